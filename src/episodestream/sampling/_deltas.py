"""``delta_timestamps`` as LeRobot defines them: offsets in seconds that must be multiples of
1/fps (within a tolerance), turned into frame offsets ``round(d * fps)``, applied to frame
indices, clamped to the episode and flagged in an ``is_pad`` mask where clamped."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from episodestream.errors import SamplingError

__all__ = [
    "DEFAULT_DELTA_TOLERANCE_S",
    "MAX_DELTA_FRAMES",
    "MAX_DELTA_OFFSETS",
    "DeltaQuery",
    "delta_frame_offsets",
    "delta_query",
]

DEFAULT_DELTA_TOLERANCE_S = 1e-4
"""LeRobot's default tolerance for timestamps, in seconds."""

MAX_DELTA_OFFSETS = 1024
"""Most offsets one key may ask for: every sample reads (and decodes, for a camera) one
frame per offset, so the count sizes each sample's arrays (policies ask for up to ~100)."""

MAX_DELTA_FRAMES = 1 << 31
"""Farthest an offset may reach, in frames (about 2 years at 30 fps): frame indices plus
offsets stay far inside int64."""


@dataclass(frozen=True, slots=True, eq=False)
class DeltaQuery:
    """Frames to read for one key.

    Attributes:
        frame_indices: frame within the episode for each sample and offset, clamped to
            ``[0, length - 1]``; shape ``sample_shape + (num_offsets,)``, int64.
        is_pad: True where the unclamped frame fell outside the episode; same shape, bool.
    """

    frame_indices: np.ndarray
    is_pad: np.ndarray


def delta_frame_offsets(
    delta_timestamps: Mapping[str, Sequence[float]],
    fps: float,
    *,
    tolerance_s: float = DEFAULT_DELTA_TOLERANCE_S,
) -> dict[str, np.ndarray]:
    """Validate ``delta_timestamps`` and convert each key's offsets to whole frames.

    A delta ``d`` is accepted when ``|d*fps - round(d*fps)| / fps <= tolerance_s`` (LeRobot's
    rule); its frame offset is ``round(d*fps)``.

    Args:
        delta_timestamps: ``{key: [offset_seconds, ...]}``, offsets relative to the sample.
        fps: frames per second of the dataset (> 0).
        tolerance_s: accepted distance from a multiple of ``1/fps``, in seconds.

    Returns:
        ``{key: int64 array of frame offsets}`` in the given order.

    Raises:
        SamplingError: (a ``ValueError``) naming the key and the offending offset; more
            than :data:`MAX_DELTA_OFFSETS` offsets for a key, or one more than
            :data:`MAX_DELTA_FRAMES` frames away.
    """
    if isinstance(fps, bool) or not isinstance(fps, numbers.Real) or not fps > 0:
        raise SamplingError(f"fps must be a positive number, got {fps!r}")
    if not math.isfinite(float(fps)):
        raise SamplingError(f"fps must be finite, got {fps!r}")
    if not isinstance(tolerance_s, numbers.Real) or not tolerance_s >= 0:
        raise SamplingError(f"tolerance_s must be >= 0, got {tolerance_s!r}")
    if not isinstance(delta_timestamps, Mapping):
        raise SamplingError(
            f"delta_timestamps must map keys to lists of offsets in seconds, "
            f"got {type(delta_timestamps).__name__}"
        )
    fps = float(fps)
    result: dict[str, np.ndarray] = {}
    for key, offsets in delta_timestamps.items():
        if isinstance(offsets, str | bytes) or not isinstance(offsets, Sequence | np.ndarray):
            raise SamplingError(
                f"delta_timestamps[{key!r}] must be a list of offsets in seconds, got {offsets!r}"
            )
        if len(offsets) == 0:
            raise SamplingError(f"delta_timestamps[{key!r}] is empty")
        if len(offsets) > MAX_DELTA_OFFSETS:
            raise SamplingError(
                f"delta_timestamps[{key!r}] holds {len(offsets)} offsets; at most "
                f"{MAX_DELTA_OFFSETS} (MAX_DELTA_OFFSETS: each sample reads a frame per offset)"
            )
        frames = []
        for offset in list(offsets):
            seconds = _finite_seconds(offset)
            if seconds is None:
                raise SamplingError(
                    f"delta_timestamps[{key!r}] holds {_shown(offset)}, not a finite number "
                    "of seconds"
                )
            scaled = seconds * fps
            if not abs(scaled) <= MAX_DELTA_FRAMES:  # also inf: a finite offset times fps
                raise SamplingError(
                    f"delta_timestamps[{key!r}] offset {seconds!r} s is {scaled:.3g} frames "
                    f"away; at most {MAX_DELTA_FRAMES} (MAX_DELTA_FRAMES)"
                )
            nearest = round(scaled)
            if abs(scaled - nearest) / fps > tolerance_s:
                raise SamplingError(
                    f"delta_timestamps[{key!r}] offset {offset!r} s is not a multiple of "
                    f"1/{fps:g} s within {tolerance_s:g} s (nearest: {nearest / fps!r} s)"
                )
            frames.append(nearest)
        result[key] = np.asarray(frames, dtype=np.int64)
    return result


def _finite_seconds(offset: object) -> float | None:
    """``offset`` as float seconds; None unless a finite real number (bools, and ints too
    large for a float, included)."""
    if isinstance(offset, bool) or not isinstance(offset, numbers.Real):
        return None
    try:
        seconds = float(offset)
    except (OverflowError, ValueError):
        return None
    return seconds if math.isfinite(seconds) else None


def _shown(value: object) -> str:
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)


def delta_query(
    frame_indices: ArrayLike,
    episode_lengths: ArrayLike,
    offsets: Mapping[str, ArrayLike],
) -> dict[str, DeltaQuery]:
    """Frames to read around each sample, clamped to its episode, with a padding mask.

    Args:
        frame_indices: frame of each sample within its episode; any shape, or a scalar.
        episode_lengths: frames of each sample's episode, broadcastable with ``frame_indices``.
        offsets: ``{key: frame offsets}``, e.g. from :func:`delta_frame_offsets`.

    Returns:
        ``{key: DeltaQuery}`` with arrays of shape ``broadcast_shape + (len(offsets[key]),)``.

    Raises:
        SamplingError: a length below 1 or a frame index outside ``[0, length)``.
    """
    frames = np.asarray(frame_indices)
    lengths = np.asarray(episode_lengths)
    for name, array in (("frame_indices", frames), ("episode_lengths", lengths)):
        if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
            raise SamplingError(f"{name} must hold integers, got dtype {array.dtype}")
    try:
        frames, lengths = np.broadcast_arrays(frames.astype(np.int64), lengths.astype(np.int64))
    except ValueError as exc:
        raise SamplingError(
            f"frame_indices shape {frames.shape} does not broadcast with episode_lengths "
            f"shape {lengths.shape}"
        ) from exc
    if lengths.size and int(lengths.min()) < 1:
        raise SamplingError(f"episode_lengths must be >= 1, got {int(lengths.min())}")
    outside = (frames < 0) | (frames >= lengths)
    if outside.any():
        where = np.argwhere(outside)[0]
        raise SamplingError(
            f"frame_indices value {int(frames[tuple(where)])} is outside its episode of "
            f"{int(lengths[tuple(where)])} frames"
        )
    result: dict[str, DeltaQuery] = {}
    for key, key_offsets in offsets.items():
        steps = np.asarray(key_offsets, dtype=np.int64).reshape(-1)
        wanted = frames[..., None] + steps
        last = lengths[..., None] - 1
        is_pad = (wanted < 0) | (wanted > last)
        result[key] = DeltaQuery(np.clip(wanted, 0, last), is_pad)
    return result

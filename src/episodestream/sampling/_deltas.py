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

__all__ = ["DEFAULT_DELTA_TOLERANCE_S", "DeltaQuery", "delta_frame_offsets", "delta_query"]

DEFAULT_DELTA_TOLERANCE_S = 1e-4
"""LeRobot's default tolerance for timestamps, in seconds."""


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
        SamplingError: (a ``ValueError``) naming the key and the offending offset.
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
        frames = []
        for offset in list(offsets):
            if (
                isinstance(offset, bool)
                or not isinstance(offset, numbers.Real)
                or not math.isfinite(float(offset))
            ):
                raise SamplingError(
                    f"delta_timestamps[{key!r}] holds {offset!r}, not a finite number of seconds"
                )
            scaled = float(offset) * fps
            nearest = round(scaled)
            if abs(scaled - nearest) / fps > tolerance_s:
                raise SamplingError(
                    f"delta_timestamps[{key!r}] offset {offset!r} s is not a multiple of "
                    f"1/{fps:g} s within {tolerance_s:g} s (nearest: {nearest / fps!r} s)"
                )
            frames.append(nearest)
        result[key] = np.asarray(frames, dtype=np.int64)
    return result


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

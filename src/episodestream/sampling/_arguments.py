"""The episode selection and ``delta_timestamps`` a caller passes, checked as given: before
any metadata is read, so an argument no dataset can satisfy fails at once and typed.

What needs the dataset (which episodes exist, which keys are features, whether an offset is a
multiple of 1/fps) is checked later, where the metadata is (``datasets``, ``check``,
:func:`~episodestream.sampling.delta_frame_offsets`).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from episodestream._checks import Bound, shown
from episodestream.errors import SamplingError
from episodestream.sampling._deltas import MAX_DELTA_OFFSETS

__all__ = [
    "MAX_COUNT",
    "MAX_DELTA_SECONDS",
    "MAX_EPISODE_INDEX",
    "MAX_LOADER_WORKERS",
    "MAX_SEED",
    "MAX_WORLD_SIZE",
    "check_delta_timestamps",
    "episode_selection",
]

MAX_EPISODE_INDEX = Bound(
    "MAX_EPISODE_INDEX", 2**63 - 1, "episode indices are int64 in LeRobot's tables"
)
MAX_COUNT = Bound("MAX_COUNT", 2**62, "sample, batch and epoch counts are computed in int64")
MAX_SEED = Bound("MAX_SEED", 2**64 - 1, "seeds are 64-bit in numpy and torch")
MAX_WORLD_SIZE = Bound("MAX_WORLD_SIZE", 2**16, "ranks of one run; plans loop over them")
MAX_LOADER_WORKERS = Bound(
    "MAX_LOADER_WORKERS", 1024, "DataLoader workers of one rank; plans are sized by it"
)
# the count delta_frame_offsets caps, named as it names it
_DELTA_OFFSETS = Bound(
    "MAX_DELTA_OFFSETS",
    MAX_DELTA_OFFSETS,
    "each sample reads (a camera: decodes) a frame per offset",
)
MAX_DELTA_SECONDS = Bound(
    "MAX_DELTA_SECONDS", 86400.0, "a day before or after the sample: beyond, only padding"
)


def _is_index(value: Any) -> bool:
    # a bool is an Integral in Python, but True is not episode 1
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def episode_selection(episodes: object, *, distinct: bool = True) -> np.ndarray | None:
    """``episodes`` as a dataset takes it: None (every episode), or the episode indices to
    select, in the caller's order, as a read-only int64 array.

    Accepts any iterable of ints (a list, a range, a 1-D integer array); refuses a scalar or
    a string, an empty selection, an index that is not an int (``True``, ``1.0``), one
    outside ``0..MAX_EPISODE_INDEX`` and, with ``distinct``, one given twice. Whether the
    dataset has these episodes is for the caller to check once the metadata is read.

    Raises:
        SamplingError: naming the first offending item and its position.
    """
    if episodes is None:
        return None
    if isinstance(episodes, str | bytes | numbers.Number | Mapping) or not isinstance(
        episodes, Iterable
    ):
        raise SamplingError(f"episodes must be a list of episode indices, got {shown(episodes)}")
    if isinstance(episodes, np.ndarray):
        if episodes.ndim != 1 or episodes.dtype == np.bool_ or episodes.dtype.kind not in "iu":
            raise SamplingError(
                "episodes must be a list of episode indices, got an array of "
                f"dtype {episodes.dtype} and shape {episodes.shape}"
            )
        items: Sequence[Any] = episodes.tolist()  # Python ints: uint64 values stay exact
    elif callable(getattr(episodes, "tolist", None)):  # a torch tensor: Python values
        items = episodes.tolist()  # type: ignore[attr-defined]
        items = items if isinstance(items, list) else [items]
    else:
        items = list(episodes)
    for position, item in enumerate(items):
        if not _is_index(item):
            raise SamplingError(
                f"episodes[{position}] is {shown(item)}: an episode index is an int "
                "(a bool or a float is not one)"
            )
        if not 0 <= item <= MAX_EPISODE_INDEX.value:
            raise SamplingError(
                f"episodes[{position}] is {shown(item)}: episode indices lie in "
                f"0..{MAX_EPISODE_INDEX}"
            )
    if not items:
        raise SamplingError("episodes is empty: select at least one episode")
    ids = np.array(items, dtype=np.int64)
    if distinct and np.unique(ids).size != ids.size:
        raise SamplingError("episodes lists an episode more than once")
    ids.flags.writeable = False
    return ids


def check_delta_timestamps(delta_timestamps: object) -> None:
    """Refuse ``delta_timestamps`` that no dataset could take: not a mapping of feature names
    to non-empty lists of finite offsets in seconds, more than ``MAX_DELTA_OFFSETS`` offsets
    for a key, or an offset beyond ``MAX_DELTA_SECONDS``.

    Raises:
        SamplingError: naming the key and the offending offset.
    """
    if delta_timestamps is None:
        return
    if not isinstance(delta_timestamps, Mapping):
        raise SamplingError(
            "delta_timestamps must map keys to lists of offsets in seconds, "
            f"got {type(delta_timestamps).__name__}"
        )
    for key, offsets in delta_timestamps.items():
        if not isinstance(key, str):
            raise SamplingError(f"delta_timestamps keys are feature names (str), got {shown(key)}")
        _check_offsets(key, offsets)


def _check_offsets(key: str, offsets: object) -> None:
    where = f"delta_timestamps[{shown(key)}]"
    if isinstance(offsets, np.ndarray):
        if offsets.ndim != 1 or offsets.dtype == np.bool_ or offsets.dtype.kind not in "iuf":
            raise SamplingError(
                f"{where} must be a list of offsets in seconds, got an array of dtype "
                f"{offsets.dtype} and shape {offsets.shape}"
            )
    elif isinstance(offsets, str | bytes) or not isinstance(offsets, Sequence):
        raise SamplingError(f"{where} must be a list of offsets in seconds, got {shown(offsets)}")
    if len(offsets) == 0:
        raise SamplingError(f"{where} is empty")
    if len(offsets) > _DELTA_OFFSETS.value:
        raise SamplingError(f"{where} holds {len(offsets)} offsets, more than {_DELTA_OFFSETS}")
    for offset in offsets.tolist() if isinstance(offsets, np.ndarray) else offsets:
        if isinstance(offset, bool | np.bool_) or not isinstance(offset, numbers.Real):
            raise SamplingError(f"{where} holds {shown(offset)}, not a number of seconds")
        try:
            seconds = float(offset)
        except OverflowError:  # an int too large for a float
            seconds = math.inf
        if not math.isfinite(seconds):
            raise SamplingError(f"{where} holds {shown(offset)}, not a finite number of seconds")
        if abs(seconds) > MAX_DELTA_SECONDS.value:
            raise SamplingError(f"{where} holds {shown(offset)} s, beyond +-{MAX_DELTA_SECONDS}")

"""Argument checks shared by the sampling modules; every failure is a SamplingError naming the
parameter."""

from __future__ import annotations

import numbers
from typing import Any, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from episodestream._checks import Bound, shown
from episodestream.errors import SamplingError

__all__: list[str] = []

_T = TypeVar("_T")


def require_int(
    name: str, value: Any, *, minimum: int | None = None, maximum: Bound | None = None
) -> int:
    """Return ``value`` as a Python int, refusing bools, floats and values outside
    ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SamplingError(f"{name} must be an integer, got {shown(value)}")
    result = int(value)
    if minimum is not None and result < minimum:
        raise SamplingError(f"{name} must be >= {minimum}, got {shown(result)}")
    if maximum is not None and result > maximum.value:
        raise SamplingError(f"{name} must be <= {maximum}, got {shown(result)}")
    return result


def require_instance(name: str, value: object, kind: type[_T]) -> _T:
    """Return ``value`` when it is a ``kind``; otherwise a SamplingError naming ``name``."""
    if not isinstance(value, kind):
        raise SamplingError(f"{name} must be a {kind.__name__}, got {type(value).__name__}")
    return value


def or_default(name: str, value: _T | None, kind: type[_T]) -> _T:
    """``value``, or a default ``kind()`` when it is None (see :func:`require_instance`)."""
    return kind() if value is None else require_instance(name, value, kind)


def canonical_episodes(
    episode_ids: ArrayLike, frame_counts: ArrayLike, *, allow_empty: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Validate an episode set and return (ids ascending, their frame counts) as int64 arrays.

    Sorting makes every order derived from the set independent of the order it was given in,
    so all ranks and workers agree on it.
    """
    ids = _int_vector("episode_ids", episode_ids)
    counts = _int_vector("frame_counts", frame_counts)
    if ids.shape != counts.shape:
        raise SamplingError(
            f"episode_ids and frame_counts must have the same length, "
            f"got {ids.size} and {counts.size}"
        )
    if ids.size == 0 and not allow_empty:
        raise SamplingError("episode_ids is empty: select at least one episode")
    if ids.size and int(ids.min()) < 0:
        raise SamplingError(f"episode_ids must be >= 0, got {int(ids.min())}")
    if counts.size and int(counts.min()) < 1:
        bad = int(np.argmin(counts))
        raise SamplingError(
            f"frame_counts must be >= 1, episode {int(ids[bad])} has {int(counts[bad])} frames"
        )
    order = np.argsort(ids, kind="stable")
    ids = ids[order]
    counts = counts[order]
    duplicated = np.flatnonzero(ids[1:] == ids[:-1])
    if duplicated.size:
        raise SamplingError(f"episode_ids contains episode {int(ids[duplicated[0]])} twice")
    ids.setflags(write=False)
    counts.setflags(write=False)
    return ids, counts


def _int_vector(name: str, values: ArrayLike) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise SamplingError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise SamplingError(f"{name} must hold integers, got dtype {array.dtype}")
    return array.astype(np.int64, copy=True)

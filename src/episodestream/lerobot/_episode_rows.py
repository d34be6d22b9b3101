"""Rows of episodes in a table sorted by episode index: what the episodes table and the manifest
both look up."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from episodestream.errors import ConfigTypeError

__all__ = ["EpisodeRowLookup"]


class EpisodeRowLookup:
    """Row of each episode in ``episode_index`` (sorted, unique): the index itself when the
    episodes are 0..n-1 (the usual case), a binary search otherwise. ``where`` ends the
    message of a missing episode (``"no episode 7 in the dataset"``)."""

    __slots__ = ("_dense", "_ids", "_where")

    def __init__(self, episode_index: np.ndarray, where: str) -> None:
        n = len(episode_index)
        self._ids = episode_index
        self._dense = bool(n == 0 or (episode_index[0] == 0 and episode_index[-1] == n - 1))
        self._where = where

    def row(self, episode_index: int) -> int:
        """Row of ``episode_index`` (an int or numpy integer).

        Raises:
            KeyError: no such episode.
            ConfigTypeError: ``episode_index`` is not an integer (``1.5`` is not episode 1).
        """
        if type(episode_index) is not int:  # a plain int skips the ABC check
            if isinstance(episode_index, bool) or not isinstance(episode_index, numbers.Integral):
                raise ConfigTypeError(
                    f"episode index must be an int, got {type(episode_index).__name__} "
                    f"{episode_index!r}"
                )
            episode_index = int(episode_index)
        n = len(self._ids)
        if self._dense:
            if 0 <= episode_index < n:
                return int(episode_index)
        else:
            position = int(np.searchsorted(self._ids, episode_index))
            if position < n and self._ids[position] == episode_index:
                return position
        raise KeyError(f"no episode {episode_index} in {self._where}")

    def rows(self, episode_indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Rows of many episodes at once (vectorized :meth:`row`; KeyError names the first
        missing one; ConfigTypeError for indices that are not integers)."""
        given = np.asarray(episode_indices)
        if given.size and given.dtype.kind not in "iu":
            raise ConfigTypeError(f"episode indices must be integers, got dtype {given.dtype}")
        wanted = given.astype(np.int64, copy=False)
        positions = wanted if self._dense else np.searchsorted(self._ids, wanted)
        n = len(self._ids)
        bad = (positions < 0) | (positions >= n)
        if not bad.any():
            bad = self._ids[positions] != wanted
        if bad.any():
            raise KeyError(f"no episode {int(wanted[np.argmax(bad)])} in {self._where}")
        return positions.astype(np.int64, copy=False)

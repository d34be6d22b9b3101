"""What every draw order of this layer answers: the cursor :class:`PoolSchedule`,
:class:`WindowSchedule` and the window schedule's spread draws share.

A cursor walks one slot's draws for one epoch; items (episodes, or windows) enter a resident
pool in an entry order and leave when their frames are drawn. The introspection is defined
once here, with its meaning; each cursor says how it reads its own state.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator
from typing import Any

import numpy as np

from episodestream.errors import SamplingError
from episodestream.sampling._validate import require_int

__all__ = ["DrawCursor"]


class DrawCursor(abc.ABC):
    """A cursor over one slot's draws for one epoch (not thread-safe).

    A cursor that counts its draws in ``_position`` of ``_total`` has :attr:`position` and
    :attr:`total_samples` as they are; one that delegates overrides them. Every cursor keeps
    its whole entry order (read-only) in ``_entry``: :attr:`entry_order` and :meth:`upcoming`
    read it.
    """

    _position: int
    _total: int
    _entry: np.ndarray

    @abc.abstractmethod
    def events(self, batch_draws: int = 4096) -> Iterator[Any]:
        """Yield the remaining events in order (``enter``, ``draw``, ``leave``)."""

    @abc.abstractmethod
    def skip(self, count: int) -> None:
        """Advance past ``count`` draws without producing them.

        Raises:
            SamplingError: ``count`` negative or past the end of the epoch.
        """

    def iter_draws(self) -> Iterator[tuple[int, int]]:
        """Yield the remaining draws as ``(episode_id, frame_index)`` Python ints."""
        for event in self.events():
            if event.kind == "draw":
                yield event.episode_id, event.frame_index

    @property
    def position(self) -> int:
        """Draws already taken or skipped this epoch."""
        return self._position

    @property
    def total_samples(self) -> int:
        """Draws in the whole epoch (= frames of the slot's episodes)."""
        return self._total

    @property
    def remaining(self) -> int:
        """Draws left this epoch."""
        return self.total_samples - self.position

    @property
    def entry_order(self) -> np.ndarray:
        """All item ids in the order they enter the pool this epoch (read-only)."""
        return self._entry

    @property
    @abc.abstractmethod
    def entered(self) -> int:
        """Items that have entered the pool so far (a prefix of the entry order)."""

    @abc.abstractmethod
    def resident(self) -> np.ndarray:
        """Item ids in the pool now (entered, not yet exhausted), in entry order."""

    def upcoming(self, count: int) -> np.ndarray:
        """The next ``count`` item ids to enter (fewer near the end): fetch or decode these
        ahead (a read-only view of :attr:`entry_order`)."""
        count = require_int("count", count, minimum=0)
        entered = self.entered
        return self.entry_order[entered : entered + count]

    def _skip_count(self, count: int) -> int:
        """``count`` checked for :meth:`skip`: a non-negative int that stays in the epoch."""
        count = require_int("count", count, minimum=0)
        if self.position + count > self.total_samples:
            raise SamplingError(
                f"cannot skip {count} draws from position {self.position}: the epoch has "
                f"{self.total_samples} samples"
            )
        return count

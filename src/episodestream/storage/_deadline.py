"""Deadlines of whole operations (opening a dataset), held by the reader that serves them.

Timeouts bound each wait and the retry policy each read; an operation made of many reads —
opening a dataset reads ``meta/info.json``, then its episodes, tasks and stats files on
three threads, pyarrow's own among them — needs a bound of its own. :func:`reads_within`
gives a reader a :class:`Deadline` for the length of a block: every read of that reader, on
any thread, checks it before each attempt, never sleeps past it (backoff, a rate-limit
window) and bounds each exchange by it (``_transport.exchange_deadline``); past it, a
:class:`~episodestream.StorageTimeout` naming the operation and the setting that bounds it.

The deadline belongs to the reader, not to a thread: that is what lets the metadata pool's
and pyarrow's threads inherit it. Reads others make through the same reader meanwhile are
bounded by it too (they would be by their own timeouts anyway).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass

from episodestream.errors import StorageTimeout
from episodestream.storage._base import BaseRangeReader, RangeReader
from episodestream.storage._config import DEFAULT_TIMEOUTS, Timeouts

__all__ = ["Deadline", "open_seconds_of", "reads_within"]


@dataclass(frozen=True, slots=True)
class Deadline:
    """An instant (``time.monotonic()``) by which an operation must be done.

    Attributes:
        what: the operation, as errors name it (``"reading the metadata of https://…"``).
        seconds: the time it was given.
        expires: when that time is up.
        setting: the option that gave it, named in the error so it can be raised.
    """

    what: str
    seconds: float
    expires: float
    setting: str = "Timeouts.open_seconds"

    @classmethod
    def after(
        cls, seconds: float, what: str, *, setting: str = "Timeouts.open_seconds"
    ) -> Deadline:
        """A deadline ``seconds`` from now."""
        return cls(what, seconds, time.monotonic() + seconds, setting)

    def remaining(self) -> float:
        """Seconds left (negative once passed)."""
        return self.expires - time.monotonic()

    def passed(self) -> bool:
        return self.remaining() <= 0

    def error(self) -> StorageTimeout:
        """The error to raise once it has passed (or when a wait would pass it)."""
        return StorageTimeout(
            f"{self.what} did not finish within {self.setting}={self.seconds:g} s "
            "(raise it for a slow link)"
        )

    def check(self) -> None:
        """Raise :meth:`error` if the deadline has passed."""
        if self.passed():
            raise self.error()

    def allows_wait(self, seconds: float) -> bool:
        """Whether waiting ``seconds`` now still ends before the deadline."""
        return seconds < self.remaining()


def open_seconds_of(reader: RangeReader) -> float:
    """How long opening a dataset through ``reader`` may take: its ``timeouts.open_seconds``
    where it has timeouts (the HTTP readers), else the default."""
    timeouts = getattr(reader, "timeouts", None)
    if isinstance(timeouts, Timeouts):
        return timeouts.open_seconds
    return DEFAULT_TIMEOUTS.open_seconds


@contextlib.contextmanager
def reads_within(
    reader: RangeReader, seconds: float | None = None, *, what: str
) -> Iterator[Deadline]:
    """Within the block, ``reader``'s reads end by a deadline ``seconds`` from now (default:
    :func:`open_seconds_of` the reader); yields the deadline in force (an enclosing one, if
    sooner). A reader that is not a :class:`BaseRangeReader` is not bounded by it: callers
    still get the deadline to bound their own waits."""
    deadline = Deadline.after(open_seconds_of(reader) if seconds is None else seconds, what)
    if not isinstance(reader, BaseRangeReader):
        yield deadline
        return
    previous = reader._deadline
    if previous is not None and previous.expires <= deadline.expires:
        yield previous
        return
    reader._deadline = deadline
    try:
        yield deadline
    finally:
        reader._deadline = previous

"""Deadlines of whole operations (opening a dataset), held by the reader that serves them.

Timeouts bound each wait and the retry policy each read; an operation made of many reads —
opening a dataset reads ``meta/info.json``, then its episodes, tasks and stats files on
three threads, pyarrow's own among them — needs a bound of its own.
:func:`reads_within` (``_within.py``) gives a reader a :class:`Deadline` for the length of a
block: every read of that reader, on any thread, checks it before each attempt, never
sleeps past it (backoff, a rate-limit window) and bounds each exchange by it
(``http/_transport.exchange_deadline``); past it, a
:class:`~episodestream.StorageTimeout` naming the operation and the setting that bounds it.

The deadline belongs to the reader, not to a thread: that is what lets the metadata pool's
and pyarrow's threads inherit it. Reads others make through the same reader meanwhile are
bounded by it too (they would be by their own timeouts anyway).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from episodestream.errors import StorageTimeout

__all__ = ["MIN_BYTES_PER_SECOND", "Deadline", "body_deadline_seconds"]

# An exchange or body (HTTP, fsspec) slower than this on average, after a read timeout's worth
# of grace, has failed: a trickling server cannot hold a read for ever.
MIN_BYTES_PER_SECOND = 64 * 1024


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


def body_deadline_seconds(read_seconds: float, wanted: int) -> float:
    """How long reading (or skipping) ``wanted`` body bytes may take in all: the read timeout,
    or longer for a body that needs it at the minimum rate (:data:`MIN_BYTES_PER_SECOND`)."""
    return max(read_seconds, wanted / MIN_BYTES_PER_SECOND)

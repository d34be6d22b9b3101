"""Bounding every read of a reader by one deadline for the length of a block (opening a
dataset): :func:`reads_within`, the :class:`~episodestream.storage._deadline.Deadline` it sets
on the reader and whose reads check it (see ``_deadline.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from episodestream.storage._base import BaseRangeReader, RangeReader
from episodestream.storage._config import DEFAULT_TIMEOUTS, Timeouts
from episodestream.storage._deadline import Deadline

__all__ = ["open_seconds_of", "reads_within"]


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

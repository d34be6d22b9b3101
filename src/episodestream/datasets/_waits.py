"""Bounded waits on futures whose own errors must pass through unchanged."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

from episodestream.errors import EpisodeStreamError

T = TypeVar("T")


def result_within(
    future: Future[T], timeout_s: float, timed_out: Callable[[], EpisodeStreamError]
) -> T:
    """``future``'s result, waiting at most ``timeout_s``; past it, raise ``timed_out()``.

    Waits first, then takes the result: a ``TimeoutError`` the work raised itself (a
    :class:`~episodestream.errors.StorageTimeout` reading rows or bytes) is its own error and
    passes through as such, never mistaken for this wait running out.
    """
    if not future.done():  # most asks find the work done: no waiter to build
        try:
            # returns the work's own exception (a TimeoutError it raised included); raises
            # only CancelledError, or TimeoutError when this wait runs out
            future.exception(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            raise timed_out() from None
    return future.result()

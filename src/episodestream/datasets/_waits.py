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
    if not concurrent.futures.wait([future], timeout=timeout_s).done:
        raise timed_out()
    return future.result()

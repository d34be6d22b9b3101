"""DecodeExecutor: a small thread pool with a bounded queue for decoding clips concurrently.

torchcodec and PyAV release the GIL while FFmpeg decodes, so threads decode several cameras
or episodes in parallel within one process.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, ParamSpec, TypeVar

from episodestream._checks import check_int, check_number
from episodestream._closing import Closing
from episodestream.errors import DecodeError

__all__ = [
    "DEFAULT_DECODE_THREADS",
    "DEFAULT_JOIN_TIMEOUT_S",
    "DEFAULT_RESULT_TIMEOUT_S",
    "DEFAULT_SUBMIT_TIMEOUT_S",
    "DecodeExecutor",
]

_LOG = logging.getLogger(__name__)

#: Decode threads per process (per DataLoader worker: N workers run N times as many), the one
#: default for the pool, bench and this executor: two overlap decoding with sample building
#: without oversubscribing cores that DataLoader workers share.
DEFAULT_DECODE_THREADS = 2
#: How long submit() waits for room in a full queue.
DEFAULT_SUBMIT_TIMEOUT_S = 60.0
#: How long map() waits for all its results.
DEFAULT_RESULT_TIMEOUT_S = 300.0
#: How long close() waits for each worker thread.
DEFAULT_JOIN_TIMEOUT_S = 30.0

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

# an idle worker wakes this often to notice close() even if its stop marker was lost
_IDLE_POLL_S = 1.0
_STOP = object()
_executor_ids = itertools.count()


class DecodeExecutor(Closing):
    """Runs decode calls on ``threads`` worker threads fed by a queue of ``max_pending`` items.

    ``threads=0`` runs every call inline in the submitting thread (useful inside DataLoader
    workers that should not add threads). Worker threads are named ``"{name}-{i}"`` and all are
    joined by :meth:`close`.

    Args:
        threads: worker threads (0: inline).
        max_pending: queued calls not yet started; ``submit`` blocks while it is full
            (default ``4 * threads``).
        submit_timeout_s: how long ``submit`` blocks on a full queue before DecodeError.
        name: thread name prefix.
    """

    def __init__(
        self,
        threads: int = DEFAULT_DECODE_THREADS,
        *,
        max_pending: int | None = None,
        submit_timeout_s: float = DEFAULT_SUBMIT_TIMEOUT_S,
        name: str | None = None,
    ) -> None:
        threads = check_int("threads", threads, minimum=0)
        pending = 4 * max(threads, 1) if max_pending is None else max_pending
        pending = check_int("max_pending", pending, minimum=1)
        check_number("submit_timeout_s", submit_timeout_s, above=0)
        self._threads_wanted = threads
        self._submit_timeout_s = submit_timeout_s
        self._name = name or f"episodestream-decode-{next(_executor_ids)}"
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=pending)
        self._lock = threading.Lock()
        self._closed = False
        self._workers = [
            threading.Thread(target=self._work, name=f"{self._name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for worker in self._workers:
            worker.start()

    @property
    def threads(self) -> int:
        return self._threads_wanted

    @property
    def name(self) -> str:
        return self._name

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        """Queue ``fn(*args, **kwargs)``; its Future holds the result or the original exception.

        Raises:
            DecodeError: the executor is closed, or the queue stayed full for
                ``submit_timeout_s``.
        """
        future: Future[R] = Future()
        if self._closed:
            raise DecodeError(f"{self._name}: executor is closed")
        if not self._workers:
            if future.set_running_or_notify_cancel():
                _run(future, fn, args, kwargs)
            return future
        try:
            self._queue.put((future, fn, args, kwargs), timeout=self._submit_timeout_s)
        except queue.Full:
            raise DecodeError(
                f"{self._name}: decode queue full for {self._submit_timeout_s:g} s "
                f"({self._queue.maxsize} pending calls)"
            ) from None
        if self._closed:  # raced with close(): make sure it is not left pending forever
            self._cancel_queued()
        return future

    def map(
        self,
        fn: Callable[[T], R],
        items: Iterable[T],
        *,
        timeout_s: float = DEFAULT_RESULT_TIMEOUT_S,
    ) -> list[R]:
        """``[fn(x) for x in items]`` computed on the workers; results in input order.

        The first failure (in input order) is raised as the original exception once every
        call has finished or been cancelled.

        Raises:
            DecodeError: results not ready within ``timeout_s`` (calls not started are
                cancelled), or the executor is closed.
        """
        deadline = time.monotonic() + timeout_s
        futures = [self.submit(fn, item) for item in items]
        try:
            for future in futures:
                future.exception(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            for future in futures:
                future.cancel()
            raise DecodeError(
                f"{self._name}: {sum(not f.done() for f in futures)} of {len(futures)} decode "
                f"calls not finished after {timeout_s:g} s"
            ) from None
        except CancelledError:
            pass  # reported below as the executor closing
        results: list[R] = []
        for future in futures:
            if future.cancelled():
                raise DecodeError(f"{self._name}: executor closed before all calls ran")
            results.append(future.result())
        return results

    def close(
        self, *, cancel_pending: bool = True, timeout_s: float = DEFAULT_JOIN_TIMEOUT_S
    ) -> None:
        """Stop accepting calls, cancel queued ones (unless ``cancel_pending=False``, which
        lets them run), wait for running calls and join every worker. Idempotent."""
        with self._lock:
            if self._closed and not any(w.is_alive() for w in self._workers):
                return
            self._closed = True
        if cancel_pending:
            self._cancel_queued()
        deadline = time.monotonic() + timeout_s
        for _ in self._workers:
            try:
                self._queue.put(_STOP, timeout=max(0.0, deadline - time.monotonic()))
            except queue.Full:
                break
        for worker in self._workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                _LOG.warning(
                    "%s: %s still running after %.0f s", self._name, worker.name, timeout_s
                )
        self._cancel_queued()  # anything that slipped in behind the stop markers

    def _cancel_queued(self) -> None:
        stops = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                stops += 1
            elif item[0].cancel():
                # cancel() alone wakes result() but not concurrent.futures.wait(): notify
                # those waiters too, or they sit out their whole timeout
                item[0].set_running_or_notify_cancel()
        for _ in range(stops):  # keep stop markers for workers that have not seen one
            try:
                self._queue.put_nowait(_STOP)
            except queue.Full:  # workers also stop on their own once closed and idle
                break

    def _work(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=_IDLE_POLL_S)
            except queue.Empty:
                if self._closed:
                    return
                continue
            if item is _STOP:
                return
            future, fn, args, kwargs = item
            if future.set_running_or_notify_cancel():
                _run(future, fn, args, kwargs)
            # an idle worker must not keep its last call alive: the callable may hold its
            # owner (whose finalizer closes this executor) and the Future its result
            del item, future, fn, args, kwargs


def _run(future: Future[Any], fn: Callable[..., Any], args: Any, kwargs: Any) -> None:
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # the caller gets the original exception from the Future
        future.set_exception(exc)
    else:
        future.set_result(result)

"""A bounded run of tasks on a shared thread pool, the caller's thread included.

The HTTP reader runs the parts of ``read_many`` and of split ranges through :func:`run_bounded`:
no task waits on another, so one flat list of tasks per call can never deadlock the pool.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from episodestream.errors import StorageTimeout

__all__ = ["TrackedPool", "run_bounded", "shut_down"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _record_worker(workers: set[threading.Thread]) -> None:
    workers.add(threading.current_thread())  # set.add is atomic under the GIL


class TrackedPool(ThreadPoolExecutor):
    """A thread pool that records its own worker threads (``workers``), so :func:`shut_down`
    can join them without relying on the executor's private attributes."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        # The set, not a bound method of the pool, goes to the initializer (no cycle).
        self.workers: set[threading.Thread] = set()
        super().__init__(
            max_workers=max_workers,
            thread_name_prefix=thread_name_prefix,
            initializer=_record_worker,
            initargs=(self.workers,),
        )

    def threads(self) -> list[threading.Thread]:
        """The threads to join, by name: those recorded, with CPython's own set (``_threads``)
        where it exists, which also holds a thread started but not yet through the
        initializer."""
        threads = set(self.workers)
        threads.update(getattr(self, "_threads", ()))
        return sorted(threads, key=lambda thread: thread.name)


def shut_down(executor: TrackedPool, join_seconds: float, owner: str) -> list[str]:
    """Cancel ``executor``'s queued work and join its threads for at most ``join_seconds``
    in all; the names of threads still running then are logged (as a warning) and returned.

    Never an unbounded join: a thread stuck in a call nothing can interrupt is left to
    finish on its own (pool threads do not keep the interpreter from exiting).
    """
    executor.shutdown(wait=False, cancel_futures=True)
    threads = executor.threads()
    deadline = time.monotonic() + join_seconds
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    left = [thread.name for thread in threads if thread.is_alive()]
    if left:
        logger.warning(
            "%s: %d worker thread(s) still running %.0f s after close: %s",
            owner,
            len(left),
            join_seconds,
            ", ".join(left),
        )
    return left


def run_bounded(
    tasks: list[Callable[[], T]],
    max_concurrency: int,
    executor: Callable[[], Executor],
    *,
    wait_seconds: float | None = None,
    describe: Callable[[int], str] = str,
) -> list[T]:
    """Run ``tasks`` on at most ``max_concurrency`` threads, the caller's included; results in
    order, or the first error once everything already running has finished.

    Workers pull task indices from one shared iterator (no future per task), and stop pulling
    after an error. ``executor`` is asked for the pool only when helpers are wanted; helpers
    that have not started when the caller runs out of tasks are cancelled, never waited for.

    Helpers still running a task when the caller's own loop ends are waited for at most
    ``wait_seconds`` (None: unbounded) — the longest one task may take under the reader's
    policy; past it, :class:`StorageTimeout` names the tasks still running (``describe``
    turns a task's index into words) and the run is abandoned (those helpers finish on
    their own; their results are dropped).
    """
    if len(tasks) <= 1:
        return [task() for task in tasks]
    results: list[Any] = [None] * len(tasks)
    order = iter(range(len(tasks)))  # next() on it is atomic under the GIL
    errors: list[BaseException] = []
    running_tasks: set[int] = set()  # set.add / discard are atomic under the GIL

    def work() -> None:
        for index in order:
            if errors:
                return
            running_tasks.add(index)
            try:
                results[index] = tasks[index]()
            except BaseException as error:
                errors.append(error)
                return
            finally:
                running_tasks.discard(index)

    helpers = min(max_concurrency, len(tasks)) - 1
    futures = []
    if helpers:
        pool = executor()
        futures = [pool.submit(work) for _ in range(helpers)]
    work()
    # The caller's own loop ended, so every task is taken (or an error stopped the run): a
    # helper still queued behind other callers' downloads has nothing left to do, and waiting
    # for it to start could take as long as those downloads. Cancel it; wait only for helpers
    # already running a task, each bounded by the reader's timeouts and retry policy, and
    # the wait itself by ``wait_seconds`` in case one is not.
    running = [future for future in futures if not future.cancel()]
    _, pending = wait(running, timeout=wait_seconds)
    if pending:
        stuck = sorted(running_tasks)
        named = ", ".join(describe(index) for index in stuck[:8])
        more = f" and {len(stuck) - 8} more" if len(stuck) > 8 else ""
        timeout = StorageTimeout(
            f"{len(stuck)} range(s) still running after {wait_seconds:g} s, the longest one "
            f"read may take under the reader's timeouts and retry policy: {named}{more}"
        )
        errors.append(timeout)  # no helper pulls another task
        raise timeout from (errors[0] if errors[0] is not timeout else None)
    if errors:
        raise errors[0]
    return results

"""A bounded run of tasks on a shared thread pool, the caller's thread included.

The HTTP reader runs the parts of ``read_many`` and of split ranges through :func:`run_bounded`:
no task waits on another, so one flat list of tasks per call can never deadlock the pool.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor, wait
from typing import Any, TypeVar

__all__ = ["run_bounded"]

T = TypeVar("T")


def run_bounded(
    tasks: list[Callable[[], T]], max_concurrency: int, executor: Callable[[], Executor]
) -> list[T]:
    """Run ``tasks`` on at most ``max_concurrency`` threads, the caller's included; results in
    order, or the first error once everything already running has finished.

    Workers pull task indices from one shared iterator (no future per task), and stop pulling
    after an error. ``executor`` is asked for the pool only when helpers are wanted; helpers
    that have not started when the caller runs out of tasks are cancelled, never waited for.
    """
    if len(tasks) <= 1:
        return [task() for task in tasks]
    results: list[Any] = [None] * len(tasks)
    order = iter(range(len(tasks)))  # next() on it is atomic under the GIL
    errors: list[BaseException] = []

    def work() -> None:
        for index in order:
            if errors:
                return
            try:
                results[index] = tasks[index]()
            except BaseException as error:
                errors.append(error)
                return

    helpers = min(max_concurrency, len(tasks)) - 1
    futures = []
    if helpers:
        pool = executor()
        futures = [pool.submit(work) for _ in range(helpers)]
    work()
    # The caller's own loop ended, so every task is taken (or an error stopped the run): a
    # helper still queued behind other callers' downloads has nothing left to do, and waiting
    # for it to start could take as long as those downloads. Cancel it; wait only for helpers
    # already running a task (bounded by their own timeouts).
    running = [future for future in futures if not future.cancel()]
    wait(running)
    if errors:
        raise errors[0]
    return results

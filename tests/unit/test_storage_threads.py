"""The HTTP reader's thread plumbing, apart from any socket: the bounded runner's wait, the
bounded shutdown of a pool, and the per-thread counters."""

from __future__ import annotations

import gc
import logging
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import pytest

from episodestream import StorageTimeout
from episodestream.storage import HttpRangeReader
from episodestream.storage._runner import TrackedPool, run_bounded, shut_down
from episodestream.storage.http._metrics import Metrics

# Bounds on waits for events the test itself sets: never reached unless something is broken.
NEVER_SECONDS = 60.0


def _one_stuck_helper() -> tuple[list, threading.Event, threading.Event]:
    """Two tasks: whichever a helper thread runs blocks until ``release``; the caller's own
    waits until a helper has started (so a helper is surely running when the caller's loop
    ends)."""
    helper_started, release = threading.Event(), threading.Event()
    caller = threading.get_ident()

    def task() -> str:
        if threading.get_ident() == caller:
            assert helper_started.wait(NEVER_SECONDS)
            return "caller"
        helper_started.set()
        release.wait(NEVER_SECONDS)
        return "helper"

    return [task, task], helper_started, release


def test_the_wait_for_a_stuck_helper_is_bounded_and_names_its_range():
    tasks, _, release = _one_stuck_helper()
    pool = ThreadPoolExecutor(1)
    try:
        with pytest.raises(StorageTimeout) as raised:
            run_bounded(
                tasks, 2, lambda: pool, wait_seconds=0.2, describe=lambda i: f"blob.bin part {i}"
            )
        message = str(raised.value)
        assert "1 range(s) still running after 0.2 s" in message
        assert "blob.bin part" in message
        assert not release.is_set()  # the helper was still stuck: the bound ended the wait
    finally:
        release.set()
        pool.shutdown(wait=True)


def test_helpers_that_finish_in_time_give_every_result_in_order():
    tasks, _, release = _one_stuck_helper()
    pool = ThreadPoolExecutor(1)
    try:
        threading.Timer(0.1, release.set).start()
        results = run_bounded(tasks, 2, lambda: pool, wait_seconds=NEVER_SECONDS)
        assert sorted(results) == ["caller", "helper"]
    finally:
        release.set()
        pool.shutdown(wait=True)


def test_shut_down_joins_against_a_deadline_and_logs_what_is_left(caplog):
    caplog.set_level(logging.WARNING, logger="episodestream.storage")
    release, started = threading.Event(), threading.Event()
    pool = TrackedPool(2, "episodestream-test")

    def stuck() -> None:
        started.set()
        release.wait(NEVER_SECONDS)

    running = pool.submit(stuck)
    queued = [pool.submit(stuck) for _ in range(3)]  # one may start on the second thread
    assert started.wait(NEVER_SECONDS)
    try:
        left = shut_down(pool, 0.2, "reader X")
        assert left and all(name.startswith("episodestream-test") for name in left)
        assert not running.done()  # returned while the thread still ran: a bounded join
        assert sum(future.cancelled() for future in queued) >= 2  # queued work cancelled
        [record] = [r for r in caplog.records if "still running" in r.getMessage()]
        assert "reader X" in record.getMessage() and left[0] in record.getMessage()
    finally:
        release.set()
        pool.shutdown(wait=True)
    caplog.clear()
    assert shut_down(pool, 0.2, "reader X") == []  # all joined: nothing logged
    assert not [r for r in caplog.records if "still running" in r.getMessage()]


def test_a_tracked_pool_names_its_threads_without_the_executors_private_set(caplog):
    caplog.set_level(logging.WARNING, logger="episodestream.storage")
    release, started = threading.Event(), threading.Event()
    pool = TrackedPool(1, "episodestream-tracked")
    ran_on: list[threading.Thread] = []

    def stuck() -> None:
        ran_on.append(threading.current_thread())
        started.set()
        release.wait(NEVER_SECONDS)

    pool.submit(stuck)
    assert started.wait(NEVER_SECONDS)
    assert pool.workers == set(ran_on)  # recorded by the pool's initializer
    del pool._threads  # as where the executor keeps no such attribute
    try:
        assert shut_down(pool, 0.2, "reader Y") == [ran_on[0].name]
    finally:
        release.set()
        ran_on[0].join(NEVER_SECONDS)
    assert not ran_on[0].is_alive()
    caplog.clear()
    assert shut_down(pool, 0.2, "reader Y") == []  # joined: nothing left, nothing logged
    assert not [r for r in caplog.records if "still running" in r.getMessage()]


def test_a_dropped_http_reader_is_freed_without_the_cyclic_gc():
    # the reader holds its retrier and transport: neither may hold the reader back, or its
    # connections stay open until a cyclic collection happens to run
    gc.collect()
    gc.disable()
    try:
        reader = HttpRangeReader("http://127.0.0.1:9/data")
        dropped = weakref.ref(reader)
        del reader
        assert dropped() is None
    finally:
        gc.enable()


def test_counts_of_ended_threads_are_folded_in_and_never_lost():
    metrics = Metrics()
    metrics.add("reads")  # the caller's own thread
    for _ in range(40):  # short-lived pools, as per-call executors make them
        threads = [
            threading.Thread(target=lambda: [metrics.add("requests"), metrics.add("bytes", 10)])
            for _ in range(5)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(NEVER_SECONDS)
    # every thread of an earlier pool had ended when a later one first added: folded
    assert len(metrics._live) == 1  # only the caller's thread is still alive
    snapshot = metrics.snapshot()
    assert (snapshot["reads"], snapshot["requests"], snapshot["bytes"]) == (1, 200, 2000)
    assert len(metrics._live) == 1
    assert metrics.snapshot()["requests"] == 200  # folding twice counts nothing twice


def test_a_live_threads_counts_keep_coming_after_a_snapshot():
    metrics = Metrics()
    added, go_on, done = threading.Event(), threading.Event(), threading.Event()

    def worker() -> None:
        metrics.add("requests")
        added.set()
        go_on.wait(NEVER_SECONDS)
        metrics.add("requests")
        done.set()

    thread = threading.Thread(target=worker)
    thread.start()
    assert added.wait(NEVER_SECONDS)
    assert metrics.snapshot()["requests"] == 1
    go_on.set()
    thread.join(NEVER_SECONDS)
    assert done.is_set()
    assert metrics.snapshot()["requests"] == 2


def test_a_thread_threading_did_not_start_leaves_no_dummy_thread_behind():
    # Arrow's I/O threads call a Python file object's read (and so the reader) from C++
    # threads; threading.current_thread() there would register a dummy thread for good
    import _thread

    metrics = Metrics()
    before = {t.ident for t in threading.enumerate()}
    done = threading.Event()

    def foreign() -> None:
        metrics.add("requests", 3)
        done.set()

    _thread.start_new_thread(foreign, ())
    assert done.wait(NEVER_SECONDS)
    deadline = time.monotonic() + NEVER_SECONDS
    while metrics._live and time.monotonic() < deadline:
        time.sleep(0.01)  # the foreign thread's state is cleared as it ends
    assert {t.ident for t in threading.enumerate()} <= before
    assert metrics.snapshot()["requests"] == 3
    assert not metrics._live  # its counts were folded when it ended

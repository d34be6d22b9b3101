"""The HTTP reader answers promptly: a small read_many never queues behind other callers'
stalled downloads, and close() interrupts a read blocked on a silent server."""

from __future__ import annotations

import random
import threading

import pytest

from episodestream import StorageError
from episodestream.storage import HttpRangeReader, Limits, ReadRequest, RetryPolicy, Timeouts
from tests.plugins.storage import Fault, FaultServer

pytestmark = pytest.mark.timeout(60)

BIG = "videos/big.mp4"
SMALL = "meta/small.bin"
DATA = random.Random(7).randbytes(400_000)
FAST = RetryPolicy(max_attempts=4, backoff_initial_seconds=0.01, backoff_max_seconds=0.05)
# Two pool threads; no coalescing, so two ranges are two tasks (one helper per caller).
TWO_THREADS = Limits(
    max_concurrency=2, max_connections_per_host=8, split_threshold_bytes=0, coalesce_gap_bytes=-1
)
# Longer than any bounded join below: a stalled exchange never ends by timing out first.
PATIENT = Timeouts(connect_seconds=2, read_seconds=20)


def _run(target, errors: list[BaseException], results: list[object]) -> threading.Thread:
    def body() -> None:
        try:
            results.append(target())
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread


def _wait_for_requests(server: FaultServer, path: str, count: int) -> None:
    for _ in range(1000):
        if len(server.requests_for(path)) >= count:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"{path}: fewer than {count} requests arrived")


def test_small_read_many_does_not_wait_for_helpers_queued_behind_stalled_downloads(
    fault_server: FaultServer,
):
    fault_server.put(BIG, DATA)
    fault_server.put(SMALL, DATA[:1000])
    release = threading.Event()
    # Two callers, two stalled ranges each: both pool threads are held by stalled exchanges.
    fault_server.inject(BIG, *[Fault("stall", release=release)] * 4)
    reader = HttpRangeReader(
        fault_server.url, limits=TWO_THREADS, timeouts=PATIENT, retry=FAST, seed=0
    )
    errors: list[BaseException] = []
    big_results: list[object] = []
    big = [ReadRequest(BIG, 0, 100_000), ReadRequest(BIG, 200_000, 100_000)]
    downloads = [_run(lambda: reader.read_many(big), errors, big_results) for _ in range(2)]
    try:
        _wait_for_requests(fault_server, BIG, 4)
        small_results: list[object] = []
        small = [ReadRequest(SMALL, 0, 10), ReadRequest(SMALL, 500, 10)]
        caller = _run(lambda: reader.read_many(small), errors, small_results)
        caller.join(timeout=15)  # under the server's release bound: the downloads still hang
        assert not caller.is_alive(), "read_many waited for helpers that never started"
        assert not release.is_set() and all(thread.is_alive() for thread in downloads)
        assert small_results == [[DATA[:10], DATA[500:510]]]
    finally:
        release.set()
        for thread in downloads:
            thread.join(timeout=10)
        reader.close()
    assert not errors
    assert big_results == [[DATA[:100_000], DATA[200_000:300_000]]] * 2


def test_close_interrupts_reads_stalled_mid_body_without_retrying(fault_server: FaultServer):
    fault_server.put(BIG, DATA)
    release = threading.Event()
    fault_server.inject(BIG, *[Fault("stall_body", after_bytes=1000, release=release)] * 2)
    reader = HttpRangeReader(
        fault_server.url, limits=TWO_THREADS, timeouts=PATIENT, retry=FAST, seed=0
    )
    errors: list[BaseException] = []
    results: list[object] = []
    # One stalled range in the caller's thread, one in a pool thread.
    ranges = [ReadRequest(BIG, 0, 100_000), ReadRequest(BIG, 200_000, 100_000)]
    caller = _run(lambda: reader.read_many(ranges), errors, results)
    try:
        _wait_for_requests(fault_server, BIG, 2)
        closer = threading.Thread(target=reader.close, daemon=True)
        closer.start()
        closer.join(timeout=15)  # under the server's release bound
        caller.join(timeout=15)
        assert not closer.is_alive() and not caller.is_alive(), "close() did not interrupt"
        assert not release.is_set()
    finally:
        release.set()
        caller.join(timeout=10)
    assert not results and len(errors) == 1
    assert isinstance(errors[0], StorageError) and "closed" in str(errors[0])
    assert len(fault_server.requests_for(BIG)) == 2  # no retry after close

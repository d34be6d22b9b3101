"""DecodeExecutor: concurrent decoding, bounded queue, original errors, close leaves no thread."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from episodestream.decode import DecodeExecutor, DecoderPool, open_decoder
from episodestream.errors import DecodeError, FrameNotFoundError

# every wait in these tests is bounded by this
_WAIT_S = 30.0


def _python_threads(prefix: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(prefix)]


def _blocking(result: str) -> tuple[Callable[[], str], threading.Event, threading.Event]:
    """A call that sets ``started``, waits (at most ``_WAIT_S``) for ``release`` and returns
    ``result``; with those two events."""
    started, release = threading.Event(), threading.Event()

    def blocked() -> str:
        started.set()
        release.wait(_WAIT_S)
        return result

    return blocked, started, release


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _os_threads_after_settling(target: int) -> int:
    """The OS thread count once it reaches ``target`` or 5 s pass: a joined Python thread's OS
    thread may take a moment more to leave /proc."""
    deadline = time.monotonic() + 5.0
    while _os_threads() > target and time.monotonic() < deadline:
        time.sleep(0.01)
    return _os_threads()


@pytest.fixture(scope="module")
def clips(lerobot_fixture_root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(lerobot_fixture_root)): p.read_bytes()
        for p in sorted((lerobot_fixture_root / "videos").glob("*/chunk-000/*.mp4"))
    }


def test_map_runs_concurrently_on_named_threads_and_keeps_order() -> None:
    barrier = threading.Barrier(3, timeout=_WAIT_S)

    def work(x: int) -> tuple[int, str]:
        if x < 3:
            barrier.wait()  # only passes if three calls run at the same time
        return x * x, threading.current_thread().name

    with DecodeExecutor(3, name="t-map") as executor:
        results = executor.map(work, range(10))
    assert [r[0] for r in results] == [x * x for x in range(10)]
    assert all(r[1].startswith("t-map-") for r in results)
    assert _python_threads("t-map") == []


def test_map_raises_the_original_error_of_the_first_failure() -> None:
    def work(x: int) -> int:
        if x in (3, 6):
            raise FrameNotFoundError(f"item {x}")
        return x

    with DecodeExecutor(2) as executor:
        with pytest.raises(FrameNotFoundError, match="item 3"):
            executor.map(work, range(8))
        assert executor.map(work, [1, 2]) == [1, 2]  # still usable


def test_bounded_queue_blocks_then_times_out() -> None:
    blocked, started, release = _blocking("done")
    executor = DecodeExecutor(1, max_pending=2, submit_timeout_s=0.2, name="t-bounded")
    try:
        first = executor.submit(blocked)
        assert started.wait(_WAIT_S)
        queued = [executor.submit(lambda i=i: i) for i in range(2)]
        t0 = time.monotonic()
        with pytest.raises(DecodeError, match="queue full"):
            executor.submit(lambda: None)
        assert time.monotonic() - t0 < _WAIT_S
        release.set()
        assert first.result(_WAIT_S) == "done"
        assert [f.result(_WAIT_S) for f in queued] == [0, 1]
    finally:
        release.set()
        executor.close()
    assert _python_threads("t-bounded") == []


def test_close_cancels_queued_calls_waits_for_running_ones_and_joins() -> None:
    blocked, started, release = _blocking("finished")
    executor = DecodeExecutor(1, max_pending=4, name="t-close")
    running = executor.submit(blocked)
    assert started.wait(_WAIT_S)
    queued = [executor.submit(lambda: "never") for _ in range(3)]
    closer = threading.Thread(target=executor.close)
    closer.start()
    deadline = time.monotonic() + _WAIT_S
    while not all(f.cancelled() for f in queued) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert all(f.cancelled() for f in queued)
    assert closer.is_alive()  # still waiting for the running call
    release.set()
    closer.join(_WAIT_S)
    assert not closer.is_alive()
    assert running.result(0) == "finished"
    assert _python_threads("t-close") == []
    with pytest.raises(DecodeError, match="closed"):
        executor.submit(lambda: None)
    executor.close()  # idempotent


def test_a_call_cancelled_by_close_wakes_whoever_waits_on_it() -> None:
    blocked, started, release = _blocking("finished")
    executor = DecodeExecutor(1, max_pending=4, name="t-wake")
    running = executor.submit(blocked)
    assert started.wait(_WAIT_S)
    queued = executor.submit(lambda: "never")
    closer = threading.Thread(target=executor.close)
    closer.start()
    try:
        # concurrent.futures.wait (what the datasets' bounded waits use) must see the
        # cancellation at once, not sit out its timeout
        done, _ = concurrent.futures.wait([queued], timeout=5.0)
        assert queued in done and queued.cancelled()
    finally:
        release.set()
        closer.join(_WAIT_S)
    assert running.result(0) == "finished"
    assert _python_threads("t-wake") == []


def test_close_without_cancel_runs_what_was_queued() -> None:
    executor = DecodeExecutor(2, name="t-drain")
    futures = [executor.submit(time.sleep, 0.01) for _ in range(6)]
    executor.close(cancel_pending=False)
    assert all(f.done() and not f.cancelled() for f in futures)
    assert _python_threads("t-drain") == []


def test_map_timeout_is_a_decode_error() -> None:
    release = threading.Event()
    with DecodeExecutor(1, name="t-timeout") as executor:
        with pytest.raises(DecodeError, match="not finished"):
            executor.map(lambda _: release.wait(_WAIT_S), range(3), timeout_s=0.2)
        release.set()


def test_zero_threads_runs_inline() -> None:
    caller = threading.current_thread().name
    with DecodeExecutor(0) as executor:
        assert executor.map(lambda _: threading.current_thread().name, range(3)) == [caller] * 3
        future = executor.submit(int, "x")
        assert isinstance(future.exception(0), ValueError)


def test_decoding_cameras_concurrently_matches_sequential_and_leaves_no_thread(
    clips: dict[str, bytes],
) -> None:
    requests = []
    rng = np.random.default_rng(3)
    expected = {}
    for key, data in clips.items():
        with open_decoder(data) as decoder:
            times = decoder.frame_times()
            expected[key] = decoder.frames_at(times)
        for _ in range(4):
            requests.append((key, rng.choice(len(times), size=5), times))
    # torch starts its process-wide intra-op threads on the first indexing; count after that
    assert torch.equal(expected[key][torch.tensor([0, 1])], expected[key][:2])
    os_threads_before = _os_threads()

    pool: DecoderPool[str] = DecoderPool(max_decoders=4)
    executor = DecodeExecutor(3, name="t-decode")

    def decode(request: tuple[str, np.ndarray, np.ndarray]) -> torch.Tensor:
        key, pick, times = request
        with pool.lease(key, lambda: open_decoder(clips[key], name=key, threads=2)) as dec:
            return dec.frames_at(times[pick])

    results = executor.map(decode, requests)
    for (key, pick, _), frames in zip(requests, results, strict=True):
        assert torch.equal(frames, expected[key][torch.from_numpy(pick)])
    assert _os_threads() > os_threads_before  # worker threads and FFmpeg threads exist now
    executor.close()
    pool.close()
    assert _python_threads("t-decode") == []
    assert pool.stats().decoders == 0
    # FFmpeg's decode threads went with the decoders, the workers with the executor
    assert _os_threads_after_settling(os_threads_before) == os_threads_before

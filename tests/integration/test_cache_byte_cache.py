"""EpisodeByteCache mechanics over real files: budget, eviction, retain, errors, shutdown."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from episodestream import BudgetError, CacheError, NotFound, StorageTimeout
from episodestream.cache import ClipJob, EpisodeByteCache
from episodestream.storage import LocalRangeReader, ReadRequest

CAMERAS = ("observation.images.cam_high", "observation.images.cam_left_wrist")


class WholeFileSource:
    """Each 'episode' i is file-00{i % 3} of each camera; a whole MP4 is already a clip."""

    def __init__(self, root: Path, missing: frozenset[int] = frozenset()) -> None:
        self.root = root
        self.missing = missing

    def path(self, episode: int, camera: str) -> str:
        name = "file-999.mp4" if episode in self.missing else f"file-{episode % 3:03d}.mp4"
        return f"videos/{camera}/chunk-000/{name}"

    def clip_jobs(self, episode: int) -> Sequence[ClipJob]:
        jobs = []
        for camera in CAMERAS:
            path = self.path(episode, camera)
            size = 1000 if episode in self.missing else (self.root / path).stat().st_size
            jobs.append(
                ClipJob(episode, camera, path, 0, size, size, 0.0, build=lambda payload: payload)
            )
        return jobs

    def episode_bytes(self, episode: int) -> int:
        return sum(2 * (j.byte_end - j.byte_start) for j in self.clip_jobs(episode))


class SlowReader(LocalRangeReader):
    """A real local reader on a slow disk: every read takes ``delay_s``."""

    def __init__(self, root: Path, delay_s: float) -> None:
        super().__init__(root)
        self.delay_s = delay_s

    def read(self, path: str, offset: int, length: int) -> bytes:
        time.sleep(self.delay_s)
        return super().read(path, offset, length)

    def read_many(self, requests: Sequence[ReadRequest]) -> list[bytes]:
        return [self.read(r.path, r.offset, r.length) for r in requests]


class GatedReader(SlowReader):
    """A slow reader whose reads also wait for ``gate`` first (bounded): no fetch can end
    while a test fills the cache's queue, however slowly the machine runs it."""

    def __init__(self, root: Path, delay_s: float) -> None:
        super().__init__(root, delay_s)
        self.gate = threading.Event()
        self.held = 0  # reads begun (each waits at the gate first)
        self._lock = threading.Lock()

    def read(self, path: str, offset: int, length: int) -> bytes:
        with self._lock:
            self.held += 1
        self.gate.wait(timeout=30)
        return super().read(path, offset, length)


@pytest.fixture
def source(lerobot_fixture_root: Path) -> WholeFileSource:
    return WholeFileSource(lerobot_fixture_root)


def test_fetched_clips_are_the_exact_bytes(source, lerobot_fixture_root):
    reader = LocalRangeReader(lerobot_fixture_root)
    with EpisodeByteCache(source, reader, byte_budget=10 * source.episode_bytes(0)) as cache:
        resident = cache.wait_ready(1, timeout=10)
        for camera in CAMERAS:
            expected = (lerobot_fixture_root / source.path(1, camera)).read_bytes()
            assert resident.clips[camera].data == expected
        assert cache.wait_ready(1, timeout=10) is resident
        m = cache.metrics()
        assert (m.hits, m.misses, m.fetches) == (1, 1, 1)
        assert m.resident_bytes == resident.nbytes
        assert m.reserved_bytes == 0


def test_budget_never_exceeded_under_concurrent_prefetch(source, lerobot_fixture_root):
    budget = max(source.episode_bytes(e) for e in range(3)) * 2 + 1
    reader = SlowReader(lerobot_fixture_root, delay_s=0.002)
    violations: list[tuple[int, int]] = []
    stop = threading.Event()
    with EpisodeByteCache(source, reader, byte_budget=budget, fetch_workers=4) as cache:

        def watch() -> None:
            while not stop.is_set():
                m = cache.metrics()
                if m.resident_bytes + m.reserved_bytes > budget:
                    violations.append((m.resident_bytes, m.reserved_bytes))

        watcher = threading.Thread(target=watch)
        watcher.start()

        def consume(offset: int) -> None:
            for i in range(30):
                episode = (i + offset) % 9
                cache.prefetch((episode + 1) % 9)
                cache.wait_ready(episode, timeout=30)

        consumers = [threading.Thread(target=consume, args=(k,)) for k in range(3)]
        for t in consumers:
            t.start()
        for t in consumers:
            t.join(60)
        stop.set()
        watcher.join(10)
        m = cache.metrics()
    assert not violations
    assert m.peak_bytes <= budget
    assert m.evictions > 0
    assert m.fetches >= 9


def test_retained_episodes_are_never_evicted(source, lerobot_fixture_root):
    reader = LocalRangeReader(lerobot_fixture_root)
    budget = source.episode_bytes(0) + source.episode_bytes(1) + 1
    with EpisodeByteCache(source, reader, byte_budget=budget) as cache:
        cache.retain(0)
        first = cache.wait_ready(0, timeout=10)
        for episode in (1, 2, 4, 5):
            cache.wait_ready(episode, timeout=10)
            assert cache.get(0) is first
        cache.release(0)
        for episode in (7, 8, 10, 11):  # all newer than 0 in LRU order
            cache.wait_ready(episode, timeout=10)
        assert cache.get(0) is None
        with pytest.raises(CacheError, match="released more often"):
            cache.release(0)


def test_budget_full_of_retained_episodes_times_out_then_frees(source, lerobot_fixture_root):
    reader = LocalRangeReader(lerobot_fixture_root)
    budget = max(source.episode_bytes(e) for e in range(3)) + 1
    with EpisodeByteCache(source, reader, byte_budget=budget) as cache:
        cache.retain(0)
        cache.wait_ready(0, timeout=10)
        assert cache.prefetch(1) is False
        with pytest.raises(StorageTimeout, match="no budget freed"):
            cache.wait_ready(1, timeout=0.3)
        threading.Timer(0.2, cache.release, args=(0,)).start()
        assert cache.wait_ready(1, timeout=10).episode == 1


def test_episode_larger_than_budget_is_a_clear_error(source, lerobot_fixture_root):
    reader = LocalRangeReader(lerobot_fixture_root)
    with EpisodeByteCache(source, reader, byte_budget=1000) as cache:
        with pytest.raises(BudgetError, match=r"episode 0 needs \d+ bytes .* budget is 1000"):
            cache.wait_ready(0, timeout=5)
        with pytest.raises(BudgetError):
            cache.prefetch(0)


def test_fetch_error_reaches_every_waiter_and_can_be_retried(lerobot_fixture_root):
    source = WholeFileSource(lerobot_fixture_root, missing=frozenset({7}))
    reader = GatedReader(lerobot_fixture_root, delay_s=0.0)
    errors: list[BaseException] = []
    with EpisodeByteCache(source, reader, byte_budget=10**8) as cache:
        assert cache.prefetch(7)

        def wait() -> None:
            try:
                cache.wait_ready(7, timeout=10)
            except BaseException as error:
                errors.append(error)

        waiters = [threading.Thread(target=wait) for _ in range(4)]
        for t in waiters:
            t.start()
        # the fetch fails only once all four wait on it (a waiter coming after the failure
        # would start a fetch of its own, with an error object of its own)
        deadline = time.monotonic() + 10
        while cache.metrics().misses < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cache.metrics().misses == 4
        reader.gate.set()
        for t in waiters:
            t.join(20)
        assert len(errors) == 4
        assert all(isinstance(e, NotFound) for e in errors)
        assert len({id(e) for e in errors}) == 1, "every waiter gets the original error object"
        assert "file-999.mp4" in str(errors[0])
        assert cache.metrics().reserved_bytes == 0
        source.missing = frozenset()
        assert cache.wait_ready(7, timeout=10).episode == 7


def test_close_with_work_in_flight_returns_promptly_and_joins_threads(source, lerobot_fixture_root):
    reader = GatedReader(lerobot_fixture_root, delay_s=0.5)
    before = set(threading.enumerate())
    cache = EpisodeByteCache(source, reader, byte_budget=10**8, fetch_workers=2, max_queued=8)
    accepted = [cache.prefetch(episode) for episode in range(2)]
    deadline = time.monotonic() + 10
    while reader.held < 2 and time.monotonic() < deadline:  # each worker holds one fetch
        time.sleep(0.01)
    assert reader.held == 2
    accepted += [cache.prefetch(episode) for episode in range(2, 20)]
    # the 2 workers hold one each, the queue 8 more, and nothing ends while the gate is shut
    assert accepted == [True] * 10 + [False] * 10
    reader.gate.set()  # the in-flight fetches may now end, each read 0.5 s late
    started = time.monotonic()
    cache.close()
    took = time.monotonic() - started
    assert took < 30, took  # a hang guard; what bounds close is below
    # close waited for the two fetches in flight and started none of the eight queued
    assert reader.held == 2 * len(CAMERAS)
    leftover = [t for t in threading.enumerate() if t not in before]
    assert leftover == []
    with pytest.raises(CacheError, match="closed"):
        cache.wait_ready(0, timeout=1)

"""Byte-budgeted cache of episode clips, fetched in the background.

Entry states and their transitions (all under one lock)::

    QUEUED ──► FETCHING ──► RESIDENT ──► (evicted: removed)
       │           │
       └───────────┴──► FAILED (removed from the table; waiters get the error)

Bytes are *reserved* when an episode is admitted (QUEUED): payload plus clip bytes while it is
in flight, shrunk to the clip bytes once resident. ``resident + reserved`` never exceeds the
budget: admission evicts least-recently-used unretained resident episodes first, and refuses
(prefetch) or waits (wait_ready) when that is not enough.
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from episodestream._closing import Closing
from episodestream._frozen import FrozenDict
from episodestream.cache._source import ClipJob, ClipSource, EpisodeClip
from episodestream.errors import BudgetError, CacheError, EpisodeStreamError, StorageTimeout
from episodestream.storage import RangeReader, ReadRequest

__all__ = ["CacheMetrics", "EpisodeByteCache", "ResidentEpisode"]

logger = logging.getLogger(__name__)

DEFAULT_FETCH_WORKERS = 4
DEFAULT_MAX_QUEUED = 64
DEFAULT_CLOSE_TIMEOUT_S = 10.0


class _State(enum.IntEnum):
    QUEUED = 0
    FETCHING = 1
    RESIDENT = 2
    FAILED = 3


@dataclass(frozen=True, slots=True)
class ResidentEpisode:
    """All camera clips of one episode, as stored in the cache.

    The same value reaches every caller of the cache, so ``clips`` is read-only (a
    ``FrozenDict``, whatever mapping it was made from): one caller cannot take a camera away
    from the others.
    """

    episode: int
    clips: Mapping[str, EpisodeClip]

    def __post_init__(self) -> None:
        object.__setattr__(self, "clips", FrozenDict.of(self.clips))

    @property
    def nbytes(self) -> int:
        return sum(clip.nbytes for clip in self.clips.values())


@dataclass(frozen=True, slots=True)
class CacheMetrics:
    """A snapshot of the cache's counters (times are totals in seconds)."""

    hits: int
    misses: int
    fetches: int
    failures: int
    evictions: int
    bytes_fetched: int
    resident_bytes: int
    reserved_bytes: int
    peak_bytes: int
    resident_episodes: int
    queued_episodes: int
    lookup_s: float
    fetch_s: float
    clip_write_s: float
    store_s: float
    wait_s: float


class _Entry:
    __slots__ = ("done", "episode", "error", "jobs", "reserved", "resident", "state")

    def __init__(self, episode: int, jobs: Sequence[ClipJob], reserved: int) -> None:
        self.episode = episode
        self.jobs = jobs
        self.reserved = reserved
        self.state = _State.QUEUED
        self.resident: ResidentEpisode | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()


class EpisodeByteCache(Closing):
    """Fetches episodes' clips through ``reader`` and keeps them within ``byte_budget`` bytes.

    ``prefetch`` never blocks; ``wait_ready`` blocks up to its timeout. ``retain``ed episodes are
    never evicted until ``release``d. A fetch failure reaches every waiter of that episode as the
    original exception; the failed episode leaves the table so it can be retried.
    """

    def __init__(
        self,
        source: ClipSource,
        reader: RangeReader,
        *,
        byte_budget: int,
        fetch_workers: int = DEFAULT_FETCH_WORKERS,
        max_queued: int = DEFAULT_MAX_QUEUED,
    ) -> None:
        if byte_budget <= 0:
            raise BudgetError(f"byte_budget must be positive, got {byte_budget}")
        if fetch_workers < 1 or max_queued < 1:
            raise CacheError("fetch_workers and max_queued must be at least 1")
        self._source = source
        self._reader = reader
        self._budget = int(byte_budget)
        self._max_queued = max_queued
        self._lock = threading.Condition(threading.Lock())
        self._entries: dict[int, _Entry] = {}
        self._lru: collections.OrderedDict[int, None] = collections.OrderedDict()  # resident
        self._retained: collections.Counter[int] = collections.Counter()
        self._queue: collections.deque[_Entry] = collections.deque()
        self._resident_bytes = 0
        self._reserved_bytes = 0
        self._closed = False
        self._counters = collections.Counter[str]()
        self._times = collections.Counter[str]()
        self._peak = 0
        self._workers = [
            threading.Thread(target=self._run_worker, name=f"episodestream-fetch-{i}", daemon=True)
            for i in range(fetch_workers)
        ]
        for worker in self._workers:
            worker.start()

    # -- public API ---------------------------------------------------------------------------

    @property
    def byte_budget(self) -> int:
        return self._budget

    def prefetch(self, episode: int, *, evict: bool = False) -> bool:
        """Queue ``episode`` for fetching without blocking.

        True when it is resident, in flight or now queued; False when the queue is full or the
        budget cannot take it yet (try again later). With ``evict`` it may evict unretained
        resident episodes (least recently used first) to make room, as a demand does.
        """
        with self._lock:
            self._check_open()
            if episode in self._entries:
                return True
            if len(self._queue) >= self._max_queued:
                return False
            jobs = self._jobs(episode)
            return self._admit(episode, jobs, evict=evict) is not None

    def wait_ready(self, episode: int, timeout: float) -> ResidentEpisode:
        """Return the resident clips of ``episode``, fetching it first if needed.

        Raises the fetch's own error on failure and ``StorageTimeout`` after ``timeout`` s.
        """
        deadline = time.monotonic() + timeout
        started = time.perf_counter()
        with self._lock:
            self._check_open()
            entry = self._entries.get(episode)
            if entry is not None and entry.state is _State.RESIDENT:
                self._counters["hits"] += 1
                self._lru.move_to_end(episode)
                assert entry.resident is not None
                return entry.resident
            self._counters["misses"] += 1
            while entry is None:
                jobs = self._jobs(episode)
                entry = self._admit(episode, jobs, evict=True)
                if entry is None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise StorageTimeout(
                            f"episode {episode}: no budget freed within {timeout:.1f} s "
                            f"({self._describe_budget()})"
                        )
                    self._lock.wait(min(remaining, 0.5))
                    self._check_open()
                    entry = self._entries.get(episode)
        if not entry.done.wait(max(0.0, deadline - time.monotonic())):
            raise StorageTimeout(f"episode {episode}: not fetched within {timeout:.1f} s")
        with self._lock:
            self._times["wait"] += time.perf_counter() - started
            if entry.error is not None:
                raise entry.error
            if entry.state is _State.RESIDENT and episode in self._lru:
                self._lru.move_to_end(episode)
        assert entry.resident is not None
        return entry.resident

    def get(self, episode: int) -> ResidentEpisode | None:
        """The resident clips of ``episode`` or None, without fetching."""
        with self._lock:
            entry = self._entries.get(episode)
            if entry is None or entry.state is not _State.RESIDENT:
                return None
            self._lru.move_to_end(episode)
            return entry.resident

    def is_ready(self, episode: int) -> bool:
        with self._lock:
            entry = self._entries.get(episode)
            return entry is not None and entry.state is _State.RESIDENT

    def retain(self, episode: int) -> None:
        """Pin ``episode`` (resident or not yet): it is never evicted until released."""
        with self._lock:
            self._retained[episode] += 1

    def release(self, episode: int) -> None:
        with self._lock:
            if self._retained[episode] <= 0:
                raise CacheError(f"episode {episode} released more often than retained")
            self._retained[episode] -= 1
            if self._retained[episode] == 0:
                del self._retained[episode]
            self._lock.notify_all()

    def evict(self, episode: int) -> bool:
        """Drop a resident, unretained episode now; True if it was dropped."""
        with self._lock:
            entry = self._entries.get(episode)
            if entry is None or entry.state is not _State.RESIDENT or self._retained[episode]:
                return False
            self._drop_resident(episode)
            return True

    @property
    def idle(self) -> bool:
        """True when no episode is queued, being fetched or retained: nothing in flight."""
        with self._lock:
            return not self._queue and not self._reserved_bytes and not self._retained

    def reset_metrics(self) -> None:
        """Zero the counters and times, and start the peak afresh from the bytes held now
        (a pool reusing this cache for its next pass reports that pass alone)."""
        with self._lock:
            self._counters.clear()
            self._times.clear()
            self._peak = self._resident_bytes + self._reserved_bytes

    def metrics(self) -> CacheMetrics:
        with self._lock:
            c, t = self._counters, self._times
            return CacheMetrics(
                hits=c["hits"],
                misses=c["misses"],
                fetches=c["fetches"],
                failures=c["failures"],
                evictions=c["evictions"],
                bytes_fetched=c["bytes_fetched"],
                resident_bytes=self._resident_bytes,
                reserved_bytes=self._reserved_bytes,
                peak_bytes=self._peak,
                resident_episodes=len(self._lru),
                queued_episodes=len(self._queue),
                lookup_s=t["lookup"],
                fetch_s=t["fetch"],
                clip_write_s=t["clip_write"],
                store_s=t["store"],
                wait_s=t["wait"],
            )

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT_S) -> None:
        """Cancel queued work, wake every waiter, and join the fetch threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            cancelled = list(self._queue)
            self._queue.clear()
            for entry in cancelled:
                self._fail(entry, CacheError(f"episode {entry.episode}: cache closed"))
            self._lock.notify_all()
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        alive = [w.name for w in self._workers if w.is_alive()]
        if alive:
            logger.warning("fetch threads still running after close: %s", alive)

    # -- internals (the lock is held where noted) ---------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise CacheError("the episode cache is closed")

    def _describe_budget(self) -> str:
        return (
            f"budget {self._budget} B, resident {self._resident_bytes} B, reserved "
            f"{self._reserved_bytes} B, retained episodes {sorted(self._retained)}"
        )

    def _jobs(self, episode: int) -> Sequence[ClipJob]:
        started = time.perf_counter()
        jobs = self._source.clip_jobs(episode)
        self._times["lookup"] += time.perf_counter() - started
        return jobs

    def _admit(self, episode: int, jobs: Sequence[ClipJob], *, evict: bool) -> _Entry | None:
        """Reserve bytes for ``episode`` and queue it; None if the budget cannot take it now.

        Only a demand (``evict``) evicts: a prefetch takes free budget or waits its turn, so
        it never pushes out episodes fetched earlier and needed sooner.
        """
        need = sum(job.payload_nbytes + job.clip_nbytes for job in jobs)
        if need > self._budget:
            raise BudgetError(
                f"episode {episode} needs {need} bytes in flight (payload + clips) but the byte "
                f"budget is {self._budget}: raise the budget"
            )
        excess = self._resident_bytes + self._reserved_bytes + need - self._budget
        if excess > 0:
            if not evict:
                return None
            # evict only when that frees enough: otherwise nothing is gained and the victims
            # (often prefetched episodes about to enter) would be fetched again
            victims, freed = [], 0
            for candidate in self._lru:
                if freed >= excess:
                    break
                if not self._retained[candidate]:
                    victims.append(candidate)
                    entry = self._entries[candidate]
                    assert entry.resident is not None
                    freed += entry.resident.nbytes
            if freed < excess:
                return None
            for victim in victims:
                self._drop_resident(victim)
        entry = _Entry(episode, jobs, need)
        self._entries[episode] = entry
        self._reserved_bytes += need
        self._peak = max(self._peak, self._resident_bytes + self._reserved_bytes)
        self._queue.append(entry)
        self._lock.notify_all()
        return entry

    def _drop_resident(self, episode: int) -> None:
        entry = self._entries.pop(episode)
        del self._lru[episode]
        assert entry.resident is not None
        self._resident_bytes -= entry.resident.nbytes
        self._counters["evictions"] += 1
        self._lock.notify_all()

    def _fail(self, entry: _Entry, error: BaseException) -> None:
        self._reserved_bytes -= entry.reserved
        entry.reserved = 0
        entry.state = _State.FAILED
        entry.error = error
        if self._entries.get(entry.episode) is entry:
            del self._entries[entry.episode]
        self._counters["failures"] += 1
        entry.done.set()
        self._lock.notify_all()

    def _run_worker(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                entry = self._queue.popleft()
                entry.state = _State.FETCHING
            try:
                resident, timings = self._fetch(entry)
            except BaseException as error:  # delivered to waiters, typed and intact
                if not isinstance(error, EpisodeStreamError):
                    logger.debug("episode %d fetch failed", entry.episode, exc_info=True)
                with self._lock:
                    self._fail(entry, error)
                continue
            with self._lock:
                for name, seconds in timings.items():
                    self._times[name] += seconds
                self._counters["fetches"] += 1
                self._counters["bytes_fetched"] += sum(j.payload_nbytes for j in entry.jobs)
                self._reserved_bytes -= entry.reserved
                entry.reserved = 0
                if self._closed:
                    entry.state = _State.FAILED
                    entry.error = CacheError(f"episode {entry.episode}: cache closed")
                    self._entries.pop(entry.episode, None)
                else:
                    entry.state = _State.RESIDENT
                    entry.resident = resident
                    self._resident_bytes += resident.nbytes
                    self._lru[entry.episode] = None
                entry.done.set()
                self._lock.notify_all()
            # an idle thread must not hold the last clips after the cache evicts them
            del entry, resident

    def _fetch(self, entry: _Entry) -> tuple[ResidentEpisode, dict[str, float]]:
        started = time.perf_counter()
        payloads = self._reader.read_many(
            [ReadRequest(job.path, job.byte_start, job.payload_nbytes) for job in entry.jobs]
        )
        fetched = time.perf_counter()
        clips: dict[str, EpisodeClip] = {}
        for job, payload in zip(entry.jobs, payloads, strict=True):
            data = job.build(payload)
            if len(data) != job.clip_nbytes:
                raise CacheError(
                    f"episode {job.episode} camera {job.camera!r}: clip is {len(data)} bytes, "
                    f"planned {job.clip_nbytes}"
                )
            clips[job.camera] = EpisodeClip(
                job.episode, job.camera, data, job.time_offset_s, job.frame_times_s
            )
        written = time.perf_counter()
        resident = ResidentEpisode(entry.episode, clips)
        stored = time.perf_counter()
        return resident, {
            "fetch": fetched - started,
            "clip_write": written - fetched,
            "store": stored - written,
        }

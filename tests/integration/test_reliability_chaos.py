"""Chaos streaming: whole epochs of synthetic datasets through a fault-injecting HTTP proxy.

Chain: HttpRangeReader → WanEmulator (2 ms RTT) → FaultProxy (seeded random faults) → nginx.
The dataset is opened through the faults too (metadata, Parquet, manifest built from the moov
boxes), with a fresh sidecar cache per run. Every sample yielded is compared with a fault-free
run over local disk — every tensor equal, and every camera's frame identity cells reading the
(episode, frame) the sample claims. A run must either deliver the whole epoch that way, or stop
with a typed ``EpisodeStreamError`` naming the file (and, for transport errors, the byte range);
a watchdog fails a run that takes longer than a bound, and the cache's peak stays within its
byte budget.

The retry budget is sized for the fault rate (:func:`attempts_for`), so a run must deliver the
whole epoch: a reader that gives up early fails (``test_a_reader_that_gives_up_early_fails``
shows the check catching one). Where a stop is expected (harsh faults, a replaced file), it must
be the kind expected: retries exhausted, naming the file and range, or the file changed.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

from episodestream import (
    EpisodePoolDataset,
    EpisodeStreamDataset,
    EpisodeStreamError,
    StaleSourceError,
    StorageError,
)
from episodestream.storage import RetryPolicy, Timeouts
from episodestream_tools.serving import NginxServer, WanEmulator, WanSettings
from episodestream_tools.synthetic import read_frame_identity
from tests.plugins.datasets import samples_by_index
from tests.support.faults import Fault, FaultProxy, RandomFaults

# every fault the proxy knows, several shapes of some; drawn uniformly when a request misbehaves
FAULT_MENU = (
    Fault("status", status=503, burst=3),
    Fault("status", status=500),
    Fault("status", status=502, burst=2),
    Fault("status", status=504),
    Fault("retry_after", retry_after_s=1, burst=2),
    Fault("reset_before"),
    Fault("reset_body", body_fraction=0.3),
    Fault("truncate", body_fraction=0.6),
    Fault("stall_headers", stall_s=3.0),
    Fault("stall_body", body_fraction=0.5, stall_s=3.0),
    Fault("wrong_range", shift_bytes=64),
    Fault("wrong_range", shift_bytes=-1),
    Fault("bad_content_range", shift_bytes=1),
    Fault("ignore_range"),
)
CHAOS_RATE = 0.25  # share of requests that misbehave in the streaming runs
# every chaos run of this module together sends fewer requests than this (about 50-150 each)
CHAOS_REQUESTS_BOUND = 2000
CHAOS_GIVE_UP_RISK = 1e-4  # chance that any request of the module exhausts its retries


def give_up_probability(menu: tuple[Fault, ...], rate: float, attempts: int) -> float:
    """Chance that ``attempts`` attempts of one request all fail, faults drawn from ``menu``.

    Pessimistic: a fresh attempt fails with the share of all answers that are faults, bursts
    included (a burst another request set off may hit this one), and a fault this request
    met fails its next ``burst - 1`` attempts too.
    """
    bursts = [f.burst if f.kind in ("status", "retry_after") else 1 for f in menu]
    mean_burst = sum(bursts) / len(bursts)
    fresh = rate * mean_burst / (1 - rate + rate * mean_burst)
    owed_probability = {0: 1.0}  # answers owed to a burst -> chance, all attempts failed so far
    for _ in range(attempts):
        after: collections.Counter[int] = collections.Counter()
        for owed, chance in owed_probability.items():
            if owed:
                after[owed - 1] += chance
            else:
                for burst in bursts:
                    after[burst - 1] += chance * fresh / len(bursts)
        owed_probability = dict(after)
    return sum(owed_probability.values())


def attempts_for(menu: tuple[Fault, ...], rate: float, requests: int, risk: float) -> int:
    """The fewest attempts per request for which ``requests`` requests all succeed but for a
    chance of ``risk``."""
    attempts = 1
    while requests * give_up_probability(menu, rate, attempts) > risk:
        attempts += 1
    return attempts


CHAOS_ATTEMPTS = attempts_for(FAULT_MENU, CHAOS_RATE, CHAOS_REQUESTS_BOUND, CHAOS_GIVE_UP_RISK)
# quick retries, short read timeout (stalls cost 0.5 s, not 30 s); the attempts sized above,
# and time for all of them (a stalled body costs about 1 s, a backoff at most 0.3 s)
CHAOS_RETRY = RetryPolicy(
    max_attempts=CHAOS_ATTEMPTS,
    max_elapsed_seconds=2.0 * CHAOS_ATTEMPTS + 10.0,
    backoff_initial_seconds=0.02,
    backoff_max_seconds=0.3,
    retry_after_max_seconds=1.0,
)
CHAOS_TIMEOUTS = Timeouts(connect_seconds=2.0, read_seconds=0.5, pool_seconds=10.0)
# small enough that episodes are evicted and fetched again (~17 KiB of clips each)
BYTE_BUDGET = 60_000
WATCHDOG_S = 90.0
PATH_IN_MESSAGE = re.compile(r"(videos|data|meta)/\S+")
RANGE_IN_MESSAGE = re.compile(r"bytes \d+-\d+")
GAVE_UP = re.compile(r"gave up after (\d+) attempt")


@dataclass
class RunResult:
    """What one chaos run delivered."""

    samples: int = 0
    expected: int = 0
    error: BaseException | None = None
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    requests: int = 0
    retries: int = 0
    failure_log_lines: int = 0
    cache_peak: int = 0
    budget: int = BYTE_BUDGET
    seconds: float = 0.0

    def line(self, name: str) -> str:
        outcome = "complete" if self.error is None else f"stopped: {type(self.error).__name__}"
        return (
            f"[chaos] {name}: {outcome}, {self.samples}/{self.expected} samples verified, "
            f"{self.requests} requests, {sum(self.faults.values())} faults "
            f"{dict(sorted(self.faults.items()))}, {self.retries} retries, cache peak "
            f"{self.cache_peak}/{self.budget} B, {self.seconds:.1f} s"
        )

    def watch(
        self,
        proxy: FaultProxy,
        work: Callable[[], None],
        what: str,
        *,
        plan: RandomFaults | None = None,
    ) -> None:
        """Run ``work`` under the watchdog, ``plan`` set on the proxy (when given; cleared
        after, whatever happens), then record the time taken and the requests and faults the
        proxy saw meanwhile."""
        before = len(proxy.records())
        if plan is not None:
            proxy.set_plan(plan)
        started = time.perf_counter()
        try:
            run_with_watchdog(work, WATCHDOG_S, what)
        finally:
            proxy.set_plan(None)
        self.seconds = time.perf_counter() - started
        records = proxy.records()[before:]
        self.requests = len(records)
        self.faults = collections.Counter(r.fault for r in records if r.fault is not None)


def run_with_watchdog(work: Callable[[], None], seconds: float, what: str) -> None:
    """Run ``work`` in a thread; fail the test if it is still running after ``seconds``."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as error:  # handed to the test thread
            errors.append(error)

    thread = threading.Thread(target=target, name="reliability-watched", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"{what}: still running after {seconds:.0f} s (a wait without bound?)")
    if errors:
        raise errors[0]


def assert_same_sample(got: dict[str, Any], want: dict[str, Any], cameras: tuple[str, ...]) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got[key], value), f"sample {int(want['index'])}: {key} differs"
        else:
            assert got[key] == value, f"sample {int(want['index'])}: {key} differs"
    identity = (int(got["episode_index"]), int(got["frame_index"]))
    for camera in cameras:
        assert read_frame_identity(got[camera]) == identity, f"{camera} shows another frame"


def assert_complete(result: RunResult) -> None:
    """The run delivered the whole epoch, every sample verified, and stopped for nothing."""
    assert result.error is None, f"the run stopped: {result.error!r}"
    assert result.samples == result.expected, f"{result.samples}/{result.expected} samples"


def assert_retries_exhausted(error: BaseException | None, attempts: int) -> None:
    """A stop because a request used up its ``attempts``, naming the file and byte range."""
    assert isinstance(error, StorageError), f"not a storage error: {error!r}"
    assert not isinstance(error, StaleSourceError), f"no file changed: false alarm {error!r}"
    check_typed_stop(error)
    gave_up = GAVE_UP.search(str(error))
    assert gave_up, f"not a stop for exhausted retries: {error}"
    assert int(gave_up.group(1)) == attempts, str(error)


def check_typed_stop(error: BaseException) -> None:
    """A run that stops must stop with a typed error naming the file (and range)."""
    assert isinstance(error, EpisodeStreamError), f"untyped error {error!r}"
    message = str(error)
    assert PATH_IN_MESSAGE.search(message), f"error names no file: {message}"
    if isinstance(error, StorageError) and not isinstance(error, StaleSourceError):
        assert RANGE_IN_MESSAGE.search(message), f"error names no byte range: {message}"


@pytest.fixture
def reference(synthetic_av1_samples: dict[int, Any]) -> dict[int, Any]:
    """Fault-free samples of synthetic_av1 read from local disk, by global frame index."""
    return synthetic_av1_samples


@pytest.fixture(scope="module")
def chaos_link(http_server: NginxServer) -> Iterator[tuple[FaultProxy, WanEmulator]]:
    """The fault proxy in front of the session's nginx, and a 2 ms-RTT link in front of it."""
    with (
        FaultProxy((http_server.host, http_server.port), io_timeout_s=10.0) as proxy,
        WanEmulator(proxy.address, WanSettings(rtt_ms=2.0)) as emulator,
    ):
        yield proxy, emulator


@pytest.fixture
def proxy(chaos_link: tuple[FaultProxy, WanEmulator]) -> FaultProxy:
    return chaos_link[0]


@pytest.fixture
def av1_url(
    chaos_link: tuple[FaultProxy, WanEmulator],
    http_publish: Callable[..., str],
    synthetic_av1: Path,
) -> str:
    """synthetic_av1 on the session's nginx, reached through the link and the fault proxy."""
    return chaos_link[1].rebase_url(http_publish(synthetic_av1))


def _reader_options(
    seed: int, failure_log: Path, retry: RetryPolicy = CHAOS_RETRY
) -> dict[str, Any]:
    return {
        "timeouts": CHAOS_TIMEOUTS,
        "retry": retry,
        "seed": seed,
        "failure_log": failure_log,
    }


def _finish(result: RunResult, metrics: dict[str, Any]) -> None:
    result.retries = int(metrics["reader"]["retries"])
    cache = metrics.get("cache")
    result.cache_peak = cache.peak_bytes if cache is not None else 0


def stream_map_epoch(
    url: str,
    proxy: FaultProxy,
    reference: dict[int, Any],
    tmp: Path,
    *,
    seed: int,
    rate: float,
    on_sample: Callable[[int], None] | None = None,
    retry: RetryPolicy = CHAOS_RETRY,
) -> RunResult:
    """One epoch of EpisodeStreamDataset (index order) through random faults."""
    result = RunResult(expected=len(reference))
    failure_log = tmp / "failures.jsonl"

    def work() -> None:
        dataset = None
        try:
            dataset = EpisodeStreamDataset(
                url,
                cache_dir=tmp / "cache",
                image_dtype="uint8",
                byte_budget=BYTE_BUDGET,
                wait_timeout_s=60.0,
                reader_options=_reader_options(seed, failure_log, retry),
            )
            cameras = dataset.samples.video_keys
            for index in range(len(dataset)):
                sample = dataset[index]
                assert_same_sample(sample, reference[int(sample["index"])], cameras)
                assert int(sample["index"]) == index
                result.samples += 1
                if on_sample is not None:
                    on_sample(index)
        except EpisodeStreamError as error:
            result.error = error
        finally:
            if dataset is not None:
                _finish(result, dataset.metrics())
                dataset.close()

    plan = RandomFaults(FAULT_MENU, rate=rate, seed=seed)
    result.watch(proxy, work, f"chaos seed {seed}", plan=plan)
    if failure_log.exists():
        lines = failure_log.read_text().splitlines()
        result.failure_log_lines = len(lines)
        assert all(json.loads(line)["url"].startswith("http://") for line in lines)
    return result


@pytest.mark.parametrize("seed", [11, 12, 13, 14, 15])
def test_map_epoch_through_random_faults(
    seed: int, proxy: FaultProxy, av1_url: str, reference: dict[int, Any], tmp_path: Path
) -> None:
    result = stream_map_epoch(av1_url, proxy, reference, tmp_path, seed=seed, rate=CHAOS_RATE)
    print(result.line(f"EpisodeStreamDataset seed {seed}"))
    assert sum(result.faults.values()) > 0, "the run saw no fault at all"
    assert_complete(result)
    assert result.cache_peak <= BYTE_BUDGET
    # every retry was logged (the log also holds attempts that gave up)
    assert result.failure_log_lines >= result.retries


def test_the_retry_budget_is_sized_for_the_fault_rate() -> None:
    risk = CHAOS_REQUESTS_BOUND * give_up_probability(FAULT_MENU, CHAOS_RATE, CHAOS_ATTEMPTS)
    fewer = CHAOS_REQUESTS_BOUND * give_up_probability(FAULT_MENU, CHAOS_RATE, CHAOS_ATTEMPTS - 1)
    assert risk <= CHAOS_GIVE_UP_RISK < fewer  # the fewest attempts that are enough
    assert CHAOS_RETRY.max_attempts == CHAOS_ATTEMPTS
    # the budget these tests had (8 attempts, sized for nothing) was not enough by this account
    assert CHAOS_REQUESTS_BOUND * give_up_probability(FAULT_MENU, CHAOS_RATE, 8) > 1e-3
    assert give_up_probability(FAULT_MENU, 0.0, 1) == 0.0
    # a burst of 3 fails the next two attempts for sure: two attempts are no better than one
    bursts_only = (Fault("status", status=503, burst=3),)
    assert give_up_probability(bursts_only, 0.5, 3) == give_up_probability(bursts_only, 0.5, 1)


def test_a_reader_that_gives_up_early_fails(
    proxy: FaultProxy, av1_url: str, reference: dict[int, Any], tmp_path: Path
) -> None:
    """The negative check: the same run with no retries stops, and the completion check the
    chaos runs make fails on it; the stop is retries exhausted, naming the file and range."""
    no_retries = RetryPolicy(max_attempts=1, retry_after_max_seconds=1.0)
    result = stream_map_epoch(
        av1_url, proxy, reference, tmp_path, seed=11, rate=CHAOS_RATE, retry=no_retries
    )
    print(result.line("EpisodeStreamDataset seed 11, no retries"))
    with pytest.raises(AssertionError, match="the run stopped"):
        assert_complete(result)
    assert_retries_exhausted(result.error, 1)
    assert result.samples < result.expected


def test_pool_epoch_through_random_faults(
    chaos_link: tuple[FaultProxy, WanEmulator],
    http_publish: Callable[..., str],
    synthetic_h264: Path,
    tmp_path: Path,
) -> None:
    """EpisodePoolDataset (H.264, B-frames, open GOPs): prefetch and decode threads under fire."""
    proxy, emulator = chaos_link
    want = samples_by_index(synthetic_h264, tmp_path / "ref")
    url = emulator.rebase_url(http_publish(synthetic_h264))
    result = RunResult(expected=len(want), budget=4 * BYTE_BUDGET)
    seen: set[int] = set()

    def work() -> None:
        dataset = None
        try:
            dataset = EpisodePoolDataset(
                url,
                pool_size=2,
                prefetch_episodes=2,
                byte_budget=4 * BYTE_BUDGET,
                decode_threads=2,
                seed=3,
                cache_dir=tmp_path / "cache",
                image_dtype="uint8",
                wait_timeout_s=60.0,
                reader_options=_reader_options(21, tmp_path / "failures.jsonl"),
            )
            cameras = dataset.samples.video_keys
            for sample in dataset:
                index = int(sample["index"])
                assert index not in seen, f"sample {index} drawn twice"
                seen.add(index)
                assert_same_sample(sample, want[index], cameras)
                result.samples += 1
                if dataset._engine is not None:
                    peak = dataset._engine.cache.metrics().peak_bytes
                    result.cache_peak = max(result.cache_peak, peak)
        except EpisodeStreamError as error:
            result.error = error
        finally:
            if dataset is not None:
                result.retries = int(dataset.metrics()["reader"]["retries"])
                dataset.close()

    result.watch(proxy, work, "pool chaos", plan=RandomFaults(FAULT_MENU, rate=CHAOS_RATE, seed=21))
    print(result.line("EpisodePoolDataset (H.264) seed 21"))
    assert sum(result.faults.values()) > 0
    assert_complete(result)
    assert seen == set(want), "the epoch did not cover every frame exactly once"
    assert result.cache_peak <= 4 * BYTE_BUDGET


def test_harsh_faults_stop_with_a_typed_error_naming_file_and_range(
    proxy: FaultProxy, av1_url: str, reference: dict[int, Any], tmp_path: Path
) -> None:
    """Opened cleanly, then 60 % of requests fail and only 2 attempts are allowed: the epoch
    stops early, with a typed error naming the file and the byte range."""
    harsh = RetryPolicy(max_attempts=2, backoff_initial_seconds=0.01, retry_after_max_seconds=0.1)
    result = RunResult(expected=len(reference))

    def work() -> None:
        try:
            with EpisodeStreamDataset(
                av1_url,
                cache_dir=tmp_path / "cache",
                image_dtype="uint8",
                byte_budget=BYTE_BUDGET,
                wait_timeout_s=30.0,
                reader_options={"timeouts": CHAOS_TIMEOUTS, "retry": harsh, "seed": 5},
            ) as dataset:
                proxy.set_plan(RandomFaults(FAULT_MENU, rate=0.6, seed=5))
                for index in range(len(dataset)):
                    sample = dataset[index]
                    assert_same_sample(sample, reference[index], dataset.samples.video_keys)
                    result.samples += 1
        except EpisodeStreamError as error:
            result.error = error

    result.watch(proxy, work, "harsh chaos")
    print(result.line("EpisodeStreamDataset harsh (rate 0.6, 2 attempts)"))
    assert result.error is not None, "expected the run to give up"
    assert_retries_exhausted(result.error, harsh.max_attempts)


def _copy_dataset(source: Path, destination: Path) -> Path:
    shutil.copytree(source, destination)
    return destination


def test_file_replaced_mid_run_stops_with_stale_source_error(
    chaos_link: tuple[FaultProxy, WanEmulator],
    http_publish: Callable[..., str],
    synthetic_av1: Path,
    reference: dict[int, Any],
    tmp_path: Path,
) -> None:
    """A video file replaced on the server while the epoch runs (with random faults too): the
    samples before are correct; the first read of the new file raises StaleSourceError."""
    proxy, emulator = chaos_link
    root = _copy_dataset(synthetic_av1, tmp_path / "copy")
    url = emulator.rebase_url(http_publish(root, f"replaced-{os.getpid()}-{time.time_ns()}"))
    victim = root / "videos/observation.images.cam_high/chunk-000/file-001.mp4"
    replaced = threading.Event()

    def replace_after_first_samples(index: int) -> None:
        if index == 3 and not replaced.is_set():
            # same bytes, new modification time: a new version to any HTTP validator
            data = victim.read_bytes()
            temporary = victim.with_suffix(".new")
            temporary.write_bytes(data)
            stat = victim.stat()
            os.utime(temporary, (stat.st_atime + 100, stat.st_mtime + 100))
            os.replace(temporary, victim)
            replaced.set()

    result = stream_map_epoch(
        url, proxy, reference, tmp_path, seed=31, rate=0.1, on_sample=replace_after_first_samples
    )
    print(result.line("EpisodeStreamDataset, file replaced after sample 3"))
    assert replaced.is_set()
    assert isinstance(result.error, StaleSourceError), result.error
    assert "chunk-000/file-001.mp4" in str(result.error)
    check_typed_stop(result.error)
    # file-001 holds episodes 3-5: everything before them came through intact
    assert result.samples >= 4


def test_file_replaced_between_runs_is_caught_against_the_cached_index(
    http_publish: Callable[..., str],
    http_server: NginxServer,
    synthetic_av1: Path,
    reference: dict[int, Any],
    tmp_path: Path,
) -> None:
    """The sidecar cached by a first run records each file's validators; a second run whose
    reader first meets the replaced file refuses it before a clip is built from it."""
    root = _copy_dataset(synthetic_av1, tmp_path / "copy")
    url = http_publish(root, f"replaced-between-{os.getpid()}-{time.time_ns()}")
    cache = tmp_path / "cache"
    with EpisodeStreamDataset(url, cache_dir=cache, image_dtype="uint8") as first:
        assert_same_sample(first[0], reference[0], first.samples.video_keys)
    victim = root / "videos/observation.images.cam_left_wrist/chunk-000/file-000.mp4"
    stat = victim.stat()
    os.utime(victim, (stat.st_atime + 100, stat.st_mtime + 100))
    with (
        EpisodeStreamDataset(url, cache_dir=cache, image_dtype="uint8") as second,
        pytest.raises(StaleSourceError) as caught,
    ):
        second[0]
    assert "cam_left_wrist/chunk-000/file-000.mp4 changed" in str(caught.value)


def test_dataloader_workers_stream_through_random_faults(
    proxy: FaultProxy, av1_url: str, reference: dict[int, Any], tmp_path: Path
) -> None:
    """DataLoader(num_workers=2): workers forked from a process whose reader already holds
    connections (opening read the metadata and built the index) stream through the faults."""
    result = RunResult(expected=len(reference), budget=4 * BYTE_BUDGET)
    seen: set[int] = set()

    def work() -> None:
        with EpisodePoolDataset(
            av1_url,
            pool_size=2,
            prefetch_episodes=1,
            byte_budget=4 * BYTE_BUDGET,  # split between the two workers
            decode_threads=1,
            cache_dir=tmp_path / "cache",
            image_dtype="uint8",
            wait_timeout_s=60.0,
            reader_options=_reader_options(41, tmp_path / "failures.jsonl"),
        ) as dataset:
            cameras = dataset.samples.video_keys
            proxy.set_plan(RandomFaults(FAULT_MENU, rate=CHAOS_RATE, seed=41))
            loader = torch.utils.data.DataLoader(
                dataset, batch_size=None, num_workers=2, timeout=60
            )
            try:
                for sample in loader:
                    index = int(sample["index"])
                    assert index not in seen, f"sample {index} drawn twice"
                    seen.add(index)
                    assert_same_sample(sample, reference[index], cameras)
                    result.samples += 1
            except EpisodeStreamError as error:  # re-raised by the DataLoader, type kept
                result.error = error

    result.watch(proxy, work, "DataLoader chaos")
    print(
        result.line("EpisodePoolDataset, DataLoader(num_workers=2), seed 41 (retries in workers)")
    )
    assert sum(result.faults.values()) > 0
    # a StaleSourceError would be a false alarm here (e.g. workers reading each other's
    # responses on sockets inherited from the parent): no file changed
    assert_complete(result)
    assert seen == set(reference)

"""Hostile arguments and invocations of the public surface: the constructors (every argument,
LeRobot's keywords included), ``[i]``, iteration, resume state, ``check_dataset``, the command
line and the nginx.conf ``serve`` writes.

Each argument case runs under the harness of ``test_reliability_hostile`` (a thread joined
with a deadline, RSS sampled): it must end within ``CASE_TIME_BOUND_S`` with the typed
``EpisodeStreamError`` the table names, whose message names the argument (and the bound that
refused it, for a value above one), in fewer than ``MESSAGE_BOUND_CHARS`` characters, and
before the first request: the datasets read through a :class:`Tripwire` reader that counts
every call, ``check_dataset`` an HTTP root whose nginx access log must stay empty, and the
methods of an open dataset a :class:`CountingReader` whose count must not move.
"""

from __future__ import annotations

import collections
import math
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import torch

from episodestream import (
    BudgetError,
    ConfigError,
    ConfigTypeError,
    EpisodePoolDataset,
    EpisodeStreamDataset,
    EpisodeStreamError,
    Order,
    Resources,
    SampleIndexError,
    SamplingError,
    ServingError,
    StreamOptions,
    check_dataset,
)
from episodestream.cli import EXIT_ERROR, EXIT_INTERNAL, main
from episodestream.datasets import images_to_float
from episodestream.storage import (
    BaseRangeReader,
    Limits,
    LocalRangeReader,
    ReaderStats,
    RetryPolicy,
)
from episodestream_tools.serving import NginxServer
from episodestream_tools.serving._nginx import nginx_string
from tests.integration.test_reliability_hostile import (
    CASE_TIME_BOUND_S,
    RSS_BOUND_BYTES,
    RssPeak,
)

MESSAGE_BOUND_CHARS = 1000
# (table, case) -> outcome label, printed at the end of the module (docs/RELIABILITY.md)
OUTCOMES: collections.Counter[tuple[str, str]] = collections.Counter()
PEAKS: list[tuple[float, int, str]] = []  # (seconds, RSS rise, case) of every refusal


class Touched(Exception):
    """A read of a reader no argument check may reach (deliberately no EpisodeStreamError)."""


class Tripwire(BaseRangeReader):
    """A reader named after a real dataset whose every read fails and is counted."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self._root = str(root)
        self.calls = 0

    @property
    def root(self) -> str:
        return self._root

    def size(self, path: str) -> int:
        self.calls += 1
        raise Touched(path)

    def read(self, path: str, offset: int, length: int) -> bytes:
        self.calls += 1
        raise Touched(path)

    def stats(self) -> ReaderStats:
        return ReaderStats()


class CountingReader(BaseRangeReader):
    """A local reader that counts its calls (size and read)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self._local = LocalRangeReader(root)
        self.calls = 0

    @property
    def root(self) -> str:
        return self._local.root

    def size(self, path: str) -> int:
        self.calls += 1
        return self._local.size(path)

    def read(self, path: str, offset: int, length: int) -> bytes:
        self.calls += 1
        return self._local.read(path, offset, length)

    def stats(self) -> ReaderStats:
        return self._local.stats()

    def close(self) -> None:
        self._local.close()


@dataclass
class Refusal:
    error: BaseException | None
    seconds: float
    rss_peak_delta: int
    value: Any = field(default=None)


def refused(call: Callable[[], Any]) -> Refusal:
    """Run ``call`` on a thread joined with CASE_TIME_BOUND_S, RSS sampled; what it raised."""
    result: dict[str, Any] = {"error": None}
    rss = RssPeak()
    started = time.perf_counter()

    def work() -> None:
        try:
            result["value"] = call()
        except BaseException as error:  # judged by the caller: typed or not
            result["error"] = error

    thread = threading.Thread(target=work, name="hostile-argument", daemon=True)
    thread.start()
    thread.join(CASE_TIME_BOUND_S)
    seconds = time.perf_counter() - started
    delta = rss.stop()
    if thread.is_alive():
        pytest.fail(f"still running after {CASE_TIME_BOUND_S:.0f} s")
    value = result.get("value")
    if isinstance(value, EpisodeStreamDataset | EpisodePoolDataset):
        value.close()
    return Refusal(result["error"], seconds, delta, value)


def assert_refused(
    table: str,
    case: str,
    outcome: Refusal,
    error: type[EpisodeStreamError],
    names: tuple[str, ...],
) -> None:
    label = type(outcome.error).__name__ if outcome.error is not None else "accepted"
    OUTCOMES[(table, f"{case}: {label}")] += 1
    PEAKS.append((outcome.seconds, outcome.rss_peak_delta, f"{table} {case}"))
    assert outcome.error is not None, f"{case}: accepted"
    assert isinstance(outcome.error, error), f"{case}: {outcome.error!r}"
    message = str(outcome.error)
    for name in names:
        assert name in message, f"{case}: {message!r} does not name {name!r}"
    assert len(message) < MESSAGE_BOUND_CHARS, f"{case}: a message of {len(message)} characters"
    assert outcome.rss_peak_delta < RSS_BOUND_BYTES, f"{case}: RSS +{outcome.rss_peak_delta}"


@pytest.fixture(scope="module", autouse=True)
def _print_outcomes() -> Iterator[None]:
    yield
    for (table, label), count in sorted(OUTCOMES.items()):
        print(f"[hostile-api] {table} {label} x{count}")
    if PEAKS:
        print(
            f"[hostile-api] {len(PEAKS)} cases: longest {max(p[0] for p in PEAKS):.3f} s, "
            f"largest RSS rise {max(p[1] for p in PEAKS) / 2**20:.1f} MiB"
        )
        for seconds, rise, case in sorted(PEAKS, reverse=True)[:5]:
            print(f"[hostile-api] slowest: {case}: {seconds:.3f} s, RSS +{rise / 2**20:.1f} MiB")


# -- constructor arguments -----------------------------------------------------------------
# (case, keyword arguments, error, what the message names); "both" runs each dataset class

BIG = 2**70  # past int64
HUGE_INT = 10**400  # past a float
DIGITS_400 = "9" * 400


@dataclass(frozen=True)
class Built:
    """A record built inside the refused call, not when the table is read: the storage
    records refuse absurd values themselves, so building one at import would fail there."""

    record: type
    fields: dict[str, Any]

    def __init__(self, record: type, **fields: Any) -> None:
        object.__setattr__(self, "record", record)
        object.__setattr__(self, "fields", fields)


def built(value: Any) -> Any:
    """``value`` with every :class:`Built` in it (at any depth of dicts) constructed."""
    if isinstance(value, Built):
        return value.record(**value.fields)
    if isinstance(value, dict):
        return {key: built(item) for key, item in value.items()}
    return value


DATASET_CASES: list[tuple[str, dict[str, Any], type[EpisodeStreamError], tuple[str, ...]]] = [
    # episodes: only distinct ints in 0..2**63-1 select episodes
    ("episodes [True]", {"episodes": [True]}, SamplingError, ("episodes[0]", "bool")),
    ("episodes [0, True]", {"episodes": [0, True]}, SamplingError, ("episodes[1]",)),
    ("episodes [1.5]", {"episodes": [1.5]}, SamplingError, ("episodes[0]", "float")),
    ("episodes [1.0]", {"episodes": [1.0]}, SamplingError, ("episodes[0]",)),
    ("episodes float array", {"episodes": np.array([0.0, 1.0])}, SamplingError, ("float64",)),
    ("episodes bool array", {"episodes": np.array([True])}, SamplingError, ("bool",)),
    ("episodes [2**70]", {"episodes": [BIG]}, SamplingError, ("MAX_EPISODE_INDEX",)),
    (
        "episodes uint64 max",
        {"episodes": np.array([2**64 - 1], np.uint64)},
        SamplingError,
        ("MAX_EPISODE_INDEX",),
    ),
    ("episodes [-1]", {"episodes": [-1]}, SamplingError, ("episodes[0]", "0..")),
    ("episodes [None]", {"episodes": [None]}, SamplingError, ("episodes[0]",)),
    ("episodes [[0]]", {"episodes": [[0]]}, SamplingError, ("episodes[0]",)),
    ("episodes []", {"episodes": []}, SamplingError, ("episodes is empty",)),
    ("episodes repeated", {"episodes": [1, 1]}, SamplingError, ("more than once",)),
    ("episodes a string", {"episodes": "0,1"}, SamplingError, ("episodes must be a list",)),
    ("episodes an int", {"episodes": 3}, SamplingError, ("episodes must be a list",)),
    ("episodes a dict", {"episodes": {0: 1}}, SamplingError, ("episodes must be a list",)),
    # delta_timestamps: a mapping of feature names to up to 4096 offsets within a day
    (
        "delta 1e300 s",
        {"delta_timestamps": {"action": [1e300]}},
        SamplingError,
        ("'action'", "MAX_DELTA_SECONDS"),
    ),
    (
        "delta 10**400 s",
        {"delta_timestamps": {"action": [HUGE_INT]}},
        SamplingError,
        ("'action'", "finite"),
    ),
    (
        "delta 10**6 offsets",
        {"delta_timestamps": {"action": [0.0] * 10**6}},
        SamplingError,
        ("'action'", "MAX_DELTA_OFFSETS"),
    ),
    ("delta NaN", {"delta_timestamps": {"action": [math.nan]}}, SamplingError, ("finite",)),
    ("delta inf", {"delta_timestamps": {"action": [-math.inf]}}, SamplingError, ("finite",)),
    ("delta True", {"delta_timestamps": {"action": [True]}}, SamplingError, ("True",)),
    ("delta a string", {"delta_timestamps": {"action": "0.1"}}, SamplingError, ("'action'",)),
    ("delta empty", {"delta_timestamps": {"action": []}}, SamplingError, ("is empty",)),
    (
        "delta 2-D",
        {"delta_timestamps": {"action": np.zeros((2, 2))}},
        SamplingError,
        ("shape (2, 2)",),
    ),
    ("delta key not a str", {"delta_timestamps": {1: [0.0]}}, SamplingError, ("feature names",)),
    ("delta a list", {"delta_timestamps": [0.0]}, SamplingError, ("delta_timestamps",)),
    # byte sizes: positive, at most 2**60
    (
        "byte_budget 400 digits",
        {"byte_budget": DIGITS_400},
        BudgetError,
        ("byte_budget", "MAX_BYTES", "402 characters"),
    ),
    (
        "byte_budget 10**400",
        {"byte_budget": HUGE_INT},
        BudgetError,
        ("MAX_BYTES", "an int of 1329 bits"),
    ),
    (
        "byte_budget 5000 digits",
        {"byte_budget": "1" * 5000 + "GiB"},
        BudgetError,
        ("MAX_BYTES",),
    ),
    ("byte_budget 0", {"byte_budget": 0}, BudgetError, ("positive",)),
    ("byte_budget True", {"byte_budget": True}, BudgetError, ("byte_budget",)),
    ("byte_budget 1.5", {"byte_budget": 1.5}, BudgetError, ("byte_budget",)),
    ("byte_budget infGiB", {"byte_budget": "infGiB"}, BudgetError, ("not a size",)),
    (
        "max_decoder_bytes 10**400",
        {"max_decoder_bytes": HUGE_INT},
        ConfigError,
        ("max_decoder_bytes", "MAX_BYTES"),
    ),
    # waits and tolerances: finite, positive, bounded
    (
        "wait_timeout_s 1e300",
        {"wait_timeout_s": 1e300},
        ConfigError,
        ("wait_timeout_s", "MAX_WAIT_SECONDS"),
    ),
    ("wait_timeout_s 10**400", {"wait_timeout_s": HUGE_INT}, ConfigError, ("finite",)),
    ("wait_timeout_s NaN", {"wait_timeout_s": math.nan}, ConfigError, ("finite",)),
    ("wait_timeout_s 0", {"wait_timeout_s": 0}, ConfigError, ("wait_timeout_s",)),
    ("wait_timeout_s '5'", {"wait_timeout_s": "5"}, ConfigTypeError, ("wait_timeout_s",)),
    ("tolerance_s 1e300", {"tolerance_s": 1e300}, ConfigError, ("MAX_TOLERANCE_S",)),
    ("tolerance_s -1", {"tolerance_s": -1.0}, ConfigError, ("tolerance_s",)),
    # threads, connections, decoders
    ("fetch_workers 10**6", {"fetch_workers": 10**6}, ConfigError, ("MAX_FETCH_WORKERS",)),
    ("fetch_workers True", {"fetch_workers": True}, ConfigTypeError, ("fetch_workers",)),
    ("ffmpeg_threads 10**6", {"ffmpeg_threads": 10**6}, ConfigError, ("MAX_FFMPEG_THREADS",)),
    (
        "max_open_decoders 2**70",
        {"max_open_decoders": BIG},
        ConfigError,
        ("MAX_OPEN_DECODERS",),
    ),
    (
        "connections per host 10**6",
        {"reader_options": {"limits": Built(Limits, max_connections_per_host=10**6)}},
        ConfigError,
        ("Limits.max_connections_per_host", "MAX_CONNECTIONS"),
    ),
    (
        "request threads 10**6",
        {"reader_options": {"limits": Built(Limits, max_concurrency=10**6)}},
        ConfigError,
        ("MAX_CONNECTIONS",),
    ),
    (
        "fsspec concurrency 10**6",
        {"reader_options": {"max_concurrency": 10**6}},
        ConfigError,
        ("MAX_CONNECTIONS",),
    ),
    (
        "backoff of 1e300 s",
        {"reader_options": {"retry": Built(RetryPolicy, backoff_initial_seconds=1e300)}},
        ConfigError,
        ("RetryPolicy.backoff_initial_seconds", "MAX_WAIT_SECONDS"),
    ),
    (
        "retry for 1e300 s",
        {"data_reader_options": {"retry": Built(RetryPolicy, max_elapsed_seconds=1e300)}},
        ConfigError,
        ("RetryPolicy.max_elapsed_seconds", "MAX_WAIT_SECONDS"),
    ),
    ("reader option misspelt", {"reader_options": {"tokn": "x"}}, ConfigTypeError, ("tokn",)),
    ("reader_options a list", {"reader_options": ["x"]}, ConfigTypeError, ("reader_options",)),
    # paths, flags, choices
    ("sidecar an int", {"sidecar": 5}, ConfigTypeError, ("sidecar",)),
    ("cache_dir with NUL", {"cache_dir": "/tmp/a\x00b"}, ConfigError, ("cache_dir", "NUL")),
    ("data_root an int", {"data_root": 5}, ConfigTypeError, ("data_root",)),
    ("build_index 'no'", {"build_index": "no"}, ConfigTypeError, ("build_index",)),
    ("decoder ffmpeg", {"decoder": "ffmpeg"}, ConfigError, ("decoder",)),
    ("device tpu", {"device": "tpu"}, ConfigError, ("device",)),
    ("device cuda:9**30", {"device": "cuda:" + "9" * 30}, ConfigError, ("device",)),
    ("image_dtype float16", {"image_dtype": "float16"}, SamplingError, ("image_dtype",)),
    ("image_transforms 5", {"image_transforms": 5}, ConfigTypeError, ("image_transforms",)),
    ("options a str", {"options": "fast"}, ConfigTypeError, ("StreamOptions",)),
    ("unknown keyword", {"bogus": 1}, ConfigTypeError, ("bogus",)),
    # LeRobot's keywords
    ("return_uint8 'yes'", {"return_uint8": "yes"}, ConfigTypeError, ("return_uint8",)),
    ("video_backend ffmpeg", {"video_backend": "ffmpeg"}, ConfigError, ("video_backend",)),
    ("revision an int", {"revision": 5}, ConfigTypeError, ("revision",)),
    ("repo_type model", {"repo_type": "model"}, ConfigError, ("repo_type",)),
    ("depth_output_unit 5", {"depth_output_unit": 5}, ConfigTypeError, ("depth_output_unit",)),
    ("tolerance_s NaN", {"tolerance_s": math.nan}, ConfigError, ("tolerance_s",)),
    # the option groups
    ("resources a dict", {"resources": {"byte_budget": 1}}, ConfigTypeError, ("resources",)),
    ("samples a StreamOptions", {"samples": StreamOptions()}, ConfigTypeError, ("samples",)),
    ("source an int", {"source": 5}, ConfigTypeError, ("source",)),
    (
        "byte_budget given twice",
        {"resources": Resources(byte_budget="1GiB"), "byte_budget": "2GiB"},
        ConfigError,
        ("byte_budget", "twice"),
    ),
]

POOL_CASES: list[tuple[str, dict[str, Any], type[EpisodeStreamError], tuple[str, ...]]] = [
    ("pool_size 2**70", {"pool_size": BIG}, SamplingError, ("MAX_POOL_EPISODES",)),
    ("pool_size True", {"pool_size": True}, SamplingError, ("pool_size",)),
    ("prefetch_episodes 2**70", {"prefetch_episodes": BIG}, ConfigError, ("MAX_POOL_EPISODES",)),
    ("seed 2**70", {"seed": BIG}, SamplingError, ("MAX_SEED",)),
    ("seed 10**5000", {"seed": 10**5000}, SamplingError, ("an int of",)),
    ("shuffle 'no'", {"shuffle": "no"}, SamplingError, ("shuffle",)),
    ("decode_threads 10**6", {"decode_threads": 10**6}, ConfigError, ("MAX_DECODE_THREADS",)),
    (
        "max_pending_samples 10**9",
        {"max_pending_samples": 10**9},
        ConfigError,
        ("MAX_PENDING_SAMPLES",),
    ),
    ("world_size 2**70", {"world_size": BIG}, ConfigError, ("MAX_WORLD_SIZE",)),
    ("rank 2**70", {"rank": BIG}, ConfigError, ("MAX_WORLD_SIZE",)),
    ("rank 2 of 2", {"rank": 2, "world_size": 2}, ConfigError, ("rank",)),
    ("unit frame", {"unit": "frame"}, ConfigError, ("unit",)),
    (
        "window_frames 2**70",
        {"unit": "window", "window_frames": BIG},
        ConfigError,
        ("MAX_WINDOW_FRAMES",),
    ),
    (
        "decoded_budget 400 digits",
        {"decoded_budget": DIGITS_400},
        BudgetError,
        ("decoded_budget", "MAX_BYTES"),
    ),
]

POOL_CASES += [
    ("order a dict", {"order": {"seed": 1}}, ConfigTypeError, ("order",)),
    ("seed given twice", {"order": Order(seed=1), "seed": 2}, ConfigError, ("seed", "twice")),
]

MAP_CASES: list[tuple[str, dict[str, Any], type[EpisodeStreamError], tuple[str, ...]]] = [
    ("prefetch_next 'no'", {"prefetch_next": "no"}, ConfigTypeError, ("prefetch_next",)),
]

CONSTRUCTOR_CASES = [
    (cls, *case)
    for cls in (EpisodeStreamDataset, EpisodePoolDataset)
    for case in DATASET_CASES + (POOL_CASES if cls is EpisodePoolDataset else MAP_CASES)
]


@pytest.mark.parametrize(
    ("cls", "case", "kwargs", "error", "names"),
    CONSTRUCTOR_CASES,
    ids=[f"{c[0].__name__}-{c[1]}" for c in CONSTRUCTOR_CASES],
)
def test_dataset_argument_is_refused_before_any_read(
    cls: type,
    case: str,
    kwargs: dict[str, Any],
    error: type[EpisodeStreamError],
    names: tuple[str, ...],
    lerobot_fixture_root: Path,
    tmp_path: Path,
) -> None:
    reader = Tripwire(lerobot_fixture_root)
    arguments = {"cache_dir": tmp_path / "cache", **kwargs}
    outcome = refused(lambda: cls(reader=reader, **built(arguments)))
    assert_refused(cls.__name__, case, outcome, error, names)
    assert reader.calls == 0, f"{case}: {reader.calls} reads before the refusal"
    assert not (tmp_path / "cache").exists()


OPTIONS_CASES = [case for case in DATASET_CASES if set(case[1]) <= set(StreamOptions.__slots__)]


@pytest.mark.parametrize(
    ("case", "kwargs", "error", "names"), OPTIONS_CASES, ids=[c[0] for c in OPTIONS_CASES]
)
def test_stream_options_refuse_the_same_values(
    case: str, kwargs: dict[str, Any], error: type[EpisodeStreamError], names: tuple[str, ...]
) -> None:
    assert_refused(
        "StreamOptions", case, refused(lambda: StreamOptions(**built(kwargs))), error, names
    )


CHECK_CASES: list[tuple[str, dict[str, Any], type[EpisodeStreamError], tuple[str, ...]]] = [
    ("episodes [True]", {"episodes": [True]}, SamplingError, ("episodes[0]",)),
    ("episodes [2**70]", {"episodes": [BIG]}, SamplingError, ("MAX_EPISODE_INDEX",)),
    ("episodes [0.5]", {"episodes": [0.5]}, SamplingError, ("episodes[0]",)),
    ("num_episodes 2**70", {"num_episodes": BIG}, ConfigError, ("MAX_COUNT",)),
    (
        "episodes and num_episodes",
        {"episodes": [0], "num_episodes": 1},
        ConfigError,
        ("not both",),
    ),
    (
        "delta 1e300 s",
        {"delta_timestamps": {"action": [1e300]}},
        SamplingError,
        ("MAX_DELTA_SECONDS",),
    ),
    (
        "delta 10**6 offsets",
        {"delta_timestamps": {"action": [0.1] * 10**6}},
        SamplingError,
        ("MAX_DELTA_OFFSETS",),
    ),
    ("tolerance_s 1e300", {"tolerance_s": 1e300}, ConfigError, ("MAX_TOLERANCE_S",)),
    ("workers 10**6", {"workers": 10**6}, ConfigError, ("MAX_CHECK_WORKERS",)),
    (
        "rate-limit wait 1e300 s",
        {"reader_options": {"retry": Built(RetryPolicy, rate_limit_max_seconds=1e300)}},
        ConfigError,
        ("MAX_WAIT_SECONDS",),
    ),
    (
        "connections 10**6",
        {"reader_options": {"limits": Built(Limits, max_connections_per_host=10**6)}},
        ConfigError,
        ("MAX_CONNECTIONS",),
    ),
    ("reader option misspelt", {"reader_options": {"tokn": 1}}, ConfigTypeError, ("tokn",)),
    ("use_cache 'no'", {"use_cache": "no"}, ConfigTypeError, ("use_cache",)),
    ("sidecar an int", {"sidecar": 5}, ConfigTypeError, ("sidecar",)),
]


@pytest.mark.parametrize(
    ("case", "kwargs", "error", "names"), CHECK_CASES, ids=[c[0] for c in CHECK_CASES]
)
def test_check_dataset_argument_is_refused_before_any_request(
    case: str,
    kwargs: dict[str, Any],
    error: type[EpisodeStreamError],
    names: tuple[str, ...],
    lerobot_sim5_url: str,
    http_server: NginxServer,
    tmp_path: Path,
) -> None:
    mark = http_server.log_mark()
    outcome = refused(lambda: check_dataset(lerobot_sim5_url, cache_dir=tmp_path, **built(kwargs)))
    assert_refused("check_dataset", case, outcome, error, names)
    time.sleep(0.05)  # nginx logs a request just after answering it
    assert http_server.access_records(since=mark) == [], f"{case}: requests were made"


# -- an open dataset: [i], set_epoch, state_dict, load_state_dict, iteration -------------


@pytest.fixture(scope="module")
def opened(
    lerobot_fixture_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[EpisodeStreamDataset, EpisodePoolDataset, CountingReader]]:
    cache = tmp_path_factory.mktemp("hostile-api-cache")
    reader = CountingReader(lerobot_fixture_root)
    with (
        EpisodeStreamDataset(reader=reader, cache_dir=cache) as dataset,
        EpisodePoolDataset(reader=reader, cache_dir=cache) as pool,
    ):
        yield dataset, pool, reader
    reader.close()


def _state(pool: EpisodePoolDataset, **changes: Any) -> dict[str, Any]:
    return {**pool.state_dict(samples_consumed=0, num_workers=1, batch_size=1), **changes}


METHOD_CASES: list[
    tuple[str, Callable[[Any, Any], Any], type[EpisodeStreamError], tuple[str, ...]]
] = [
    ("ds[2**70]", lambda ds, pool: ds[BIG], SampleIndexError, ("out of range",)),
    ("ds[-2**70]", lambda ds, pool: ds[-BIG], SampleIndexError, ("out of range",)),
    ("ds[10**5000]", lambda ds, pool: ds[10**5000], SampleIndexError, ("an int of",)),
    ("ds[uint64 max]", lambda ds, pool: ds[np.uint64(2**64 - 1)], SampleIndexError, ("range",)),
    ("ds[len]", lambda ds, pool: ds[len(ds)], SampleIndexError, ("out of range",)),
    ("ds[True]", lambda ds, pool: ds[True], ConfigTypeError, ("index",)),
    ("ds[1.5]", lambda ds, pool: ds[1.5], ConfigTypeError, ("index",)),
    ("ds['0']", lambda ds, pool: ds["0"], ConfigTypeError, ("index",)),
    ("locate(2**70)", lambda ds, pool: ds.locate(BIG), SampleIndexError, ("out of range",)),
    ("set_epoch(2**70)", lambda ds, pool: pool.set_epoch(BIG), SamplingError, ("MAX_COUNT",)),
    ("set_epoch(True)", lambda ds, pool: pool.set_epoch(True), SamplingError, ("epoch",)),
    ("set_epoch(1.5)", lambda ds, pool: pool.set_epoch(1.5), SamplingError, ("epoch",)),
    (
        "state_dict(samples_consumed=2**70)",
        lambda ds, pool: pool.state_dict(samples_consumed=BIG, num_workers=1),
        SamplingError,
        ("samples_consumed", "MAX_COUNT"),
    ),
    (
        "state_dict(num_workers=10**9)",
        lambda ds, pool: pool.state_dict(samples_consumed=0, num_workers=10**9),
        ConfigError,
        ("MAX_LOADER_WORKERS",),
    ),
    (
        "state_dict(num_workers=1.5)",
        lambda ds, pool: pool.state_dict(samples_consumed=0, num_workers=1.5),
        ConfigTypeError,
        ("num_workers",),
    ),
    (
        "state_dict(batch_size=2**70)",
        lambda ds, pool: pool.state_dict(samples_consumed=0, batch_size=BIG),
        ConfigError,
        ("batch_size", "MAX_COUNT"),
    ),
    (
        "state_dict(drop_last='yes')",
        lambda ds, pool: pool.state_dict(samples_consumed=0, drop_last="yes"),
        ConfigTypeError,
        ("drop_last",),
    ),
    (
        "resume batch_size=2**70",
        lambda ds, pool: pool.load_state_dict(_state(pool, batch_size=BIG)),
        SamplingError,
        ("batch_size", "MAX_COUNT"),
    ),
    (
        "resume samples_consumed=2**70",
        lambda ds, pool: pool.load_state_dict(_state(pool, samples_consumed=BIG)),
        SamplingError,
        ("samples_consumed",),
    ),
    (
        "resume num_workers=10**9",
        lambda ds, pool: pool.load_state_dict(_state(pool, num_workers=10**9)),
        SamplingError,
        ("MAX_LOADER_WORKERS",),
    ),
    (
        "resume world_size=2**70",
        lambda ds, pool: pool.load_state_dict(_state(pool, world_size=BIG)),
        SamplingError,
        ("MAX_WORLD_SIZE",),
    ),
    (
        "resume seed=10**5000",
        lambda ds, pool: pool.load_state_dict(_state(pool, seed=10**5000)),
        SamplingError,
        ("seed", "an int of"),
    ),
    (
        "resume version=10**5000",
        lambda ds, pool: pool.load_state_dict(_state(pool, version=10**5000)),
        SamplingError,
        ("newer",),
    ),
    (
        "resume kind=['rank']",
        lambda ds, pool: pool.load_state_dict(_state(pool, kind=["rank"])),
        SamplingError,
        ("kind",),
    ),
    (
        "resume epoch=-1",
        lambda ds, pool: pool.load_state_dict(_state(pool, epoch=-1)),
        SamplingError,
        ("epoch",),
    ),
    (
        "resume a list",
        lambda ds, pool: pool.load_state_dict([1, 2]),
        SamplingError,
        ("mapping",),
    ),
]


@pytest.mark.parametrize(
    ("case", "call", "error", "names"), METHOD_CASES, ids=[c[0] for c in METHOD_CASES]
)
def test_method_argument_is_refused_without_a_read(
    case: str,
    call: Callable[[Any, Any], Any],
    error: type[EpisodeStreamError],
    names: tuple[str, ...],
    opened: tuple[EpisodeStreamDataset, EpisodePoolDataset, CountingReader],
) -> None:
    dataset, pool, reader = opened
    pool.set_epoch(0)
    before = reader.calls
    assert_refused("method", case, refused(lambda: call(dataset, pool)), error, names)
    assert reader.calls == before, f"{case}: {reader.calls - before} reads"


def test_an_index_past_the_end_is_still_an_index_error(
    opened: tuple[EpisodeStreamDataset, EpisodePoolDataset, CountingReader],
) -> None:
    """Python's sequence protocol ends ``iter(ds)`` at an IndexError: the typed error is one."""
    dataset = opened[0]
    with pytest.raises(IndexError):
        dataset[len(dataset)]
    assert issubclass(SampleIndexError, IndexError)
    assert issubclass(SampleIndexError, SamplingError)


def test_images_to_float_refuses_what_is_no_batch_or_no_device() -> None:
    frames = {"cam": torch.zeros(2, 3, 4, 4, dtype=torch.uint8)}
    with pytest.raises(ConfigTypeError, match="batch must be a dict"):
        images_to_float([frames["cam"]])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="device"):
        images_to_float(frames, device="tpu:x")
    assert frames["cam"].dtype == torch.uint8  # refused before anything was converted


@pytest.mark.parametrize(
    ("variable", "value"),
    [("RANK", "99999999999"), ("RANK", "abc"), ("WORLD_SIZE", "0"), ("WORLD_SIZE", "9" * 5000)],
)
def test_rank_and_world_size_from_the_environment_are_checked(
    variable: str,
    value: str,
    opened: tuple[EpisodeStreamDataset, EpisodePoolDataset, CountingReader],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, pool, reader = opened
    monkeypatch.setenv(variable, value)
    before = reader.calls
    outcome = refused(lambda: next(iter(pool)))
    assert_refused("iteration", f"{variable}={value[:12]}", outcome, ConfigError, (variable,))
    assert reader.calls == before


# -- the command line: one line per error, --debug for the traceback ------------------------


def _cli(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "episodestream.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _error_lines(stderr: str) -> list[str]:
    """stderr without log records (INFO/WARNING lines of the library's logging)."""
    return [
        line
        for line in stderr.splitlines()
        if line.strip() and not re.match(r"^(DEBUG|INFO|WARNING) episodestream", line)
    ]


@pytest.fixture
def dollar_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "price$http_host"
    folder.mkdir()
    return folder


CLI_CASES: list[tuple[str, list[str], str]] = [
    ("missing root", ["inspect", "{missing}"], "meta/info.json"),
    (
        "delta 1e300 s",
        ["check", "{root}", "--delta-timestamps", '{"action": [1e300]}'],
        "MAX_DELTA_SECONDS",
    ),
    (
        "delta of 10**4 offsets",
        [
            "check",
            "{root}",
            "--delta-timestamps",
            '{"action": [' + ", ".join(["0.0"] * 10**4) + "]}",
        ],
        "MAX_DELTA_OFFSETS",
    ),
    ("serve a $ path", ["serve", "{dollar}"], "'$'"),
    ("serve 10**6 workers", ["serve", "{root}", "--workers", "1000000"], "MAX_NGINX_WORKERS"),
    ("port 99999", ["index", "http://127.0.0.1:99999/"], "port"),
    (
        "plan 300 x 300 ranks",
        ["plan", "{root}", "--samples-per-s", "100", "--nodes", "300", "--gpus-per-node", "300"],
        "MAX_WORLD_SIZE",
    ),
]


def _run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``episodestream ARGS`` in this process: the exit status and stderr."""
    try:
        status = main(args)
    except SystemExit as usage:  # argparse: usage, then the error line
        status = int(usage.code or 0)
    return status, capsys.readouterr().err


@pytest.mark.parametrize(("case", "args", "names"), CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_error_is_one_line(
    case: str,
    args: list[str],
    names: str,
    lerobot_fixture_root: Path,
    dollar_folder: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    values = {
        "{root}": str(lerobot_fixture_root),
        "{missing}": str(tmp_path / "missing"),
        "{dollar}": str(dollar_folder),
    }
    status, err = _run_main([values.get(arg, arg) for arg in args], capsys)
    lines = _error_lines(err)
    OUTCOMES[("cli", f"{case}: exit {status}")] += 1
    assert status == EXIT_ERROR, (case, err)
    assert len(lines) == 1 and lines[0].startswith(f"episodestream {args[0]}: error: "), lines
    assert names in lines[0] and "Traceback" not in err


def test_cli_error_in_a_process_of_its_own(lerobot_fixture_root: Path) -> None:
    """``python -m episodestream.cli``: exit status 2 and one line on stderr; with
    ``--debug`` (before or after the command) the traceback above the same line."""
    args = ["check", str(lerobot_fixture_root), "--delta-timestamps", '{"action": [1e300]}']
    plain = _cli(*args)
    assert plain.returncode == EXIT_ERROR
    (line,) = _error_lines(plain.stderr)
    assert line.startswith("episodestream check: error: ") and "MAX_DELTA_SECONDS" in line
    debug = _cli("--debug", *args)
    assert debug.returncode == EXIT_ERROR
    assert "Traceback (most recent call last)" in debug.stderr
    assert debug.stderr.strip().splitlines()[-1] == line


def test_cli_debug_after_the_command(
    lerobot_fixture_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["check", str(lerobot_fixture_root), "--delta-timestamps", '{"action": [1e300]}']
    status, err = _run_main([*args, "--debug"], capsys)
    assert status == EXIT_ERROR and "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-1].startswith("episodestream check: error: ")


def test_cli_usage_errors_have_no_traceback(
    lerobot_fixture_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """argparse's own errors (usage, then one error line), for values argparse's types used
    to let through as a RecursionError or a 5,000-digit int."""
    for option, value, said in (
        ("--delta-timestamps", "[" * 5000 + "]" * 5000, "not JSON"),
        ("--episodes", "9" * 30, "MAX_EPISODE_INDEX"),
        ("--workers", "9" * 5000, "not an integer"),
    ):
        status, err = _run_main(["check", str(lerobot_fixture_root), option, value], capsys)
        assert status == 2, err
        assert "Traceback" not in err
        last = err.strip().splitlines()[-1]
        assert option in last and said in last and len(last) < MESSAGE_BOUND_CHARS, last


def _boom(args: Any) -> int:
    raise RuntimeError("first line\nsecond line \x1b[31mred\x1b[0m")


def test_an_unexpected_exception_is_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import episodestream.cli._inspect as inspect_command

    monkeypatch.setattr(inspect_command, "run", _boom)
    assert main(["inspect", "anywhere"]) == EXIT_INTERNAL
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("episodestream inspect: unexpected RuntimeError: first line | ")
    assert "\x1b" not in line and "\\x1b[31mred" in line  # a terminal escape, shown escaped
    assert line.endswith("run with --debug for the traceback")
    assert main(["--debug", "inspect", "anywhere"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "_boom" in err
    assert err.splitlines()[-1].startswith("episodestream inspect: unexpected RuntimeError")


def test_cli_bounds_name_themselves(
    capsys: pytest.CaptureFixture[str], lerobot_fixture_root: Path
) -> None:
    """Counts of threads, workers and ranks on the command line: refused as usage errors (or
    by the library, typed), the bound named; nothing reaches the catch-all for bugs."""
    root = str(lerobot_fixture_root)
    for args, bound in (
        (["check", root, "--tolerance-s", "1e300"], "MAX_TOLERANCE_S"),
        (["check", root, "--workers", "100000"], "MAX_CHECK_WORKERS"),
        (["index", root, "--workers", "100000"], "MAX_INDEX_WORKERS"),
        (["plan", root, "--samples-per-s", "10", "--workers", "100000"], "MAX_LOADER_WORKERS"),
        (["plan", root, "--samples-per-s", "10", "--nodes", "10000000"], "MAX_WORLD_SIZE"),
        (["bench", root, "--decode-threads", "100000"], "MAX_DECODE_THREADS"),
        (["bench", root, "--connections", "100000"], "MAX_CONNECTIONS"),
        (["bench", root, "--num-workers", "1,100000"], "MAX_LOADER_WORKERS"),
        (["bench", root, "--samples", "9" * 30], "MAX_COUNT"),
    ):
        status, err = _run_main(args, capsys)
        assert status == EXIT_ERROR, (args, err)
        assert bound in err.strip().splitlines()[-1], (args, err)
        assert "unexpected" not in err and "Traceback" not in err, err


# -- serve: paths reach nginx quoted, workers unprivileged where they can be ---------------

HOSTILE_FOLDER_NAMES = [
    "a; location /{ root /; } #",  # the injection that served /etc/passwd
    'q"uo\\te\\n',
    "include /etc/nginx/nginx.conf;",
    "sp ace {}#;",
]


@pytest.fixture
def world_readable_tmp() -> Iterator[Path]:
    """A folder ``nobody`` can read (pytest's own are 0700): the served files must be."""
    folder = Path(tempfile.mkdtemp(prefix="episodestream-serve-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", "--", str(folder)], check=True)


def _status_and_body(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, b""


def _worker_users(nginx_pid: int) -> set[str]:
    return {child.username() for child in psutil.Process(nginx_pid).children()}


@pytest.mark.parametrize("name", HOSTILE_FOLDER_NAMES)
def test_a_folder_named_with_nginx_syntax_is_served_as_a_folder(
    name: str, world_readable_tmp: Path
) -> None:
    folder = world_readable_tmp / name  # a "/" in the name: folders in folders
    folder.mkdir(parents=True)
    (folder / "hello.txt").write_bytes(b"hello from inside")
    with NginxServer(folder) as server:
        assert _status_and_body(server.url_for("hello.txt")) == (200, b"hello from inside")
        assert _status_and_body(server.url_for("etc/passwd"))[0] == 404
        assert _status_and_body(server.url_for("passwd"))[0] == 404
        assert f"root {nginx_string(str(folder), 'root')};" in server.config_path.read_text()
        if os.geteuid() == 0:
            assert server.worker_account is not None and server.worker_account[0] == "nobody"
            assert _worker_users(server.pid) == {"nobody"}
        else:  # nginx cannot switch users: its workers are ours
            assert server.worker_account is None
            assert _worker_users(server.pid) == {psutil.Process().username()}
    OUTCOMES[("serve", f"folder {name!r}: served as a folder")] += 1


def test_serve_cli_with_the_injection_folder(world_readable_tmp: Path) -> None:
    """``episodestream serve DIR`` with the folder that served /etc/passwd before."""
    folder = world_readable_tmp / HOSTILE_FOLDER_NAMES[0]
    folder.mkdir(parents=True)
    (folder / "hello.txt").write_bytes(b"hello")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "episodestream.cli",
            "serve",
            str(folder),
            "--rtt-ms",
            "0",
            "--bandwidth-mibps",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []
        assert process.stdout is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any("stop with" in x for x in lines):
            line = process.stdout.readline()
            if not line:
                break
            lines.append(line)
        output = "".join(lines)
        url = re.search(r"url:\s+(http://\S+)", output)
        assert url is not None, output
        assert _status_and_body(f"{url.group(1)}/hello.txt") == (200, b"hello")
        assert _status_and_body(f"{url.group(1)}/etc/passwd")[0] == 404
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0


def test_a_dollar_in_a_served_path_is_refused(dollar_folder: Path) -> None:
    server = NginxServer(dollar_folder)
    with pytest.raises(ServingError, match=r"'\$'.*no escape"):
        server.start()
    assert not server.running


def test_nginx_strings_escape_quotes_and_backslashes_and_refuse_the_rest() -> None:
    assert nginx_string('/a "b" \\c', "x") == '"/a \\"b\\" \\\\c"'
    assert nginx_string("/a;{}#", "x") == '"/a;{}#"'
    for bad in ("/a$b", "/a\nb", "/a\x1bb", "/a\x00b"):
        with pytest.raises(ServingError):
            nginx_string(bad, "x")


def test_workers_keep_root_only_where_nobody_cannot_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """pytest's temporary folders are 0700: served as root, the workers stay root (and say
    so); they could not read the files as nobody."""
    folder = tmp_path / "private"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"a")
    # a folder above is closed to others (pytest makes its own 0700)
    assert any(stat.S_IMODE(above.stat().st_mode) & 0o001 == 0 for above in folder.parents)
    with caplog.at_level("WARNING"), NginxServer(folder) as server:
        assert _status_and_body(server.url_for("a.txt")) == (200, b"a")
        users = _worker_users(server.pid)
    if os.geteuid() == 0:
        assert users == {"root"} and "nobody cannot read" in caplog.text
    else:
        assert users == {psutil.Process().username()}

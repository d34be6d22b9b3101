"""Bad arguments to the public constructors raise an EpisodeStreamError naming the argument.

Two parts: every int or float field of every configuration dataclass is fed a value of the
wrong type and an out-of-range one (so a field added without a check fails here), and a table
of the constructors and functions that take arguments directly.
"""

from __future__ import annotations

import dataclasses
import math
import random
from pathlib import Path

import numpy as np
import pytest

from episodestream import (
    BudgetError,
    ConfigError,
    ConfigTypeError,
    EpisodePoolDataset,
    EpisodeStreamDataset,
    EpisodeStreamError,
    Location,
    LocationError,
    Order,
    Resources,
    SampleOptions,
    SamplingError,
    StreamOptions,
    open_reader,
)
from episodestream.datasets import parse_bytes
from episodestream.decode import DecodeExecutor, DecoderPool, nearest_frame_indices, open_decoder
from episodestream.sampling import PoolParams, WorkerSlot
from episodestream.storage import (
    HttpRangeReader,
    Limits,
    ReaderOptions,
    ReaderStats,
    ReadRequest,
    RetryPolicy,
    Timeouts,
)
from episodestream_tools.bench import BenchConfig, DemoConfig, detect_shard
from episodestream_tools.serving import NginxServer, WanSettings
from episodestream_tools.synthetic import SyntheticSpec
from tests.support.faults import Fault, RandomFaults

# Each configuration dataclass with the fewest arguments that build it.
CONFIG_CLASSES = {
    Timeouts: {},
    Limits: {},
    RetryPolicy: {},
    StreamOptions: {},
    Resources: {},
    SampleOptions: {},
    Order: {},
    PoolParams: {},
    WorkerSlot: {},
    BenchConfig: {"root": "/data/x"},
    DemoConfig: {},
    WanSettings: {},
    Fault: {"kind": "status"},
    SyntheticSpec: {},
}


def _numeric_fields() -> list[tuple[type, str, str]]:
    cases = []
    for cls in CONFIG_CLASSES:
        for field in dataclasses.fields(cls):
            kind = str(field.type).split("|")[0].strip()  # "int | None" -> "int"
            if kind in ("int", "float"):
                cases.append((cls, field.name, kind))
    return cases


NUMERIC_FIELDS = _numeric_fields()


def test_the_sweep_covers_every_config_class():
    assert {cls for cls, _, _ in NUMERIC_FIELDS} == set(CONFIG_CLASSES)
    assert len(NUMERIC_FIELDS) >= 60
    for cls, base in CONFIG_CLASSES.items():
        cls(**base)  # the base arguments are valid


@pytest.mark.parametrize(
    ("cls", "name", "kind"), NUMERIC_FIELDS, ids=[f"{c.__name__}.{n}" for c, n, _ in NUMERIC_FIELDS]
)
def test_numeric_fields_refuse_wrong_types_and_values_by_name(cls, name, kind):
    bad_values = ["three", math.nan] if kind == "float" else ["three", 1.5]
    for bad in bad_values:
        with pytest.raises(EpisodeStreamError) as raised:
            cls(**CONFIG_CLASSES[cls], **{name: bad})
        assert name in str(raised.value), (bad, str(raised.value))
        assert isinstance(raised.value, ValueError)  # generic handlers keep working


def test_wrong_types_are_also_type_errors():
    with pytest.raises(ConfigTypeError, match="read_seconds") as raised:
        Timeouts(read_seconds="30")
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValueError)
    with pytest.raises(ConfigError, match="read_seconds") as raised:
        Timeouts(read_seconds=-1.0)
    assert not isinstance(raised.value, TypeError)  # a bad value is not a bad type


def _fixture_root() -> str:
    return str(Path(__file__).parents[1] / "data" / "lerobot_sim5")


HTTP_ROOT = "https://example.invalid/d"

# (call, error class, text the message must hold: the argument's name)
CALLS = [
    (lambda: StreamOptions(decoder="ffmpeg"), ConfigError, "decoder"),
    (lambda: StreamOptions(reader_options=["token"]), ConfigTypeError, "reader_options"),
    (lambda: StreamOptions(device=0), ConfigTypeError, "device"),
    (lambda: StreamOptions(byte_budget="lots"), BudgetError, "byte_budget"),
    (lambda: parse_bytes(0), BudgetError, "byte_budget"),
    (lambda: RetryPolicy(retry_statuses={"503"}), ConfigTypeError, "retry_statuses"),
    (lambda: RetryPolicy().next_delay(0, random.Random(0)), ConfigError, "attempt"),
    (lambda: ReadRequest("meta/info.json", -1, 4), ConfigError, "offset=-1"),
    (lambda: Location.parse(""), LocationError, "root"),
    (lambda: open_reader(_fixture_root(), token="x"), ConfigTypeError, "token"),
    (lambda: open_reader("https://example.invalid/d", tokn="x"), ConfigTypeError, "tokn"),
    (lambda: open_reader("https://example.invalid/d", timeouts=5), ConfigTypeError, "timeouts"),
    (lambda: open_reader("hf://datasets/org/name", endpont="x"), ConfigTypeError, "endpont"),
    (lambda: open_reader("memory://d", max_concurrency=0), ConfigError, "max_concurrency"),
    (lambda: open_decoder(b"clip", backend="ffmpeg"), ConfigError, "backend"),
    (lambda: open_decoder(b"clip", device="gpu"), ConfigError, "device"),
    (lambda: open_decoder(b"clip", backend="pyav", device="cuda"), ConfigError, "device"),
    (lambda: DecoderPool(max_decoders=0), ConfigError, "max_decoders"),
    (lambda: DecoderPool(max_bytes="1GiB"), ConfigTypeError, "max_bytes"),
    (lambda: DecodeExecutor(threads=-1), ConfigError, "threads"),
    (lambda: nearest_frame_indices(np.zeros(2), [0.0], 0.0), ConfigError, "tolerance_s"),
    (lambda: nearest_frame_indices(np.zeros(2), [[0.0]]), ConfigError, "timestamps_s"),
    (lambda: BenchConfig(root="/x", tracks=("stream", "fast")), ConfigError, "track"),
    (lambda: BenchConfig(root="/x", shard_index=2, shard_count=2), ConfigError, "shard_index"),
    (lambda: BenchConfig(root="/x", decoder="ffmpeg"), ConfigError, "decoder"),
    (lambda: DemoConfig(mode="huge"), ConfigError, "mode"),
    (lambda: DemoConfig(bench={"sampels": 5}), ConfigTypeError, "sampels"),
    (lambda: detect_shard({"RANK": "2", "WORLD_SIZE": "2"}), ConfigError, "RANK"),
    (lambda: Fault("meltdown"), ConfigError, "kind"),
    (lambda: RandomFaults([], rate=0.5, seed=0), ConfigError, "menu"),
    (lambda: RandomFaults([Fault("status")], rate=1.5, seed=0), ConfigError, "rate"),
    (lambda: NginxServer(workers=0), ConfigError, "workers"),
    (lambda: NginxServer(port=70000), ConfigError, "port"),
    (lambda: PoolParams(shuffle="yes"), SamplingError, "shuffle"),
    (lambda: WorkerSlot(rank=2, world_size=2), SamplingError, "rank"),
    (lambda: ReaderOptions(verify=3), ConfigTypeError, "verify"),
    (lambda: ReaderOptions(seed="7"), ConfigTypeError, "seed"),
    (lambda: ReaderOptions(seed=True), ConfigTypeError, "seed"),
    (lambda: ReaderOptions(endpoint=443), ConfigTypeError, "endpoint"),
    (lambda: ReaderOptions(failure_log=3), ConfigTypeError, "failure_log"),
    (lambda: ReaderOptions(headers={"X-Key": 5}), ConfigTypeError, "headers"),
    (lambda: HttpRangeReader(123), ConfigTypeError, "base_url"),  # type: ignore[arg-type]
    (lambda: HttpRangeReader(HTTP_ROOT, transport=5), ConfigTypeError, "transport"),
    (lambda: HttpRangeReader(HTTP_ROOT, timeouts={"read_seconds": 5}), ConfigTypeError, "timeouts"),
    (lambda: HttpRangeReader(HTTP_ROOT, limits=None), ConfigTypeError, "limits"),
    (lambda: HttpRangeReader(HTTP_ROOT, retry={}), ConfigTypeError, "retry"),
    (lambda: HttpRangeReader(HTTP_ROOT, max_skip_bytes=-1), ConfigError, "max_skip_bytes"),
    (lambda: HttpRangeReader(HTTP_ROOT, max_skip_bytes=1.5), ConfigError, "max_skip_bytes"),
    (lambda: HttpRangeReader(HTTP_ROOT, headers=[("X-Key", "v")]), ConfigTypeError, "headers"),
    (lambda: HttpRangeReader(HTTP_ROOT, verify=2), ConfigTypeError, "verify"),
    (lambda: HttpRangeReader(HTTP_ROOT, seed="7"), ConfigTypeError, "seed"),
    (lambda: HttpRangeReader(HTTP_ROOT, failure_log=3), ConfigTypeError, "failure_log"),
]


@pytest.mark.parametrize(("call", "error", "name"), CALLS, ids=[c[2] for c in CALLS])
def test_constructors_and_functions_name_the_bad_argument(call, error, name):
    with pytest.raises(error) as raised:
        call()
    assert isinstance(raised.value, EpisodeStreamError)
    assert name in str(raised.value)


DATASET_ARGUMENTS = [
    (EpisodeStreamDataset, {"fetch_workers": 0}, "fetch_workers"),
    (EpisodeStreamDataset, {"decoder": "ffmpeg"}, "decoder"),
    (EpisodeStreamDataset, {"byte_budget": "lots"}, "byte_budget"),
    (EpisodeStreamDataset, {"tolerance_s": -1.0}, "tolerance_s"),
    (EpisodeStreamDataset, {"reader_options": {"tokn": "x"}}, "tokn"),
    (EpisodeStreamDataset, {"episodes": [999]}, "episodes"),
    (EpisodeStreamDataset, {"delta_timestamps": {"nope": [0.0]}}, "delta_timestamps"),
    (EpisodePoolDataset, {"pool_size": 0}, "pool_size"),
    (EpisodePoolDataset, {"prefetch_episodes": -1}, "prefetch_episodes"),
    (EpisodePoolDataset, {"max_pending_samples": 0}, "max_pending_samples"),
    (EpisodePoolDataset, {"seed": -1}, "seed"),
    (EpisodePoolDataset, {"wait_timeout_s": 0}, "wait_timeout_s"),
    (EpisodePoolDataset, {"decode_threads": "2"}, "decode_threads"),
    (EpisodeStreamDataset, {"fetch_worker": 2}, "fetch_worker"),  # a typo of an option
    (EpisodePoolDataset, {"byte_budgte": "1GiB"}, "byte_budgte"),
]


@pytest.mark.parametrize(
    ("cls", "kwargs", "name"),
    DATASET_ARGUMENTS,
    ids=[f"{c.__name__}-{n}" for c, _, n in DATASET_ARGUMENTS],
)
def test_dataset_arguments_name_the_bad_argument(cls, kwargs, name):
    with pytest.raises(EpisodeStreamError) as raised:
        cls(_fixture_root(), **kwargs)
    assert isinstance(raised.value, ValueError)
    assert name in str(raised.value)


def test_dataset_index_of_the_wrong_type_is_a_config_type_error():
    dataset = EpisodeStreamDataset(_fixture_root())
    with pytest.raises(ConfigTypeError, match="index must be an int, got str"):
        dataset["0"]


# --- EpisodePoolDataset's own settings and StreamOptions' paths and flags (review items) ---

POOL_AND_OPTION_ARGUMENTS = [
    (EpisodePoolDataset, {"max_pending_samples": "a"}, ConfigTypeError, "max_pending_samples"),
    (EpisodePoolDataset, {"max_pending_samples": 0}, ConfigError, "max_pending_samples"),
    (EpisodePoolDataset, {"prefetch_episodes": -1}, ConfigError, "prefetch_episodes"),
    (EpisodePoolDataset, {"prefetch_episodes": 2.0}, ConfigTypeError, "prefetch_episodes"),
    (EpisodePoolDataset, {"decode_threads": "2"}, ConfigTypeError, "decode_threads"),
    (EpisodePoolDataset, {"window_frames": 0}, ConfigError, "window_frames"),
    (EpisodePoolDataset, {"rank": "0", "world_size": 2}, ConfigTypeError, "rank"),
    (EpisodePoolDataset, {"world_size": 0}, ConfigError, "world_size"),
    (EpisodePoolDataset, {"rank": 2, "world_size": 2}, ConfigError, "rank"),
    (EpisodePoolDataset, {"return_uint8": "yes"}, ConfigTypeError, "return_uint8"),
    (EpisodeStreamDataset, {"sidecar": 5}, ConfigTypeError, "sidecar"),
    (EpisodeStreamDataset, {"cache_dir": 5}, ConfigTypeError, "cache_dir"),
    (EpisodeStreamDataset, {"build_index": "no"}, ConfigTypeError, "build_index"),
    (EpisodePoolDataset, {"progress": 1}, ConfigTypeError, "progress"),
    (EpisodeStreamDataset, {"data_root": 5}, ConfigTypeError, "data_root"),
]


@pytest.mark.parametrize(
    ("cls", "kwargs", "error", "name"),
    POOL_AND_OPTION_ARGUMENTS,
    ids=[
        f"{c.__name__}-{n}-{next(iter(k.values()))!r}" for c, k, _, n in POOL_AND_OPTION_ARGUMENTS
    ],
)
def test_dataset_settings_are_config_errors_naming_the_argument(cls, kwargs, error, name):
    with pytest.raises(error) as raised:
        cls(_fixture_root(), **kwargs)
    assert type(raised.value) is error
    assert name in str(raised.value)


def test_stream_options_take_paths_and_bools_for_its_paths_and_flags():
    options = StreamOptions(sidecar=Path("/x/i.arrow"), cache_dir="/x", build_index=False)
    assert (options.sidecar, options.cache_dir, options.build_index) == (
        Path("/x/i.arrow"),
        "/x",
        False,
    )
    with pytest.raises(ConfigTypeError, match="progress must be a bool, got None"):
        StreamOptions(progress=None)


def test_reader_options_are_a_hashable_read_only_value_that_pickles():
    import pickle

    def options() -> ReaderOptions:
        return ReaderOptions(
            token="t",
            headers={"X-Key": "v"},
            storage_options={"anon": True, "config_kwargs": {"retries": [1, 2]}},
            timeouts=Timeouts(read_seconds=5),
        )

    first, second = options(), options()
    assert first == second and hash(first) == hash(second)
    assert len({first, second, ReaderOptions()}) == 2
    with pytest.raises(TypeError):
        first.headers["X-Key"] = "changed"  # type: ignore[index]
    given = {"X-Key": "v"}
    kept = ReaderOptions(headers=given)
    given["X-Key"] = "changed"  # the caller's dict: the options kept their own copy
    assert kept.headers == {"X-Key": "v"}
    again = pickle.loads(pickle.dumps(first))
    assert again == first and hash(again) == hash(first)
    with pytest.raises(TypeError):
        again.storage_options["anon"] = False  # type: ignore[index]
    assert HttpRangeReader(HTTP_ROOT, **kept.given()).base_url == HTTP_ROOT


@pytest.mark.parametrize(
    "value",
    [
        ReaderOptions(headers={"X-Key": "v"}, storage_options={"anon": True}),
        ReaderStats.from_counters({"requests": 3, "status_206": 2, "status_429": 1, "extra": 0.5}),
        ReaderStats(statuses={200: 1}),  # a plain dict given directly is kept read-only too
    ],
    ids=["ReaderOptions", "ReaderStats.from_counters", "ReaderStats"],
)
def test_values_with_mappings_copy_pickle_hash_and_convert_like_other_values(value):
    import copy
    import dataclasses
    import json
    import pickle

    for again in (pickle.loads(pickle.dumps(value)), copy.deepcopy(value), copy.copy(value)):
        assert again == value and hash(again) == hash(value)
    flat = dataclasses.asdict(value)  # a dict per mapping field: JSON takes it as it is
    assert json.loads(json.dumps(flat)).keys() == flat.keys()
    mapping_fields = [name for name, field_value in flat.items() if isinstance(field_value, dict)]
    assert mapping_fields
    for name in mapping_fields:
        kept = getattr(value, name)
        assert dict(kept) == flat[name]
        with pytest.raises(TypeError, match="read-only"):
            kept["new"] = 1
        with pytest.raises(TypeError, match="read-only"):
            kept.update(new=1)
        assert "new" not in kept
    changed = dataclasses.replace(value)
    assert changed == value and hash(changed) == hash(value)

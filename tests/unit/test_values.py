"""Frozen dataclass values behave as values: equal by contents across pickle and copies,
hashable, and read-only all the way down where the library shares them between callers."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from episodestream._frozen import FrozenDict
from episodestream.cache import EpisodeClip, ResidentEpisode
from episodestream.errors import ConfigError, ConfigTypeError
from episodestream.mp4 import parse_moov
from episodestream.storage import ReaderStats
from episodestream_tools.bench import DemoConfig
from episodestream_tools.serving import AccessLogRecord, summarize_access
from tests.support.synthetic_moov import synthetic_moov


def _round_trips(value):
    return [pickle.loads(pickle.dumps(value)), copy.deepcopy(value), copy.copy(value)]


def test_track_index_is_equal_by_contents_and_hashable():
    moov, expected = synthetic_moov(90, gop=30, bframes=2)
    parsed = parse_moov(moov)
    assert parsed == expected  # arrays element by element (a dataclass __eq__ raised here)
    assert hash(parsed) == hash(expected)
    for again in _round_trips(parsed):
        assert again == parsed and hash(again) == hash(parsed)
    other_moov, _ = synthetic_moov(90, gop=30, bframes=2, seed=1)
    other = parse_moov(other_moov)
    assert other != parsed  # same shape, other sizes
    assert parse_moov(synthetic_moov(91)[0]) != parsed
    shifted = copy.copy(parsed)
    object.__setattr__(shifted, "offsets", parsed.offsets + 1)
    assert shifted != parsed
    retyped = copy.copy(parsed)
    object.__setattr__(retyped, "offsets", parsed.offsets.astype(np.int32))
    assert retyped != parsed  # equal numbers in another dtype are another index
    assert parsed != "not an index"


def _clip(camera: str) -> EpisodeClip:
    return EpisodeClip(3, camera, b"\x00" * 10, 0.5, np.arange(4, dtype=np.float64) / 30)


def test_resident_episode_clips_cannot_be_taken_from_other_callers():
    given = {"front": _clip("front"), "wrist": _clip("wrist")}
    resident = ResidentEpisode(3, given)
    given.pop("wrist")  # the caller's dict: the value kept its own copy
    assert set(resident.clips) == {"front", "wrist"} and resident.nbytes == 20
    with pytest.raises(TypeError, match="read-only"):
        resident.clips.pop("front")  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="read-only"):
        resident.clips["side"] = _clip("side")  # type: ignore[index]
    assert resident.nbytes == 20
    for again in _round_trips(resident):
        assert again == resident and hash(again) == hash(resident)


def _record(status: int, connection: int) -> AccessLogRecord:
    return AccessLogRecord(
        time_s=1.0,
        remote_addr="127.0.0.1",
        method="GET",
        uri="/videos/a.mp4",
        status=status,
        range_header="bytes=0-9",
        content_range=None,
        body_bytes=10,
        sent_bytes=200,
        request_bytes=100,
        request_time_s=0.001,
        connection=connection,
        connection_requests=1,
        etag=None,
        user_agent=None,
    )


def test_access_summary_is_a_hashable_read_only_value():
    summary = summarize_access([_record(206, 1), _record(206, 1), _record(429, 2)])
    assert summary.status_counts == {206: 2, 429: 1} and summary.connections == 2
    with pytest.raises(TypeError, match="read-only"):
        summary.status_counts[200] = 1  # type: ignore[index]
    for again in _round_trips(summary):
        assert again == summary and hash(again) == hash(summary)


def test_demo_config_keeps_its_own_checked_copy_of_the_bench_overrides():
    given = {"samples": 10}
    config = DemoConfig(bench=given)
    given["no_such_field"] = 1  # after the check: must not reach the config
    assert dict(config.bench) == {"samples": 10}
    with pytest.raises(TypeError, match="read-only"):
        config.bench["no_such_field"] = 1  # type: ignore[index]
    with pytest.raises(ConfigError, match="no_such_field"):
        DemoConfig(bench=given)
    assert hash(config) == hash(DemoConfig(bench={"samples": 10}))
    assert pickle.loads(pickle.dumps(config)) == config


def test_frozen_dict_cannot_be_changed_by_any_dict_method():
    frozen = FrozenDict({"a": 1, "b": [2]})
    refused = [
        lambda: frozen.__setitem__("c", 3),
        lambda: frozen.__delitem__("a"),
        lambda: frozen.update(c=3),
        lambda: frozen.setdefault("c", 3),
        lambda: frozen.pop("a"),
        lambda: frozen.popitem(),
        lambda: frozen.clear(),
        lambda: frozen.__ior__({"c": 3}),
    ]
    for change in refused:
        with pytest.raises(TypeError, match="read-only"):
            change()
    frozen.__init__(c=3)  # a second __init__ adds nothing: the contents were set at creation
    assert frozen == {"a": 1, "b": [2]}
    assert FrozenDict.fromkeys("xy", 0) == {"x": 0, "y": 0}
    assert type(FrozenDict.fromkeys("xy")) is FrozenDict
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        again = pickle.loads(pickle.dumps(frozen, protocol))
        assert again == frozen and type(again) is FrozenDict
    deep = copy.deepcopy(frozen)
    assert deep == frozen and deep["b"] is not frozen["b"]
    assert hash(FrozenDict(a=1)) == hash(FrozenDict({"a": 1}))
    assert FrozenDict.of(frozen) is frozen


def test_reader_stats_refuses_a_mapping_field_that_is_no_mapping():
    with pytest.raises(ConfigTypeError, match=r"ReaderStats\.statuses must be a dict, got None"):
        ReaderStats(statuses=None)  # type: ignore[arg-type]

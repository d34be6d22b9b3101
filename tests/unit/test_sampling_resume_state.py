"""ResumeState: the one resume format (rank and worker kinds) — its dict form as checkpoints hold
it, validation naming each field, version checks, old dicts, and where a resume starts."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from episodestream import SamplingError
from episodestream.sampling import (
    PoolParams,
    PoolSchedule,
    ResumeState,
    WorkerSlot,
    episodes_digest,
)

DIGEST = episodes_digest(np.arange(5), np.full(5, 30))

# the dicts EpisodePoolDataset wrote before ResumeState existed, key for key and in order:
# checkpoints saved by it must keep loading, and states written now must look the same
# (both kinds carry the same pool fields, in this order, after a window pool's fields)
_POOL_FIELDS: dict[str, Any] = {
    "version": 1,
    "seed": 7,
    "epoch": 2,
    "pool_size": 3,
    "shuffle": True,
    "rank": 1,
    "world_size": 2,
    "episodes_digest": DIGEST,
}
RANK_DICT: dict[str, Any] = {
    **_POOL_FIELDS,
    "kind": "rank",
    "num_workers": 2,
    "batch_size": 4,
    "drop_last": False,
    "samples_consumed": 12,
}
WORKER_DICT: dict[str, Any] = {
    "unit": "window",
    "window_frames": 16,
    "decoded_budget": 64 << 20,
    "window_bytes": 1 << 20,
    "window_spread": 31,
    **_POOL_FIELDS,
    "kind": "worker",
    "num_workers": 2,
    "worker": 1,
    "samples_yielded": 9,
}


@pytest.mark.parametrize("saved", [RANK_DICT, WORKER_DICT], ids=["rank", "worker-window"])
def test_dicts_round_trip_through_json_unchanged(saved: dict[str, Any]) -> None:
    state = ResumeState.from_dict(json.loads(json.dumps(saved)))
    assert state.kind == saved["kind"] and state.unit == saved.get("unit", "episode")
    written = state.to_dict()
    assert written == saved and list(written) == list(saved)
    assert ResumeState.from_dict(json.loads(json.dumps(written))) == state


def test_an_episode_pool_state_has_no_window_fields() -> None:
    state = ResumeState.from_dict(RANK_DICT)
    assert state.unit == "episode" and state.window_frames is None
    window_fields = {"unit", "window_frames", "decoded_budget", "window_bytes", "window_spread"}
    assert not window_fields & set(state.to_dict())


def test_numpy_scalars_become_plain_json_values() -> None:
    state = ResumeState.from_dict(
        {**RANK_DICT, "seed": np.int64(7), "shuffle": np.bool_(True), "batch_size": np.int32(4)}
    )
    assert state == ResumeState.from_dict(RANK_DICT)
    assert type(state.seed) is int and type(state.shuffle) is bool
    assert json.loads(json.dumps(state.to_dict())) == RANK_DICT


def test_a_newer_version_is_refused_before_its_fields_are_read() -> None:
    with pytest.raises(SamplingError, match="version 2 is newer than 1"):
        ResumeState.from_dict({**RANK_DICT, "version": 2})
    with pytest.raises(SamplingError, match="version 2 is newer"):
        ResumeState.from_dict({"version": 2, "kind": "a kind from the future"})
    with pytest.raises(SamplingError, match="version 2 is newer"):
        ResumeState(**{**_fields(ResumeState.from_dict(RANK_DICT)), "version": 2})


def _fields(state: ResumeState) -> dict[str, Any]:
    return {name: getattr(state, name) for name in state.__dataclass_fields__}


@pytest.mark.parametrize("saved", [RANK_DICT, WORKER_DICT], ids=["rank", "worker-window"])
def test_each_missing_field_is_named(saved: dict[str, Any]) -> None:
    for name in saved:
        if name in ("kind", "unit"):
            continue  # they have defaults (dicts written before they existed)
        partial = {key: value for key, value in saved.items() if key != name}
        with pytest.raises(SamplingError, match=rf"lacks field.*'{name}'"):
            ResumeState.from_dict(partial)


BAD_VALUES = [
    ("kind", "process", "kind 'process' is not 'rank' or 'worker'"),
    ("unit", "clip", "unit 'clip' is not"),
    ("version", 0, "version must be >= 1"),
    ("version", "1", "version must be an int"),
    ("seed", -1, "seed must be >= 0"),
    ("seed", 1.5, "seed must be an int"),
    ("epoch", True, "epoch must be an int"),
    ("pool_size", 0, "pool_size must be >= 1"),
    ("shuffle", 1, "shuffle must be a bool"),
    ("rank", 2, "rank=2 is not below world_size=2"),
    ("world_size", 0, "world_size must be >= 1"),
    ("num_workers", 0, "num_workers must be >= 1"),
    ("episodes_digest", 5, "episodes_digest must be a non-empty str"),
    ("episodes_digest", "", "episodes_digest must be a non-empty str"),
    ("batch_size", 0, "batch_size must be >= 1"),
    ("drop_last", "no", "drop_last must be a bool"),
    ("samples_consumed", -4, "samples_consumed must be >= 0"),
]


@pytest.mark.parametrize(("name", "value", "message"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_each_malformed_field_is_refused_by_name(name: str, value: Any, message: str) -> None:
    with pytest.raises(SamplingError, match=message):
        ResumeState.from_dict({**RANK_DICT, name: value})


def test_worker_and_window_fields_are_validated_by_name() -> None:
    for name, value, message in (
        ("worker", 2, "worker=2 is not below num_workers=2"),
        ("worker", -1, "worker must be >= 0"),
        ("samples_yielded", 2.0, "samples_yielded must be an int"),
        ("window_frames", 0, "window_frames must be >= 1"),
        ("decoded_budget", "64MiB", "decoded_budget must be an int"),
        ("window_bytes", None, "window_bytes is required with unit 'window'"),
        ("window_spread", -1, "window_spread must be >= 0"),
    ):
        with pytest.raises(SamplingError, match=message):
            ResumeState.from_dict({**WORKER_DICT, name: value})


def test_fields_of_another_kind_or_unit_are_refused() -> None:
    rank = _fields(ResumeState.from_dict(RANK_DICT))
    with pytest.raises(SamplingError, match=r"samples_yielded does not belong to .*'rank'"):
        ResumeState(**{**rank, "samples_yielded": 3})
    with pytest.raises(SamplingError, match=r"window_frames does not belong to .*'episode'"):
        ResumeState(**{**rank, "window_frames": 16})
    with pytest.raises(SamplingError, match="samples_consumed is required with kind 'rank'"):
        ResumeState(**{**rank, "samples_consumed": None})
    with pytest.raises(SamplingError, match="must be a mapping"):
        ResumeState.from_dict([("kind", "rank")])  # type: ignore[arg-type]


def test_dicts_from_before_kinds_existed_are_accepted() -> None:
    # a rank's state without "kind"
    old_rank = {key: value for key, value in RANK_DICT.items() if key != "kind"}
    assert ResumeState.from_dict(old_rank) == ResumeState.from_dict(RANK_DICT)
    # PoolSchedule.state_dict() wrote this before (SamplingState): no kind, its frame counts
    ids, counts = np.arange(6), np.full(6, 5)
    params, slot = PoolParams(pool_size=3, seed=9), WorkerSlot(0, 2, 1, 2)
    old_schedule = {
        "seed": 9,
        "epoch": 1,
        "rank": 0,
        "world_size": 2,
        "worker": 1,
        "num_workers": 2,
        "pool_size": 3,
        "shuffle": True,
        "num_episodes": 6,
        "num_frames": 30,
        "episodes_digest": episodes_digest(ids, counts),
        "samples_yielded": 7,
        "version": 1,
    }
    state = ResumeState.from_dict(old_schedule)
    assert (state.kind, state.worker, state.samples_yielded) == ("worker", 1, 7)
    resumed = PoolSchedule.from_state(old_schedule, ids, counts, params=params, slot=slot)
    whole = PoolSchedule(ids, counts, params=params, slot=slot, epoch=1)
    whole.take(7)
    assert resumed.position == 7
    tail, expected = resumed.take(30), whole.take(30)
    assert np.array_equal(tail.episode_ids, expected.episode_ids)
    assert np.array_equal(tail.frame_indices, expected.frame_indices)


MISMATCHES = [
    ("seed", 8, "resume state seed=7 does not match this run's 8"),
    ("pool_size", 4, "resume state pool_size=3 does not match this run's 4"),
    ("shuffle", False, "resume state shuffle=True does not match this run's False"),
    ("rank", 0, "resume state rank=1 does not match this run's 0"),
    ("world_size", 3, "resume state world_size=2 does not match this run's 3"),
    ("episodes_digest", "0" * 32, r"episodes_digest=.* \(the episode set differs\)"),
    ("window_frames", 8, "resume state window_frames=16 does not match this run's 8"),
    ("decoded_budget", 1 << 30, "resume state decoded_budget=67108864 does not match"),
    ("window_bytes", 2 << 20, "resume state window_bytes=1048576 does not match"),
]


@pytest.mark.parametrize(("name", "value", "message"), MISMATCHES, ids=[m[0] for m in MISMATCHES])
def test_each_mismatched_field_is_named(name: str, value: Any, message: str) -> None:
    saved = ResumeState.from_dict(WORKER_DICT)
    saved.check_matches(saved)
    with pytest.raises(SamplingError, match=message):
        saved.check_matches(ResumeState(**{**_fields(saved), name: value}))


def test_epoch_and_position_are_carried_not_compared() -> None:
    saved = ResumeState.from_dict(WORKER_DICT)
    saved.check_matches(ResumeState(**{**_fields(saved), "epoch": 0, "samples_yielded": 0}))


def test_units_differ_before_any_other_field() -> None:
    window = ResumeState.from_dict(WORKER_DICT)
    episode = ResumeState(
        **{**_fields(window), "unit": "episode", "seed": 8}
        | dict.fromkeys(("window_frames", "decoded_budget", "window_bytes", "window_spread"))
    )
    with pytest.raises(SamplingError, match="unit='window' does not match this run's 'episode'"):
        window.check_matches(episode)
    with pytest.raises(SamplingError, match="unit='episode' does not match this run's 'window'"):
        episode.check_matches(window)


def test_a_worker_state_resumes_only_its_own_worker() -> None:
    saved = ResumeState.from_dict(WORKER_DICT)
    assert saved.resume_position(WorkerSlot(1, 2, 1, 2)) == (WorkerSlot(1, 2, 1, 2), 9)
    with pytest.raises(SamplingError, match=r"worker 1 of 2 was handed to worker 0 of 2$"):
        saved.resume_position(WorkerSlot(1, 2, 0, 2))
    with pytest.raises(SamplingError, match=r"was handed to worker 1 of 3 \(num_workers differs"):
        saved.resume_position(WorkerSlot(1, 2, 1, 3))


def test_a_rank_state_places_each_worker_where_the_loader_stopped() -> None:
    saved = ResumeState.from_dict(RANK_DICT)  # 12 samples in batches of 4 from 2 workers
    totals = np.array([10, 10])
    # the loader took worker 0, 1, 0: 8 and 4 delivered, worker 1 is polled next; so the
    # fresh loader's worker 0 plays worker 1, and its worker 1 plays worker 0
    assert saved.resume_position(WorkerSlot(1, 2, 0, 2), totals) == (WorkerSlot(1, 2, 1, 2), 4)
    assert saved.resume_position(WorkerSlot(1, 2, 1, 2), totals) == (WorkerSlot(1, 2, 0, 2), 8)
    with pytest.raises(SamplingError, match="num_workers=2 does not match this DataLoader's 1"):
        saved.resume_position(WorkerSlot(1, 2, 0, 1), totals[:1])
    with pytest.raises(SamplingError, match="needs worker_totals"):
        saved.resume_position(WorkerSlot(1, 2, 0, 2))
    with pytest.raises(SamplingError, match="one count per worker"):
        saved.resume_position(WorkerSlot(1, 2, 0, 2), np.array([10, 10, 10]))
    with pytest.raises(SamplingError, match="batch boundary"):
        ResumeState(**{**_fields(saved), "samples_consumed": 6}).resume_position(
            WorkerSlot(1, 2, 0, 2), totals
        )


def test_a_schedule_resumes_from_a_worker_state_only() -> None:
    ids, counts = np.arange(4), np.full(4, 5)
    params, slot = PoolParams(pool_size=2, seed=7), WorkerSlot(0, 1, 0, 1)
    schedule = PoolSchedule(ids, counts, params=params, slot=slot)
    schedule.take(3)
    state = schedule.state()
    assert state.kind == "worker" and state.unit == "episode"
    rank = ResumeState(
        **{**_fields(state), "kind": "rank", "worker": None, "samples_yielded": None}
        | {"batch_size": 1, "drop_last": False, "samples_consumed": 3}
    )
    with pytest.raises(SamplingError, match=r"takes a 'worker' resume state.*kind 'rank'"):
        PoolSchedule.from_state(rank, ids, counts, params=params, slot=slot)
    window = ResumeState(
        **{**_fields(state), "unit": "window"}
        | {"window_frames": 4, "decoded_budget": 1 << 20, "window_bytes": 1 << 10}
        | {"window_spread": 31}
    )
    with pytest.raises(SamplingError, match="unit='window'"):
        PoolSchedule.from_state(window, ids, counts, params=params, slot=slot)
    assert PoolSchedule.from_state(state, ids, counts, params=params, slot=slot).position == 3


def test_a_window_state_from_before_spread_draws_is_refused_not_resumed_in_another_order():
    old = {name: value for name, value in WORKER_DICT.items() if name != "window_spread"}
    with pytest.raises(
        SamplingError, match=r"'window_spread'\]: a window pool's state written before"
    ):
        ResumeState.from_dict(old)
    saved = ResumeState.from_dict(WORKER_DICT)
    unspread = ResumeState(**{**_fields(saved), "window_spread": 0})
    with pytest.raises(SamplingError, match="window_spread=31 does not match this run's 0"):
        saved.check_matches(unspread)

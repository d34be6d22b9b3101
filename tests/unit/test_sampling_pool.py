"""The exact-coverage pool order: coverage, determinism, resume, uniformity and the draw rule."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from episodestream import SamplingError
from episodestream.sampling import (
    PoolParams,
    PoolSchedule,
    ResumeState,
    WorkerSlot,
    episodes_digest,
)
from tests.support.sampling import (
    SETTINGS,
    assert_exact_cover,
    draws_of_every_slot,
    episode_sets_of,
)

episode_sets = episode_sets_of(max_frames=40, max_episodes=30, stride=3, first=1)


def all_draws(schedule: PoolSchedule) -> tuple[np.ndarray, np.ndarray]:
    batch = schedule.take(schedule.remaining)
    assert schedule.take(5).episode_ids.size == 0
    return batch.episode_ids, batch.frame_indices


def draw_pairs(schedule: PoolSchedule) -> list[tuple[int, int]]:
    episodes, frames = all_draws(schedule)
    return list(zip(episodes.tolist(), frames.tolist(), strict=True))


@SETTINGS
@given(
    episode_sets,
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 12),
    st.integers(0, 2**32),
    st.integers(0, 5),
    st.booleans(),
)
def test_every_frame_exactly_once_across_all_slots(
    episodes, world_size, num_workers, pool_size, seed, epoch, shuffle
):
    ids, counts = episodes
    params = PoolParams(pool_size=pool_size, seed=seed, shuffle=shuffle)
    drawn = draws_of_every_slot(
        ids,
        counts,
        world_size=world_size,
        num_workers=num_workers,
        seed=seed,
        epoch=epoch,
        schedule_for=lambda e, n, slot: PoolSchedule(e, n, params=params, slot=slot, epoch=epoch),
        draws=draw_pairs,
    )
    assert_exact_cover(ids, counts, drawn)


@SETTINGS
@given(episode_sets, st.integers(1, 8), st.integers(0, 1000), st.booleans(), st.data())
def test_resume_after_k_equals_the_uninterrupted_tail(episodes, pool_size, seed, shuffle, data):
    ids, counts = episodes
    params = PoolParams(pool_size=pool_size, seed=seed, shuffle=shuffle)
    slot = WorkerSlot(1, 2, 0, 3)
    full_e, full_f = all_draws(PoolSchedule(ids, counts, params=params, slot=slot, epoch=2))
    k = data.draw(st.integers(0, int(counts.sum())))

    interrupted = PoolSchedule(ids, counts, params=params, slot=slot, epoch=2)
    interrupted.take(k)
    saved = json.loads(json.dumps(interrupted.state_dict()))
    assert saved["samples_yielded"] == k

    resumed = PoolSchedule.from_state(saved, ids[::-1], counts[::-1], params=params, slot=slot)
    assert resumed.position == k
    assert np.array_equal(resumed.resident(), interrupted.resident())
    assert np.array_equal(resumed.upcoming(3), interrupted.upcoming(3))
    tail_e, tail_f = all_draws(resumed)
    assert np.array_equal(tail_e, full_e[k:])
    assert np.array_equal(tail_f, full_f[k:])

    started = PoolSchedule(ids, counts, params=params, slot=slot, epoch=2, start=k)
    assert np.array_equal(all_draws(started)[1], full_f[k:])


@SETTINGS
@given(episode_sets, st.integers(1, 6), st.lists(st.integers(0, 60), min_size=1, max_size=12))
def test_batching_and_skipping_do_not_change_the_order(episodes, pool_size, steps):
    ids, counts = episodes
    params = PoolParams(pool_size=pool_size, seed=7)
    reference_e, reference_f = all_draws(PoolSchedule(ids, counts, params=params))
    schedule = PoolSchedule(ids, counts, params=params)
    for i, step in enumerate(steps):
        start = schedule.position
        if i % 2:
            step = min(step, schedule.remaining)
            schedule.skip(step)
            assert schedule.position == start + step
        else:
            batch = schedule.take(step)
            assert batch.start == start
            assert np.array_equal(batch.episode_ids, reference_e[start : start + len(batch)])
            assert np.array_equal(batch.frame_indices, reference_f[start : start + len(batch)])
    rest_e, _ = all_draws(schedule)
    assert np.array_equal(rest_e, reference_e[len(reference_e) - len(rest_e) :])


def test_same_inputs_same_order_other_epochs_seeds_and_slots_differ():
    ids, counts = np.arange(40), np.full(40, 25)

    def order(**kwargs):
        params = PoolParams(pool_size=8, seed=kwargs.pop("seed", 0))
        e, f = all_draws(PoolSchedule(ids, counts, params=params, **kwargs))
        return e * 1000 + f

    assert np.array_equal(order(epoch=3), order(epoch=3))
    assert not np.array_equal(order(epoch=3), order(epoch=4))
    assert not np.array_equal(order(epoch=3), order(epoch=3, seed=1))
    assert not np.array_equal(order(slot=WorkerSlot(0, 2)), order(slot=WorkerSlot(1, 2)))


def test_shuffle_false_gives_the_sequential_order_and_still_announces_entries():
    ids, counts = np.array([7, 2, 5]), np.array([3, 2, 4])
    schedule = PoolSchedule(ids, counts, params=PoolParams(pool_size=2, shuffle=False))
    assert schedule.entry_order.tolist() == [2, 5, 7]
    assert schedule.upcoming(5).tolist() == [7]
    batch = schedule.take(100)
    assert batch.episode_ids.tolist() == [2, 2, 5, 5, 5, 5, 7, 7, 7]
    assert batch.frame_indices.tolist() == [0, 1, 0, 1, 2, 3, 0, 1, 2]
    assert batch.leaves.tolist() == [False, True, False, False, False, True, False, False, True]
    assert batch.enters.tolist() == [-1, 7, -1, -1, -1, -1, -1, -1, -1]


def test_events_respect_the_pool_and_announce_entries_in_entry_order():
    ids, counts = np.arange(30), (np.arange(30) % 7) + 1
    pool_size = 5
    schedule = PoolSchedule(ids, counts, params=PoolParams(pool_size=pool_size, seed=3))
    entry_order = schedule.entry_order.tolist()
    assert schedule.upcoming(3).tolist() == entry_order[pool_size : pool_size + 3]
    resident: set[int] = set()
    entered: list[int] = []
    drawn = Counter()
    positions = []
    for event in schedule.events(batch_draws=7):
        if event.kind == "enter":
            assert event.episode_id not in resident
            resident.add(event.episode_id)
            entered.append(event.episode_id)
            assert len(resident) <= pool_size
        elif event.kind == "draw":
            assert event.episode_id in resident
            drawn[event.episode_id] += 1
            positions.append(event.position)
        else:
            assert drawn[event.episode_id] == counts[event.episode_id]
            resident.remove(event.episode_id)
    assert entered == entry_order
    assert positions == list(range(int(counts.sum())))
    assert not resident


def test_resident_and_upcoming_track_the_pool():
    ids, counts = np.arange(12), np.full(12, 4)
    schedule = PoolSchedule(ids, counts, params=PoolParams(pool_size=3, seed=11))
    order = schedule.entry_order
    assert schedule.resident().tolist() == order[:3].tolist()
    left: list[int] = []
    while schedule.remaining:
        batch = schedule.take(1)
        if batch.leaves[0]:
            left.append(int(batch.episode_ids[0]))
        expected = [e for e in order[: schedule.entered].tolist() if e not in left]
        assert schedule.resident().tolist() == expected
        assert len(expected) == min(3, len(order) - len(left))
        assert schedule.upcoming(2).tolist() == order[schedule.entered :][:2].tolist()
    assert schedule.resident().size == 0


def test_first_pool_size_draws_touch_most_of_the_pool():
    # uniform over the pool's frames touches about 1 - (1 - 1/P)^P ~ 64 % of 16 episodes
    pool_size = 16
    rng = np.random.default_rng(0)
    fractions = []
    for seed in range(200):
        counts = rng.integers(20, 120, size=64)
        schedule = PoolSchedule(
            np.arange(64), counts, params=PoolParams(pool_size=pool_size, seed=seed)
        )
        first = schedule.take(pool_size).episode_ids
        fractions.append(np.unique(first).size / pool_size)
    assert np.mean(fractions) >= 0.6
    assert np.min(fractions) >= 0.3


def test_each_draw_is_uniform_over_the_frames_left_in_the_pool():
    """Randomized PIT: map every draw to a point of U(0,1) using the rule's probabilities
    (remaining / total remaining, residents in entry order); the points must be uniform."""
    counts = np.array([1, 3, 5, 8, 13, 2, 30, 4, 9, 17, 6, 11])
    ids = np.arange(counts.size)
    jitter = np.random.default_rng(123)
    points = []
    for seed in range(60):
        schedule = PoolSchedule(ids, counts, params=PoolParams(pool_size=4, seed=seed))
        remaining: dict[int, int] = {}
        for event in schedule.events():
            if event.kind == "enter":
                remaining[event.episode_id] = int(counts[event.episode_id])
            elif event.kind == "draw":
                residents = list(remaining)
                weights = np.array([remaining[e] for e in residents], dtype=float)
                cdf = np.concatenate([[0.0], np.cumsum(weights / weights.sum())])
                i = residents.index(event.episode_id)
                points.append(cdf[i] + jitter.random() * (cdf[i + 1] - cdf[i]))
                remaining[event.episode_id] -= 1
            else:
                assert remaining.pop(event.episode_id) == 0
    observed = np.histogram(points, bins=10, range=(0.0, 1.0))[0]
    expected = len(points) / 10
    chi_square = float(((observed - expected) ** 2 / expected).sum())
    # 9 degrees of freedom: P(chi2 > 40) < 1e-5; a biased rule lands far above this
    assert chi_square < 40, (chi_square, observed)


def test_frames_within_an_episode_come_in_a_seeded_permutation():
    schedule = PoolSchedule([0], [50], params=PoolParams(pool_size=1, seed=5))
    frames = schedule.take(50).frame_indices
    assert sorted(frames.tolist()) == list(range(50))
    assert frames.tolist() != list(range(50))


def test_large_epoch_is_produced_and_skipped_without_per_frame_objects():
    counts = np.full(2000, 150)
    params = PoolParams(pool_size=32, seed=1)
    schedule = PoolSchedule(np.arange(2000), counts, params=params)
    total = 0
    checksum = 0
    while schedule.remaining:
        batch = schedule.take(50_000)
        total += len(batch)
        checksum += int(batch.frame_indices.sum())
    assert total == 300_000
    assert checksum == 2000 * (149 * 150 // 2)
    tail = PoolSchedule(np.arange(2000), counts, params=params, start=299_990)
    assert len(tail.take(100)) == 10


def test_empty_shard_is_an_empty_epoch():
    schedule = PoolSchedule([], [], params=PoolParams(pool_size=4))
    assert schedule.total_samples == 0
    assert len(schedule.take(10)) == 0
    assert list(schedule.events()) == []
    assert schedule.state().episodes_digest == episodes_digest([], [])


def test_state_round_trips_through_json_and_names_mismatches():
    ids, counts = np.arange(6), np.full(6, 5)
    params = PoolParams(pool_size=3, seed=9)
    slot = WorkerSlot(0, 2, 1, 2)
    schedule = PoolSchedule(ids, counts, params=params, slot=slot, epoch=1)
    schedule.take(7)
    state = schedule.state_dict()
    assert state["version"] == 1
    assert state["kind"] == "worker" and state["samples_yielded"] == 7
    assert ResumeState.from_dict(json.loads(json.dumps(state))) == schedule.state()

    resume_args = {"params": params, "slot": slot}
    cases = [
        ("world_size", dict(slot=WorkerSlot(0, 3, 1, 2))),
        ("num_workers", dict(slot=WorkerSlot(0, 2, 1, 3))),
        ("rank", dict(slot=WorkerSlot(1, 2, 1, 2))),
        ("worker", dict(slot=WorkerSlot(0, 2, 0, 2))),
        ("pool_size", dict(params=PoolParams(pool_size=4, seed=9))),
        ("seed", dict(params=PoolParams(pool_size=3, seed=8))),
        ("shuffle", dict(params=PoolParams(pool_size=3, seed=9, shuffle=False))),
    ]
    for field, change in cases:
        kwargs = {"params": params, "slot": slot, **change}
        with pytest.raises(SamplingError, match=field):
            PoolSchedule.from_state(state, ids, counts, **kwargs)
    with pytest.raises(SamplingError, match="episode set"):
        PoolSchedule.from_state(state, ids, counts + 1, params=params, slot=slot)
    with pytest.raises(SamplingError, match="episode set"):
        PoolSchedule.from_state(state, ids[:5], counts[:5], params=params, slot=slot)
    with pytest.raises(SamplingError, match="newer"):
        ResumeState.from_dict({**state, "version": 99})
    with pytest.raises(SamplingError, match="samples_yielded"):
        ResumeState.from_dict({k: v for k, v in state.items() if k != "samples_yielded"})
    # the state no longer carries the frame count: the schedule it resumes refuses the excess
    with pytest.raises(SamplingError, match="samples_yielded"):
        PoolSchedule.from_state({**state, "samples_yielded": 31}, ids, counts, **resume_args)
    with pytest.raises(SamplingError, match="samples_yielded"):
        ResumeState.from_dict({**state, "samples_yielded": -1})


def test_bad_arguments_are_errors_naming_the_parameter():
    with pytest.raises(SamplingError, match="pool_size"):
        PoolParams(pool_size=0)
    with pytest.raises(SamplingError, match="pool_size"):
        PoolParams(pool_size=-3)
    with pytest.raises(SamplingError, match="pool_size"):
        PoolParams(pool_size=2.5)
    with pytest.raises(SamplingError, match="seed"):
        PoolParams(seed=-1)
    with pytest.raises(SamplingError, match="frame_counts"):
        PoolSchedule([1, 2], [3, 0])
    with pytest.raises(SamplingError, match="episode_ids"):
        PoolSchedule([1, 1], [3, 3])
    with pytest.raises(SamplingError, match="same length"):
        PoolSchedule([1, 2], [3])
    with pytest.raises(SamplingError, match="epoch"):
        PoolSchedule([1], [3], epoch=-1)
    with pytest.raises(SamplingError, match="start"):
        PoolSchedule([1], [3], start=-1)
    with pytest.raises(SamplingError, match="cannot skip"):
        PoolSchedule([1], [3], start=4)
    with pytest.raises(SamplingError, match="params"):
        PoolSchedule([1], [3], params={"pool_size": 2})

"""Sharding whole episodes between ranks and workers; worker slots and budget shares."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from episodestream import SamplingError
from episodestream.sampling import WorkerSlot, plan_shards, shard_episodes, split_budget

counts_strategy = st.lists(st.integers(1, 500), min_size=1, max_size=60)


@settings(max_examples=60, deadline=None)
@given(counts_strategy, st.integers(1, 4), st.integers(1, 4), st.integers(0, 99), st.booleans())
def test_shards_are_disjoint_covering_and_balanced(counts, world_size, num_workers, epoch, shuffle):
    counts = np.asarray(counts)
    ids = np.arange(counts.size) * 2 + 5
    plan = plan_shards(
        ids[::-1],
        counts[::-1],
        world_size=world_size,
        num_workers=num_workers,
        seed=3,
        epoch=epoch,
        shuffle=shuffle,
    )
    owned = []
    for rank in range(world_size):
        for worker in range(num_workers):
            slot = WorkerSlot(rank, world_size, worker, num_workers)
            mine = plan.episodes_for(slot)
            assert np.all(np.diff(mine) > 0)
            expected = shard_episodes(ids, counts, slot, seed=3, epoch=epoch, shuffle=shuffle)
            assert np.array_equal(mine, expected)
            owned.extend(mine.tolist())
    assert sorted(owned) == ids.tolist()
    # greedy onto the lightest bin keeps the spread within the largest episode, at each level
    per_rank = plan.frames_per_rank
    assert per_rank.sum() == counts.sum()
    assert per_rank.max() - per_rank.min() <= counts.max()
    for rank in range(world_size):
        members = counts[plan.rank_of == rank]
        per_worker = plan.frames_per_slot[rank]
        assert per_worker.sum() == members.sum()
        if members.size:
            assert per_worker.max() - per_worker.min() <= members.max()


def test_largest_first_balances_tightly_on_a_realistic_mix():
    counts = np.random.default_rng(4).integers(200, 800, size=400)
    plan = plan_shards(np.arange(400), counts, world_size=4, num_workers=4, seed=0)
    totals = plan.frames_per_slot
    assert totals.max() - totals.min() <= 0.01 * totals.mean()


def test_the_rank_split_does_not_depend_on_the_rank_asking():
    ids, counts = np.arange(50), np.arange(50) % 9 + 1
    a = plan_shards(ids, counts, world_size=3, num_workers=2, seed=1, epoch=2)
    b = plan_shards(ids[::-1], counts[::-1], world_size=3, num_workers=2, seed=1, epoch=2)
    assert np.array_equal(a.rank_of, b.rank_of)
    assert np.array_equal(a.worker_of, b.worker_of)


def test_shuffle_moves_episodes_between_epochs_and_unshuffled_is_stable():
    ids, counts = np.arange(64), np.full(64, 10)
    slot = WorkerSlot(0, 4)
    epochs = [shard_episodes(ids, counts, slot, seed=0, epoch=e).tolist() for e in range(3)]
    assert epochs[0] != epochs[1] != epochs[2]
    fixed = [shard_episodes(ids, counts, slot, epoch=e, shuffle=False).tolist() for e in range(3)]
    assert fixed[0] == fixed[1] == fixed[2] == list(range(0, 64, 4))


def test_more_slots_than_episodes_leaves_some_slots_empty():
    plan = plan_shards([1, 2], [5, 5], world_size=2, num_workers=2)
    sizes = [plan.episodes_for(WorkerSlot(r, 2, w, 2)).size for r in range(2) for w in range(2)]
    assert sorted(sizes) == [0, 0, 1, 1]


def test_shard_errors_name_the_parameter():
    with pytest.raises(SamplingError, match="empty"):
        plan_shards([], [])
    with pytest.raises(SamplingError, match="frame_counts"):
        plan_shards([0, 1], [4, -1])
    with pytest.raises(SamplingError, match="episode_ids"):
        plan_shards([0, 0], [4, 4])
    with pytest.raises(SamplingError, match="episode_ids"):
        plan_shards([-1], [4])
    with pytest.raises(SamplingError, match="episode_ids"):
        plan_shards([0.5], [4])
    with pytest.raises(SamplingError, match="world_size"):
        plan_shards([0], [4], world_size=0)
    with pytest.raises(SamplingError, match="seed"):
        plan_shards([0], [4], seed=-2)
    plan = plan_shards([0, 1], [4, 4], world_size=2)
    with pytest.raises(SamplingError, match="world_size"):
        plan.episodes_for(WorkerSlot(0, 3))


def test_worker_slot_is_a_validated_value():
    slot = WorkerSlot(rank=2, world_size=4, worker=1, num_workers=3)
    assert slot.global_index == 7
    assert slot.count == 12
    assert slot.with_worker(0, 2) == WorkerSlot(2, 4, 0, 2)
    assert WorkerSlot() == WorkerSlot(0, 1, 0, 1)
    for kwargs, name in [
        (dict(rank=1, world_size=1), "rank"),
        (dict(rank=-1), "rank"),
        (dict(world_size=0), "world_size"),
        (dict(worker=2, num_workers=2), "worker"),
        (dict(num_workers=0), "num_workers"),
        (dict(rank=True), "rank"),
        (dict(world_size=2.0), "world_size"),
    ]:
        with pytest.raises(SamplingError, match=name):
            WorkerSlot(**kwargs)


@given(st.integers(0, 10**12), st.integers(1, 5), st.integers(1, 6))
def test_budget_shares_sum_to_the_budget(total, world_size, num_workers):
    slots = [
        WorkerSlot(r, world_size, w, num_workers)
        for r in range(world_size)
        for w in range(num_workers)
    ]
    if total >= world_size * num_workers:
        shares = [split_budget(total, s, across="all") for s in slots]
        assert sum(shares) == total
        assert max(shares) - min(shares) <= 1
    if total >= num_workers:
        rank_shares = [split_budget(total, s) for s in slots if s.rank == 0]
        assert sum(rank_shares) == total


def test_budget_errors():
    with pytest.raises(SamplingError, match="total_bytes"):
        split_budget(-1, WorkerSlot())
    with pytest.raises(SamplingError, match="total_bytes"):
        split_budget(3, WorkerSlot(num_workers=4))
    with pytest.raises(SamplingError, match="across"):
        split_budget(10, WorkerSlot(), across="node")  # type: ignore[arg-type]


def test_the_sampling_layer_imports_no_torch_and_starts_no_threads():
    code = (
        "import sys, threading\n"
        "import episodestream.sampling\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert threading.active_count() == 1\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"

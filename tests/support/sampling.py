"""What the sampling orders' property tests share: hypothesis settings, episode sets, and the
check that the schedules of every slot of a plan draw every frame exactly once."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from episodestream.sampling import WorkerSlot, plan_shards
from episodestream.sampling._cursor import DrawCursor

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def episode_sets_of(
    *, max_frames: int, max_episodes: int, stride: int, first: int
) -> st.SearchStrategy[tuple[np.ndarray, np.ndarray]]:
    """(episode ids, frame counts): up to ``max_episodes`` episodes of 1..``max_frames``
    frames, ids ``first``, ``first + stride``, ... (not dense, so ids and positions differ)."""
    return st.lists(st.integers(1, max_frames), min_size=1, max_size=max_episodes).map(
        lambda counts: (np.arange(len(counts)) * stride + first, np.asarray(counts))
    )


def draws_of_every_slot(
    ids: np.ndarray,
    counts: np.ndarray,
    *,
    world_size: int,
    num_workers: int,
    seed: int,
    epoch: int,
    schedule_for: Callable[[np.ndarray, np.ndarray, WorkerSlot], DrawCursor],
    draws: Callable[[DrawCursor], Sequence[tuple[int, int]]],
) -> list[tuple[int, int]]:
    """The ``(episode, frame)`` draws of every slot's schedule over ``plan_shards``' plan, each
    slot's as many as the frames the plan gave it."""
    plan = plan_shards(
        ids, counts, world_size=world_size, num_workers=num_workers, seed=seed, epoch=epoch
    )
    drawn: list[tuple[int, int]] = []
    for rank in range(world_size):
        for worker in range(num_workers):
            slot = WorkerSlot(rank, world_size, worker, num_workers)
            schedule = schedule_for(plan.episodes_for(slot), plan.frame_counts_for(slot), slot)
            mine = draws(schedule)
            assert len(mine) == schedule.total_samples == plan.frames_per_slot[rank, worker]
            drawn.extend(mine)
    return drawn


def assert_exact_cover(
    ids: np.ndarray, counts: np.ndarray, drawn: Sequence[tuple[int, int]]
) -> None:
    """``drawn`` holds every frame of the episodes exactly once."""
    expected = {(int(e), f) for e, n in zip(ids, counts, strict=True) for f in range(int(n))}
    assert len(drawn) == len(set(drawn)), "a frame was drawn twice"
    assert set(drawn) == expected

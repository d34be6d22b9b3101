"""Split whole episodes between ranks, then between each rank's DataLoader workers, balanced by
frame count.

Strategy: longest-processing-time greedy — episodes in decreasing frame count, each onto the
currently lightest bin (ties: lowest bin). For any placement order greedy-to-lightest keeps
``max(load) - min(load) <= max(frame_counts)``; largest-first makes the spread much tighter in
practice. With ``shuffle=True`` equal-length episodes are ordered by a seeded permutation and
the bins are relabelled by one, so which rank/worker gets which group changes per epoch; with
``shuffle=False`` ties go by episode id and bins keep their labels. The rank-level split depends
only on (seed, epoch, episode set, world_size), so every rank computes the same one.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from episodestream.errors import SamplingError
from episodestream.sampling._rng import generator, stream_key
from episodestream.sampling._slot import WorkerSlot
from episodestream.sampling._validate import canonical_episodes, require_int

__all__ = ["ShardPlan", "plan_shards", "shard_episodes"]


@dataclass(frozen=True, slots=True, eq=False)
class ShardPlan:
    """Where every episode goes for one epoch.

    Attributes:
        world_size: ranks.
        num_workers: DataLoader workers per rank.
        episode_ids: all selected episode ids, ascending (int64, read-only).
        frame_counts: their frame counts.
        rank_of: rank owning each episode (aligned with ``episode_ids``).
        worker_of: worker (within its rank) owning each episode.
    """

    world_size: int
    num_workers: int
    episode_ids: np.ndarray
    frame_counts: np.ndarray
    rank_of: np.ndarray
    worker_of: np.ndarray

    def _check_slot(self, slot: WorkerSlot) -> None:
        if slot.world_size != self.world_size or slot.num_workers != self.num_workers:
            raise SamplingError(
                f"slot has world_size={slot.world_size}, num_workers={slot.num_workers} but "
                f"the plan was made for world_size={self.world_size}, "
                f"num_workers={self.num_workers}"
            )

    def _mask(self, slot: WorkerSlot) -> np.ndarray:
        self._check_slot(slot)
        return (self.rank_of == slot.rank) & (self.worker_of == slot.worker)

    def episodes_for(self, slot: WorkerSlot) -> np.ndarray:
        """Episode ids owned by ``slot``, ascending (may be empty when slots outnumber episodes)."""
        return self.episode_ids[self._mask(slot)]

    def frame_counts_for(self, slot: WorkerSlot) -> np.ndarray:
        """Frame counts aligned with ``episodes_for(slot)``."""
        return self.frame_counts[self._mask(slot)]

    @property
    def frames_per_slot(self) -> np.ndarray:
        """Frames owned by each (rank, worker), shape ``(world_size, num_workers)``."""
        totals = np.zeros((self.world_size, self.num_workers), dtype=np.int64)
        np.add.at(totals, (self.rank_of, self.worker_of), self.frame_counts)
        return totals

    @property
    def frames_per_rank(self) -> np.ndarray:
        """Frames owned by each rank, shape ``(world_size,)``."""
        return np.bincount(
            self.rank_of, weights=self.frame_counts, minlength=self.world_size
        ).astype(np.int64)


def plan_shards(
    episode_ids: ArrayLike,
    frame_counts: ArrayLike,
    *,
    world_size: int = 1,
    num_workers: int = 1,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
) -> ShardPlan:
    """Assign every episode to one (rank, worker), balanced by frames; see the module docstring.

    Raises:
        SamplingError: empty or invalid episode set, bad counts, seed or epoch.
    """
    world_size = require_int("world_size", world_size, minimum=1)
    num_workers = require_int("num_workers", num_workers, minimum=1)
    seed = require_int("seed", seed, minimum=0)
    epoch = require_int("epoch", epoch, minimum=0)
    ids, counts = canonical_episodes(episode_ids, frame_counts, allow_empty=False)

    rank_key = stream_key(seed, epoch, "shard_ranks", world_size)
    rank_of = _balance(counts, world_size, rank_key if shuffle else None)
    worker_of = np.zeros(ids.size, dtype=np.int64)
    for rank in range(world_size):
        members = np.flatnonzero(rank_of == rank)
        key = stream_key(seed, epoch, "shard_workers", world_size, rank, num_workers)
        worker_of[members] = _balance(counts[members], num_workers, key if shuffle else None)
    rank_of.setflags(write=False)
    worker_of.setflags(write=False)
    return ShardPlan(world_size, num_workers, ids, counts, rank_of, worker_of)


def shard_episodes(
    episode_ids: ArrayLike,
    frame_counts: ArrayLike,
    slot: WorkerSlot,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
) -> np.ndarray:
    """Episode ids (ascending) that ``slot`` owns this epoch; see :func:`plan_shards`."""
    plan = plan_shards(
        episode_ids,
        frame_counts,
        world_size=slot.world_size,
        num_workers=slot.num_workers,
        seed=seed,
        epoch=epoch,
        shuffle=shuffle,
    )
    return plan.episodes_for(slot)


def _balance(counts: np.ndarray, bins: int, key: int | None) -> np.ndarray:
    """Bin of each item: largest first onto the lightest bin; seeded ties and labels if keyed."""
    if bins == 1 or counts.size == 0:
        return np.zeros(counts.size, dtype=np.int64)
    if key is None:
        tiebreak = np.arange(counts.size)
        labels = np.arange(bins)
    else:
        rng = generator(key)
        tiebreak = rng.permutation(counts.size)
        labels = rng.permutation(bins)
    order = np.lexsort((tiebreak, -counts))
    heap = [(0, b) for b in range(bins)]
    assigned = np.empty(counts.size, dtype=np.int64)
    sizes = counts.tolist()
    for item in order.tolist():
        load, b = heap[0]
        assigned[item] = b
        heapq.heapreplace(heap, (load + sizes[item], b))
    return labels[assigned]

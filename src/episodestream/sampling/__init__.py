"""Pure sampling layer: which slot owns which episodes, the exact-coverage pool order, resume
state, and LeRobot ``delta_timestamps`` arithmetic. No I/O, no threads, no torch.

Everything here is a pure function of (seed, epoch, episode set, slot, pool parameters); the
datasets layer detects the slot and owns the I/O.
"""

from episodestream.sampling._deltas import (
    DEFAULT_DELTA_TOLERANCE_S,
    DeltaQuery,
    delta_frame_offsets,
    delta_query,
)
from episodestream.sampling._loader import loader_consumption
from episodestream.sampling._pool import (
    DEFAULT_POOL_SIZE,
    DrawBatch,
    PoolEvent,
    PoolParams,
    PoolSchedule,
)
from episodestream.sampling._shard import ShardPlan, plan_shards, shard_episodes
from episodestream.sampling._slot import WorkerSlot, split_budget
from episodestream.sampling._state import STATE_VERSION, SamplingState, episodes_digest

__all__ = [
    "DEFAULT_DELTA_TOLERANCE_S",
    "DEFAULT_POOL_SIZE",
    "STATE_VERSION",
    "DeltaQuery",
    "DrawBatch",
    "PoolEvent",
    "PoolParams",
    "PoolSchedule",
    "SamplingState",
    "ShardPlan",
    "WorkerSlot",
    "delta_frame_offsets",
    "delta_query",
    "episodes_digest",
    "loader_consumption",
    "plan_shards",
    "shard_episodes",
    "split_budget",
]

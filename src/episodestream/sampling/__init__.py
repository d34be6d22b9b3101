"""Pure sampling layer: which slot owns which episodes, the exact-coverage pool order (of
episodes, or of decoded windows), a weighted mixture's order over many sources, resume state,
and LeRobot ``delta_timestamps`` arithmetic.
No I/O, no threads, no torch.

Everything here is a pure function of (seed, epoch, episode set, slot, pool parameters); the
datasets layer detects the slot and owns the I/O.
"""

from episodestream.sampling._arguments import (
    MAX_COUNT,
    MAX_DELTA_SECONDS,
    MAX_EPISODE_INDEX,
    MAX_LOADER_WORKERS,
    MAX_SEED,
    MAX_WORLD_SIZE,
    check_delta_timestamps,
    episode_selection,
)
from episodestream.sampling._deltas import (
    DeltaQuery,
    delta_frame_offsets,
    delta_query,
)
from episodestream.sampling._loader import loader_consumption
from episodestream.sampling._mixture import (
    DEFAULT_BLOCK_SIZE,
    MAX_PASS_SEGMENTS,
    MixtureBatch,
    MixtureSchedule,
    MixtureState,
    MixtureWeight,
    PassSegments,
    mixture_digest,
    mixture_quotas,
    pass_seeds,
    pass_segments,
    slot_span,
)
from episodestream.sampling._pool import (
    DEFAULT_POOL_SIZE,
    DrawBatch,
    PoolEvent,
    PoolParams,
    PoolSchedule,
)
from episodestream.sampling._shard import ShardPlan, plan_shards, shard_episodes
from episodestream.sampling._slot import WorkerSlot, split_budget
from episodestream.sampling._state import ResumeState, episodes_digest
from episodestream.sampling._windows import (
    DEFAULT_SPREAD,
    DEFAULT_WINDOW_FRAMES,
    WindowEvent,
    WindowParams,
    WindowSchedule,
    decoded_span,
    window_bounds,
    window_slots,
)

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_POOL_SIZE",
    "DEFAULT_SPREAD",
    "DEFAULT_WINDOW_FRAMES",
    "MAX_COUNT",
    "MAX_DELTA_SECONDS",
    "MAX_EPISODE_INDEX",
    "MAX_LOADER_WORKERS",
    "MAX_PASS_SEGMENTS",
    "MAX_SEED",
    "MAX_WORLD_SIZE",
    "DeltaQuery",
    "DrawBatch",
    "MixtureBatch",
    "MixtureSchedule",
    "MixtureState",
    "MixtureWeight",
    "PassSegments",
    "PoolEvent",
    "PoolParams",
    "PoolSchedule",
    "ResumeState",
    "ShardPlan",
    "WindowEvent",
    "WindowParams",
    "WindowSchedule",
    "WorkerSlot",
    "check_delta_timestamps",
    "decoded_span",
    "delta_frame_offsets",
    "delta_query",
    "episode_selection",
    "episodes_digest",
    "loader_consumption",
    "mixture_digest",
    "mixture_quotas",
    "pass_seeds",
    "pass_segments",
    "plan_shards",
    "shard_episodes",
    "slot_span",
    "split_budget",
    "window_bounds",
    "window_slots",
]

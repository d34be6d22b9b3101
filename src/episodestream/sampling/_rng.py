"""Local random streams: every random choice in sampling/ comes from a generator keyed by
(seed, epoch, purpose, context), never from global state.

Each purpose gets its own SeedSequence-derived 64-bit key; a Philox generator keyed by
(that key, a counter id) gives independent streams for each episode without hashing anew.
Bit streams are stable across numpy versions; ``Generator`` methods are stable in practice
but numpy does not promise it, so a resume should use the same numpy major version.
"""

from __future__ import annotations

import numpy as np

__all__: list[str] = []

_PURPOSES = {
    "shard_ranks": 1,
    "shard_workers": 2,
    "pool_plan": 3,
    "pool_episode": 4,
    "window_order": 5,
    "window_pool": 6,
    "window_spread": 7,
}


def stream_key(seed: int, epoch: int, purpose: str, *context: int) -> int:
    """A 64-bit key for the stream of ``purpose`` in (seed, epoch, context)."""
    sequence = np.random.SeedSequence(seed, spawn_key=(epoch, _PURPOSES[purpose], *context))
    return int(sequence.generate_state(1, dtype=np.uint64)[0])


def generator(key: int, counter_id: int = 0) -> np.random.Generator:
    """An independent generator for ``counter_id`` (e.g. an episode id) under ``key``."""
    return np.random.Generator(np.random.Philox(key=np.array([key, counter_id], dtype=np.uint64)))

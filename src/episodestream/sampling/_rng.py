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
    "mixture_phase": 8,
    "mixture_block": 9,
    "mixture_pass": 10,
}

# splitmix64's increment and finaliser constants (Steele, Lea and Flood 2014)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)


def stream_key(seed: int, epoch: int, purpose: str, *context: int) -> int:
    """A 64-bit key for the stream of ``purpose`` in (seed, epoch, context)."""
    sequence = np.random.SeedSequence(seed, spawn_key=(epoch, _PURPOSES[purpose], *context))
    return int(sequence.generate_state(1, dtype=np.uint64)[0])


def generator(key: int, counter_id: int = 0) -> np.random.Generator:
    """An independent generator for ``counter_id`` (e.g. an episode id) under ``key``."""
    return np.random.Generator(np.random.Philox(key=np.array([key, counter_id], dtype=np.uint64)))


def counter_keys(key: int, counters: np.ndarray) -> np.ndarray:
    """Independent 64-bit keys for many ``counters`` (e.g. pass numbers) under ``key`` at once
    (uint64 array): splitmix64's finaliser of ``key + (counter + 1) * golden``, vectorised, for
    where one ``SeedSequence`` per counter would cost too much."""
    with np.errstate(over="ignore"):
        z = np.uint64(key) + (np.asarray(counters, dtype=np.uint64) + np.uint64(1)) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX_1
        z = (z ^ (z >> np.uint64(27))) * _MIX_2
        return z ^ (z >> np.uint64(31))

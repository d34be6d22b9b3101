"""The pool's progress counters: what ``EpisodePoolDataset.metrics()`` reports of a pass."""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

import numpy as np

__all__ = ["METRICS_WINDOW", "PoolMetrics"]

#: samples over which the unique episodes of a batch-sized stretch are counted
METRICS_WINDOW = 32


class PoolMetrics:
    """Counters of one iteration (one process / worker)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = time.perf_counter()
        self.first_sample_s: float | None = None
        self.samples = 0
        self.refill_waits = 0
        self.refill_wait_s = 0.0
        self.episodes_entered = 0
        self.window: list[int] = []
        self.window_unique: list[int] = []
        self.per_episode: collections.Counter[int] = collections.Counter()

    def sample(self, episode: int) -> None:
        with self.lock:
            if self.first_sample_s is None:
                self.first_sample_s = time.perf_counter() - self.started
            self.samples += 1
            self.per_episode[episode] += 1
            self.window.append(episode)
            if len(self.window) == METRICS_WINDOW:
                self.window_unique.append(len(set(self.window)))
                self.window.clear()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            elapsed = time.perf_counter() - self.started
            unique = self.window_unique
            counts = list(self.per_episode.values())
            return {
                "samples": self.samples,
                "elapsed_s": elapsed,
                "samples_per_s": self.samples / elapsed if elapsed > 0 else 0.0,
                "time_to_first_sample_s": self.first_sample_s,
                "refill_waits": self.refill_waits,
                "refill_wait_s": self.refill_wait_s,
                "episodes_entered": self.episodes_entered,
                "unique_episodes": len(self.per_episode),
                f"unique_episodes_per_{METRICS_WINDOW}_mean": float(np.mean(unique))
                if unique
                else None,
                f"unique_episodes_per_{METRICS_WINDOW}_min": int(min(unique)) if unique else None,
                "samples_per_episode_max": max(counts) if counts else 0,
            }

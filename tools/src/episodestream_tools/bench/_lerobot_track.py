"""LEROBOT: LeRobot's own ``LeRobotDataset`` on the same local files and the same samples.

Runs where ``lerobot`` imports (``.venv-lerobot``: run ``bench`` with that interpreter); the
dataset is read from a complete local copy (LeRobot loads every Parquet file of ``data/`` and
would go to the Hub for missing ones). Samples are drawn one after another with
``dataset[global_index]`` in one process, as one DataLoader worker draws them.
"""

from __future__ import annotations

import inspect
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from episodestream.decode import resolve_backend
from episodestream.errors import EpisodeStreamError
from episodestream_tools.bench._config import BenchConfig
from episodestream_tools.bench._measure import Progress, Sampler, timing_figures
from episodestream_tools.bench._sequence import BenchDataset

__all__ = ["LeRobotTrackError", "lerobot_version", "run_lerobot"]

logger = logging.getLogger(__name__)


class LeRobotTrackError(EpisodeStreamError):
    """``LeRobotDataset`` refused a sample of the sequence (its message, and which sample)."""


def lerobot_version() -> str | None:
    """LeRobot's version where it imports in this interpreter, else None."""
    try:
        import lerobot
    except ImportError:
        return None
    return str(getattr(lerobot, "__version__", "?"))


def global_indices(ds: BenchDataset, count: int) -> np.ndarray:
    """LeRobot's index of each of the first ``count`` samples: the episode's
    ``dataset_from_index`` plus the frame within the episode."""
    sequence = ds.sequence
    table = ds.meta.episodes
    rows = table.rows(sequence.episodes[:count])
    return table.dataset_from_index[rows].astype(np.int64) + sequence.frames[:count]


def run_lerobot(config: BenchConfig, ds: BenchDataset, count: int, root: Path) -> dict[str, Any]:
    """``LeRobotDataset(repo_id, root=root)[i]`` for the first ``count`` samples."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    backend = resolve_backend(config.decoder)
    options: dict[str, Any] = {"video_backend": backend}
    # LeRobot 0.4.4 has no uint8 output; later versions take return_uint8
    has_uint8 = "return_uint8" in inspect.signature(LeRobotDataset.__init__).parameters
    uint8 = config.image_dtype == "uint8" and has_uint8
    if uint8:
        options["return_uint8"] = True
    indices = global_indices(ds, count)
    opened = time.perf_counter()
    dataset = LeRobotDataset(f"episodestream-bench/{root.name}", root=root, **options)
    open_s = time.perf_counter() - opened
    arrivals = np.zeros(count, dtype=np.float64)
    got = np.zeros((count, 2), dtype=np.int64)
    with (
        Sampler() as sampler,
        Progress(count, "LEROBOT", enabled=config.progress, unit="samples") as bar,
    ):
        started = time.perf_counter()
        cpu_started = time.process_time()
        for i, index in enumerate(indices.tolist()):
            try:
                item = dataset[index]
            except Exception as error:  # LeRobot's errors have no common base class
                episode = int(ds.sequence.episodes[i])
                frame = int(ds.sequence.frames[i])
                raise LeRobotTrackError(
                    f"LeRobotDataset {lerobot_version()} failed on sample {i} (index {index}: "
                    f"episode {episode}, frame {frame}) of {root}: {type(error).__name__}: "
                    f"{str(error).splitlines()[0] if str(error) else ''}"
                ) from error
            arrivals[i] = time.perf_counter() - started
            got[i] = (int(item["episode_index"]), int(item["frame_index"]))
            bar.update()
        cpu_s = time.process_time() - cpu_started
    return {
        **timing_figures(arrivals, count, cpu_s),
        "open_s": open_s,
        "sequence_matches": bool(
            np.array_equal(got[:, 0], ds.sequence.episodes[:count])
            and np.array_equal(got[:, 1], ds.sequence.frames[:count])
        ),
        "lerobot_version": lerobot_version(),
        "video_backend": backend,
        "image_dtype": "uint8" if uint8 else "float32",
        "uint8_available": has_uint8,
        "memory": sampler.memory(),
    }

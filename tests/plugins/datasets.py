"""pytest fixtures: the datasets layer (EpisodeStreamDataset / EpisodePoolDataset).

* ``datasets_cache_dir``: a session-wide temporary ``cache_dir`` for sidecar indexes, so the
  tests never touch ``~/.cache`` and each dataset's index is built once per session.
* ``lerobot_reference``: what LeRobot's ``LeRobotDataset`` returned for lerobot_sim5 (the two
  ``.npz`` files and the ``delta_timestamps`` they were made with), loaded once.
* ``synthetic_many``: a synthetic AV1 dataset with many short episodes (one camera, 64x48),
  for pool statistics that need more episodes than the other fixtures have.
* ``synthetic_av1_samples``: every sample of synthetic_av1 read from disk, by index (the
  reference of the reliability tests; ``samples_by_index`` makes one for another dataset).
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from episodestream import EpisodeStreamDataset
from episodestream_tools.synthetic import SyntheticSpec

# 48 episodes of 3-6 frames, 12 per video file: first pool draws of a 32-episode pool
SYNTHETIC_MANY_SPEC = SyntheticSpec(
    cameras=("observation.images.cam_high",),
    width=64,
    height=48,
    fps=30,
    episodes=48,
    min_length=3,
    max_length=6,
    episodes_per_file=12,
    episodes_per_data_file=24,
    codec="av1",
    moov="start",
    seed=5,
)


@dataclass(frozen=True)
class LeRobotReference:
    """LeRobot's own answers for lerobot_sim5 (see tests/data/README.md)."""

    samples: dict[str, np.ndarray]
    samples_delta: dict[str, np.ndarray]
    delta_timestamps: dict[str, list[float]]

    #: arrays of the .npz files that are not sample keys
    NOT_KEYS = ("request_index", "getitem_s")

    @staticmethod
    def keys(arrays: dict[str, np.ndarray]) -> set[str]:
        return set(arrays) - set(LeRobotReference.NOT_KEYS)

    def assert_whole_epoch(self, samples: dict[int, dict[str, Any]]) -> None:
        """``samples`` (float32, by index) are lerobot_sim5's whole epoch, every frame once,
        and those LeRobot returned equal its answers (two cameras' pixels, the action)."""
        arrays = self.samples
        assert sorted(samples) == list(range(244))
        for row, index in enumerate(arrays["request_index"].tolist()):
            sample = samples[index]
            for key in ("observation.images.cam_high", "observation.images.cam_right_wrist"):
                expected = arrays[key][row].astype(np.float32) / 255
                assert np.array_equal(sample[key].numpy(), expected), (index, key)
            assert np.array_equal(sample["action"].numpy(), arrays["action"][row])


@pytest.fixture(scope="session")
def datasets_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("episodestream-cache")


@pytest.fixture(scope="session")
def lerobot_reference(lerobot_reference_dir: Path) -> LeRobotReference:
    def load(name: str) -> dict[str, np.ndarray]:
        with np.load(lerobot_reference_dir / name, allow_pickle=False) as arrays:
            return {key: arrays[key] for key in arrays.files}

    text = (lerobot_reference_dir / "delta_timestamps.txt").read_text()
    return LeRobotReference(
        samples=load("samples.npz"),
        samples_delta=load("samples_delta.npz"),
        delta_timestamps=ast.literal_eval(text),
    )


@pytest.fixture(scope="session")
def synthetic_many(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    """:data:`SYNTHETIC_MANY_SPEC`: AV1, 1 camera 64x48, 48 episodes of 3-6 frames."""
    return synthetic_dataset(SYNTHETIC_MANY_SPEC)


def samples_by_index(root: Path, cache_dir: Path) -> dict[int, Any]:
    """Every uint8 sample of the dataset at ``root`` read from disk, by global frame index:
    the fault-free reference runs under faults or over hostile inputs are compared with."""
    with EpisodeStreamDataset(root, cache_dir=cache_dir, image_dtype="uint8") as dataset:
        samples = (dataset[i] for i in range(len(dataset)))
        return {int(sample["index"]): sample for sample in samples}


@pytest.fixture(scope="session")
def synthetic_av1_samples(
    synthetic_av1: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, Any]:
    """:func:`samples_by_index` of synthetic_av1 (shared: treat as read-only)."""
    return samples_by_index(synthetic_av1, tmp_path_factory.mktemp("synthetic-av1-samples-cache"))

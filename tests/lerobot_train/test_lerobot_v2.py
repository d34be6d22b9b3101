"""LeRobot v2.1 sources against LeRobot's own conversion of them.

LeRobot 0.4+ reads v3.0 only: a v2.1 dataset must first go through its converter (0.4:
``lerobot.datasets.v30.convert_dataset_v21_to_v30``; 0.6: ``lerobot.scripts``), run offline on
a local copy. We stream the v2.1 dataset as published; LeRobot's ``LeRobotDataset`` on its
conversion is the oracle: every sample (with delta timestamps, whole and for an episode
subset), the metadata its training reads (stats, info, episodes), and LeRobot's own
``train()``, whose batches and losses on our v2.1 source equal those on the conversion.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lerobot.configs.train import TrainPipelineConfig
from lerobot.datasets import factory as lerobot_factory
from lerobot.datasets.lerobot_dataset import LeRobotDataset

try:  # LeRobot 0.4 keeps its converter among the datasets, 0.6 among the scripts
    from lerobot.datasets.v30.convert_dataset_v21_to_v30 import convert_dataset
except ModuleNotFoundError:
    from lerobot.scripts.convert_dataset_v21_to_v30 import convert_dataset

from episodestream import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.integrations.lerobot import make_dataset
from episodestream_tools.synthetic import SyntheticSpec
from tests.lerobot_train.test_lerobot_train import (
    BATCH_SIZE,
    LEROBOT_06,
    REPO_ID,
    STEPS,
    _act_policy,
    _assert_batch_equal,
    _config,
    _train,
)
from tests.support.lerobot_v2 import DELTA_TIMESTAMPS, V21_SPEC
from tests.support.samples import assert_samples_equal

# what the conversion may change in info.json: the path templates (ours keep the published
# ones, which name the files that exist)
_TEMPLATES = ("data_path", "video_path")


@pytest.fixture(scope="module")
def v21_root(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    return synthetic_dataset(V21_SPEC)


@pytest.fixture(scope="module")
def v21_url(v21_root: Path, http_publish: Callable[..., str]) -> str:
    return http_publish(v21_root)


@pytest.fixture(scope="module")
def converted_root(v21_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """LeRobot's own v3.0 conversion of the v2.1 dataset: its converter on a local copy, with
    a root given (nothing downloaded) and ``push_to_hub=False``. It converts in place: the
    copy moves aside to ``<name>_old`` and the v3.0 dataset takes its name."""
    parent = tmp_path_factory.mktemp("converted")
    root = parent / REPO_ID
    shutil.copytree(v21_root, root)
    # 0.4 takes the folder above the dataset (and adds repo_id), 0.6 the dataset's own
    convert_dataset(repo_id=REPO_ID, root=root if LEROBOT_06 else parent, push_to_hub=False)
    assert (root / "meta/info.json").is_file() and (root / "meta/episodes").is_dir()
    return root


def _info(info: Any) -> dict[str, Any]:
    """info.json as JSON reads it: LeRobot 0.6's metadata holds a ``DatasetInfo`` dataclass
    (whose ``to_dict`` gives shapes as lists, where 0.4's dict holds tuples)."""
    plain = dict(info) if isinstance(info, Mapping) else info.to_dict()
    return json.loads(json.dumps(plain))


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}/"))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


@pytest.mark.parametrize("where", ["local", "http"])
def test_samples_and_metadata_equal_lerobot_on_its_conversion(
    where: str,
    v21_root: Path,
    v21_url: str,
    converted_root: Path,
    datasets_cache_dir: Path,
) -> None:
    source = str(v21_root) if where == "local" else v21_url
    common = {"delta_timestamps": DELTA_TIMESTAMPS, "video_backend": "torchcodec"}
    theirs = LeRobotDataset(REPO_ID, root=converted_root, **common)
    ours = EpisodeStreamDataset(REPO_ID, root=source, cache_dir=datasets_cache_dir, **common)
    with ours:
        assert ours.meta.dataset_meta.codebase_version == "v2.1"
        # what LeRobot's training reads from dataset.meta
        their_stats, our_stats = _flat(theirs.meta.stats), _flat(ours.meta.stats)
        assert set(our_stats) == set(their_stats)
        for key, value in their_stats.items():
            assert our_stats[key].dtype == value.dtype, key
            assert np.array_equal(our_stats[key], value), key
        strip = {name: None for name in _TEMPLATES}
        assert {**_info(ours.meta.info), **strip} == {**_info(theirs.meta.info), **strip}
        assert ours.meta.episodes.column_names == theirs.meta.episodes.column_names
        for column in ("episode_index", "tasks", "length", "dataset_from_index"):
            assert ours.meta.episodes[column] == list(theirs.meta.episodes[column]), column
        assert list(ours.meta.tasks.index) == list(theirs.meta.tasks.index)
        assert (ours.num_frames, ours.num_episodes) == (theirs.num_frames, theirs.num_episodes)
        # every sample, delta timestamps padded at both edges of every episode
        assert len(ours) == len(theirs)
        for index in range(len(theirs)):
            assert_samples_equal(ours[index], theirs[index], f"{where} [{index}]")

    # an episode subset: LeRobot's positions over the chosen episodes, ours the same
    theirs = LeRobotDataset(REPO_ID, root=converted_root, episodes=[1, 4], **common)
    with EpisodeStreamDataset(
        REPO_ID, root=source, episodes=[1, 4], cache_dir=datasets_cache_dir, **common
    ) as ours:
        assert len(ours) == len(theirs)
        for index in range(len(theirs)):
            assert_samples_equal(ours[index], theirs[index], f"{where} subset [{index}]")


def test_lerobot_train_on_the_v21_source_equals_training_on_its_conversion(
    tmp_path: Path,
    v21_url: str,
    converted_root: Path,
    datasets_cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def config(root: str, name: str, streaming: bool, steps: int) -> TrainPipelineConfig:
        return _config(
            root,
            tmp_path / name,
            policy=_act_policy(),
            num_workers=0,
            streaming=streaming,
            steps=steps,
        )

    def ours_builder(cfg: TrainPipelineConfig) -> Any:
        return make_dataset(cfg, cache_dir=datasets_cache_dir)

    theirs = _train(
        lerobot_factory.make_dataset,
        config(str(converted_root), "lerobot", False, STEPS),
        monkeypatch,
    )
    ours = _train(ours_builder, config(v21_url, "map", False, STEPS), monkeypatch)
    assert isinstance(theirs.datasets[0], LeRobotDataset)
    assert isinstance(ours.datasets[0], EpisodeStreamDataset)
    assert len(theirs.batches) == len(ours.batches) == STEPS
    for step, (mine, reference) in enumerate(zip(ours.batches, theirs.batches, strict=True)):
        _assert_batch_equal(mine, reference, f"map-style step {step}")
    assert ours.losses == theirs.losses
    assert all(np.isfinite(theirs.losses))

    # the exact-coverage pool on the same source: each sample it drew is LeRobot's
    pool = _train(ours_builder, config(v21_url, "pool", True, 4), monkeypatch)
    assert isinstance(pool.datasets[0], EpisodePoolDataset)
    reference_dataset = theirs.datasets[0]
    drawn: list[int] = []
    for step, batch in enumerate(pool.batches):
        for row, index in enumerate(batch["index"].tolist()):
            sample = {k: v[row] for k, v in batch.items()}
            assert_samples_equal(sample, reference_dataset[index], f"pool {step} @ {index}")
            drawn.append(index)
    assert len(drawn) == len(set(drawn)) == 4 * BATCH_SIZE
    assert len(pool.losses) == 4 and all(np.isfinite(pool.losses))

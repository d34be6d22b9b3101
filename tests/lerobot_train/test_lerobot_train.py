"""LeRobot's own ``train()`` (0.4.x and 0.6.x, ACT and diffusion on CPU) on episodestream
datasets.

Runs in a LeRobot test environment (``make test-lerobot``: 0.4.4; ``make test-lerobot06``:
0.6.1), never in ``.venv``. The same
``TrainPipelineConfig`` trains three times on the repository's LeRobot-written fixture: with
LeRobot's ``LeRobotDataset``, with ``EpisodeStreamDataset`` (map-style, streamed over HTTP)
and with ``EpisodePoolDataset`` (``--dataset.streaming=true``), the latter two through
``episodestream.integrations.lerobot.make_dataset``. Batches and step losses are recorded
from inside LeRobot's loop.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from lerobot.configs.default import DatasetConfig
from lerobot.configs.train import TrainPipelineConfig
from lerobot.datasets import factory as lerobot_factory
from lerobot.datasets import video_utils as lerobot_video_utils
from lerobot.datasets.lerobot_dataset import LeRobotDataset
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
from lerobot.scripts import lerobot_train
from packaging.version import Version

from episodestream import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.integrations.lerobot import (
    make_dataset,
    make_train_eval_datasets,
    use_episodestream,
)

# LeRobot 0.6 changed the surface train() uses: train() builds its datasets with
# make_train_eval_datasets (which calls the factory's make_dataset), the evaluation period is
# env_eval_freq, map-style datasets always go through EpisodeAwareSampler, frames reach the
# loop as uint8, and DataLoader workers are spawned, not forked
LEROBOT_06 = Version(importlib.metadata.version("lerobot")) >= Version("0.6")

REPO_ID = "local/lerobot_sim5"
STEPS = 20
BATCH_SIZE = 4


@dataclasses.dataclass
class TrainRecord:
    """What LeRobot's loop saw: the raw batches (before its pre-processor), the step losses,
    the dataset it built and the episode-aware sampler, when it made one."""

    batches: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    losses: list[float] = dataclasses.field(default_factory=list)
    datasets: list[Any] = dataclasses.field(default_factory=list)
    samplers: list[Any] = dataclasses.field(default_factory=list)


def _act_policy() -> ACTConfig:
    return ACTConfig(
        device="cpu",
        push_to_hub=False,
        pretrained_backbone_weights=None,
        chunk_size=8,
        n_action_steps=8,
        dim_model=32,
        n_heads=2,
        dim_feedforward=64,
        n_encoder_layers=1,
        n_decoder_layers=1,
        n_vae_encoder_layers=1,
        latent_dim=8,
    )


def _diffusion_policy() -> DiffusionConfig:
    return DiffusionConfig(
        device="cpu",
        push_to_hub=False,
        pretrained_backbone_weights=None,
        use_group_norm=True,
        n_obs_steps=2,
        horizon=8,
        n_action_steps=4,
        drop_n_last_frames=3,  # horizon - n_action_steps - n_obs_steps + 1
        down_dims=(16, 32),
        diffusion_step_embed_dim=16,
        spatial_softmax_num_keypoints=8,
        crop_shape=(64, 64),
        num_train_timesteps=10,
    )


def _config(root: str, out: Path, *, policy: Any, num_workers: int, streaming: bool, steps: int):
    no_eval = {"env_eval_freq": 0} if LEROBOT_06 else {"eval_freq": 0}
    return TrainPipelineConfig(
        dataset=DatasetConfig(
            repo_id=REPO_ID, root=root, video_backend="torchcodec", streaming=streaming
        ),
        policy=policy,
        output_dir=out,
        job_name="episodestream-test",
        steps=steps,
        batch_size=BATCH_SIZE,
        num_workers=num_workers,
        seed=1000,
        save_checkpoint=False,
        log_freq=0,
        **no_eval,
    )


def _train(builder: Any, cfg: TrainPipelineConfig, monkeypatch: pytest.MonkeyPatch) -> TrainRecord:
    """LeRobot's train(), unchanged but for the dataset ``builder`` (LeRobot's own
    ``make_dataset`` or ours), with its loop's batches, losses and sampler recorded.

    LeRobot 0.4's train() calls ``make_dataset`` by its own name; 0.6's calls
    ``make_train_eval_datasets``, which calls the factory's ``make_dataset`` (no eval split
    here), so that is where the builder goes."""
    record = TrainRecord()
    original_cycle = lerobot_train.cycle
    original_update = lerobot_train.update_policy
    original_sampler = lerobot_train.EpisodeAwareSampler

    def recording_cycle(loader: Any) -> Iterator[dict[str, Any]]:
        for batch in original_cycle(loader):
            record.batches.append(
                {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            )
            yield batch

    def recording_update(train_metrics: Any, *args: Any, **kwargs: Any) -> Any:
        result = original_update(train_metrics, *args, **kwargs)
        record.losses.append(float(result[0].loss.val))
        return result

    class RecordingSampler(original_sampler):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            record.samplers.append(self)

    def recording_make_dataset(config: TrainPipelineConfig) -> Any:
        dataset = builder(config)
        record.datasets.append(dataset)
        return dataset

    # LeRobot caches open decoders with their file handles per process; forked DataLoader
    # workers (0.4 forks them; 0.6 spawns them by default) would share those handles' offsets
    # (corrupt reads in LeRobot's own run), so each run starts, as a fresh LeRobot process
    # does, with none open
    lerobot_video_utils._default_decoder_cache.clear()
    with monkeypatch.context() as patch:
        patch.setattr(lerobot_train, "cycle", recording_cycle)
        patch.setattr(lerobot_train, "update_policy", recording_update)
        patch.setattr(lerobot_train, "EpisodeAwareSampler", RecordingSampler)
        if LEROBOT_06:
            patch.setattr(lerobot_factory, "make_dataset", recording_make_dataset)
        else:
            patch.setattr(lerobot_train, "make_dataset", recording_make_dataset)
        lerobot_train.train(cfg)
    return record


def _assert_batch_equal(ours: dict[str, Any], theirs: dict[str, Any], where: str) -> None:
    assert set(ours) == set(theirs), where
    for key, value in theirs.items():
        if isinstance(value, torch.Tensor):
            assert ours[key].dtype == value.dtype, f"{where}: {key} dtype"
            assert torch.equal(ours[key], value), f"{where}: {key} differs"
        else:
            assert list(ours[key]) == list(value), f"{where}: {key} differs"


@pytest.fixture(scope="module")
def lerobot_reference_dataset(lerobot_fixture_root: Path) -> LeRobotDataset:
    """LeRobot's dataset with the delta timestamps its ACT config asks for."""
    cfg = _config(
        str(lerobot_fixture_root),
        Path("/nonexistent"),
        policy=_act_policy(),
        num_workers=0,
        streaming=False,
        steps=1,
    )
    return lerobot_factory.make_dataset(cfg)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_act_training_on_streamed_datasets_equals_lerobot(
    num_workers: int,
    tmp_path: Path,
    lerobot_fixture_root: Path,
    lerobot_sim5_url: str,
    lerobot_reference_dataset: LeRobotDataset,
    datasets_cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def config(root: str, name: str, streaming: bool) -> TrainPipelineConfig:
        return _config(
            root,
            tmp_path / name,
            policy=_act_policy(),
            num_workers=num_workers,
            streaming=streaming,
            steps=STEPS,
        )

    theirs = _train(
        lerobot_factory.make_dataset,
        config(str(lerobot_fixture_root), "lerobot", False),
        monkeypatch,
    )

    def ours_builder(cfg: TrainPipelineConfig) -> Any:
        return make_dataset(cfg, cache_dir=datasets_cache_dir)

    ours = _train(ours_builder, config(lerobot_sim5_url, "map", False), monkeypatch)
    pool = _train(ours_builder, config(lerobot_sim5_url, "pool", True), monkeypatch)

    assert isinstance(theirs.datasets[0], LeRobotDataset)
    assert isinstance(ours.datasets[0], EpisodeStreamDataset)
    assert isinstance(pool.datasets[0], EpisodePoolDataset)
    assert len(theirs.batches) == len(ours.batches) == len(pool.batches) == STEPS

    # LeRobot 0.6 samples every map-style dataset through EpisodeAwareSampler (built from our
    # meta for ours) and hands its loop uint8 frames; 0.4 shuffles and hands float32
    samplers = 1 if LEROBOT_06 else 0
    assert len(theirs.samplers) == len(ours.samplers) == samplers and not pool.samplers
    frames = torch.uint8 if LEROBOT_06 else torch.float32
    for run in (theirs, ours, pool):
        assert run.batches[0]["observation.images.cam_high"].dtype == frames

    # map-style: LeRobot's sampler drew the same indices; every batch and every loss equal
    assert torch.equal(ours.batches[0]["index"], theirs.batches[0]["index"])
    for step, (mine, reference) in enumerate(zip(ours.batches, theirs.batches, strict=True)):
        _assert_batch_equal(mine, reference, f"map-style step {step}")
    assert ours.losses == theirs.losses
    assert all(np.isfinite(theirs.losses))

    # pool: every sample it drew equals LeRobotDataset[index]; no frame drawn twice
    drawn: list[int] = []
    for step, batch in enumerate(pool.batches):
        for row, index in enumerate(batch["index"].tolist()):
            reference = lerobot_reference_dataset[index]
            sample = {k: v[row] for k, v in batch.items()}
            for key, value in reference.items():
                if isinstance(value, torch.Tensor):
                    assert torch.equal(sample[key], value), f"pool step {step} {key} @ {index}"
                else:
                    assert sample[key] == value, f"pool step {step} {key} @ {index}"
            drawn.append(index)
    assert len(drawn) == len(set(drawn)) == STEPS * BATCH_SIZE
    assert all(np.isfinite(pool.losses)) and len(pool.losses) == STEPS

    # the LeRobot-shaped surface the loop read
    meta = pool.datasets[0].meta
    assert meta.camera_keys == lerobot_reference_dataset.meta.camera_keys
    assert pool.datasets[0].num_frames == lerobot_reference_dataset.num_frames
    assert pool.datasets[0].num_episodes == lerobot_reference_dataset.num_episodes


def test_diffusion_builds_episode_aware_sampler_from_our_meta(
    tmp_path: Path,
    lerobot_fixture_root: Path,
    lerobot_sim5_url: str,
    datasets_cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = _config(
        lerobot_sim5_url,
        tmp_path / "diffusion",
        policy=_diffusion_policy(),
        num_workers=0,
        streaming=False,
        steps=3,
    )

    def ours_builder(config: TrainPipelineConfig) -> Any:
        return make_dataset(config, cache_dir=datasets_cache_dir)

    record = _train(ours_builder, cfg, monkeypatch)
    assert len(record.samplers) == 1
    episodes = pq.read_table(
        lerobot_fixture_root / "meta/episodes/chunk-000/file-000.parquet",
        columns=["dataset_from_index", "dataset_to_index"],
    ).to_pydict()
    drop = cfg.policy.drop_n_last_frames
    expected = [
        i
        for start, end in zip(
            episodes["dataset_from_index"], episodes["dataset_to_index"], strict=True
        )
        for i in range(start, end - drop)
    ]
    assert record.samplers[0].indices == expected
    assert len(record.losses) == 3 and all(np.isfinite(record.losses))
    # the sampler's indices reached our dataset: every batch index is one it may draw
    drawn = torch.cat([b["index"] for b in record.batches]).tolist()
    assert set(drawn) <= set(expected)
    # two observation steps per sample: frames at t - 1/fps and t, padded at episode starts
    first = record.batches[0]
    assert first["observation.images.cam_high"].shape[1] == 2
    assert first["observation.images.cam_high_is_pad"].shape == (BATCH_SIZE, 2)


def test_use_episodestream_swaps_and_restores_lerobot_factory(
    lerobot_sim5_url: str, datasets_cache_dir: Path
) -> None:
    # the name this LeRobot's train() builds its datasets with
    name = "make_train_eval_datasets" if LEROBOT_06 else "make_dataset"
    original = getattr(lerobot_train, name)
    cfg = _config(
        lerobot_sim5_url,
        Path("/nonexistent"),
        policy=_act_policy(),
        num_workers=0,
        streaming=False,
        steps=1,
    )
    with use_episodestream(cache_dir=datasets_cache_dir):
        assert getattr(lerobot_train, name) is not original
        built = getattr(lerobot_train, name)(cfg)
    assert getattr(lerobot_train, name) is original
    if LEROBOT_06:
        dataset, held_out = built
        assert held_out is None  # no eval_split
        assert not hasattr(lerobot_train, "make_dataset")  # nothing left behind
    else:
        dataset = built
    assert isinstance(dataset, EpisodeStreamDataset)
    # LeRobot's ImageNet override went into our mutable stats, as into LeRobot's own
    mean = dataset.meta.stats["observation.images.cam_high"]["mean"]
    assert isinstance(mean, torch.Tensor) and mean.shape == (3, 1, 1)
    assert dataset.meta.stats["action"]["mean"].dtype == np.float64


@pytest.mark.skipif(not LEROBOT_06, reason="LeRobot 0.6's held-out split (eval_split)")
@pytest.mark.parametrize("streaming", [False, True])
def test_train_eval_split_equals_lerobot(
    streaming: bool,
    lerobot_fixture_root: Path,
    lerobot_sim5_url: str,
    datasets_cache_dir: Path,
) -> None:
    def config(root: str) -> TrainPipelineConfig:
        cfg = _config(
            root,
            Path("/nonexistent"),
            policy=_act_policy(),
            num_workers=0,
            streaming=streaming,
            steps=1,
        )
        cfg.dataset.eval_split = 0.5
        return cfg

    # LeRobot builds LeRobotDatasets from the local copy whatever the streaming flag says
    train_ref, eval_ref = lerobot_factory.make_train_eval_datasets(
        config(str(lerobot_fixture_root))
    )
    train, held_out = make_train_eval_datasets(
        config(lerobot_sim5_url), cache_dir=datasets_cache_dir
    )
    # three tasks over five episodes: per task the last ceil(n / 2) episodes are held out
    assert train.episodes == train_ref.episodes == [0, 1]
    assert held_out.episodes == eval_ref.episodes == [3, 4, 2]
    assert isinstance(train, EpisodePoolDataset if streaming else EpisodeStreamDataset)
    assert isinstance(held_out, EpisodeStreamDataset)
    assert train.num_frames == train_ref.num_frames
    assert held_out.num_frames == eval_ref.num_frames
    assert held_out.num_episodes == eval_ref.num_episodes == 3
    # the same global frame through each one's own index mapping (what LeRobot's sampler uses)
    theirs_at = eval_ref.absolute_to_relative_idx
    ours_at = held_out.absolute_to_relative_idx
    assert set(ours_at) == set(theirs_at)
    for frame in sorted(theirs_at)[::23]:
        reference = eval_ref[theirs_at[frame]]
        sample = held_out[ours_at[frame]]
        for key, value in reference.items():
            if isinstance(value, torch.Tensor):
                assert sample[key].dtype == value.dtype, f"{key} @ {frame}"
                assert torch.equal(sample[key], value), f"{key} @ {frame}"
            else:
                assert sample[key] == value, f"{key} @ {frame}"


REPO_ROOT = Path(__file__).resolve().parents[2]


def _readme_recipe() -> str:
    """The bash block of the README that follows the lerobot-recipe marker, as written."""
    text = (REPO_ROOT / "README.md").read_text()
    marker = text.index("<!-- lerobot-recipe")
    start = text.index("```bash\n", marker) + len("```bash\n")
    return text[start : text.index("```", start)]


def _lerobot_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("EPISODESTREAM_TEST_ENV", None)
    return env


@pytest.mark.parametrize("streaming", [False, True])
def test_readme_recipe_runs_as_written(
    streaming: bool, tmp_path: Path, lerobot_sim5_url: str
) -> None:
    recipe = _readme_recipe()
    if streaming:  # the README's one-flag variant
        recipe = recipe.rstrip() + " --dataset.streaming=true\n"
    env = _lerobot_env()
    env.update(ROOT=lerobot_sim5_url, OUT=str(tmp_path / "out"), HOME=str(tmp_path))
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", recipe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    log = result.stdout + result.stderr
    assert "End of training" in log
    kind = "EpisodePoolDataset" if streaming else "EpisodeStreamDataset"
    assert kind in log  # the dataset LeRobot's train() built and logged
    assert (tmp_path / "out/checkpoints/last/pretrained_model/model.safetensors").is_file()


def test_example_script_trains_from_a_streamed_root(tmp_path: Path, lerobot_sim5_url: str) -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "examples/train_lerobot.py"),
            "--root",
            lerobot_sim5_url,
            "--repo-id",
            "local/lerobot_sim5",
            "--output-dir",
            str(tmp_path / "out"),
            "--steps",
            "3",
            "--batch-size",
            "4",
            "--from-scratch",
            "--streaming",
        ],
        cwd=tmp_path,
        env=_lerobot_env() | {"HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert (tmp_path / "out/checkpoints/last/pretrained_model/model.safetensors").is_file()

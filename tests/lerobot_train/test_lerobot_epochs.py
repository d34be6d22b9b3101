"""LeRobot's train() past one epoch of the pool: Accelerate calls ``set_epoch`` on the
dataset at every pass of the loader, and each pass is an exact-coverage epoch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from lerobot.configs.train import TrainPipelineConfig
from lerobot.configs.types import FeatureType, PolicyFeature

from episodestream.integrations.lerobot import make_dataset
from tests.lerobot_train.test_lerobot_train import _act_policy, _config, _train

FRAMES = 244  # lerobot_sim5
BATCH_SIZE = 61  # four full batches per epoch with one reading process


def test_pool_epochs_under_accelerate(
    tmp_path: Path,
    lerobot_sim5_url: str,
    datasets_cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    per_epoch = FRAMES // BATCH_SIZE
    extra = 1
    # the policy looks at one camera (a third of the backbone's work): this test is about
    # the loader, which still decodes and delivers all three
    policy = _act_policy()
    policy.input_features = {
        "observation.state": PolicyFeature(FeatureType.STATE, (6,)),
        "observation.images.cam_high": PolicyFeature(FeatureType.VISUAL, (3, 96, 128)),
    }
    cfg = _config(
        lerobot_sim5_url,
        tmp_path / "pool",
        policy=policy,
        num_workers=0,
        streaming=True,
        steps=per_epoch + extra,
    )
    cfg.batch_size = BATCH_SIZE

    def ours(config: TrainPipelineConfig) -> Any:
        return make_dataset(config, cache_dir=datasets_cache_dir, pool_size=2)

    record = _train(ours, cfg, monkeypatch)
    indices = [batch["index"] for batch in record.batches]
    first = torch.cat(indices[:per_epoch]).tolist()
    second = torch.cat(indices[per_epoch:]).tolist()
    assert sorted(first) == list(range(FRAMES))  # epoch 0: every frame exactly once
    assert len(second) == extra * BATCH_SIZE == len(set(second))
    # Accelerate's set_epoch(1) reached the pool: the second pass is another permutation
    assert second != first[: len(second)]
    assert record.datasets[0].epoch == 1

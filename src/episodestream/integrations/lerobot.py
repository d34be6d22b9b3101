"""LeRobot's own training on a streamed dataset.

LeRobot's ``make_dataset(cfg)`` hard-codes ``LeRobotDataset`` / ``StreamingLeRobotDataset``.
:func:`make_dataset` builds ours from the same ``TrainPipelineConfig`` with the same meaning
(``cfg.dataset.root`` may be a URL: ``https://...``, ``hf://datasets/...``, ``s3://...``;
without it ``cfg.dataset.repo_id`` streams from the Hub), so LeRobot's ``train()`` runs
unchanged once it uses it::

    from lerobot.scripts import lerobot_train
    from episodestream.integrations.lerobot import make_dataset

    lerobot_train.make_dataset = make_dataset
    lerobot_train.train(cfg)

From the command line, ``python -m episodestream.integrations.lerobot`` takes
``lerobot-train``'s arguments and does the same. ``--dataset.streaming=true`` gives the
exact-coverage :class:`~episodestream.EpisodePoolDataset`, otherwise the map-style
:class:`~episodestream.EpisodeStreamDataset`. Works with LeRobot 0.4.x and 0.6.x.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Iterator
from typing import Any

import torch

from episodestream.datasets import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.datasets._compat import lerobot_meta, resolve_dataset_name
from episodestream.errors import ConfigError
from episodestream.lerobot import LeRobotMetadata, load_dataset_meta
from episodestream.storage import open_reader

__all__ = ["load_metadata", "main", "make_dataset", "use_episodestream"]

logger = logging.getLogger(__name__)

# LeRobot's factory overrides camera stats with ImageNet's when use_imagenet_stats is on
_IMAGENET_STATS = {
    "mean": [[[0.485]], [[0.456]], [[0.406]]],
    "std": [[[0.229]], [[0.224]], [[0.225]]],
}


def load_metadata(
    repo_id: str | None, root: str | None = None, revision: str | None = None
) -> LeRobotMetadata:
    """Only the metadata (LeRobot's ``LeRobotDatasetMetadata(repo_id, root, revision)``)."""
    name = resolve_dataset_name(repo_id, root)
    location = name.location
    if revision is not None and location.kind == "hub":
        from dataclasses import replace

        location = replace(location, revision=revision)
    with open_reader(location) as reader:
        meta = load_dataset_meta(reader, root=location.url)
    return lerobot_meta(meta, name, revision)


def _lerobot_factory() -> Any:
    try:
        from lerobot.datasets import factory
    except ImportError as error:  # pragma: no cover - exercised only without LeRobot
        raise ConfigError(
            "episodestream.integrations.lerobot needs LeRobot installed (pip install lerobot)"
        ) from error
    return factory


def _returns_uint8(factory: Any) -> bool:
    """Whether this LeRobot's datasets return uint8 frames to its training (0.6 does)."""
    return "return_uint8" in inspect.signature(factory.LeRobotDataset.__init__).parameters


def make_dataset(cfg: Any, **options: Any) -> EpisodeStreamDataset | EpisodePoolDataset:
    """Our dataset for LeRobot's ``TrainPipelineConfig``, as LeRobot's ``make_dataset`` builds
    its own: same delta timestamps (from the policy), image transforms, episodes, revision,
    tolerance and ImageNet stats override.

    Args:
        cfg: LeRobot's ``TrainPipelineConfig``.
        options: further keyword arguments of the dataset class (``byte_budget=``,
            ``pool_size=``, ``cache_dir=``, ...).

    Raises:
        ConfigError: LeRobot is not installed, or ``cfg.dataset.repo_id`` is a list
            (LeRobot's multi-dataset, which LeRobot itself does not train on either).
    """
    factory = _lerobot_factory()
    dataset_cfg = cfg.dataset
    if not isinstance(dataset_cfg.repo_id, str):
        raise ConfigError(
            "cfg.dataset.repo_id must be one dataset (multi-dataset is not supported)"
        )
    image_transforms = (
        factory.ImageTransforms(dataset_cfg.image_transforms)
        if dataset_cfg.image_transforms.enable
        else None
    )
    meta = load_metadata(dataset_cfg.repo_id, dataset_cfg.root, dataset_cfg.revision)
    trainable = getattr(cfg, "trainable_config", None) or cfg.policy
    delta_timestamps = factory.resolve_delta_timestamps(trainable, meta)
    common: dict[str, Any] = {
        "root": dataset_cfg.root,
        "episodes": dataset_cfg.episodes,
        "delta_timestamps": delta_timestamps,
        "image_transforms": image_transforms,
        "revision": dataset_cfg.revision,
        "tolerance_s": cfg.tolerance_s,
        "return_uint8": _returns_uint8(factory),
        "repo_type": getattr(dataset_cfg, "repo_type", "dataset"),
    }
    if getattr(dataset_cfg, "depth_output_unit", None) is not None and meta.depth_keys:
        common["depth_output_unit"] = dataset_cfg.depth_output_unit
    dataset: EpisodeStreamDataset | EpisodePoolDataset
    if dataset_cfg.streaming:
        dataset = EpisodePoolDataset(
            dataset_cfg.repo_id,
            seed=cfg.seed if cfg.seed is not None else 0,
            **common,
            **options,
        )
    else:
        dataset = EpisodeStreamDataset(
            dataset_cfg.repo_id, video_backend=dataset_cfg.video_backend, **common, **options
        )
    if dataset_cfg.use_imagenet_stats and dataset.meta.stats is not None:
        depth = set(dataset.meta.depth_keys)
        for key in dataset.meta.camera_keys:
            if key in depth:
                continue
            for stats_type, stats in _IMAGENET_STATS.items():
                dataset.meta.stats.setdefault(key, {})[stats_type] = torch.tensor(
                    stats, dtype=torch.float32
                )
    logger.info("LeRobot trains on %r", dataset)
    return dataset


@contextlib.contextmanager
def use_episodestream(**options: Any) -> Iterator[None]:
    """Within this block, LeRobot's ``train()`` builds its dataset with :func:`make_dataset`
    (``options`` go to the dataset class); LeRobot's own factory is restored afterwards."""
    from lerobot.scripts import lerobot_train

    original = lerobot_train.make_dataset

    def build(cfg: Any) -> EpisodeStreamDataset | EpisodePoolDataset:
        return make_dataset(cfg, **options)

    lerobot_train.make_dataset = build
    try:
        yield
    finally:
        lerobot_train.make_dataset = original


def main() -> None:
    """``lerobot-train`` with episodestream datasets: same arguments."""
    from lerobot.scripts import lerobot_train

    with use_episodestream():
        lerobot_train.main()


if __name__ == "__main__":
    main()

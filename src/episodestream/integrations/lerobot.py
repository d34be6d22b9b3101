"""LeRobot's own training on a streamed dataset.

LeRobot's ``make_dataset(cfg)`` hard-codes ``LeRobotDataset`` / ``StreamingLeRobotDataset``.
:func:`make_dataset` builds ours from the same ``TrainPipelineConfig`` with the same meaning
(``cfg.dataset.root`` may be a URL: ``https://...``, ``hf://datasets/...``, ``s3://...``;
without it ``cfg.dataset.repo_id`` streams from the Hub), so LeRobot's ``train()`` runs
unchanged once it uses it::

    from lerobot.scripts import lerobot_train
    from episodestream.integrations.lerobot import use_episodestream

    with use_episodestream():
        lerobot_train.train(cfg)

(LeRobot 0.4's ``train()`` calls ``make_dataset``; 0.6's calls ``make_train_eval_datasets``,
provided here too; :func:`use_episodestream` swaps whichever this LeRobot uses.)
From the command line, ``python -m episodestream.integrations.lerobot`` takes
``lerobot-train``'s arguments and does the same. ``--dataset.streaming=true`` gives the
exact-coverage :class:`~episodestream.EpisodePoolDataset`, otherwise the map-style
:class:`~episodestream.EpisodeStreamDataset`. Works with LeRobot 0.4.x and 0.6.x.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from episodestream.datasets import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.datasets._compat import check_arguments, lerobot_meta, resolve_dataset_name
from episodestream.errors import ConfigError
from episodestream.lerobot import LeRobotMetadata, open_dataset_files

__all__ = [
    "load_metadata",
    "main",
    "make_dataset",
    "make_train_eval_datasets",
    "use_episodestream",
]

logger = logging.getLogger(__name__)

# LeRobot's factory overrides camera stats with ImageNet's when use_imagenet_stats is on
_IMAGENET_STATS = {
    "mean": [[[0.485]], [[0.456]], [[0.406]]],
    "std": [[[0.229]], [[0.224]], [[0.225]]],
}


def load_metadata(
    repo_id: str | None,
    root: str | None = None,
    revision: str | None = None,
    *,
    reader_options: Mapping[str, Any] | None = None,
) -> LeRobotMetadata:
    """Only the metadata (LeRobot's ``LeRobotDatasetMetadata(repo_id, root, revision)``);
    ``reader_options`` as the dataset would get them (a token, storage options)."""
    name = resolve_dataset_name(repo_id, root)
    location = name.location
    if revision is not None and location.kind == "hub":
        from dataclasses import replace

        location = replace(location, revision=revision)
    reader, meta = open_dataset_files(location, reader_options=reader_options)
    reader.close()
    return lerobot_meta(meta, name, revision)


def _reader_options(options: Mapping[str, Any]) -> Any:
    """The reader options the dataset will use, for reading its metadata first: given flat,
    in ``source=`` or in ``options=``."""
    if options.get("reader_options") is not None:
        return options["reader_options"]
    for group in (options.get("source"), options.get("options")):
        if group is not None:
            return group.reader_options
    return None


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


def _image_transforms(factory: Any, dataset_cfg: Any) -> Any:
    if not dataset_cfg.image_transforms.enable:
        return None
    return factory.ImageTransforms(dataset_cfg.image_transforms)


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
    return _build(cfg, factory, streaming=cfg.dataset.streaming, **options)


def _build(
    cfg: Any,
    factory: Any,
    *,
    streaming: bool,
    episodes: Any = None,
    transforms: bool = True,
    meta: LeRobotMetadata | None = None,
    **options: Any,
) -> EpisodeStreamDataset | EpisodePoolDataset:
    """One dataset for ``cfg``: ``episodes`` replaces ``cfg.dataset.episodes`` when given,
    ``transforms=False`` leaves image transforms out (LeRobot's held-out split)."""
    dataset_cfg = cfg.dataset
    if not isinstance(dataset_cfg.repo_id, str):
        raise ConfigError(
            "cfg.dataset.repo_id must be one dataset (multi-dataset is not supported)"
        )
    # every option is checked (ConfigError) before the first request for the metadata
    chosen = {} if episodes is None else {"episodes": episodes}
    check_arguments(
        EpisodePoolDataset if streaming else EpisodeStreamDataset, {**options, **chosen}
    )
    image_transforms = _image_transforms(factory, dataset_cfg) if transforms else None
    if meta is None:
        meta = load_metadata(
            dataset_cfg.repo_id,
            dataset_cfg.root,
            dataset_cfg.revision,
            reader_options=_reader_options(options),
        )
    trainable = getattr(cfg, "trainable_config", None) or cfg.policy
    delta_timestamps = factory.resolve_delta_timestamps(trainable, meta)
    common: dict[str, Any] = {
        "root": dataset_cfg.root,
        "episodes": dataset_cfg.episodes if episodes is None else episodes,
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
    if streaming:
        # LeRobot's seed orders the pool unless the caller chose one
        pool_options = {"seed": cfg.seed if cfg.seed is not None else 0, **options}
        dataset = EpisodePoolDataset(dataset_cfg.repo_id, **common, **pool_options)
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


def split_episodes_by_task(
    episodes: list[int], episode_tasks: dict[int, Any], eval_split: float
) -> tuple[list[int], list[int]]:
    """LeRobot 0.6's held-out split: per task (an episode's first task, "" without one; tasks
    in order of first appearance), the last ``ceil(n * eval_split)`` of its ``n`` episodes are
    held out. Returns (train, eval) episode indices, each grouped by task.

    Raises:
        ConfigError: no training episode is left.
    """
    by_task: dict[Any, list[int]] = {}
    for episode in episodes:
        tasks = episode_tasks[episode]
        by_task.setdefault(tasks[0] if tasks else "", []).append(episode)
    train: list[int] = []
    held_out: list[int] = []
    for group in by_task.values():
        keep = len(group) - math.ceil(len(group) * eval_split)
        train.extend(group[:keep])
        held_out.extend(group[keep:])
    if not train:
        raise ConfigError(f"eval_split={eval_split} leaves no training episode of {len(episodes)}")
    return train, held_out


def make_train_eval_datasets(
    cfg: Any, **options: Any
) -> tuple[EpisodeStreamDataset | EpisodePoolDataset, EpisodeStreamDataset | None]:
    """LeRobot 0.6's ``make_train_eval_datasets(cfg)`` with our datasets: without
    ``cfg.dataset.eval_split`` the dataset :func:`make_dataset` builds and no held-out one;
    with it, the episodes are split per task as LeRobot splits them
    (:func:`split_episodes_by_task`): the training dataset is the kind :func:`make_dataset`
    builds (the pool with ``--dataset.streaming=true``) over the training episodes, the held-out
    one a map-style :class:`~episodestream.EpisodeStreamDataset` without image transforms.

    Raises:
        ConfigError: as :func:`make_dataset`; or the split leaves no training episode.
    """
    factory = _lerobot_factory()
    eval_split = getattr(cfg.dataset, "eval_split", 0.0) or 0.0
    if eval_split == 0.0:
        return make_dataset(cfg, **options), None
    if not isinstance(cfg.dataset.repo_id, str):
        raise ConfigError(
            "cfg.dataset.repo_id must be one dataset (multi-dataset is not supported)"
        )
    check_arguments(EpisodePoolDataset if cfg.dataset.streaming else EpisodeStreamDataset, options)
    meta = load_metadata(
        cfg.dataset.repo_id,
        cfg.dataset.root,
        cfg.dataset.revision,
        reader_options=_reader_options(options),
    )
    typed = meta.dataset_meta.episodes
    chosen = cfg.dataset.episodes
    episodes = [int(e) for e in (chosen if chosen is not None else typed.episode_index)]
    tasks = dict(zip(typed.episode_index.tolist(), typed.tasks, strict=True))
    train, held_out = split_episodes_by_task(episodes, tasks, eval_split)
    logger.info(
        "train/eval split: %d train, %d eval episodes (eval_split=%s)",
        len(train),
        len(held_out),
        eval_split,
    )
    streaming = cfg.dataset.streaming
    train_dataset = _build(cfg, factory, streaming=streaming, episodes=train, meta=meta, **options)
    eval_options = {k: v for k, v in options.items() if k not in _POOL_ONLY}
    eval_dataset = _build(
        cfg,
        factory,
        streaming=False,
        episodes=held_out,
        transforms=False,
        meta=meta,
        **eval_options,
    )
    assert isinstance(eval_dataset, EpisodeStreamDataset)
    return train_dataset, eval_dataset


# options of EpisodePoolDataset that the map-style held-out dataset does not take
_POOL_ONLY = frozenset(
    {
        "pool_size",
        "prefetch_episodes",
        "seed",
        "shuffle",
        "decode_threads",
        "max_pending_samples",
        "rank",
        "world_size",
        "unit",
        "window_frames",
        "decoded_budget",
        "order",
    }
)


@contextlib.contextmanager
def use_episodestream(**options: Any) -> Iterator[None]:
    """Within this block, LeRobot's ``train()`` builds its datasets with ours (``options`` go to
    the dataset class): :func:`make_dataset` in LeRobot 0.4.x, :func:`make_train_eval_datasets`
    in 0.6.x (whichever ``lerobot_train`` calls); LeRobot's own are restored afterwards."""
    from lerobot.scripts import lerobot_train

    def build(cfg: Any) -> EpisodeStreamDataset | EpisodePoolDataset:
        return make_dataset(cfg, **options)

    def build_train_eval(
        cfg: Any,
    ) -> tuple[EpisodeStreamDataset | EpisodePoolDataset, EpisodeStreamDataset | None]:
        return make_train_eval_datasets(cfg, **options)

    ours = {"make_dataset": build, "make_train_eval_datasets": build_train_eval}
    originals = {
        name: getattr(lerobot_train, name) for name in ours if hasattr(lerobot_train, name)
    }
    if not originals:  # pragma: no cover - a LeRobot whose train() builds datasets otherwise
        raise ConfigError(
            "this LeRobot's lerobot_train has neither make_dataset nor make_train_eval_datasets"
        )
    for name in originals:
        setattr(lerobot_train, name, ours[name])
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(lerobot_train, name, original)


def main() -> None:
    """``lerobot-train`` with episodestream datasets: same arguments."""
    from lerobot.scripts import lerobot_train

    with use_episodestream():
        lerobot_train.main()


if __name__ == "__main__":
    main()

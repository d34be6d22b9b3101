"""LeRobot's dataset constructor arguments, mapped onto ours.

LeRobot's ``make_dataset`` builds ``LeRobotDataset(repo_id, root=..., episodes=...,
delta_timestamps=..., image_transforms=..., revision=..., video_backend=..., tolerance_s=...)``
(and ``StreamingLeRobotDataset`` with ``max_num_shards``; 0.6 adds ``return_uint8``,
``repo_type``, ``depth_output_unit``). Our datasets accept the same keywords with the same
meaning, so a LeRobot user swaps the class and nothing else.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from episodestream._checks import check_options
from episodestream.datasets._options import StreamOptions, resolve_stream_options
from episodestream.decode import BackendName
from episodestream.errors import ConfigError, ConfigTypeError
from episodestream.lerobot import DatasetMeta, LeRobotMetadata
from episodestream.storage import BaseRangeReader, Location

__all__ = [
    "LEROBOT_NO_EFFECT_ARGS",
    "DatasetName",
    "LeRobotSurface",
    "check_depth",
    "dataset_options",
    "decoder_for_backend",
    "lerobot_meta",
    "resolve_dataset_name",
    "split_lerobot_args",
]

logger = logging.getLogger(__name__)

# "org/name" as the Hub spells repository ids
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*/[A-Za-z0-9][A-Za-z0-9._\-]*$")

#: LeRobot constructor arguments that steer downloading, caching or recording; a stream has
#: none of those, so they are accepted and have no effect.
LEROBOT_NO_EFFECT_ARGS = frozenset(
    {
        "force_cache_sync",
        "download_videos",
        "batch_encoding_size",
        "vcodec",
        "max_num_shards",
        "buffer_size",
        "streaming",
        "metadata_buffer_size",
    }
)

_VIDEO_BACKENDS: dict[str | None, BackendName] = {
    None: "auto",
    "torchcodec": "torchcodec",
    "pyav": "pyav",
}


@dataclass(frozen=True, slots=True)
class DatasetName:
    """Where a dataset streams from and what LeRobot calls it.

    Attributes:
        location: the root to open (path, URL, ``hf://``, ...).
        repo_id: LeRobot's name for the dataset (``org/name``; for roots given without one, the
            root's last two path parts).
        root: what ``meta.root`` reports: a ``Path`` for local roots, else the URL.
    """

    location: Location
    repo_id: str
    root: str | Path


def _looks_like_root(value: str) -> bool:
    return "://" in value or value.startswith(("/", ".", "~")) or os.path.exists(value)


def resolve_dataset_name(
    repo_id: str | os.PathLike[str] | Location | None,
    root: str | os.PathLike[str] | Location | None,
    *,
    repo_type: str = "dataset",
    reader: BaseRangeReader | None = None,
) -> DatasetName:
    """Accept both our spelling (``Dataset(root)``) and LeRobot's (``Dataset(repo_id,
    root=...)``; without ``root``, ``repo_id`` streams from the Hub). A dataset handed a
    ``reader`` and neither is named by the reader's root.

    Raises:
        ConfigError: neither given (nor a reader), or ``repo_type`` unknown.
        ConfigTypeError: ``reader`` is not a :class:`BaseRangeReader` (the one check of it:
            the datasets name themselves before they open anything through it).
    """
    if repo_type not in ("dataset", "bucket"):
        raise ConfigError(f"repo_type must be 'dataset' or 'bucket', got {repo_type!r}")
    if reader is not None and not isinstance(reader, BaseRangeReader):
        raise ConfigTypeError(
            f"reader must be a RangeReader (a BaseRangeReader subclass), "
            f"got {type(reader).__name__}"
        )
    if root is None and repo_id is None and reader is not None:
        root = reader.root
    if root is None:
        if repo_id is None:
            raise ConfigError("a dataset needs a root (path or URL) or a repo_id")
        if isinstance(repo_id, str) and _REPO_ID.match(repo_id) and not _looks_like_root(repo_id):
            kind = "buckets" if repo_type == "bucket" else "datasets"
            location = Location.parse(f"hf://{kind}/{repo_id}")
            return DatasetName(location, repo_id, location.url)
        root, repo_id = repo_id, None
    location = Location.parse(root)
    if repo_id is not None and not isinstance(repo_id, str):
        raise ConfigError(f"repo_id must be a str like 'org/name', got {repo_id!r}")
    if repo_id is None:
        if location.kind == "hub" and location.repo_id:
            repo_id = location.repo_id
        else:
            parts = [p for p in location.path.rstrip("/").split("/") if p]
            repo_id = "/".join(parts[-2:]) if parts else location.url
    shown: str | Path = Path(location.path) if location.kind == "local" else location.url
    return DatasetName(location, repo_id, shown)


def decoder_for_backend(video_backend: str | None, decoder: BackendName) -> BackendName:
    """LeRobot's ``video_backend`` as our ``decoder`` (``decoder`` wins when both are set).

    Raises:
        ConfigError: a backend we do not decode with.
    """
    if video_backend is None or decoder != "auto":
        return decoder
    if video_backend not in _VIDEO_BACKENDS:
        raise ConfigError(
            f"video_backend={video_backend!r} is not supported: use 'torchcodec' or 'pyav'"
        )
    return _VIDEO_BACKENDS[video_backend]


def split_lerobot_args(options: Mapping[str, Any], what: str) -> dict[str, Any]:
    """Drop the LeRobot arguments that have no effect on a stream (logged once at debug)."""
    ignored = sorted(name for name in options if name in LEROBOT_NO_EFFECT_ARGS)
    if ignored:
        logger.debug("%s: LeRobot argument(s) %s have no effect when streaming", what, ignored)
    kept = {name: value for name, value in options.items() if name not in LEROBOT_NO_EFFECT_ARGS}
    # the rest become StreamOptions: name a typo here, not as StreamOptions.__init__'s TypeError
    check_options(what, kept, (f.name for f in fields(StreamOptions)))
    return kept


def dataset_options(
    what: str,
    options: StreamOptions | None,
    keywords: Mapping[str, Any],
    *,
    revision: str | None,
    video_backend: str | None,
    decoder: BackendName,
    device: str,
    byte_budget: int | str,
    tolerance_s: float | None,
    default_byte_budget: int | str,
) -> StreamOptions:
    """A dataset's :class:`StreamOptions` from its constructor: ``options=`` as given, or built
    from the shortcut parameters and the other keyword options (LeRobot's no-effect arguments
    dropped, LeRobot's ``video_backend`` and ``tolerance_s`` mapped)."""
    kept = split_lerobot_args(keywords, what)
    if tolerance_s is not None:
        kept["tolerance_s"] = tolerance_s
    shortcuts = {
        "revision": revision,
        "decoder": decoder_for_backend(video_backend, decoder),
        "device": device,
        "byte_budget": byte_budget,
    }
    defaults = {"revision": None, "decoder": "auto", "device": "cpu"}
    return resolve_stream_options(
        options,
        {**shortcuts, **kept},
        {**defaults, "byte_budget": default_byte_budget},
        what=what,
    )


def lerobot_meta(meta: DatasetMeta, name: DatasetName, revision: str | None) -> LeRobotMetadata:
    return LeRobotMetadata(meta, repo_id=name.repo_id, root=name.root, revision=revision)


def check_depth(meta: LeRobotMetadata, depth_output_unit: str | None) -> None:
    """Depth-map cameras are not converted between units; refuse them rather than return
    values in another unit than asked for."""
    if depth_output_unit is not None and meta.depth_keys:
        raise ConfigError(
            f"depth_output_unit={depth_output_unit!r}: depth-map cameras {meta.depth_keys} are "
            "streamed as stored, without unit conversion"
        )


class LeRobotSurface:
    """What LeRobot's training reads from a dataset besides its samples, shared by both
    dataset classes (which set ``name``, ``options`` and ``dataset``, then call
    :meth:`_describe_for_lerobot`)."""

    name: DatasetName
    options: StreamOptions
    dataset: Any  # datasets._engine.OpenedDataset (an upper module; typed loosely here)
    _meta: LeRobotMetadata
    _requested_episodes: list[int] | None

    def _describe_for_lerobot(self, episodes: object | None, depth_output_unit: str | None) -> None:
        """Once ``dataset`` is open: the selection as LeRobot's ``dataset.episodes`` reports
        it (validated by opening), and LeRobot's metadata; refuses depth maps in another unit
        (:func:`check_depth`), closing the dataset's reader on any refusal."""
        self._requested_episodes = (
            None if episodes is None else self.dataset.episode_ids.astype(int).tolist()
        )
        try:
            self._meta = lerobot_meta(self.dataset.meta, self.name, self.options.revision)
            check_depth(self._meta, depth_output_unit)
        except BaseException:
            self.dataset.close()
            raise

    @property
    def meta(self) -> LeRobotMetadata:
        """LeRobot's ``LeRobotDatasetMetadata`` surface (features, stats, episodes, ...);
        our typed metadata is ``meta.dataset_meta``."""
        return self._meta

    @property
    def repo_id(self) -> str:
        return self.name.repo_id

    @property
    def root(self) -> str | Path:
        return self.name.root

    @property
    def revision(self) -> str:
        return self._meta.revision

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self._meta.features

    @property
    def fps(self) -> int | float:
        return self._meta.fps

    @property
    def num_frames(self) -> int:
        """Frames of the selected episodes (for the pool: all ranks together, one epoch)."""
        return int(self.dataset.num_frames)

    @property
    def num_episodes(self) -> int:
        return len(self.dataset.episode_ids)

    @property
    def episodes(self) -> list[int] | None:
        """The episodes asked for, as given (None: all), like LeRobot's."""
        return self._requested_episodes

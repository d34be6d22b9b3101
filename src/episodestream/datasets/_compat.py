"""LeRobot's dataset constructor arguments, mapped onto ours.

LeRobot's ``make_dataset`` builds ``LeRobotDataset(repo_id, root=..., episodes=...,
delta_timestamps=..., image_transforms=..., revision=..., video_backend=..., tolerance_s=...)``
(and ``StreamingLeRobotDataset`` with ``max_num_shards``; 0.6 adds ``return_uint8``,
``repo_type``, ``depth_output_unit``). Our datasets accept the same keywords with the same
meaning, so a LeRobot user swaps the class and nothing else.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from episodestream._checks import check_options
from episodestream.datasets._groups import Order, Resources, SampleOptions, check_bool
from episodestream.datasets._options import (
    RESOURCE_FIELDS,
    SAMPLE_FIELDS,
    SOURCE_FIELDS,
    StreamOptions,
)
from episodestream.datasets._source import REPO_ID, Source, looks_like_root
from episodestream.decode import BackendName
from episodestream.errors import ConfigError, ConfigTypeError
from episodestream.lerobot import DatasetMeta, LeRobotMetadata
from episodestream.storage import BaseRangeReader, Location

__all__ = [
    "LEROBOT_NO_EFFECT_ARGS",
    "DatasetConfig",
    "DatasetName",
    "LeRobotSurface",
    "check_arguments",
    "check_depth",
    "dataset_config",
    "decoder_for_backend",
    "lerobot_meta",
    "one_of",
    "resolve_dataset_name",
    "split_lerobot_args",
    "stream_options_of",
]

logger = logging.getLogger(__name__)


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
        if isinstance(repo_id, str) and REPO_ID.match(repo_id) and not looks_like_root(repo_id):
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
    # the rest are StreamOptions: name a typo here, not as a TypeError of a group
    check_options(what, kept, (f.name for f in fields(StreamOptions)))
    return kept


@dataclass(frozen=True, slots=True)
class DatasetConfig:
    """A dataset's configuration, resolved from whatever way it was given.

    Attributes:
        source, resources, samples, order: the option groups (``order`` is the default one for
            the map-style dataset, which has no order of its own).
        name: where the dataset streams from and what LeRobot calls it.
        options: ``options=`` as given, else the groups seen as a :class:`StreamOptions`.
    """

    source: Source
    resources: Resources
    samples: SampleOptions
    order: Order
    name: DatasetName | None
    options: StreamOptions


def stream_options_of(
    source: Source, resources: Resources, samples: SampleOptions
) -> StreamOptions:
    """The groups' values as a :class:`StreamOptions` (what ``ds.options`` shows)."""
    values = {name: getattr(source, name) for name in SOURCE_FIELDS}
    values.update({name: getattr(resources, name) for name in RESOURCE_FIELDS})
    values.update({name: getattr(samples, name) for name in SAMPLE_FIELDS})
    return StreamOptions(**values)


_GROUP_ARGUMENT = {
    Source: "source",
    Resources: "resources",
    SampleOptions: "samples",
    Order: "order",
}
_OPTION_FIELDS = {Source: SOURCE_FIELDS, Resources: RESOURCE_FIELDS, SampleOptions: SAMPLE_FIELDS}


def _merged_group(
    what: str,
    cls: type[Any],
    given: Any,
    options: StreamOptions | None,
    keywords: Mapping[str, Any],
) -> Any:
    """One group from the object given for it (``given``), the ``options=`` fields it owns and
    the flat keywords naming its fields; a setting given twice with two values is refused."""
    if given is not None and not isinstance(given, cls):
        raise ConfigTypeError(
            f"{what}: {_GROUP_ARGUMENT[cls]} must be a {cls.__name__}, got {type(given).__name__}"
        )
    names = {f.name for f in fields(cls)}
    mine = {name: value for name, value in keywords.items() if name in names}
    # (where, the group holding its values, the fields it speaks for); each checked in full
    said: list[tuple[str, Any, set[str]]] = []
    if given is not None:
        said.append((f"{_GROUP_ARGUMENT[cls]}=", given, names))
    if options is not None and cls in _OPTION_FIELDS:
        owned = _OPTION_FIELDS[cls]
        said.append(("options=", cls(**options.group_fields(owned)), set(owned)))
    if mine:
        said.append(("keywords", cls(**mine), set(mine)))
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    clashes: dict[tuple[str, str], list[str]] = {}
    for where, group, speaks_for in said:
        for name in sorted(speaks_for):
            value = getattr(group, name)
            if name in values and values[name] != value:
                clashes.setdefault((origin[name], where), []).append(name)
            elif name not in values:
                values[name], origin[name] = value, where
    for (first, second), clashing in clashes.items():
        listed = ", ".join(clashing)
        if (first, second) == ("options=", "keywords"):
            raise ConfigError(
                f"{what}: options= already says how to stream; set {listed} in the "
                "StreamOptions (dataclasses.replace) instead of as keyword arguments"
            )
        second_shown = "as keyword arguments" if second == "keywords" else f"in {second}"
        raise ConfigError(
            f"{what}: {listed} given twice with different values, in {first} and "
            f"{second_shown}: give each setting once"
        )
    if given is not None and len(said) == 1:
        return given
    return cls(**values)


def one_of(name: str, value: Any, alias: str, alias_value: Any) -> Any:
    """The value of an argument that has two spellings (``samples=``/``sample_options=``)."""
    if value is not None and alias_value is not None and value != alias_value:
        raise ConfigError(f"{name}= and {alias}= are one argument: give one of them")
    return value if value is not None else alias_value


def _check_reader_alone(source: Source) -> None:
    """A dataset handed an open reader must not be asked to open another."""
    opened_here = {
        "revision": source.revision,
        "data_root": source.data_root,
        "reader_options": source.reader_options.given() or None,
        "data_reader_options": source.data_reader_options,
    }
    given = sorted(name for name, value in opened_here.items() if value is not None)
    if given:
        raise ConfigError(
            f"reader= is already open: {', '.join(given)} would open another; "
            "open the reader with them instead"
        )


def dataset_config(
    what: str,
    *,
    first: object,
    root: object,
    source: object,
    resources: object,
    samples: object,
    order: object,
    options: object,
    keywords: Mapping[str, Any],
    extra: Mapping[str, Any],
    lerobot: Mapping[str, Any],
    reader: BaseRangeReader | None,
    named: bool = True,
) -> DatasetConfig:
    """The one way a dataset's arguments become its option groups (both dataset classes).

    Args:
        what: the class, for messages.
        first, root: the first positional argument (a root, a LeRobot ``repo_id`` or a
            :class:`Source`) and LeRobot's ``root=``.
        source, resources, samples, order: the groups as given (None: not given).
        options: ``options=`` (a :class:`StreamOptions`) or None.
        keywords: the constructor's own flat keywords (those left at None are not given).
        extra: its ``**options``: StreamOptions' fields, and LeRobot's arguments that have no
            effect on a stream (dropped).
        lerobot: LeRobot's mapped keywords: ``video_backend`` (our ``decoder`` when that is
            "auto") and ``return_uint8`` (``image_dtype="uint8"``).
        reader: a reader to read through, or None.
        named: resolve where the dataset streams from (False: the arguments only, for
            :func:`check_arguments`; ``name`` is then None).

    Raises:
        ConfigError: a value outside its accepted ones (the group's check names it), an
            unknown keyword, a setting given twice with two values, a group of another type.
    """
    if options is not None and not isinstance(options, StreamOptions):
        raise ConfigTypeError(
            f"{what}: options must be a StreamOptions, got {type(options).__name__}"
        )
    flat = {name: value for name, value in keywords.items() if value is not None}
    for name, value in split_lerobot_args(extra, what).items():
        if value is not None:
            flat[name] = value
    if isinstance(first, Source):
        if source is not None:
            raise ConfigError(f"{what}: the source is given twice (first argument and source=)")
        source, first = first, None
    if first is not None and not isinstance(first, str | os.PathLike | Location):
        raise ConfigTypeError(
            f"repo_id must be a str like 'org/name', a root (path or URL) or a Source, "
            f"got {type(first).__name__}"
        )
    if first is not None or root is not None:
        if root is None:
            located = Source.coerce(first)  # type: ignore[arg-type]
            flat["root"], flat["repo_id"] = located.root, located.repo_id
        else:
            if first is not None and not isinstance(first, str):
                raise ConfigError(f"repo_id must be a str like 'org/name', got {first!r}")
            flat["root"], flat["repo_id"] = root, first
        flat = {k: v for k, v in flat.items() if v is not None}
    stream = options if isinstance(options, StreamOptions) else None
    resolved_source = _merged_group(what, Source, source, stream, flat)
    resolved_resources = _merged_group(what, Resources, resources, stream, flat)
    resolved_samples = _merged_group(what, SampleOptions, samples, stream, flat)
    resolved_order = _merged_group(what, Order, order, stream, flat)
    video_backend = lerobot.get("video_backend")
    if video_backend is not None:
        decoder = decoder_for_backend(video_backend, "auto")  # checks LeRobot's name
        if resolved_resources.decoder == "auto":
            resolved_resources = dataclasses.replace(resolved_resources, decoder=decoder)
    return_uint8 = lerobot.get("return_uint8", False)
    if check_bool("return_uint8", return_uint8) and resolved_samples.image_dtype != "uint8":
        resolved_samples = dataclasses.replace(resolved_samples, image_dtype="uint8")
    if reader is not None:
        _check_reader_alone(resolved_source)
    name = (
        resolve_dataset_name(
            resolved_source.repo_id,
            resolved_source.root,
            repo_type=resolved_source.repo_type,
            reader=reader,
        )
        if named
        else None
    )
    view = stream or stream_options_of(resolved_source, resolved_resources, resolved_samples)
    return DatasetConfig(
        resolved_source, resolved_resources, resolved_samples, resolved_order, name, view
    )


#: a dataset constructor's arguments that are not flat keywords of a group
_GROUP_ARGUMENTS = frozenset(
    {"source", "resources", "samples", "sample_options", "order", "options", "reader"}
)
_LEROBOT_MAPPED = frozenset({"video_backend", "return_uint8"})


def check_arguments(cls: type[Any], arguments: Mapping[str, Any]) -> None:
    """Check keyword ``arguments`` of dataset class ``cls`` as its constructor would, without
    opening anything (LeRobot's factory checks the options it was given before it reads the
    dataset's metadata).

    Raises:
        ConfigError: as the constructor would, for the same argument.
    """
    parameters = inspect.signature(cls.__init__).parameters
    own = {name for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY}
    samples = arguments.get("samples")
    dataset_config(
        cls.__name__,
        first=None,
        root=arguments.get("root"),
        source=arguments.get("source"),
        resources=arguments.get("resources"),
        samples=one_of("samples", samples, "sample_options", arguments.get("sample_options")),
        order=arguments.get("order") if "order" in own else None,
        options=arguments.get("options"),
        keywords={
            name: value
            for name, value in arguments.items()
            if name in own and name not in _GROUP_ARGUMENTS | _LEROBOT_MAPPED | {"root"}
        },
        extra={name: value for name, value in arguments.items() if name not in own},
        lerobot={name: arguments[name] for name in _LEROBOT_MAPPED if name in arguments},
        reader=arguments.get("reader"),
        named=False,
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
    """What LeRobot's training reads from a dataset besides its samples, and the resolved
    option groups, shared by both dataset classes (which set ``config``, ``name``,
    ``options`` and ``dataset``, then call :meth:`_describe_for_lerobot`)."""

    config: DatasetConfig
    name: DatasetName
    options: StreamOptions
    dataset: Any  # datasets._engine.OpenedDataset (an upper module; typed loosely here)
    _meta: LeRobotMetadata
    _requested_episodes: list[int] | None

    @property
    def source(self) -> Source:
        """Where this dataset lives and how it is reached (resolved)."""
        return self.config.source

    @property
    def resources(self) -> Resources:
        """What this dataset may spend (resolved, defaults filled in)."""
        return self.config.resources

    @property
    def sample_options(self) -> SampleOptions:
        """What one sample holds (resolved; ``return_uint8`` folded into ``image_dtype``)."""
        return self.config.samples

    @property
    def order(self) -> Order:
        """Which samples come in which order (resolved; the pool's)."""
        return self.config.order

    def _describe_for_lerobot(self) -> None:
        """Once ``dataset`` is open: the selection as LeRobot's ``dataset.episodes`` reports
        it (validated by opening), and LeRobot's metadata; refuses depth maps in another unit
        (:func:`check_depth`), closing the dataset's reader on any refusal."""
        episodes = self.source.episodes
        self._requested_episodes = (
            None if episodes is None else self.dataset.episode_ids.astype(int).tolist()
        )
        try:
            self._meta = lerobot_meta(self.dataset.meta, self.name, self.source.revision)
            check_depth(self._meta, self.sample_options.depth_output_unit)
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

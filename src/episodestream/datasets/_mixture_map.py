"""MixtureStreamDataset: many LeRobot datasets as one map-style dataset of one schema.

Index ``i`` runs over the sources laid end to end (source 0's frames first); ``ds[i]`` is the
sample the source's own :class:`EpisodeStreamDataset` returns at the local index, mapped onto
the output :class:`MixtureSchema` by the source's :class:`SourceMapper` (renamed, vectors
padded with a mask, missing cameras as zeros, frames letterboxed to the schema's size), with
``source_index`` and ``source_id``. :meth:`MixtureStreamDataset.sample_weights` gives the
per-index weights for ``torch.utils.data.WeightedRandomSampler`` that draw each source in the
proportion its :class:`MixtureWeight` asks.

Construction reads each source's metadata only (``meta/``), to check or infer the schema: a
source that does not map is a ``ConfigError`` before any data or video byte is read. A
source's dataset (its manifest, readers and decoders) is opened at its first sample, and at
most ``max_open_sources`` stay open at once (least recently used closed first).
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from episodestream._checks import check_choice, check_int, shown
from episodestream._closing import Closing
from episodestream.datasets._compat import DatasetConfig, dataset_config
from episodestream.datasets._map import EpisodeStreamDataset
from episodestream.datasets._mixture_schema import (
    MixtureSchema,
    SourceMapper,
    aggregate_mapped_stats,
    infer_schema,
    map_source_features,
)
from episodestream.errors import ConfigError, ConfigTypeError, SampleIndexError, SamplingError
from episodestream.lerobot import DatasetMeta, LeRobotInfo, open_dataset_files
from episodestream.sampling import MixtureWeight, mixture_quotas
from episodestream.storage import Location

__all__ = ["DEFAULT_MAX_OPEN_SOURCES", "MixtureMetadata", "MixtureStreamDataset"]

logger = logging.getLogger(__name__)

#: source datasets kept open at once by default (each holds readers, a clip cache, decoders)
DEFAULT_MAX_OPEN_SOURCES = 4
#: the most a mixture keeps open (each open source holds its own byte budget of clips)
MAX_OPEN_SOURCES = 1024
_IMAGE_DTYPES = ("float32", "uint8")
#: one key map for every source, or one per source
KeyMaps = Mapping[str, str | None] | Sequence[Mapping[str, str | None] | None] | None
#: one ``delta_timestamps`` for every source, or one per source
DeltaTimestamps = (
    Mapping[str, Sequence[float]] | Sequence[Mapping[str, Sequence[float]] | None] | None
)
#: EpisodeStreamDataset arguments that select per source or would bypass the mixture's own
_REFUSED_OPTIONS = {
    "episodes": "per-source episode selection is not supported by the mixture yet",
    "reader": "a reader reads one dataset; give each source as a root",
    "return_uint8": "use image_dtype='uint8'",
    "root": "give the sources' roots as `sources`",
}
#: EpisodeStreamDataset arguments that shape samples, not streams (not StreamOptions)
_SAMPLE_OPTIONS = ("image_transforms", "prefetch_next", "depth_output_unit", "repo_type")
#: EpisodeStreamDataset's stream shortcuts and their defaults there
_STREAM_SHORTCUTS = {
    "revision": None,
    "video_backend": None,
    "decoder": "auto",
    "device": "cpu",
    "byte_budget": "2GiB",
    "tolerance_s": None,
}


# --------------------------------------------------------------------------------------------
# one source


def open_source(
    root: Any,
    *,
    image_dtype: str,
    delta_timestamps: Mapping[str, Sequence[float]] | None,
    options: Mapping[str, Any],
) -> EpisodeStreamDataset:
    """The dataset of one source (the one place a source is opened)."""
    return EpisodeStreamDataset(
        root, image_dtype=image_dtype, delta_timestamps=delta_timestamps, **options
    )


def load_source_meta(config: DatasetConfig) -> DatasetMeta:
    """One source's metadata (``meta/`` only: no data or video file is read), read as
    :class:`EpisodeStreamDataset` would read it; the reader is closed again."""
    assert config.name is not None
    reader, meta = open_dataset_files(
        config.name.location,
        data_root=config.source.data_root,
        reader_options=config.source.reader_options,
        data_reader_options=config.source.data_reader_options,
    )
    reader.close()
    return meta


def _source_label(root: Any) -> str:
    if isinstance(root, Location):
        return root.url
    if isinstance(root, os.PathLike):
        return os.fspath(root)
    return str(root)


# --------------------------------------------------------------------------------------------
# arguments


def _check_sources(sources: Any) -> list[Any]:
    if isinstance(sources, str | bytes | os.PathLike | Location | Mapping) or not isinstance(
        sources, Sequence
    ):
        raise ConfigTypeError(f"sources must be a list of dataset roots, got {shown(sources)}")
    if not sources:
        raise ConfigError("sources is empty: a mixture needs at least one source")
    for k, root in enumerate(sources):
        if not isinstance(root, str | os.PathLike | Location):
            raise ConfigTypeError(f"sources[{k}] must be a root (path, URL), got {shown(root)}")
    return list(sources)


def _check_weights(weights: Any, count: int) -> list[MixtureWeight]:
    if weights is None:
        return [MixtureWeight(repeat=1.0)] * count
    if isinstance(weights, str | bytes | Mapping) or not isinstance(weights, Sequence):
        raise ConfigTypeError(
            f"weights must be a list of MixtureWeight (one per source), got {shown(weights)}"
        )
    if len(weights) != count:
        raise ConfigError(f"weights has {len(weights)} entries for {count} sources")
    checked = []
    for k, weight in enumerate(weights):
        if isinstance(weight, Mapping):
            weight = MixtureWeight.from_dict(weight)
        elif isinstance(weight, int | float) and not isinstance(weight, bool):
            weight = MixtureWeight(proportion=weight)
        if not isinstance(weight, MixtureWeight):
            raise ConfigTypeError(
                f"weights[{k}] must be a MixtureWeight, a mapping like {{'proportion': 0.5}} "
                f"or a number (a proportion), got {shown(weight)}"
            )
        checked.append(weight)
    return checked


def _per_source(value: Any, count: int, name: str, item: type | tuple[type, ...]) -> list[Any]:
    """``value`` for every source: None, one ``item`` for all, or a list of one per source."""
    if value is None or isinstance(value, item):
        return [value] * count
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ConfigTypeError(f"{name} must be one mapping or a list of one per source")
    if len(value) != count:
        raise ConfigError(f"{name} has {len(value)} entries for {count} sources")
    for k, entry in enumerate(value):
        if entry is not None and not isinstance(entry, item):
            raise ConfigTypeError(f"{name}[{k}] must be a mapping or None, got {shown(entry)}")
    return list(value)


#: EpisodeStreamDataset's own keywords (the rest of ``**dataset_options`` are StreamOptions')
_DATASET_KEYWORDS = (
    "image_transforms",
    "tolerance_s",
    "revision",
    "repo_type",
    "depth_output_unit",
    "decoder",
    "device",
    "byte_budget",
    "prefetch_next",
)


def _split_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """What every source's dataset is opened with; refuses the arguments a mixture cannot
    pass on."""
    for name, why in _REFUSED_OPTIONS.items():
        if name in options:
            raise ConfigError(f"MixtureStreamDataset does not take {name}=: {why}")
    return dict(options)


def source_config(root: Any, options: Mapping[str, Any]) -> DatasetConfig:
    """One source's configuration, resolved by the adapter :class:`EpisodeStreamDataset` uses
    (every argument checked there, before any request)."""
    given = dict(options)
    keywords = {name: given.pop(name, None) for name in _DATASET_KEYWORDS}
    lerobot = {"video_backend": given.pop("video_backend", None), "return_uint8": False}
    return dataset_config(
        "MixtureStreamDataset",
        first=root,
        root=None,
        source=None,
        resources=given.pop("resources", None),
        samples=given.pop("samples", None),
        order=None,
        options=given.pop("options", None),
        keywords=keywords,
        extra=given,
        lerobot=lerobot,
        reader=None,
    )


def _delta_steps(
    deltas: list[Mapping[str, Sequence[float]] | None],
    metas: list[DatasetMeta],
    key_maps: list[Mapping[str, str | None] | None],
    schema: MixtureSchema,
    source_ids: list[str],
) -> dict[str, int]:
    """Output key → time steps its ``delta_timestamps`` stack; every source that has the key
    must stack it with the same count, or its samples would not batch with the others'."""
    steps: dict[str, tuple[int, int]] = {}
    for k, (delta, key_map, meta) in enumerate(zip(deltas, key_maps, metas, strict=True)):
        features = {f.key for f in meta.features}
        for source_key, offsets in (delta or {}).items():
            if source_key not in features:
                raise ConfigError(
                    f"source {k} ({source_ids[k]}): delta_timestamps names {source_key!r}, "
                    f"which is not a feature of the source (give its own key names)"
                )
            if isinstance(offsets, str | bytes) or not isinstance(offsets, Sequence):
                raise ConfigTypeError(
                    f"source {k} ({source_ids[k]}): delta_timestamps[{source_key!r}] must be "
                    f"a list of offsets in seconds, got {shown(offsets)}"
                )
            output = (key_map or {}).get(source_key, source_key)
            if output is None or output not in schema.keys:
                continue
            count = len(offsets)
            if output in steps and steps[output][0] != count:
                first = steps[output][1]
                raise ConfigError(
                    f"source {k} ({source_ids[k]}): delta_timestamps stacks {output!r} over "
                    f"{count} steps, source {first} ({source_ids[first]}) over "
                    f"{steps[output][0]}; a batch needs one count"
                )
            steps.setdefault(output, (count, k))
    for k, (delta, key_map, meta) in enumerate(zip(deltas, key_maps, metas, strict=True)):
        renamed = {
            (key_map or {}).get(f.key, f.key): f.key for f in meta.features
        }  # output -> source key
        for output in steps:
            source_key = renamed.get(output)
            if source_key is not None and source_key not in (delta or {}):
                raise ConfigError(
                    f"source {k} ({source_ids[k]}): {output!r} is stacked over "
                    f"{steps[output][0]} steps in other sources but not by this source's "
                    f"delta_timestamps ({source_key!r})"
                )
    return {key: count for key, (count, _) in steps.items()}


# --------------------------------------------------------------------------------------------
# metadata


class MixtureMetadata:
    """The mixture's LeRobot-shaped metadata: what LeRobot's training reads from
    ``dataset.meta`` (features, stats, fps, camera keys, episode and frame counts), for the
    output schema.

    Attributes:
        info: ``info.json``-shaped (fps, features, totals) as LeRobot holds it.
        stats: the sources' mapped statistics pooled (:func:`aggregate_mapped_stats`), or
            None when no source has statistics.
        per_source_stats: each source's mapped statistics (None for a source without).
        source_ids: how samples name each source.
        schema: the output schema.
    """

    def __init__(
        self,
        *,
        schema: MixtureSchema,
        fps: int | float,
        metas: Sequence[DatasetMeta],
        per_source_stats: list[dict[str, dict[str, np.ndarray]] | None],
        source_ids: Sequence[str],
        repo_id: str = "mixture",
    ) -> None:
        features = schema.info_features()
        for feature in features.values():
            feature["shape"] = tuple(feature["shape"])
        self.schema = schema
        self.repo_id = repo_id
        self.root = repo_id
        self.revision = None
        self.source_ids = list(source_ids)
        self.info = LeRobotInfo(
            {
                "codebase_version": "v3.0",
                "robot_type": None,
                "fps": fps,
                "total_episodes": sum(meta.total_episodes for meta in metas),
                "total_frames": sum(meta.total_frames for meta in metas),
                "total_tasks": sum(meta.total_tasks for meta in metas),
                "features": features,
            }
        )
        self.per_source_stats = per_source_stats
        present = [stats for stats in per_source_stats if stats]
        self.stats = aggregate_mapped_stats(present) if present else None

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.info["features"]

    @property
    def fps(self) -> int | float:
        return self.info["fps"]

    @property
    def robot_type(self) -> str | None:
        return self.info["robot_type"]

    @property
    def total_episodes(self) -> int:
        return self.info["total_episodes"]

    @property
    def total_frames(self) -> int:
        return self.info["total_frames"]

    @property
    def total_tasks(self) -> int:
        return self.info["total_tasks"]

    @property
    def video_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] == "video"]

    @property
    def camera_keys(self) -> list[str]:
        return self.video_keys

    @property
    def image_keys(self) -> list[str]:
        return []

    @property
    def depth_keys(self) -> list[str]:
        return []

    @property
    def names(self) -> dict[str, Any]:
        return {key: ft.get("names") for key, ft in self.features.items()}

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {key: tuple(ft["shape"]) for key, ft in self.features.items()}

    def __repr__(self) -> str:
        return (
            f"MixtureMetadata(sources={len(self.source_ids)}, fps={self.fps}, "
            f"frames={self.total_frames}, features={list(self.features)})"
        )


# --------------------------------------------------------------------------------------------
# the dataset


class MixtureStreamDataset(Closing, torch.utils.data.Dataset):
    """Several LeRobot datasets as one map-style dataset whose samples share one schema.

    Args:
        sources: one root per source (anything :class:`EpisodeStreamDataset` takes as its
            root: local path, URL, ``hf://``, ``s3://``, a ``Location``).
        weights: one :class:`MixtureWeight` per source (or ``{"proportion": 0.3}``, or a
            number meaning a proportion) for :meth:`sample_weights`; default: each source
            its own size (``repeat=1``), a plain concatenation.
        key_maps: source key → output key (None drops it), one mapping for all sources or a
            list of one per source (see :mod:`._mixture_schema`).
        schema: the output schema; default: inferred from the sources (:func:`infer_schema`).
        image_size: (height, width) of the cameras of an inferred schema.
        image_dtype: "float32" or "uint8": what the sources decode to and, for an inferred
            schema, what cameras come out as.
        delta_timestamps: LeRobot's ``{source key: [offsets in seconds]}``, one mapping for
            all sources or a list of one per source; a key stacked in one source must be
            stacked over as many steps in every source that has it.
        epoch_size: passed to :func:`mixture_quotas` (None: see there).
        fps: the ``meta.fps`` to report (default: the first source's).
        max_open_sources: source datasets kept open at once (least recently used closed).
        dataset_options: the other :class:`EpisodeStreamDataset` arguments (decoder,
            byte_budget, cache_dir, image_transforms, ...), for every source.

    Raises:
        ConfigError: bad arguments or weights; a source whose features do not map onto the
            schema (naming the source and the key), before any data or video is read.
    """

    def __init__(
        self,
        sources: Sequence[str | os.PathLike[str] | Location],
        *,
        weights: Sequence[MixtureWeight | Mapping[str, Any] | float] | None = None,
        key_maps: KeyMaps = None,
        schema: MixtureSchema | None = None,
        image_size: tuple[int, int] | None = None,
        image_dtype: str = "float32",
        delta_timestamps: DeltaTimestamps = None,
        epoch_size: int | None = None,
        fps: int | float | None = None,
        max_open_sources: int = DEFAULT_MAX_OPEN_SOURCES,
        **dataset_options: Any,
    ) -> None:
        self._sources = _check_sources(sources)
        count = len(self._sources)
        self._weights = _check_weights(weights, count)
        check_choice("image_dtype", image_dtype, _IMAGE_DTYPES)
        self.image_dtype = image_dtype
        self.max_open_sources = check_int(
            "max_open_sources", max_open_sources, minimum=1, maximum=MAX_OPEN_SOURCES
        )
        key_map_list = _per_source(key_maps, count, "key_maps", Mapping)
        self._deltas = _per_source(delta_timestamps, count, "delta_timestamps", Mapping)
        if schema is not None and not isinstance(schema, MixtureSchema):
            raise ConfigTypeError(f"schema must be a MixtureSchema, got {shown(schema)}")
        self._options = _split_options(dataset_options)
        configs = [source_config(root, self._options) for root in self._sources]
        metas = [load_source_meta(config) for config in configs]
        self.source_ids = [_source_label(root) for root in self._sources]
        if schema is None:
            schema = infer_schema(
                metas,
                key_map_list,
                image_size=image_size,
                image_dtype=image_dtype,  # type: ignore[arg-type]
                source_ids=self.source_ids,
            )
        elif image_size is not None:
            raise ConfigError("image_size applies to an inferred schema; declare it in schema")
        self.schema = schema
        steps = _delta_steps(self._deltas, metas, key_map_list, schema, self.source_ids)
        self.mappers: list[SourceMapper] = [
            map_source_features(
                meta,
                key_map,
                schema,
                source_id=source_id,
                source_index=k,
                image_dtype=image_dtype,  # type: ignore[arg-type]
                delta_steps=steps,
            )
            for k, (meta, key_map, source_id) in enumerate(
                zip(metas, key_map_list, self.source_ids, strict=True)
            )
        ]
        self.sizes = np.array([meta.total_frames for meta in metas], dtype=np.int64)
        self.sizes.setflags(write=False)
        self._starts = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        self._quotas = mixture_quotas(self.sizes, self._weights, epoch_size)
        if int(self._quotas.sum()) == 0:
            raise ConfigError("weights give every source a quota of 0: nothing to sample")
        if fps is None:
            fps = metas[0].info.get("fps", metas[0].fps)
            others = {meta.fps for meta in metas[1:]} - {metas[0].fps}
            if others:
                logger.info(
                    "MixtureStreamDataset: sources run at different fps (%s); meta.fps "
                    "reports the first source's %s",
                    sorted({meta.fps for meta in metas}),
                    fps,
                )
        per_source_stats = [
            mapper.map_stats(meta.stats) if meta.stats is not None else None
            for mapper, meta in zip(self.mappers, metas, strict=True)
        ]
        self.meta = MixtureMetadata(
            schema=schema,
            fps=fps,
            metas=metas,
            per_source_stats=per_source_stats,
            source_ids=self.source_ids,
        )
        self._open: OrderedDict[int, EpisodeStreamDataset] = OrderedDict()
        self._lock = threading.Lock()

    # -- sizes and weights ----------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self._starts[-1])

    @property
    def num_sources(self) -> int:
        return len(self._sources)

    @property
    def num_frames(self) -> int:
        return len(self)

    @property
    def num_episodes(self) -> int:
        return self.meta.total_episodes

    @property
    def fps(self) -> int | float:
        return self.meta.fps

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.meta.features

    @property
    def weights(self) -> tuple[MixtureWeight, ...]:
        return tuple(self._weights)

    def epoch_quotas(self) -> np.ndarray:
        """Samples each source gives one epoch (:func:`mixture_quotas` of the sizes and
        weights); read-only int64."""
        return self._quotas

    def sample_weights(self) -> np.ndarray:
        """One float64 weight per index (summing to 1) such that a
        ``WeightedRandomSampler`` draws source ``k`` with probability ``quota_k / sum(quotas)``:
        each index of source ``k`` weighs ``quota_k / size_k``, normalised."""
        per_index = self._quotas.astype(np.float64) / self.sizes.astype(np.float64)
        weights = np.repeat(per_index / float(self._quotas.sum()), self.sizes)
        return weights

    def locate(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """(source, index within the source) of each index (vectorised; negatives count from
        the end).

        Raises:
            SampleIndexError: an index outside ``[-len, len)``.
        """
        n = len(self)
        array = np.asarray(indices)
        if array.dtype.kind not in "iu":
            raise ConfigTypeError(f"indices must be ints, got {shown(indices)}")
        array = array.astype(np.int64)
        array = np.where(array < 0, array + n, array)
        bad = (array < 0) | (array >= n)
        if bad.any():
            first = np.asarray(indices).reshape(-1)[int(np.flatnonzero(bad.reshape(-1))[0])]
            raise SampleIndexError(f"index {int(first)} out of range for {n} frames")
        source = np.searchsorted(self._starts, array, side="right") - 1
        return source, array - self._starts[source]

    # -- samples --------------------------------------------------------------------------------

    def __getitem__(self, index: int) -> dict[str, Any]:
        if isinstance(index, bool | np.bool_) or not isinstance(index, int | np.integer):
            raise ConfigTypeError(f"index must be an int, got {type(index).__name__}")
        source, local = self.locate(index)
        k, j = int(source), int(local)
        return self.mappers[k](self.source(k)[j])

    def source(self, k: int) -> EpisodeStreamDataset:
        """Source ``k``'s dataset, opened on first use; opening one past
        ``max_open_sources`` closes the least recently used."""
        k = check_int("source", k, minimum=0, maximum=len(self._sources) - 1)
        with self._lock:
            dataset = self._open.get(k)
            if dataset is not None:
                self._open.move_to_end(k)
                return dataset
            evicted = []
            while len(self._open) >= self.max_open_sources:
                evicted.append(self._open.popitem(last=False)[1])
        for old in evicted:
            old.close()
        dataset = open_source(
            self._sources[k],
            image_dtype=self.image_dtype,
            delta_timestamps=self._deltas[k],
            options=self._options,
        )
        if len(dataset) != int(self.sizes[k]):
            dataset.close()
            raise SamplingError(
                f"source {k} ({self.source_ids[k]}) has {len(dataset)} frames; its metadata "
                f"said {int(self.sizes[k])} when the mixture was built"
            )
        with self._lock:
            raced = self._open.get(k)
            if raced is None:
                self._open[k] = dataset
                surplus = []
                while len(self._open) > self.max_open_sources:
                    surplus.append(self._open.popitem(last=False)[1])
            else:
                surplus = [dataset]
                dataset = raced
        for old in surplus:
            old.close()
        return dataset

    @property
    def open_sources(self) -> tuple[int, ...]:
        """Sources whose datasets are open, least recently used first."""
        with self._lock:
            return tuple(self._open)

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every open source dataset (they reopen on the next sample)."""
        with self._lock:
            datasets = list(self._open.values())
            self._open.clear()
        for dataset in datasets:
            dataset.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_open"] = OrderedDict()  # a worker opens its own, lazily
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"MixtureStreamDataset(sources={self.num_sources}, frames={len(self)}, "
            f"keys={list(self.schema.keys)})"
        )

"""EpisodeStreamDataset: map-style, a drop-in for LeRobot's ``LeRobotDataset``."""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch.utils.data

from episodestream._checks import shown
from episodestream._closing import Closing
from episodestream.datasets._compat import LeRobotSurface, dataset_config, one_of
from episodestream.datasets._engine import StreamEngine, open_for_samples
from episodestream.datasets._groups import ImageDtype, Order, Resources, SampleOptions
from episodestream.datasets._options import StreamOptions
from episodestream.datasets._samples import EpisodeRows, ImageTransform
from episodestream.datasets._source import Source
from episodestream.decode import BackendName
from episodestream.errors import ConfigError, ConfigTypeError, SampleIndexError
from episodestream.sampling import WorkerSlot, split_budget
from episodestream.storage import BaseRangeReader, Location

__all__ = ["EpisodeStreamDataset"]


def _worker_share(byte_budget: int) -> int:
    """This process's share of a rank's byte budget: split evenly among the DataLoader
    workers, as the pool splits it (the whole budget outside a worker)."""
    info = torch.utils.data.get_worker_info()
    if info is None:
        return byte_budget
    return split_budget(byte_budget, WorkerSlot(worker=info.id, num_workers=info.num_workers))


class EpisodeStreamDataset(Closing, LeRobotSurface, torch.utils.data.Dataset):
    """Map-style dataset returning, for index ``i``, the sample LeRobot's ``LeRobotDataset``
    returns for the same dataset and index — streamed instead of downloaded.

    ``len()`` is the number of frames of the selected episodes; ``ds[i]`` takes the ``i``-th of
    them (with every episode selected, ``i`` is the global frame ``index``). Each access fetches
    the whole episode's clips (one range request per camera) into a byte-budgeted cache and
    prefetches the next selected episode, so sequential and episode-local access hit the cache.

    The constructor takes LeRobot's own arguments with their meaning, so code written for
    ``LeRobotDataset`` swaps the class and nothing else: ``EpisodeStreamDataset(repo_id,
    root=..., episodes=..., delta_timestamps=..., image_transforms=..., revision=...,
    video_backend=..., tolerance_s=..., return_uint8=...)``. Arguments that steer LeRobot's
    downloads (``force_cache_sync``, ``download_videos``, ...) are accepted and have no effect.

    Configuration (README, "Options"): ``source=`` (a :class:`Source`, or the first
    argument), ``resources=`` (:class:`Resources`) and ``samples=`` (:class:`SampleOptions`,
    also spelt ``sample_options=``); ``order=`` is taken for symmetry with the pool and must be
    the default :class:`Order` (the DataLoader's sampler orders a map-style dataset). Each flat
    keyword below is a field of one of them, and
    ``options=`` (:class:`StreamOptions`) is still taken. A keyword left at None takes its
    group's default; a setting given twice with two values is a ``ConfigError``. The resolved
    groups are ``ds.source``, ``ds.resources`` and ``ds.sample_options``.

    Args:
        repo_id: ``org/name`` (streams ``hf://datasets/org/name`` unless ``root`` is given), or
            directly a root: local path, ``http(s)://`` URL, ``hf://datasets/org/name[@rev]``,
            ``hf://buckets/org/name``, ``s3://``, ...; or a :class:`Source`.
        root: where the dataset lives when ``repo_id`` only names it (LeRobot's ``root``).
        revision: Hub branch, tag or commit (pinned to a commit when opened).
        episodes: episode indices to expose, in this order (default: all).
        delta_timestamps: LeRobot's ``{key: [offsets in seconds]}``.
        tolerance_s: accepted distance between a wanted timestamp and a frame (LeRobot's).
        video_backend: LeRobot's name for ``decoder`` ("torchcodec" or "pyav").
        return_uint8: frames as uint8 0..255 (LeRobot 0.6), same as ``image_dtype="uint8"``.
        repo_type: "dataset" or "bucket" (``hf://buckets/``) for a bare ``repo_id``.
        image_dtype: "float32" (LeRobot's [0, 1]) or "uint8".
        decoder: "auto", "torchcodec" or "pyav"; device: "cpu" or "cuda".
        byte_budget: bytes of clips kept per rank, split among its DataLoader workers (int or
            "8GiB"; default ``DEFAULT_BYTE_BUDGET``).
        image_transforms: applied to each camera's frames (after dtype conversion).
        prefetch_next: prefetch the next selected episode when one is first touched.
        options: a :class:`StreamOptions`; its fields are also taken as keyword arguments.
    """

    def __init__(
        self,
        repo_id: str | os.PathLike[str] | Location | Source | None = None,
        root: str | os.PathLike[str] | Location | None = None,
        *,
        source: Source | None = None,
        resources: Resources | None = None,
        samples: SampleOptions | None = None,
        sample_options: SampleOptions | None = None,
        order: Order | None = None,
        episodes: Sequence[int] | None = None,
        image_transforms: ImageTransform | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        tolerance_s: float | None = None,
        revision: str | None = None,
        video_backend: str | None = None,
        return_uint8: bool = False,
        repo_type: str | None = None,
        depth_output_unit: str | None = None,
        image_dtype: ImageDtype | None = None,
        decoder: BackendName | None = None,
        device: str | None = None,
        byte_budget: int | str | None = None,
        prefetch_next: bool | None = None,
        options: StreamOptions | None = None,
        reader: BaseRangeReader | None = None,
        **stream_options: Any,
    ) -> None:
        # every argument is checked, in its option group, before anything is opened (no
        # request for a bad one); a keyword left at None takes the group's default
        self.config = dataset_config(
            "EpisodeStreamDataset",
            first=repo_id,
            root=root,
            source=source,
            resources=resources,
            samples=one_of("samples", samples, "sample_options", sample_options),
            order=order,
            options=options,
            keywords={
                "episodes": episodes,
                "image_transforms": image_transforms,
                "delta_timestamps": delta_timestamps,
                "tolerance_s": tolerance_s,
                "revision": revision,
                "repo_type": repo_type,
                "depth_output_unit": depth_output_unit,
                "image_dtype": image_dtype,
                "decoder": decoder,
                "device": device,
                "byte_budget": byte_budget,
                "prefetch_next": prefetch_next,
            },
            extra=stream_options,
            lerobot={"video_backend": video_backend, "return_uint8": return_uint8},
            reader=reader,
        )
        if self.order != Order():
            raise ConfigError(
                "EpisodeStreamDataset: order= applies to EpisodePoolDataset; a map-style "
                "dataset is ordered by the DataLoader's sampler"
            )
        self.name, self.options = self.config.name, self.config.options
        self.prefetch_next = self.resources.prefetch_next
        self.dataset, self.samples = open_for_samples(
            self.name.location,
            self.source,
            self.resources,
            self.sample_options,
            resident_episodes=1,
            reader=reader,
        )
        self._describe_for_lerobot()
        self._starts = np.concatenate([[0], np.cumsum(self.dataset.episode_lengths)])
        self._engine: StreamEngine | None = None
        self._rows: EpisodeRows | None = None
        self._engine_pid: int | None = None
        self._lock = threading.Lock()

    # -- LeRobot-like surface (meta, repo_id, root, fps, num_frames, ...: LeRobotSurface) -----

    @property
    def episode_ids(self) -> list[int]:
        """The episodes this dataset exposes, in index order."""
        return self.dataset.episode_ids.tolist()

    @functools.cached_property
    def absolute_to_relative_idx(self) -> dict[int, int] | None:
        """Global frame ``index`` -> position in this dataset, when a subset of episodes is
        selected (None otherwise), as LeRobot 0.6 maps sampler indices."""
        if self._requested_episodes is None:
            return None
        table = self.dataset.meta.episodes
        rows = table.rows(self.dataset.episode_ids)
        lengths = self.dataset.episode_lengths
        # each selected episode's global indices, laid end to end in this dataset's order
        first = np.repeat(table.dataset_from_index[rows] - self._starts[:-1], lengths)
        positions = np.arange(int(lengths.sum()), dtype=np.int64)
        return dict(zip((first + positions).tolist(), positions.tolist(), strict=True))

    def __len__(self) -> int:
        return self.dataset.num_frames

    def locate(self, index: int) -> tuple[int, int]:
        """(episode, frame within it) of position ``index``."""
        row, frame = self._locate_row(index)
        return int(self.dataset.episode_ids[row]), frame

    def _locate_row(self, index: int) -> tuple[int, int]:
        """(position of the episode among the selected ones, frame within it)."""
        n = len(self)
        if isinstance(index, bool | np.bool_) or not isinstance(index, int | np.integer):
            raise ConfigTypeError(f"index must be an int, got {type(index).__name__}")
        position = int(index) + n if index < 0 else int(index)
        if not 0 <= position < n:
            raise SampleIndexError(f"index {shown(index)} out of range for {n} frames")
        row = int(np.searchsorted(self._starts, position, side="right")) - 1
        return row, position - int(self._starts[row])

    def __getitem__(self, index: int) -> dict[str, Any]:
        row, frame = self._locate_row(index)
        episode = int(self.dataset.episode_ids[row])
        engine, rows = self._engine_for_process()
        resident = None
        if self.samples.video_keys:
            resident = engine.cache.wait_ready(episode, timeout=self.resources.wait_timeout_s)
            if self.prefetch_next and row + 1 < len(self.dataset.episode_ids):
                # random access has no better guess than the next episode; let it take the
                # place of the least recently used one
                engine.cache.prefetch(int(self.dataset.episode_ids[row + 1]), evict=True)
        return self.samples.build(episode, frame, rows.get(episode), resident, engine.frames)

    # -- lifecycle ------------------------------------------------------------------------------

    def _engine_for_process(self) -> tuple[StreamEngine, EpisodeRows]:
        with self._lock:
            if self._engine is None or self._engine_pid != os.getpid():
                self._engine = StreamEngine(
                    self.dataset,
                    self.resources,
                    tolerance_s=self.sample_options.tolerance_s,
                    byte_budget=_worker_share(self.resources.byte_budget),
                    max_open_decoders=self.resources.open_decoders(),
                )
                self._rows = EpisodeRows(self._engine.rows, self.samples.data_keys)
                self._engine_pid = os.getpid()
                # a dataset dropped without close() must not leave fetch threads and clips
                self._finalizer = weakref.finalize(self, self._engine.close)
            assert self._rows is not None
            return self._engine, self._rows

    def metrics(self) -> dict[str, Any]:
        """Cache, decoder and reader counters of this process."""
        engine = self._engine
        result: dict[str, Any] = {"reader": self.dataset.reader.metrics()}
        if engine is not None:
            result["cache"] = engine.cache.metrics()
            result["decoders"] = engine.decoders.stats()
        return result

    def close(self) -> None:
        """Stop fetch threads and close decoders and connections of this process."""
        with self._lock:
            engine, self._engine, self._rows = self._engine, None, None
        if engine is not None and self._engine_pid == os.getpid():
            engine.close()
        self.dataset.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_engine"] = None
        state["_rows"] = None
        state["_engine_pid"] = None
        state.pop("_finalizer", None)
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return (
            f"EpisodeStreamDataset(root={self.dataset.root!r}, episodes={self.num_episodes}, "
            f"frames={self.num_frames}, cameras={list(self.samples.video_keys)})"
        )

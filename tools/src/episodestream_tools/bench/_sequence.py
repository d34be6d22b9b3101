"""The benchmark's common ground: the dataset opened once and the seeded sample sequence every
track decodes (the pool order of this rank, exactly as :class:`EpisodePoolDataset` draws it)."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from episodestream.errors import ConfigError
from episodestream.lerobot import DatasetMeta, EpisodeRowReader, load_dataset_meta
from episodestream.manifest import EpisodeManifest, open_manifest
from episodestream.sampling import PoolParams, PoolSchedule, WorkerSlot, plan_shards
from episodestream.storage import Limits, Location, RangeReader, open_reader
from episodestream_tools.bench._config import BenchConfig

__all__ = [
    "BenchDataset",
    "SampleSequence",
    "indexed_episodes",
    "open_bench_dataset",
    "randomness",
    "selected_episodes",
]

_TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True, eq=False)
class SampleSequence:
    """The first ``len`` draws of this rank's pool order.

    Attributes:
        episodes, frames: (episode, frame within episode) of each sample, int64.
        entry_order: the order in which this rank's episodes enter the pool.
        shard_episodes, shard_frames: this rank's episodes and their frame counts.
        source_times_s: ``(samples, cameras)`` float64, where each camera's frame lies in its
            source MP4 (``from_timestamp + timestamp``, LeRobot's rule).
    """

    episodes: np.ndarray
    frames: np.ndarray
    entry_order: np.ndarray
    shard_episodes: np.ndarray
    shard_frames: np.ndarray
    source_times_s: np.ndarray

    def __len__(self) -> int:
        return int(self.episodes.size)

    def touched(self, count: int | None = None) -> np.ndarray:
        """Distinct episodes of the first ``count`` samples, in order of first use."""
        episodes = self.episodes if count is None else self.episodes[:count]
        _, first = np.unique(episodes, return_index=True)
        return episodes[np.sort(first)]

    def digest(self) -> str:
        pairs = np.stack([self.episodes, self.frames]).astype("<i8").tobytes()
        return hashlib.sha256(pairs).hexdigest()[:16]


@dataclass(frozen=True, slots=True, eq=False)
class BenchDataset:
    """The dataset as the benchmark sees it: reader options, metadata, manifest, sequence."""

    location: Location
    reader_options: dict[str, Any]
    meta: DatasetMeta
    manifest: EpisodeManifest
    rank: int
    world_size: int
    sequence: SampleSequence
    index_seconds: float
    #: the episodes sampled when a subset was asked for (the pool's ``episodes=``), else None
    episode_ids: tuple[int, ...] | None = None

    @property
    def served_over_http(self) -> bool:
        """Whether an HTTP server stands in front of the root (whichever reader reads it)."""
        return self.location.kind == "http" or self.location.protocol in ("http", "https")

    @property
    def cameras(self) -> tuple[str, ...]:
        return self.meta.video_keys

    def open_reader(self, **extra: Any) -> RangeReader:
        """A fresh reader of the dataset (its own connections and counters); ``extra`` options
        join the dataset's (a failure log)."""
        return open_reader(self.location, **{**self.reader_options, **extra})

    def episode_payload_bytes(self, episodes: np.ndarray) -> np.ndarray:
        """Bytes STREAM fetches for each episode (all cameras): the manifest's spans."""
        rows = np.searchsorted(self.manifest.episode_index, episodes)
        return self.manifest.episode_bytes()[rows].sum(axis=1).astype(np.int64)

    def episode_video_bytes(self, episodes: np.ndarray) -> np.ndarray:
        """Bytes of each episode's own frames (all cameras): the samples it presents."""
        result = np.zeros(len(episodes), dtype=np.int64)
        for camera in self.cameras:
            columns = self.meta.episodes.video(camera)
            for i, episode in enumerate(episodes.tolist()):
                span = self.manifest.span(episode, camera)
                track = self.manifest.track(span.file_path)
                row = self.meta.episodes.row(episode)
                start = float(columns.from_timestamp[row])
                end = float(columns.to_timestamp[row])
                pts = track.pts_seconds()
                mine = (pts >= start - 1e-4) & (pts < end - 1e-4)
                result[i] += int(track.sizes[mine].sum())
        return result

    def video_files_of(self, episodes: np.ndarray) -> list[str]:
        """Distinct video files (every camera) holding ``episodes``."""
        files = {
            self.meta.episode_video_path(int(e), camera)
            for e in episodes.tolist()
            for camera in self.cameras
        }
        return sorted(files)

    def data_files_of(self, episodes: np.ndarray) -> list[str]:
        return sorted({self.meta.episode_data_path(int(e)) for e in episodes.tolist()})


def reader_options_for(location: Location, config: BenchConfig) -> dict[str, Any]:
    """Connection limits for network readers; a local reader takes no options."""
    if location.kind == "local":
        return {}
    if location.kind in ("http", "hub"):
        limits = Limits(
            max_connections_per_host=config.connections, max_concurrency=config.connections
        )
        return {"limits": limits}
    return {"max_concurrency": config.connections}


def open_bench_dataset(
    config: BenchConfig, *, local_reader: RangeReader | None = None
) -> BenchDataset:
    """Open ``config.root`` (metadata, manifest — built and cached on first use) and compute the
    sample sequence of this rank. ``local_reader`` (a local copy) serves the timestamps."""
    import time

    location = range_location(Location.parse(config.root), config)
    options = reader_options_for(location, config)
    reader = open_reader(location, **options)
    try:
        # the same root label and revision as the datasets use, so they find the cached index
        meta = load_dataset_meta(reader, root=location.url, revision=reader.revision)
        if reader.revision is not None:
            location = dataclasses.replace(location, revision=reader.revision)
        subset = None
        if config.episodes is not None or config.num_episodes is not None:
            subset = tuple(int(e) for e in selected_episodes(config, meta)[0].tolist())
        started = time.perf_counter()
        # a subset's sidecar (index --episodes/--num-episodes) holding them will do, as it
        # does for the datasets opened on those episodes
        manifest = open_manifest(
            reader,
            meta,
            cache_dir=config.cache_dir,
            progress=config.progress,
            episodes=subset,
        )
        index_seconds = time.perf_counter() - started
        rank, world_size = config.shard()
        sequence = _sequence(config, meta, manifest, rank, world_size, local_reader or reader)
    finally:
        reader.close()
    return BenchDataset(
        location=location,
        reader_options=options,
        meta=meta,
        manifest=manifest,
        rank=rank,
        world_size=world_size,
        sequence=sequence,
        index_seconds=index_seconds,
        episode_ids=subset,
    )


def indexed_episodes(manifest: EpisodeManifest) -> int | None:
    """How many episodes ``manifest`` indexes when it is a subset's (``index --episodes``);
    None when it indexes the whole dataset."""
    subset = manifest.identity.episodes
    return None if subset is None else int(subset.count)


def range_location(location: Location, config: BenchConfig) -> Location:
    """``location`` as the chosen range backend reads it: ``"fsspec"`` turns an http(s) root
    into an fsspec location (fsspec's HTTP filesystem, one request per range)."""
    if config.range_backend == "native":
        return location
    if location.kind != "http":
        raise ConfigError(
            f"range_backend='fsspec' compares readers of an http(s) root; {location.url!r} is "
            f"a {location.kind} root"
        )
    return Location("fsspec", location.protocol, location.path.split("://", 1)[1])


def _sequence(
    config: BenchConfig,
    meta: DatasetMeta,
    manifest: EpisodeManifest,
    rank: int,
    world_size: int,
    rows_reader: RangeReader,
) -> SampleSequence:
    ids, lengths = selected_episodes(config, meta)
    # as EpisodePoolDataset.__iter__ plans it for (rank, worker 0 of 1), epoch 0
    plan = plan_shards(
        ids, lengths, world_size=world_size, num_workers=1, seed=config.seed, epoch=0, shuffle=True
    )
    slot = WorkerSlot(rank=rank, world_size=world_size, worker=0, num_workers=1)
    shard_ids = plan.episodes_for(slot)
    shard_counts = plan.frame_counts_for(slot)
    params = PoolParams(pool_size=config.pool_size, seed=config.seed, shuffle=True)
    schedule = PoolSchedule(shard_ids, shard_counts, params=params, slot=slot, epoch=0)
    wanted = min(config.samples, int(shard_counts.sum()))
    batch = schedule.take(wanted)
    episodes = np.asarray(batch.episode_ids, dtype=np.int64)
    frames = np.asarray(batch.frame_indices, dtype=np.int64)
    entry_order = np.asarray(schedule.entry_order, dtype=np.int64)
    times = _source_times(meta, rows_reader, episodes, frames)
    return SampleSequence(
        episodes=episodes,
        frames=frames,
        entry_order=entry_order,
        shard_episodes=np.asarray(shard_ids, dtype=np.int64),
        shard_frames=np.asarray(shard_counts, dtype=np.int64),
        source_times_s=times,
    )


def _source_times(
    meta: DatasetMeta, reader: RangeReader, episodes: np.ndarray, frames: np.ndarray
) -> np.ndarray:
    """``from_timestamp + timestamp`` of every (sample, camera), from the episodes' rows."""
    rows = EpisodeRowReader(reader, meta)
    stamps: dict[int, np.ndarray] = {}
    for episode in np.unique(episodes).tolist():
        stamps[episode] = rows.rows(episode, [_TIMESTAMP])[_TIMESTAMP].astype(np.float64)
    table = meta.episodes
    row_of = table.rows(episodes)
    timestamp = np.array(
        [stamps[e][f] for e, f in zip(episodes.tolist(), frames.tolist(), strict=True)],
        dtype=np.float64,
    ).reshape(-1)
    result = np.empty((episodes.size, len(meta.video_keys)), dtype=np.float64)
    for c, camera in enumerate(meta.video_keys):
        result[:, c] = table.video(camera).from_timestamp[row_of].astype(np.float64) + timestamp
    return result


def selected_episodes(config: BenchConfig, meta: DatasetMeta) -> tuple[np.ndarray, np.ndarray]:
    """The episodes the benchmark samples (``--episodes`` / ``--num-episodes``, else all) and
    their frame counts, in the dataset's order.

    Raises:
        ConfigError: an episode the dataset does not have (the first few are named).
    """
    table = meta.episodes
    ids = np.asarray(table.episode_index, dtype=np.int64)
    lengths = np.asarray(table.length, dtype=np.int64)
    if config.num_episodes is not None:
        return ids[: config.num_episodes], lengths[: config.num_episodes]
    if config.episodes is None:
        return ids, lengths
    wanted = np.asarray(config.episodes, dtype=np.int64)
    missing = np.setdiff1d(wanted, ids)
    if missing.size:
        raise ConfigError(
            f"episodes {missing[:5].tolist()} are not in the dataset ({ids.size} episodes, "
            f"ids {int(ids.min())}..{int(ids.max())})"
        )
    keep = np.isin(ids, wanted)
    return ids[keep], lengths[keep]


def randomness(sequence: SampleSequence, batch_size: int) -> dict[str, Any]:
    """How random the order is: distinct episodes overall and per batch, samples per episode."""
    episodes = sequence.episodes
    n = int(episodes.size)
    if n == 0:
        return {"samples": 0}
    batches = [episodes[i : i + batch_size] for i in range(0, n, batch_size)]
    full = [b for b in batches if b.size == batch_size] or batches
    unique_per_batch = np.array([np.unique(b).size for b in full], dtype=np.float64)
    _, counts = np.unique(episodes, return_counts=True)
    return {
        "samples": n,
        "batch_size": batch_size,
        "batches": len(full),
        "unique_episodes": int(counts.size),
        "shard_episodes": int(sequence.shard_episodes.size),
        "unique_episodes_per_batch_mean": float(unique_per_batch.mean()),
        "unique_episodes_per_batch_min": int(unique_per_batch.min()),
        "samples_per_episode_mean": float(counts.mean()),
        "samples_per_episode_max": int(counts.max()),
    }

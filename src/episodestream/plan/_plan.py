"""A cluster plan: what an epoch of the episode pool asks of the storage, per host and per window.

Pure: a function of the dataset's layout (manifest spans, Parquet row-group ranges, what opening
the dataset cost), the cluster, the pool parameters and the limits assumed. The request and
byte counts follow the exact schedule :class:`~episodestream.datasets.EpisodePoolDataset` runs:

* every episode is fetched once per epoch by the (rank, worker) slot that owns it
  (:func:`~episodestream.sampling.plan_shards`), one range request per camera, split into even
  parts above ``Limits.split_threshold_bytes`` like the HTTP reader splits it;
* each slot's row reader probes each data file it touches (1 byte), reads its footer the way
  pyarrow does (the last 64 KiB, then the rest of a larger footer), and reads each row group's
  column chunks as pyarrow's pre-buffering coalesces them, again whenever its decoded-column LRU
  dropped them (simulated in the pool's entry order);
* opening the dataset costs each rank what it cost the planner (same code, same sidecar
  availability).

Rates assume each rank consumes ``samples_per_s`` evenly over its share of the epoch. The
published limits (Hub resolver quotas, the per-host bucket ceiling) are assumptions the caller
can change, not facts this module checks.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from episodestream._checks import check_int, check_number
from episodestream.errors import ConfigError
from episodestream.sampling import PoolParams, PoolSchedule, WorkerSlot, plan_shards
from episodestream.storage import DEFAULT_LIMITS, Limits

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_HOST_CEILING_BYTES_PER_S",
    "DEFAULT_HUB_TIER",
    "DEFAULT_PREFETCH_EPISODES",
    "DEFAULT_RTT_S",
    "DEFAULT_WINDOW_S",
    "HUB_RESOLVER_LIMITS",
    "HUB_RESOLVER_LIMITS_SOURCE",
    "ClusterPlan",
    "ClusterSpec",
    "ColumnChunk",
    "DataFile",
    "DatasetLayout",
    "HubLimits",
    "PoolSpec",
    "coalesce_ranges",
    "format_plan",
    "plan_cluster",
    "pool_size_for_unique",
    "unique_episodes_per_batch",
]

MIB = 1 << 20
#: batch size the randomness figures are for (also the benchmark's)
DEFAULT_BATCH_SIZE = 32
#: pool entries fetched ahead per worker, as ``EpisodePoolDataset`` defaults it
DEFAULT_PREFETCH_EPISODES = 8
#: Hub resolver requests (URLs with /resolve/) allowed per 5-minute window, by plan, as the Hub's
#: rate-limit page listed them (September 2025); assumptions to override, not facts we verify
HUB_RESOLVER_LIMITS: dict[str, int] = {
    "anonymous": 3_000,
    "free": 5_000,
    "pro": 12_000,
    "team": 20_000,
    "enterprise": 50_000,
    "enterprise-plus": 100_000,
}
HUB_RESOLVER_LIMITS_SOURCE = "https://huggingface.co/docs/hub/rate-limits"
DEFAULT_HUB_TIER = "free"
DEFAULT_WINDOW_S = 300.0
#: per-host ceiling LeRobot's prototype measured on Hub buckets (bytes/s)
DEFAULT_HOST_CEILING_BYTES_PER_S = 270 * MIB
DEFAULT_RTT_S = 0.03
#: draws of the pure schedule simulated to measure distinct episodes per batch
RANDOMNESS_DRAWS = 1 << 15
#: pyarrow's first footer read (parquet's kDefaultFooterReadSize) and pre-buffer coalescing
#: (CacheOptions defaults: holes up to 8 KiB are read through, ranges capped at 32 MiB)
PARQUET_FOOTER_READ_BYTES = 64 * 1024
PARQUET_HOLE_BYTES = 8 * 1024
PARQUET_RANGE_LIMIT_BYTES = 32 * MIB


@dataclass(frozen=True, slots=True)
class ColumnChunk:
    """One column of one row group: the byte ranges ``(start, length)`` of its Parquet leaf
    columns in the data file, and the bytes its decoded array takes in the row reader's cache."""

    name: str
    ranges: tuple[tuple[int, int], ...]
    decoded_bytes: int


@dataclass(frozen=True, slots=True)
class DataFile:
    """A data Parquet file: its path, size and the footer reads pyarrow makes (lengths)."""

    path: str
    size: int
    footer_reads: tuple[int, ...]


@dataclass(frozen=True, slots=True, eq=False)
class DatasetLayout:
    """What the plan needs of a dataset (see :func:`episodestream.plan.read_plan_layout`).

    Attributes:
        episode_ids: selected episodes (int64, ascending or not).
        frame_counts: frames of each.
        fps: frames per second (for epoch durations in video time).
        cameras: camera keys, the columns of ``span_bytes``.
        span_bytes: bytes of each episode-camera range, shape ``(episodes, cameras)``.
        clip_nbytes: bytes an episode holds resident (all cameras' clips), for budgets.
        episode_groups: global row-group ids holding each episode's rows.
        group_file: data-file index of each global row group.
        group_columns: the column chunks each row group's reads need (in read order).
        data_files: the data files.
        open_requests: requests opening the dataset made (per rank).
        open_bytes: bytes opening the dataset received (per rank).
        row_cache_bytes: the row reader's decoded-column LRU budget.
        index_origin: where the planner's index came from (:attr:`EpisodeManifest.origin`):
            only ``"published"`` is what every rank finds; otherwise ranks on other machines
            build the index themselves, reading every video file's ``moov``.
    """

    episode_ids: np.ndarray
    frame_counts: np.ndarray
    fps: float
    cameras: tuple[str, ...]
    span_bytes: np.ndarray
    clip_nbytes: np.ndarray
    episode_groups: tuple[tuple[int, ...], ...]
    group_file: tuple[int, ...]
    group_columns: tuple[tuple[ColumnChunk, ...], ...]
    data_files: tuple[DataFile, ...]
    open_requests: int
    open_bytes: int
    row_cache_bytes: int
    index_origin: str = "published"

    def __post_init__(self) -> None:
        count = len(self.episode_ids)
        if count == 0:
            raise ConfigError("DatasetLayout: no episodes")
        for name in ("frame_counts", "clip_nbytes", "episode_groups"):
            if len(getattr(self, name)) != count:
                raise ConfigError(
                    f"DatasetLayout.{name} has {len(getattr(self, name))} rows, "
                    f"expected {count} (one per episode)"
                )
        if self.span_bytes.shape != (count, len(self.cameras)):
            raise ConfigError(
                f"DatasetLayout.span_bytes has shape {self.span_bytes.shape}, expected "
                f"{(count, len(self.cameras))}"
            )


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """The training job: ``nodes`` x ``gpus_per_node`` ranks, ``workers`` DataLoader workers
    each (0 counts as 1 process), each rank consuming ``samples_per_s`` samples a second.
    ``link_gbps`` is each node's link (None: not modelled); ``rtt_s`` the round trip to storage."""

    nodes: int = 1
    gpus_per_node: int = 1
    workers: int = 1
    samples_per_s: float = 100.0
    link_gbps: float | None = None
    rtt_s: float = DEFAULT_RTT_S

    def __post_init__(self) -> None:
        check_int("nodes", self.nodes, minimum=1)
        check_int("gpus_per_node", self.gpus_per_node, minimum=1)
        check_int("workers", self.workers, minimum=0)
        check_number("samples_per_s", self.samples_per_s, above=0)
        if self.link_gbps is not None:
            check_number("link_gbps", self.link_gbps, above=0)
        check_number("rtt_s", self.rtt_s, minimum=0)

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def workers_per_rank(self) -> int:
        return max(self.workers, 1)


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """The pool each slot runs: :class:`PoolParams`, entries prefetched ahead, the per-rank
    ``byte_budget`` chosen (None: not chosen yet), the epoch, and the batch size that the
    randomness figures are for. With ``unique_per_batch``, the plan picks the smallest pool
    size whose batches hold that many distinct episodes (``params.pool_size`` is ignored)."""

    params: PoolParams = field(default_factory=PoolParams)
    prefetch_episodes: int = DEFAULT_PREFETCH_EPISODES
    byte_budget: int | None = None
    epoch: int = 0
    batch_size: int = DEFAULT_BATCH_SIZE
    unique_per_batch: float | None = None

    def __post_init__(self) -> None:
        if self.unique_per_batch is not None:
            check_number("unique_per_batch", self.unique_per_batch, minimum=1)
        check_int("prefetch_episodes", self.prefetch_episodes, minimum=0)
        if self.byte_budget is not None:
            check_int("byte_budget", self.byte_budget, minimum=1)
        check_int("epoch", self.epoch, minimum=0)
        check_int("batch_size", self.batch_size, minimum=1)


@dataclass(frozen=True, slots=True)
class HubLimits:
    """Published limits assumed: resolver requests per window (shared by every node using one
    token), and the bytes/s one host reaches."""

    resolver_requests_per_window: int = HUB_RESOLVER_LIMITS[DEFAULT_HUB_TIER]
    window_s: float = DEFAULT_WINDOW_S
    host_ceiling_bytes_per_s: float = DEFAULT_HOST_CEILING_BYTES_PER_S
    tier: str = DEFAULT_HUB_TIER

    def __post_init__(self) -> None:
        check_int("resolver_requests_per_window", self.resolver_requests_per_window, minimum=1)
        check_number("window_s", self.window_s, above=0)
        check_number("host_ceiling_bytes_per_s", self.host_ceiling_bytes_per_s, above=0)


@dataclass(frozen=True, slots=True, eq=False)
class ClusterPlan:
    """What one epoch asks of storage. Per-slot arrays have shape ``(ranks, workers)``."""

    cluster: ClusterSpec
    pool: PoolSpec
    hub: HubLimits
    episodes: int
    frames: int
    cameras: int
    slot_frames: np.ndarray
    slot_episodes: np.ndarray
    slot_video_requests: np.ndarray
    slot_video_bytes: np.ndarray
    slot_row_requests: np.ndarray
    slot_row_bytes: np.ndarray
    open_requests: int
    open_bytes: int
    index_origin: str
    epoch_s: float
    node_bytes_per_s: float
    node_requests_per_s: float
    cluster_bytes_per_s: float
    cluster_requests_per_s: float
    startup_requests: int
    time_to_first_sample_s: float
    unique_per_batch: float
    byte_budget_min: int
    byte_budget_prefetch: int
    caps: dict[str, float]

    @property
    def slot_requests(self) -> np.ndarray:
        return self.slot_video_requests + self.slot_row_requests

    @property
    def slot_bytes(self) -> np.ndarray:
        return self.slot_video_bytes + self.slot_row_bytes

    @property
    def requests_per_window(self) -> float:
        return self.cluster_requests_per_s * self.hub.window_s

    @property
    def binding(self) -> str | None:
        """The limit that caps samples/s per rank below the requested rate, if one does."""
        name, cap = min(self.caps.items(), key=lambda item: item[1], default=(None, math.inf))
        return name if cap < self.cluster.samples_per_s else None

    def to_json(self) -> dict[str, Any]:
        ranks, workers = self.slot_frames.shape
        return {
            "cluster": {
                "nodes": self.cluster.nodes,
                "gpus_per_node": self.cluster.gpus_per_node,
                "ranks": ranks,
                "workers_per_rank": workers,
                "samples_per_s_per_rank": self.cluster.samples_per_s,
                "link_gbps": self.cluster.link_gbps,
                "rtt_s": self.cluster.rtt_s,
            },
            "pool": {
                "pool_episodes": self.pool.params.pool_size,
                "prefetch_episodes": self.pool.prefetch_episodes,
                "byte_budget": self.pool.byte_budget,
                "seed": self.pool.params.seed,
                "shuffle": self.pool.params.shuffle,
                "epoch": self.pool.epoch,
                "batch_size": self.pool.batch_size,
                "unique_per_batch_target": self.pool.unique_per_batch,
            },
            "assumptions": {
                "hub_tier": self.hub.tier,
                "resolver_requests_per_window": self.hub.resolver_requests_per_window,
                "window_s": self.hub.window_s,
                "host_ceiling_bytes_per_s": self.hub.host_ceiling_bytes_per_s,
                "source": HUB_RESOLVER_LIMITS_SOURCE,
            },
            "dataset": {"episodes": self.episodes, "frames": self.frames, "cameras": self.cameras},
            "epoch": {
                "seconds": self.epoch_s,
                "requests": int(self.slot_requests.sum()),
                "bytes": int(self.slot_bytes.sum()),
                "video_requests": int(self.slot_video_requests.sum()),
                "video_bytes": int(self.slot_video_bytes.sum()),
                "row_requests": int(self.slot_row_requests.sum()),
                "row_bytes": int(self.slot_row_bytes.sum()),
                "open_requests_per_rank": self.open_requests,
                "open_bytes_per_rank": self.open_bytes,
                "index_origin": self.index_origin,
            },
            "slots": {
                "frames": self.slot_frames.tolist(),
                "episodes": self.slot_episodes.tolist(),
                "requests": self.slot_requests.tolist(),
                "bytes": self.slot_bytes.tolist(),
            },
            "rates": {
                "node_bytes_per_s": self.node_bytes_per_s,
                "node_requests_per_s": self.node_requests_per_s,
                "cluster_bytes_per_s": self.cluster_bytes_per_s,
                "cluster_requests_per_s": self.cluster_requests_per_s,
                "requests_per_window": self.requests_per_window,
                "startup_requests": self.startup_requests,
            },
            "time_to_first_sample_s": self.time_to_first_sample_s,
            "randomness": {
                "unique_episodes_per_batch": self.unique_per_batch,
                "byte_budget_min_per_rank": self.byte_budget_min,
                "byte_budget_with_prefetch_per_rank": self.byte_budget_prefetch,
            },
            # JSON has no infinity: a limit that never binds is null
            "caps_samples_per_s_per_rank": {
                name: (cap if math.isfinite(cap) else None) for name, cap in self.caps.items()
            },
            "binding": self.binding,
        }


def coalesce_ranges(
    ranges: list[tuple[int, int]], *, hole_bytes: int, limit_bytes: int
) -> list[tuple[int, int]]:
    """Merge ``[start, end)`` ranges whose gap is at most ``hole_bytes`` while the merged range
    stays within ``limit_bytes`` (pyarrow's pre-buffer rule); result sorted by start."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(r for r in ranges if r[1] > r[0]):
        if merged:
            low, high = merged[-1]
            if start - high <= hole_bytes and max(end, high) - low <= limit_bytes:
                merged[-1] = (low, max(end, high))
                continue
        merged.append((start, end))
    return merged


def unique_episodes_per_batch(
    episode_ids: np.ndarray,
    frame_counts: np.ndarray,
    *,
    params: PoolParams,
    batch_size: int,
    slot: WorkerSlot | None = None,
    epoch: int = 0,
    max_draws: int = RANDOMNESS_DRAWS,
) -> float:
    """Mean distinct episodes per batch of ``batch_size`` consecutive draws of ``slot``'s pool.

    Measured on the exact schedule (its first ``max_draws`` draws): a DataLoader batch comes
    from one worker, and the pool draws in proportion to frames left, so entering episodes
    dominate and batches hold fewer episodes than an even spread over the pool would.
    """
    batch = check_int("batch_size", batch_size, minimum=1)
    schedule = PoolSchedule(episode_ids, frame_counts, params=params, slot=slot, epoch=epoch)
    draws = min(schedule.total_samples, check_int("max_draws", max_draws, minimum=1))
    episodes = schedule.take(max(draws // batch, 1) * batch).episode_ids
    if episodes.size < batch:  # the whole epoch is less than one batch
        return float(np.unique(episodes).size)
    ordered = np.sort(episodes.reshape(-1, batch), axis=1)
    distinct = 1 + np.count_nonzero(np.diff(ordered, axis=1), axis=1)
    return float(distinct.mean())


def pool_size_for_unique(
    unique_per_batch: float,
    episode_ids: np.ndarray,
    frame_counts: np.ndarray,
    *,
    params: PoolParams,
    batch_size: int,
    slot: WorkerSlot | None = None,
    epoch: int = 0,
) -> int:
    """The smallest pool whose batches hold ``unique_per_batch`` distinct episodes on average
    (by :func:`unique_episodes_per_batch`, bisected over pool sizes).

    Raises:
        ConfigError: the target is above the batch size, or not reached even with every
            episode of the slot resident.
    """
    target = check_number("unique_per_batch", unique_per_batch, minimum=1)
    if target > batch_size:
        raise ConfigError(
            f"unique_per_batch={unique_per_batch} cannot exceed batch_size={batch_size}"
        )

    def measured(pool_size: int) -> float:
        return unique_episodes_per_batch(
            episode_ids,
            frame_counts,
            params=replace(params, pool_size=pool_size),
            batch_size=batch_size,
            slot=slot,
            epoch=epoch,
        )

    low, high = 1, max(len(episode_ids), 1)
    if measured(high) < target:
        raise ConfigError(
            f"unique_per_batch={unique_per_batch} is out of reach: with all {high} episodes "
            f"of a worker resident its batches hold {measured(high):.1f} distinct episodes"
        )
    while low < high:  # more resident episodes, more distinct ones per batch
        middle = (low + high) // 2
        if measured(middle) >= target:
            high = middle
        else:
            low = middle + 1
    return low


def _split_counts(lengths: np.ndarray, limits: Limits) -> np.ndarray:
    """Requests the HTTP reader sends for each range length (even parts above the threshold)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    threshold = limits.split_threshold_bytes
    if threshold == 0:
        return np.ones_like(lengths)
    parts = -(-lengths // limits.split_part_bytes)
    return np.where(lengths > threshold, parts, 1)


class _RowTraffic:
    """One slot's row reader: files probed, footers read, decoded columns in its LRU."""

    def __init__(self, layout: DatasetLayout, limits: Limits) -> None:
        self.layout = layout
        self.limits = limits
        self.files: set[int] = set()
        self.cache: OrderedDict[tuple[int, str], int] = OrderedDict()
        self.cached = 0
        self.requests = 0
        self.bytes = 0
        self.footer_requests = 0

    def _read(self, length: int) -> None:
        self.requests += int(_split_counts(np.array([length]), self.limits)[0])
        self.bytes += length

    def episode(self, row: int) -> None:
        layout = self.layout
        for group in layout.episode_groups[row]:
            file_id = layout.group_file[group]
            if file_id not in self.files:
                self.files.add(file_id)
                data_file = layout.data_files[file_id]
                before = self.requests
                self.requests += 1  # the size probe: bytes=0-0
                self.bytes += min(1, data_file.size)
                for length in data_file.footer_reads:
                    self._read(length)
                self.footer_requests += self.requests - before
            absent = []
            for chunk in layout.group_columns[group]:
                key = (group, chunk.name)
                if key in self.cache:
                    self.cache.move_to_end(key)
                else:
                    absent.append(chunk)
            if not absent:
                continue
            for start, end in coalesce_ranges(
                [(start, start + length) for c in absent for start, length in c.ranges],
                hole_bytes=PARQUET_HOLE_BYTES,
                limit_bytes=PARQUET_RANGE_LIMIT_BYTES,
            ):
                self._read(end - start)
            for chunk in absent:
                self._put((group, chunk.name), chunk.decoded_bytes)

    def _put(self, key: tuple[int, str], size: int) -> None:
        budget = self.layout.row_cache_bytes
        if size > budget:
            return  # never cached: read again by the next episode that needs it
        self.cache[key] = size
        self.cached += size
        while self.cached > budget:
            _, dropped = self.cache.popitem(last=False)
            self.cached -= dropped


def _layout_rows(layout: DatasetLayout, episode_ids: np.ndarray) -> np.ndarray:
    """Rows of ``layout`` holding ``episode_ids`` (all present: the shards come from it)."""
    ids = np.asarray(layout.episode_ids, dtype=np.int64)
    order = np.argsort(ids, kind="stable")
    return order[np.searchsorted(ids, episode_ids, sorter=order)]


@dataclass(frozen=True, slots=True)
class _SlotFigures:
    row_requests: int
    row_bytes: int
    startup_requests: int  # first pool, its prefetch and the footers: one burst at start
    bytes_before_first_draw: int  # clip bytes queued up to the episode drawn first
    budget_min: int  # largest resident pool plus one largest episode in flight (x2)
    budget_prefetch: int  # the same with the prefetched episodes resident too


def _slot_figures(
    layout: DatasetLayout, schedule: PoolSchedule, pool: PoolSpec, limits: Limits
) -> _SlotFigures:
    params = schedule.params
    order = schedule.entry_order
    order_rows = _layout_rows(layout, order)
    traffic = _RowTraffic(layout, limits)
    for row in order_rows.tolist():  # rows are read as episodes enter
        traffic.episode(row)
    ahead = order_rows[: params.pool_size + pool.prefetch_episodes]
    clip_requests = _split_counts(layout.span_bytes[ahead], limits).sum()
    first = next(e for e in schedule.events() if e.kind == "draw").episode_id
    position = int(np.flatnonzero(order == first)[0])
    sizes = np.sort(np.asarray(layout.clip_nbytes, dtype=np.int64)[order_rows])[::-1]
    in_flight = 2 * int(sizes[0])  # payload and clip of the largest, while it is built
    return _SlotFigures(
        row_requests=traffic.requests,
        row_bytes=traffic.bytes,
        startup_requests=int(clip_requests) + traffic.footer_requests,
        bytes_before_first_draw=int(layout.span_bytes[order_rows[: position + 1]].sum()),
        budget_min=int(sizes[: params.pool_size].sum()) + in_flight,
        budget_prefetch=int(sizes[: params.pool_size + pool.prefetch_episodes].sum()) + in_flight,
    )


def plan_cluster(
    layout: DatasetLayout,
    *,
    cluster: ClusterSpec,
    pool: PoolSpec = PoolSpec(),
    limits: Limits = DEFAULT_LIMITS,
    hub: HubLimits = HubLimits(),
) -> ClusterPlan:
    """Requests, bytes and rates of one epoch of ``pool`` on ``cluster`` (module docstring)."""
    ranks, workers = cluster.ranks, cluster.workers_per_rank
    params = pool.params
    shard = plan_shards(
        layout.episode_ids,
        layout.frame_counts,
        world_size=ranks,
        num_workers=workers,
        seed=params.seed,
        epoch=pool.epoch,
        shuffle=params.shuffle,
    )
    first_slot = WorkerSlot(0, ranks, 0, workers)
    if pool.unique_per_batch is not None:
        chosen = pool_size_for_unique(
            pool.unique_per_batch,
            shard.episodes_for(first_slot),
            shard.frame_counts_for(first_slot),
            params=params,
            batch_size=pool.batch_size,
            slot=first_slot,
            epoch=pool.epoch,
        )
        params = replace(params, pool_size=chosen)
        pool = replace(pool, params=params)
    unique_per_batch = unique_episodes_per_batch(
        shard.episodes_for(first_slot),
        shard.frame_counts_for(first_slot),
        params=params,
        batch_size=pool.batch_size,
        slot=first_slot,
        epoch=pool.epoch,
    )
    rows = _layout_rows(layout, shard.episode_ids)
    video_requests = _split_counts(layout.span_bytes[rows], limits).sum(axis=1)
    video_bytes = np.asarray(layout.span_bytes, dtype=np.int64)[rows].sum(axis=1)
    shape = (ranks, workers)
    slot_index = (shard.rank_of, shard.worker_of)
    slot_frames = shard.frames_per_slot
    slot_episodes = np.zeros(shape, dtype=np.int64)
    np.add.at(slot_episodes, slot_index, 1)
    slot_video_requests = np.zeros(shape, dtype=np.int64)
    np.add.at(slot_video_requests, slot_index, video_requests)
    slot_video_bytes = np.zeros(shape, dtype=np.int64)
    np.add.at(slot_video_bytes, slot_index, video_bytes)
    slot_row_requests = np.zeros(shape, dtype=np.int64)
    slot_row_bytes = np.zeros(shape, dtype=np.int64)

    bandwidth = hub.host_ceiling_bytes_per_s
    if cluster.link_gbps is not None:
        bandwidth = min(bandwidth, cluster.link_gbps * 1e9 / 8)
    worker_bandwidth = bandwidth / (cluster.gpus_per_node * workers)
    first_sample_s = 0.0
    startup = 0
    worst_rank_need = np.zeros((ranks, 2), dtype=np.int64)
    for rank in range(ranks):
        for worker in range(workers):
            slot = WorkerSlot(rank, ranks, worker, workers)
            ids = shard.episodes_for(slot)
            if ids.size == 0:
                continue
            schedule = PoolSchedule(
                ids, shard.frame_counts_for(slot), params=params, slot=slot, epoch=pool.epoch
            )
            figures = _slot_figures(layout, schedule, pool, limits)
            slot_row_requests[rank, worker] = figures.row_requests
            slot_row_bytes[rank, worker] = figures.row_bytes
            startup += figures.startup_requests
            fetch_s = 2 * cluster.rtt_s + figures.bytes_before_first_draw / worker_bandwidth
            rows_s = 3 * cluster.rtt_s  # probe, footer, first row group
            first_sample_s = max(first_sample_s, fetch_s, rows_s)
            worst_rank_need[rank] = np.maximum(
                worst_rank_need[rank], (figures.budget_min, figures.budget_prefetch)
            )
    budget_min = int(worst_rank_need[:, 0].max()) * workers
    budget_prefetch = int(worst_rank_need[:, 1].max()) * workers
    open_s = layout.open_requests * cluster.rtt_s + layout.open_bytes / (
        bandwidth / cluster.gpus_per_node
    )
    startup += ranks * layout.open_requests

    # rates: each rank spreads its share over frames / samples_per_s seconds
    rank_frames = slot_frames.sum(axis=1).astype(np.float64)
    rank_seconds = np.where(rank_frames > 0, rank_frames / cluster.samples_per_s, np.inf)
    rank_bytes_per_s = (slot_video_bytes + slot_row_bytes).sum(axis=1) / rank_seconds
    rank_requests_per_s = (slot_video_requests + slot_row_requests).sum(axis=1) / rank_seconds
    node_of = np.arange(ranks) // cluster.gpus_per_node
    node_bytes = np.bincount(node_of, weights=rank_bytes_per_s, minlength=cluster.nodes)
    node_requests = np.bincount(node_of, weights=rank_requests_per_s, minlength=cluster.nodes)
    cluster_requests_per_s = float(rank_requests_per_s.sum())
    rate = cluster.samples_per_s
    caps = {"host_ceiling": _cap(rate, hub.host_ceiling_bytes_per_s, float(node_bytes.max()))}
    if cluster.link_gbps is not None:
        caps["link"] = _cap(rate, cluster.link_gbps * 1e9 / 8, float(node_bytes.max()))
    caps["resolver_quota"] = _cap(
        rate, hub.resolver_requests_per_window, cluster_requests_per_s * hub.window_s
    )
    return ClusterPlan(
        cluster=cluster,
        pool=pool,
        hub=hub,
        episodes=len(layout.episode_ids),
        frames=int(np.asarray(layout.frame_counts).sum()),
        cameras=len(layout.cameras),
        slot_frames=slot_frames,
        slot_episodes=slot_episodes,
        slot_video_requests=slot_video_requests,
        slot_video_bytes=slot_video_bytes,
        slot_row_requests=slot_row_requests,
        slot_row_bytes=slot_row_bytes,
        open_requests=layout.open_requests,
        open_bytes=layout.open_bytes,
        index_origin=layout.index_origin,
        epoch_s=float(rank_seconds[np.isfinite(rank_seconds)].max()),
        node_bytes_per_s=float(node_bytes.max()),
        node_requests_per_s=float(node_requests.max()),
        cluster_bytes_per_s=float(rank_bytes_per_s.sum()),
        cluster_requests_per_s=cluster_requests_per_s,
        startup_requests=startup,
        time_to_first_sample_s=open_s + first_sample_s,
        unique_per_batch=unique_per_batch,
        byte_budget_min=budget_min,
        byte_budget_prefetch=budget_prefetch,
        caps=caps,
    )


def _cap(rate: float, limit: float, use: float) -> float:
    """Samples/s per rank at which ``use`` (measured at ``rate``) reaches ``limit``."""
    return math.inf if use <= 0 else rate * limit / use


def _size(count: float) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


def format_plan(plan: ClusterPlan) -> str:
    """The plan as a readable text table."""
    c, hub = plan.cluster, plan.hub
    ranks, workers = plan.slot_frames.shape
    requests, nbytes = int(plan.slot_requests.sum()), int(plan.slot_bytes.sum())
    lines = [
        f"cluster: {c.nodes} node(s) x {c.gpus_per_node} GPU(s) x {workers} worker(s) = "
        f"{ranks * workers} slots, {c.samples_per_s:g} samples/s per rank",
        f"dataset: {plan.episodes} episodes, {plan.frames} frames, {plan.cameras} camera(s); "
        f"one epoch takes {plan.epoch_s:.3g} s",
        f"pool: {plan.pool.params.pool_size} episodes per worker, prefetch "
        f"{plan.pool.prefetch_episodes}, seed {plan.pool.params.seed}, epoch {plan.pool.epoch}",
        "",
        f"{'one epoch':<28}{'requests':>12}{'bytes':>14}",
        f"{'  video clips':<28}{int(plan.slot_video_requests.sum()):>12}"
        f"{_size(int(plan.slot_video_bytes.sum())):>14}",
        f"{'  parquet rows':<28}{int(plan.slot_row_requests.sum()):>12}"
        f"{_size(int(plan.slot_row_bytes.sum())):>14}",
        f"{'  total':<28}{requests:>12}{_size(nbytes):>14}",
        f"{'  opening, per rank':<28}{plan.open_requests:>12}{_size(plan.open_bytes):>14}",
        "",
        f"{'rates':<28}{'per node':>12}{'cluster':>14}",
        f"{'  bytes/s':<28}{_size(plan.node_bytes_per_s) + '/s':>12}"
        f"{_size(plan.cluster_bytes_per_s) + '/s':>14}",
        f"{'  requests/s':<28}{plan.node_requests_per_s:>12.1f}"
        f"{plan.cluster_requests_per_s:>14.1f}",
        f"{f'  requests per {hub.window_s:g} s window':<28}{'':>12}"
        f"{plan.requests_per_window:>14.0f}",
        f"{'  startup burst (requests)':<28}{'':>12}{plan.startup_requests:>14}",
        "",
        f"{'limit (assumed)':<40}{'binds at samples/s per rank':>30}",
        f"{f'  host ceiling {_size(hub.host_ceiling_bytes_per_s)}/s':<40}"
        f"{plan.caps['host_ceiling']:>30.1f}",
    ]
    if "link" in plan.caps:
        lines.append(f"{f'  link {c.link_gbps:g} Gb/s per node':<40}{plan.caps['link']:>30.1f}")
    quota = f"  resolvers ({hub.tier}: {hub.resolver_requests_per_window} / {hub.window_s:g} s)"
    lines.append(f"{quota:<40}{plan.caps['resolver_quota']:>30.1f}")
    binding = plan.binding
    if plan.startup_requests > hub.resolver_requests_per_window:
        lines.append(
            f"  startup burst of {plan.startup_requests} requests alone is over the quota: "
            "stagger rank starts"
        )
    lines += [
        "  -> "
        + (
            f"{binding} binds: {c.samples_per_s:g} samples/s per rank is above "
            f"{plan.caps[binding]:.1f}"
            if binding
            else f"nothing binds at {c.samples_per_s:g} samples/s per rank"
        ),
        "",
        f"time to first sample: about {plan.time_to_first_sample_s:.2f} s "
        f"(RTT {c.rtt_s * 1000:g} ms)",
        f"randomness: batches of {plan.pool.batch_size} hold {plan.unique_per_batch:.1f} "
        "distinct episodes on average (worker 0 of rank 0); byte_budget per rank >= "
        f"{_size(plan.byte_budget_min)} ({_size(plan.byte_budget_prefetch)} with prefetch)",
    ]
    if plan.pool.byte_budget is not None and plan.pool.byte_budget < plan.byte_budget_prefetch:
        lines.append(
            f"  byte_budget {_size(plan.pool.byte_budget)} cannot hold the pool and its "
            "prefetch: prefetches wait for room (stalls), requests stay as planned"
        )
    if plan.index_origin != "published":
        lines.append(
            f"  opening counted with an index {plan.index_origin} here: ranks on machines "
            "without it read every video file's moov first; publish it (episodestream index)"
        )
    lines.append(f"assumptions: Hub limits from {HUB_RESOLVER_LIMITS_SOURCE} (Sept 2025)")
    return "\n".join(lines)

"""The benchmark's tracks and phases, each returning a plain dict of figures.

- STREAM: :class:`EpisodePoolDataset` draws the sequence as fast as it can (throughput, time to
  first sample, memory, a time series), then again consumed at a target rate (keep-up).
- FETCH: the sequence's episodes fetched through the byte cache alone (no decoding): MiB/s,
  episodes/s, stage times, HTTP figures; its resident clips then serve DECODE.
- DECODE: decoder open cost and random decoding of resident clips (no network).
- LOCAL: the same samples decoded from full local files (same backend, threads, pipeline).
- NAIVE: the same samples decoded through an fsspec file object of each remote video file.
- DOWNLOAD: the touched files downloaded whole, then decoded (LOCAL's decode of the same bytes).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from episodestream.cache import EpisodeByteCache, ManifestClipSource
from episodestream.datasets import EpisodePoolDataset, row_tensor
from episodestream.decode import (
    DecodeExecutor,
    Decoder,
    DecoderPool,
    TorchcodecDecoder,
    open_decoder,
    resolve_backend,
    to_float,
)
from episodestream.errors import DecodeError, EpisodeStreamError
from episodestream.lerobot import EpisodeRowReader
from episodestream.storage import LocalRangeReader, RangeReader
from episodestream_tools.bench._access import AccessLog, range_length, range_start, summarize
from episodestream_tools.bench._config import BenchConfig
from episodestream_tools.bench._measure import (
    Progress,
    Sampler,
    synchronize,
    synchronized_end,
    timing_figures,
)
from episodestream_tools.bench._remote_decoder import RemoteFileDecoder
from episodestream_tools.bench._sequence import BenchDataset, indexed_episodes

__all__ = [
    "download_files",
    "run_decode",
    "run_fetch",
    "run_file_track",
    "run_keepup",
    "run_stream",
    "warm_up",
]

logger = logging.getLogger(__name__)

_MIB = 2**20
# how long a step of the keep-up consumer may wait for a batch before it counts as a miss
_MISS_TOLERANCE_S = 0.001
_QUEUE_POLL_S = 0.5
# batches the keep-up producer prepares ahead (DataLoader's default prefetch_factor)
_PREFETCH_BATCHES = 2
_RESULT_TIMEOUT_S = 300.0


def _pool(
    config: BenchConfig, ds: BenchDataset, failure_log: Path | None = None
) -> EpisodePoolDataset:
    return EpisodePoolDataset(
        **pool_arguments(config, ds, failure_log),
        rank=ds.rank,
        world_size=ds.world_size,
    )


def pool_arguments(
    config: BenchConfig, ds: BenchDataset, failure_log: Path | None = None
) -> dict[str, Any]:
    """The pool's arguments every STREAM run shares (rank and world size aside)."""
    return dict(
        # the fsspec backend reads an http(s) root through a Location of kind fsspec
        root=config.root if config.range_backend == "native" else ds.location,
        episodes=None if ds.episode_ids is None else list(ds.episode_ids),
        image_dtype=config.image_dtype,
        pool_size=config.pool_size,
        prefetch_episodes=config.prefetch_episodes,
        byte_budget=config.byte_budget,
        seed=config.seed,
        decode_threads=config.decode_threads,
        decoder=config.decoder,
        device=config.device,
        fetch_workers=config.fetch_workers,
        ffmpeg_threads=config.ffmpeg_threads,
        cache_dir=config.cache_dir,
        wait_timeout_s=config.wait_timeout_s,
        reader_options=reader_options(ds, failure_log),
    )


def reader_options(ds: BenchDataset, failure_log: Path | None) -> dict[str, Any]:
    """The dataset's reader options, plus a failure log where the reader keeps one (our HTTP
    and Hub readers): every failed or retried attempt, with its cause and retry delay."""
    options = dict(ds.reader_options)
    if failure_log is not None and ds.location.kind in ("http", "hub"):
        options["failure_log"] = str(failure_log)
    return options


def failure_figures(failure_log: Path | None) -> dict[str, Any]:
    """What a reader's failure log holds: failed attempts by cause (HTTP status, else the
    error's type) and how many were retried (the reader's counters hold the times)."""
    causes: collections.Counter[str] = collections.Counter()
    retried = 0
    if failure_log is not None and failure_log.is_file():
        with failure_log.open(encoding="utf-8") as lines:
            for line in lines:
                record = json.loads(line)
                status = record.get("status")
                causes[f"HTTP {status}" if status else str(record.get("error", "?"))] += 1
                retried += bool(record.get("retry"))
    return {
        "failed_attempts": int(sum(causes.values())),
        "failed_attempts_retried": retried,
        "failures_by_cause": dict(sorted(causes.items())),
    }


def _delta(after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """Counter differences (keys of ``after``; numbers only)."""
    return {
        key: value - before.get(key, 0)
        for key, value in after.items()
        if isinstance(value, int | float) and not isinstance(value, bool)
    }


def span_requests(access: AccessLog, records: list[Any], ds: BenchDataset) -> dict[str, Any]:
    """Video range requests matched to the episode-camera spans they start at (the server's
    view): requests per episode-camera requested, and requests that match no span."""
    manifest = ds.manifest
    spans = manifest.spans
    starts: dict[tuple[str, int], tuple[int, int]] = {}
    for row, episode in enumerate(manifest.episode_index.tolist()):
        for column in range(len(manifest.cameras)):
            path = manifest.file_paths[int(spans.file_id[row, column])]
            starts[(path, int(spans.byte_start[row, column]))] = (int(episode), column)
    matched = 0
    unmatched = 0
    touched: set[tuple[int, int]] = set()
    for record in records:
        relative = access.relative(record)
        if not relative.startswith("videos/") or not record.range_header:
            continue
        first = range_start(record)
        if first is None or range_length(record) == 1:
            continue
        key = starts.get((relative, first))
        if key is None:
            unmatched += 1
        else:
            matched += 1
            touched.add(key)
    return {
        "video_range_requests_matched": matched,
        "video_range_requests_unmatched": unmatched,
        "episode_cameras_requested": len(touched),
        "episodes_requested": sorted({episode for episode, _ in touched}),
        "video_range_requests_per_episode_camera": matched / len(touched) if touched else None,
    }


def http_figures(metrics: dict[str, Any]) -> dict[str, Any]:
    """Per-request means from a reader's counters (HttpRangeReader's names)."""
    requests = int(metrics.get("requests", 0))
    connections = int(metrics.get("connections", 0))

    def per_request_ms(name: str) -> float | None:
        return 1000.0 * metrics[name] / requests if requests and name in metrics else None

    statuses = {
        key.removeprefix("status_"): int(value)
        for key, value in metrics.items()
        if key.startswith("status_")
    }
    return {
        "requests": requests,
        "connections": connections,
        "connect_ms": 1000.0 * metrics["connect_seconds"] / connections
        if connections and "connect_seconds" in metrics
        else None,
        "headers_ms": per_request_ms("headers_seconds"),
        "first_byte_ms": per_request_ms("first_byte_seconds"),
        "body_ms": per_request_ms("body_seconds"),
        "retries": int(metrics.get("retries", 0)),
        "resumes": int(metrics.get("resumes", 0)),
        "failures": int(metrics.get("failures", 0)),
        # 429s that announced a quota window, and the time waited for windows to reset
        "rate_limited": int(metrics.get("rate_limited", 0)),
        "quota_wait_s": float(metrics.get("quota_wait_seconds", 0.0)),
        # what failing cost: the failed attempts themselves and the backoff slept after them
        "failed_attempt_s": float(metrics.get("failed_attempt_seconds", 0.0)),
        "retry_sleep_s": float(metrics.get("retry_sleep_seconds", 0.0)),
        "status_counts": statuses,
        "bytes": int(metrics.get("bytes", 0)),
        "bytes_per_request": metrics.get("bytes", 0) / requests if requests else 0.0,
    }


def warm_up(config: BenchConfig, ds: BenchDataset) -> float:
    """Load the decoder libraries (torchcodec's first import and FFmpeg's first open take
    seconds) and fsspec's HTTP backend before any track is timed; returns the seconds spent."""
    started = time.perf_counter()
    reader = ds.open_reader()
    try:
        source = ManifestClipSource(ds.manifest, reader, root=ds.meta.root)
        job = source.clip_jobs(int(ds.sequence.episodes[0]))[0]
        clip = job.build(reader.read(job.path, job.byte_start, job.payload_nbytes))
    finally:
        reader.close()
    with open_decoder(
        clip, backend=config.decoder, device=config.device, threads=config.ffmpeg_threads
    ) as decoder:
        decoder.frames_at(decoder.frame_times()[:1])
    if "naive" in config.tracks and ds.location.kind == "http":
        try:
            import fsspec

            fsspec.filesystem("http")
        except ImportError:
            pass  # reported when NAIVE runs
    return time.perf_counter() - started


# ----------------------------------------------------------------------------------- STREAM


def run_stream(
    config: BenchConfig,
    ds: BenchDataset,
    access: AccessLog | None,
    failure_log: Path | None = None,
) -> dict[str, Any]:
    """STREAM at full speed over the sequence: throughput, first sample, memory, time series."""
    sequence = ds.sequence
    n = len(sequence)
    opened = time.perf_counter()
    pool = _pool(config, ds, failure_log)
    open_s = time.perf_counter() - opened
    try:
        reader_before = dict(pool.metrics()["reader"])
        done = [0]

        def probe() -> dict[str, Any]:
            cache = pool.metrics().get("cache")
            held = 0 if cache is None else cache.resident_bytes + cache.reserved_bytes
            return {"samples": done[0], "cache_bytes": held}

        arrivals = np.zeros(n, dtype=np.float64)
        got = np.zeros((n, 2), dtype=np.int64)
        mark = access.mark() if access else 0
        with (
            Sampler(probe) as sampler,
            Progress(n, "STREAM", enabled=config.progress, unit="samples") as bar,
        ):
            started = time.perf_counter()
            cpu_started = time.process_time()
            iterator = iter(pool)
            try:
                for i in range(n):
                    sample = next(iterator)
                    arrivals[i] = time.perf_counter() - started
                    got[i] = (int(sample["episode_index"]), int(sample["frame_index"]))
                    done[0] = i + 1
                    bar.update()
                synchronized_end(config.device, arrivals, started)
                final = pool.metrics()
                cpu_s = time.process_time() - cpu_started
            finally:
                iterator.close()
        reader_delta = _delta(dict(final["reader"]), reader_before)
        records = access.records(mark) if access else None
    finally:
        pool.close()
    cache = dataclasses.asdict(final["cache"])
    decoders = dataclasses.asdict(final["decoders"])
    fetched = sequence.entry_order[: min(cache["fetches"], sequence.entry_order.size)]
    payload = int(ds.episode_payload_bytes(fetched).sum()) if fetched.size else 0
    video = int(ds.episode_video_bytes(fetched).sum()) if fetched.size else 0
    result: dict[str, Any] = {
        **timing_figures(arrivals, n, cpu_s),
        "open_s": open_s,
        "sequence_matches": bool(
            np.array_equal(got[:, 0], sequence.episodes)
            and np.array_equal(got[:, 1], sequence.frames)
        ),
        "episodes_entered": int(final.get("episodes_entered", 0)),
        "refill_waits": int(final.get("refill_waits", 0)),
        "refill_wait_s": float(final.get("refill_wait_s", 0.0)),
        "cache": cache,
        "decoders": decoders,
        "episodes_fetched": int(fetched.size),
        "bytes_fetched": int(cache["bytes_fetched"]),
        "manifest_bytes_fetched_episodes": payload,
        "video_bytes_fetched_episodes": video,
        "bytes_fetched_over_video_bytes": cache["bytes_fetched"] / video if video else None,
        "byte_budget": config.byte_budget,
        "peak_cache_bytes": int(cache["peak_bytes"]),
        "reader": reader_delta,
        "http": {**http_figures(reader_delta), **failure_figures(failure_log)},
        "memory": sampler.memory(),
        "timeline": [
            {
                "t_s": round(p["t_s"], 4),
                "samples": p.get("samples", 0),
                "cache_bytes": p.get("cache_bytes", 0),
                "rss_bytes": p["rss_bytes"],
            }
            for p in sampler.points
        ],
    }
    if records is not None and access is not None:
        server = summarize(access, records)
        server.update(span_requests(access, records, ds))
        # episodes still in flight when the iteration stopped are requested, not counted as
        # fetched: compare with the episodes the requests were for
        requested = np.asarray(server["episodes_requested"], dtype=np.int64)
        requested_video = int(ds.episode_video_bytes(requested).sum()) if requested.size else 0
        server["video_body_over_video_bytes"] = (
            server["video_body_bytes"] / requested_video if requested_video else None
        )
        result["server"] = server
        result["range_requests_per_episode_camera"] = server[
            "video_range_requests_per_episode_camera"
        ]
    else:
        # the reader also fetched Parquet rows and size probes: only the server can tell
        result["range_requests_per_episode_camera"] = None
    return result


def run_keepup(config: BenchConfig, ds: BenchDataset, target_samples_s: float) -> dict[str, Any]:
    """STREAM consumed at ``target_samples_s`` by a paced "trainer" while replacements stream in.

    A producer thread batches samples into a queue of ``_PREFETCH_BATCHES`` (as a DataLoader
    prefetches); the trainer takes a batch, then "trains" for ``batch / target`` seconds.
    Waiting for a batch beyond that is a deadline miss; its time is the refill stall.
    """
    n = min(config.effective_keepup_samples, int(ds.sequence.shard_frames.sum()))
    batch_size = config.batch_size
    pool = _pool(config, ds)
    batches: queue.Queue[Any] = queue.Queue(maxsize=_PREFETCH_BATCHES)
    stop = threading.Event()
    final: dict[str, Any] = {}
    started = time.perf_counter()

    def put(item: Any) -> bool:
        while not stop.is_set():
            try:
                batches.put(item, timeout=_QUEUE_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        iterator = iter(pool)
        try:
            batch: list[int] = []
            for i in range(n):
                sample = next(iterator)
                batch.append(int(sample["episode_index"]))
                if len(batch) == batch_size or i == n - 1:
                    if i == n - 1:
                        final.update(pool.metrics())
                    if not put(batch):
                        return
                    batch = []
        except BaseException as error:  # handed to the trainer, type intact
            put(error)
        finally:
            iterator.close()

    producer = threading.Thread(target=produce, name="episodestream-bench-keepup", daemon=True)
    producer.start()
    consumed = 0
    stall_s = 0.0
    misses = 0
    first_batch_s: float | None = None
    clock_start = 0.0
    try:
        with Progress(n, "keep-up", enabled=config.progress, unit="samples") as bar:
            while consumed < n:
                asked = time.perf_counter()
                item = batches.get(timeout=config.wait_timeout_s)
                arrived = time.perf_counter()
                if isinstance(item, BaseException):
                    raise item
                if first_batch_s is None:
                    first_batch_s = arrived - started
                    clock_start = arrived
                else:
                    waited = arrived - asked
                    if waited > _MISS_TOLERANCE_S:
                        misses += 1
                        stall_s += waited
                consumed += len(item)
                bar.update(len(item))
                time.sleep(len(item) / target_samples_s)  # the training step
        wall = time.perf_counter() - clock_start
    finally:
        stop.set()
        producer.join(config.wait_timeout_s)
        pool.close()
    actual = consumed / wall if wall > 0 else 0.0
    entered = int(final.get("episodes_entered", 0))
    replacements = max(0, entered - min(config.pool_size, int(ds.sequence.shard_episodes.size)))
    steps = -(-consumed // batch_size)
    return {
        "target_samples_s": target_samples_s,
        "samples": consumed,
        "batches": steps,
        "wall_s": wall,
        "actual_samples_s": actual,
        "time_to_first_batch_s": first_batch_s,
        "deadline_misses": misses,
        "miss_fraction_of_steps": misses / max(steps - 1, 1),
        "stall_s": stall_s,
        "stall_fraction_of_wall": stall_s / wall if wall > 0 else 0.0,
        "refill_waits": int(final.get("refill_waits", 0)),
        "refill_wait_s": float(final.get("refill_wait_s", 0.0)),
        "episodes_entered": entered,
        "replacements": replacements,
        "replacements_per_s": replacements / wall if wall > 0 else 0.0,
        "kept_up": bool(actual >= 0.98 * target_samples_s and stall_s < 0.02 * wall),
    }


# -------------------------------------------------------------------------- FETCH and DECODE


@dataclasses.dataclass(slots=True)
class FetchedPool:
    """Episodes kept resident after FETCH for DECODE; close() releases everything."""

    cache: EpisodeByteCache
    reader: RangeReader
    episodes: list[int]

    def close(self) -> None:
        self.cache.close()
        self.reader.close()


def run_fetch(
    config: BenchConfig,
    ds: BenchDataset,
    access: AccessLog | None,
    failure_log: Path | None = None,
) -> tuple[dict[str, Any], FetchedPool]:
    """Fetch every episode the sequence touches through the byte cache alone (no decoding),
    ``fetch_workers`` at a time; keeps the first ``pool_size`` resident for DECODE."""
    episodes = ds.sequence.touched()
    payload = ds.episode_payload_bytes(episodes)
    reader = ds.open_reader(**_failure_option(ds, failure_log))
    source = ManifestClipSource(ds.manifest, reader, root=ds.meta.root)
    cache = EpisodeByteCache(
        source, reader, byte_budget=config.byte_budget, fetch_workers=config.fetch_workers
    )
    keep = [int(e) for e in episodes[: config.pool_size]]
    for episode in keep:
        cache.retain(episode)
    window = 2 * config.fetch_workers
    mark = access.mark() if access else 0
    try:
        with Progress(len(episodes), "fetch", enabled=config.progress, unit="episodes") as bar:
            started = time.perf_counter()
            queued = 0
            ids = [int(e) for e in episodes]
            for i, episode in enumerate(ids):
                while queued < len(ids) and queued < i + window and cache.prefetch(ids[queued]):
                    queued += 1
                cache.wait_ready(episode, timeout=config.wait_timeout_s)
                if episode not in keep:
                    cache.evict(episode)
                bar.update(1, int(payload[i]))
            seconds = time.perf_counter() - started
        metrics = dataclasses.asdict(cache.metrics())
        reader_metrics = dict(reader.metrics())
        records = access.records(mark) if access else None
    except BaseException:
        cache.close()
        reader.close()
        raise
    fetches = int(metrics["fetches"])
    jobs = fetches * len(ds.cameras)
    total = int(metrics["bytes_fetched"])
    expected = int(ds.episode_payload_bytes(episodes).sum())
    video = int(ds.episode_video_bytes(episodes).sum())
    mib_s = total / _MIB / seconds if seconds > 0 else 0.0
    all_bytes = int(ds.manifest.episode_bytes().sum())
    index_episodes = indexed_episodes(ds.manifest)
    rate = total / seconds if seconds > 0 else 0.0

    def per_job_ms(name: str) -> float:
        return 1000.0 * metrics[name] / jobs if jobs else 0.0

    result: dict[str, Any] = {
        "episodes": fetches,
        "camera_jobs": jobs,
        "seconds": seconds,
        "bytes": total,
        "manifest_bytes": expected,
        "video_bytes": video,
        "bytes_over_video_bytes": total / video if video else None,
        "mib_per_s": mib_s,
        "episodes_per_s": fetches / seconds if seconds > 0 else 0.0,
        "mib_per_episode_camera": total / _MIB / jobs if jobs else 0.0,
        "estimated_s_benchmark_episodes": total / rate if rate else None,
        # the index's figures: every episode's, or only those of a subset's sidecar
        # (index --episodes), whose bytes say nothing of the whole dataset's
        "index_episodes": index_episodes,
        "dataset_bytes": all_bytes,
        "dataset_episodes": int(ds.manifest.num_episodes),
        "estimated_s_whole_dataset": (
            all_bytes / rate if rate and index_episodes is None else None
        ),
        "ms_per_camera_job": {
            "manifest_lookup": per_job_ms("lookup_s"),
            "range_fetch": per_job_ms("fetch_s"),
            "clip_write": per_job_ms("clip_write_s"),
            "store": per_job_ms("store_s"),
        },
        "ms_per_episode_range_fetch": 1000.0 * metrics["fetch_s"] / fetches if fetches else 0.0,
        "failures": int(metrics["failures"]),
        "cache": metrics,
        "http": {**http_figures(reader_metrics), **failure_figures(failure_log)},
    }
    if records is not None and access is not None:
        server = summarize(access, records)
        server.update(span_requests(access, records, ds))
        result["server"] = server
        result["range_requests_per_episode_camera"] = server[
            "video_range_requests_per_episode_camera"
        ]
    else:
        # the requests for bytes (a redirect hop to a CDN is one of them): not those that
        # learned a size or listed a folder (an HTTP probe, a Hub tree page, an fsspec info);
        # a local reader's requests are all reads
        spans = int(reader_metrics.get("requests", 0)) - int(reader_metrics.get("lookups", 0))
        result["range_requests_per_episode_camera"] = spans / jobs if jobs else None
    return result, FetchedPool(cache, reader, keep)


def run_decode(config: BenchConfig, ds: BenchDataset, fetched: FetchedPool) -> dict[str, Any]:
    """Decoder open cost and random decoding of the resident clips (no network involved)."""
    cache = fetched.cache
    residents = {e: cache.get(e) for e in fetched.episodes}
    residents = {e: r for e, r in residents.items() if r is not None}
    sequence = ds.sequence
    mask = np.isin(sequence.episodes, list(residents))
    picks = np.flatnonzero(mask)[: config.decode_samples]
    if picks.size == 0:
        return {"samples": 0}
    cameras = ds.cameras
    backend = resolve_backend(config.decoder)

    def open_clip(episode: int, camera: str, device: str = config.device) -> Decoder:
        clip = residents[episode].clips[camera]
        return open_decoder(
            clip.data,
            backend=config.decoder,
            device=device,
            threads=config.ffmpeg_threads,
            name=f"episode {episode} / {camera}",
            frame_times_s=clip.frame_times_s,  # as STREAM opens them (datasets/_engine.py)
        )

    # open cost: every resident clip once; the decoders then stay open for both passes
    opens: list[float] = []
    open_cpu: list[float] = []
    decoders: dict[tuple[int, str], Decoder] = {}
    locks = {(e, c): threading.Lock() for e in residents for c in cameras}

    def decode_one(i: int) -> float:
        episode = int(sequence.episodes[i])
        started = time.perf_counter()
        for c, camera in enumerate(cameras):
            clip = residents[episode].clips[camera]
            t = sequence.source_times_s[i, c] - clip.time_offset_s
            with locks[(episode, camera)]:  # one thread per decoder at a time
                frames = decoders[(episode, camera)].frames_at([t])
            to_float(frames)
        synchronize(config.device)  # a GPU's sample is done when its frames are
        return time.perf_counter() - started

    executor = DecodeExecutor(config.decode_threads, name="episodestream-bench-decode")
    try:
        for episode in residents:
            for camera in cameras:
                started = time.perf_counter()
                cpu_started = time.thread_time()
                decoders[(episode, camera)] = open_clip(episode, camera)
                open_cpu.append(time.thread_time() - cpu_started)
                opens.append(time.perf_counter() - started)
        # one thread: the pure cost of a random sample
        single = [decode_one(int(i)) for i in picks]
        # torchcodec decodes on the CPU where NVDEC cannot (known once a frame is decoded)
        fallbacks = sorted(
            {
                reason
                for decoder in decoders.values()
                if isinstance(decoder, TorchcodecDecoder)
                and (reason := decoder.cpu_fallback) is not None
            }
        )
        # decode_threads threads: what the resident pool can deliver with nothing to fetch
        started = time.perf_counter()
        executor.map(decode_one, picks.tolist())
        synchronize(config.device)
        threaded_s = time.perf_counter() - started
        agreement: dict[str, Any] = {}
        if config.device != "cpu":

            def frames_on(episode: int, camera: str, rows: np.ndarray, device: str) -> torch.Tensor:
                times = sequence.source_times_s[rows, cameras.index(camera)]
                times = times - residents[episode].clips[camera].time_offset_s
                if device != "cpu":  # the device's decoder timed above, idle now
                    return decoders[(episode, camera)].frames_at(times)
                with open_clip(episode, camera, "cpu") as decoder:
                    return decoder.frames_at(times)

            agreement["device_vs_cpu"] = _device_vs_cpu(ds, picks, config.device, frames_on)
            agreement["cpu_fallback"] = fallbacks or None
    finally:
        executor.close()
        for decoder in decoders.values():
            decoder.close()
    per_sample = np.asarray(single) * 1000.0
    return {
        "backend": backend,
        "samples": int(picks.size),
        "resident_episodes": len(residents),
        "open_ms_mean": 1000.0 * float(np.mean(opens)),
        "open_ms_median": 1000.0 * float(np.median(opens)),
        # this thread's CPU: comparable with LOCAL's, whose opens share the machine with decoding
        "open_cpu_ms_median": 1000.0 * float(np.median(open_cpu)),
        "opens": len(opens),
        "ms_per_sample_mean": float(per_sample.mean()),
        "ms_per_sample_median": float(np.median(per_sample)),
        "ms_per_camera_frame": float(per_sample.mean()) / len(cameras),
        "random_decode_samples_per_s": picks.size / threaded_s if threaded_s > 0 else 0.0,
        "decode_threads": config.decode_threads,
        "ffmpeg_threads": config.ffmpeg_threads,
        "device": config.device,
        **agreement,
    }


def _device_vs_cpu(
    ds: BenchDataset,
    picks: np.ndarray,
    device: str,
    frames_on: Callable[[int, str, np.ndarray, str], torch.Tensor],
) -> dict[str, Any]:
    """How far ``device``'s uint8 frames are from the CPU decoder's over the samples ``picks``
    (NVDEC and FFmpeg's software path may round YUV to RGB differently): the mean and the
    largest absolute difference in levels, and the frames compared. ``frames_on(episode,
    camera, sample rows, device)`` decodes those samples' frames of one clip on a device."""
    episodes = ds.sequence.episodes[picks]
    total = 0
    values = 0
    largest = 0
    frames = 0
    for camera in ds.cameras:
        for episode in np.unique(episodes).tolist():
            rows = picks[episodes == episode]
            ours = frames_on(episode, camera, rows, device).cpu()
            theirs = frames_on(episode, camera, rows, "cpu")
            if ours.shape != theirs.shape:
                raise DecodeError(
                    f"episode {episode} / {camera}: {device} decoded frames of shape "
                    f"{tuple(ours.shape)}, the CPU {tuple(theirs.shape)}"
                )
            diff = (ours.int() - theirs.int()).abs()
            total += int(diff.sum())
            values += diff.numel()
            largest = max(largest, int(diff.max()))
            frames += int(ours.shape[0])
    return {
        "frames": frames,
        "mean_abs_levels": total / values if values else None,
        "max_abs_levels": largest,
    }


# ------------------------------------------------------------------ LOCAL, NAIVE, DOWNLOAD


class _Rows:
    """Per-episode Parquet rows, cached by episode (as the pool caches them)."""

    def __init__(self, reader: RangeReader, ds: BenchDataset) -> None:
        self._reader = EpisodeRowReader(reader, ds.meta)
        self._keys = list(ds.meta.data_keys)
        # each numeric feature as a tensor of its declared dtype, as the datasets build it
        self.dtypes = {
            key: getattr(torch, ds.meta.feature(key).dtype, None)
            for key in self._keys
            if ds.meta.feature(key).kind == "numeric"
        }
        self._rows: dict[int, dict[str, np.ndarray]] = {}
        self._lock = threading.Lock()

    def get(self, episode: int) -> dict[str, np.ndarray]:
        with self._lock:
            rows = self._rows.get(episode)
        if rows is None:
            rows = self._reader.rows(episode, self._keys)
            with self._lock:
                self._rows[episode] = rows
        return rows


def _numeric(rows: dict[str, np.ndarray], frame: int, dtypes: dict[str, Any]) -> dict[str, Any]:
    sample: dict[str, Any] = {}
    for key, column in rows.items():
        dtype = dtypes.get(key)
        value = column[frame]
        if isinstance(dtype, torch.dtype):
            sample[key] = row_tensor(value, dtype)  # as the datasets build them
        else:
            sample[key] = value.tolist() if isinstance(value, np.ndarray) else value
    return sample


def run_file_track(
    name: str,
    config: BenchConfig,
    ds: BenchDataset,
    count: int,
    open_file: Callable[[str], Any],
    rows_reader: RangeReader | None,
) -> dict[str, Any]:
    """Decode the first ``count`` samples from decoders opened on whole video files (one per
    file, reused, leased to one thread at a time) on ``decode_threads`` threads, consuming in
    order with the pool's bound on samples in flight. ``rows_reader`` adds the Parquet rows."""
    sequence = ds.sequence
    cameras = ds.cameras
    paths = {
        (int(e), camera): ds.meta.episode_video_path(int(e), camera)
        for e in sequence.touched(count).tolist()
        for camera in cameras
    }
    files = len(set(paths.values()))
    pool: DecoderPool[str] = DecoderPool(max_decoders=max(files * 2, 1), max_bytes=1 << 50)
    rows = _Rows(rows_reader, ds) if rows_reader is not None else None
    float_images = config.image_dtype == "float32"
    opens: list[float] = []
    open_cpu: list[float] = []

    def opener(path: str) -> Callable[[], Any]:
        def open_now() -> Any:
            started = time.perf_counter()
            cpu_started = time.thread_time()
            decoder = open_file(path)
            open_cpu.append(time.thread_time() - cpu_started)
            opens.append(time.perf_counter() - started)
            return decoder

        return open_now

    def build(i: int) -> dict[str, Any]:
        episode = int(sequence.episodes[i])
        frame = int(sequence.frames[i])
        sample = _numeric(rows.get(episode), frame, rows.dtypes) if rows is not None else {}
        for c, camera in enumerate(cameras):
            path = paths[(episode, camera)]
            with pool.lease(path, opener(path)) as decoder:
                frames = decoder.frames_at([sequence.source_times_s[i, c]])
            sample[camera] = to_float(frames)[0] if float_images else frames[0]
        return sample

    max_pending = 4 * max(config.decode_threads, 1)
    executor = DecodeExecutor(
        config.decode_threads, max_pending=max_pending + 1, name=f"episodestream-bench-{name}"
    )
    arrivals = np.zeros(count, dtype=np.float64)
    pending: collections.deque[Future[dict[str, Any]]] = collections.deque()
    try:
        with (
            Sampler() as sampler,
            Progress(count, name.upper(), enabled=config.progress, unit="samples") as bar,
        ):
            started = time.perf_counter()
            cpu_started = time.process_time()
            done = 0

            def pop() -> None:
                nonlocal done
                pending.popleft().result(timeout=_RESULT_TIMEOUT_S)
                arrivals[done] = time.perf_counter() - started
                done += 1
                bar.update()

            for i in range(count):
                pending.append(executor.submit(build, i))
                while len(pending) > max_pending:
                    pop()
            while pending:
                pop()
            synchronized_end(config.device, arrivals, started)
            cpu_s = time.process_time() - cpu_started
    finally:
        executor.close()
        stats = dataclasses.asdict(pool.stats())
        pool.close()
    return {
        **timing_figures(arrivals, count, cpu_s),
        "files": files,
        "decoder_opens": len(opens),
        "open_ms_mean": 1000.0 * float(np.mean(opens)) if opens else None,
        "open_cpu_ms_median": 1000.0 * float(np.median(open_cpu)) if open_cpu else None,
        "decoders": stats,
        "memory": sampler.memory(),
    }


def local_opener(config: BenchConfig, root: Path) -> Callable[[str], Decoder]:
    def open_file(path: str) -> Decoder:
        return open_decoder(
            root / path,
            backend=config.decoder,
            device=config.device,
            threads=config.ffmpeg_threads,
            name=path,
        )

    return open_file


def remote_opener(config: BenchConfig, ds: BenchDataset) -> Callable[[str], Any]:
    backend = resolve_backend(config.decoder)
    base = ds.location.url.rstrip("/")
    local = ds.location.kind == "local"

    def open_file(path: str) -> Any:
        url = os.path.join(ds.location.path, path) if local else f"{base}/{path}"
        return RemoteFileDecoder(
            url, backend=backend, threads=config.ffmpeg_threads, fps=ds.meta.fps
        )

    return open_file


def download_files(
    config: BenchConfig,
    ds: BenchDataset,
    destination: Path,
    paths: list[str],
    failure_log: Path | None = None,
) -> dict[str, Any]:
    """Download ``paths`` whole into ``destination`` (same relative paths), ``connections`` at a
    time, through a fresh reader of the dataset (with its usual range splitting)."""
    reader = ds.open_reader(**_failure_option(ds, failure_log))
    progress = Progress(len(paths), "download", enabled=config.progress, unit="files")

    def fetch(path: str) -> int:
        size = reader.size(path)
        data = reader.read(path, 0, size)
        target = destination / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        progress.update(1, len(data))
        return len(data)

    try:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=config.connections) as pool:
            sizes = list(pool.map(fetch, paths))
        seconds = time.perf_counter() - started
        metrics = dict(reader.metrics())
    finally:
        progress.close()
        reader.close()
    total = sum(sizes)
    return {
        "files": len(paths),
        "bytes": total,
        "seconds": seconds,
        "mib_per_s": total / _MIB / seconds if seconds > 0 else 0.0,
        "http": {**http_figures(metrics), **failure_figures(failure_log)},
    }


def _failure_option(ds: BenchDataset, failure_log: Path | None) -> dict[str, Any]:
    if failure_log is not None and ds.location.kind in ("http", "hub"):
        return {"failure_log": str(failure_log)}
    return {}


def local_rows_reader(root: Path) -> RangeReader:
    return LocalRangeReader(root)


def check_local_copy(ds: BenchDataset, root: Path, paths: list[str]) -> None:
    """Fail early (naming the file) when the local copy lacks a file a track needs."""
    missing = [p for p in paths if not (root / p).is_file()]
    if missing:
        raise EpisodeStreamError(
            f"local copy {root} lacks {len(missing)} file(s) the benchmark needs, e.g. "
            f"{missing[0]!r}"
        )

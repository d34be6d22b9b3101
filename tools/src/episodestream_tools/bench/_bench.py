"""``run_bench``: every track on one seeded sample sequence, gathered in a :class:`BenchReport`."""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from episodestream.errors import SamplingError
from episodestream.storage import LocalRangeReader, redact_url
from episodestream_tools.bench._access import AccessLog
from episodestream_tools.bench._config import AUTO_TARGET_SHARE, BenchConfig
from episodestream_tools.bench._floor import run_floor
from episodestream_tools.bench._lerobot_track import LeRobotTrackError, lerobot_version, run_lerobot
from episodestream_tools.bench._measure import (
    median_round,
    peak_rss_bytes,
    rotated_rounds,
    rss_bytes,
)
from episodestream_tools.bench._scaling import run_scaling
from episodestream_tools.bench._sequence import (
    BenchDataset,
    indexed_episodes,
    open_bench_dataset,
    randomness,
)
from episodestream_tools.bench._tracks import (
    check_local_copy,
    download_files,
    local_opener,
    remote_opener,
    run_decode,
    run_fetch,
    run_file_track,
    run_keepup,
    run_stream,
    warm_up,
)

__all__ = ["REPORT_VERSION", "BenchReport", "run_bench"]

logger = logging.getLogger(__name__)

REPORT_VERSION = 1
#: the streaming targets: STREAM steady samples/s against LOCAL, bytes fetched against the episodes'
#: own video bytes, range requests per episode-camera
TARGET_STREAM_OVER_LOCAL = 0.9
TARGET_BYTES_OVER_VIDEO = 1.05
TARGET_REQUESTS_PER_EPISODE_CAMERA = 1.0


@dataclass(frozen=True, slots=True)
class BenchReport:
    """Everything one ``bench`` run measured (one rank); plain JSON-able sections.

    Sections: ``host`` (hostname, shard, versions), ``config``, ``dataset``, ``sequence``,
    ``tracks`` (stream / local / naive / download: samples, seconds, samples/s, steady
    samples/s, time to first sample, memory), ``fetch``, ``http``, ``decode``, ``randomness``,
    ``keepup``, ``memory``, ``ratios`` (STREAM over the others, CPU per sample over FLOOR's,
    byte/request ratios), ``scaling`` (the DataLoader-worker rows, when asked for),
    ``targets`` (the streaming targets, each with value, target and whether it is met), ``timeline``
    (STREAM's time series), ``notes`` (what was skipped and why).
    """

    host: dict[str, Any]
    config: dict[str, Any]
    dataset: dict[str, Any]
    sequence: dict[str, Any]
    tracks: dict[str, dict[str, Any]]
    fetch: dict[str, Any]
    http: dict[str, Any]
    decode: dict[str, Any]
    randomness: dict[str, Any]
    keepup: dict[str, Any]
    memory: dict[str, Any]
    ratios: dict[str, Any]
    targets: dict[str, Any]
    timeline: list[dict[str, Any]]
    seconds: float
    notes: list[str] = field(default_factory=list)
    scaling: dict[str, Any] = field(default_factory=dict)
    version: int = REPORT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def write_json(self, path: str | os.PathLike[str]) -> Path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.to_dict(), indent=1, default=_json_default) + "\n")
        return target

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchReport:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def read_json(cls, path: str | os.PathLike[str]) -> BenchReport:
        return cls.from_dict(json.loads(Path(path).read_text()))


def _json_default(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON-serializable: {type(value).__name__}")


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for module in ("torch", "torchcodec", "av", "numpy", "episodestream"):
        try:
            versions[module] = str(__import__(module).__version__)
        except (ImportError, AttributeError, OSError, RuntimeError):
            versions[module] = "?"
    return versions


def _dataset_summary(ds: BenchDataset) -> dict[str, Any]:
    manifest = ds.manifest
    first = manifest.track(0) if manifest.num_files else None
    sources = manifest.sources()
    sequence = ds.sequence
    return {
        "root": redact_url(ds.location.url),
        "episodes": int(ds.meta.total_episodes),
        "frames": int(ds.meta.total_frames),
        "fps": float(ds.meta.fps),
        "cameras": list(ds.cameras),
        "width": first.width if first else None,
        "height": first.height if first else None,
        "codecs": {k: list(v) for k, v in manifest.codecs().items()},
        "video_files": manifest.num_files,
        "video_bytes": int(sum(s.size for s in sources)),
        "episode_span_bytes": int(manifest.episode_bytes().sum()),
        "index_origin": manifest.origin,
        # None: the index covers every episode; else video_files, video_bytes and
        # episode_span_bytes are those of this many episodes only (a subset's sidecar)
        "index_episodes": indexed_episodes(manifest),
        "index_open_s": ds.index_seconds,
        "shard_episodes": int(sequence.shard_episodes.size),
        "shard_frames": int(sequence.shard_frames.sum()),
    }


_ROUND_FIGURES = ("samples_per_s", "steady_samples_per_s", "cpu_ms_per_sample")
_CPU = "cpu_ms_per_sample"


def _median(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median round (by steady samples/s; the lower one of an even count), its rate and
    CPU figures replaced by each one's median over the rounds, every round's attached."""
    middle = dict(median_round(rounds, "steady_samples_per_s"))
    for name in _ROUND_FIGURES:
        values = [r[name] for r in rounds if r.get(name) is not None]
        middle[name] = float(np.median(values)) if values else None
    middle["rounds"] = [{name: r.get(name) for name in _ROUND_FIGURES} for r in rounds]
    return middle


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _cpu_ratios(tracks: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """CPU per sample over FLOOR's (what each pipeline costs beyond decoding) and STREAM over
    LeRobot's; only for the tracks that ran. Over several rounds, each is the median of the
    rounds' own ratios (the two tracks ran side by side in each round), not a ratio of two
    medians that may come from different rounds."""
    ratios: dict[str, float | None] = {}
    if "floor" in tracks:
        for name in ("stream", "local", "lerobot"):
            if name in tracks:
                ratios[f"{name}_cpu_over_floor"] = _paired(tracks[name], tracks["floor"], _CPU)
    if "lerobot" in tracks:
        ratios["stream_cpu_over_lerobot"] = _paired(tracks["stream"], tracks["lerobot"], _CPU)
        ratios["stream_over_lerobot"] = _ratio(
            tracks["stream"]["samples_per_s"], tracks["lerobot"]["samples_per_s"]
        )
    return ratios


def _paired(track: dict[str, Any], base: dict[str, Any], key: str) -> float | None:
    """Median over rounds of ``track``'s ``key`` over ``base``'s in the same round; the ratio
    of the two figures when the tracks have no rounds in common."""
    mine, theirs = track.get("rounds"), base.get("rounds")
    if mine and theirs and len(mine) == len(theirs):
        pairs = [
            a[key] / b[key]
            for a, b in zip(mine, theirs, strict=True)
            if a.get(key) is not None and b.get(key)
        ]
        return float(np.median(pairs)) if pairs else None
    return _ratio(track.get(key), base.get(key))


def _file_track_runners(
    config: BenchConfig, ds: BenchDataset, complete_root: Path | None, notes: list[str]
) -> dict[str, Callable[[], dict[str, Any]]]:
    """The LEROBOT runner where it can run, else a note saying why it does not."""
    if "lerobot" not in config.tracks:
        return {}
    version = lerobot_version()
    if version is None:
        notes.append(
            "LEROBOT skipped: lerobot does not import in this interpreter (run bench with "
            ".venv-lerobot/bin/python)"
        )
        return {}
    if complete_root is None:
        notes.append(
            "LEROBOT skipped: it needs a complete local copy (a local root or --local-root)"
        )
        return {}
    n = len(ds.sequence)
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "lerobot": lambda: run_lerobot(config, ds, n, complete_root)
    }
    if config.image_dtype == "uint8":
        notes.append(
            f"LEROBOT (lerobot {version}) returns uint8 where its LeRobotDataset takes "
            "return_uint8, float32 otherwise (see its image_dtype)"
        )
    return runners


def _pick_target(config: BenchConfig, tracks: dict[str, dict[str, Any]]) -> tuple[float, str]:
    if config.target_samples_s is not None:
        return config.target_samples_s, "given"
    local = tracks.get("local")
    if local and local.get("steady_samples_per_s"):
        return AUTO_TARGET_SHARE * local["steady_samples_per_s"], f"{AUTO_TARGET_SHARE} x LOCAL"
    return (
        AUTO_TARGET_SHARE * max(tracks["stream"]["steady_samples_per_s"], 1e-3),
        f"{AUTO_TARGET_SHARE} x STREAM",
    )


def run_bench(config: BenchConfig) -> BenchReport:
    """Run the benchmark described by ``config`` on this rank; see the module docstring of
    :mod:`episodestream_tools.bench._tracks` for what each track measures."""
    previous_threads = torch.get_num_threads()
    if config.torch_threads is not None:
        torch.set_num_threads(config.torch_threads)
    try:
        return _run_bench(config)
    finally:
        torch.set_num_threads(previous_threads)


def _run_bench(config: BenchConfig) -> BenchReport:
    started = time.perf_counter()
    rss_at_start = rss_bytes()
    notes: list[str] = []
    local_root = Path(config.local_root).resolve() if config.local_root else None
    local_reader = LocalRangeReader(local_root) if local_root else None
    try:
        ds = open_bench_dataset(config, local_reader=local_reader)
    finally:
        if local_reader is not None:
            local_reader.close()
    access = None
    if config.access_log:
        if ds.served_over_http:
            access = AccessLog(config.access_log, ds.location.url)
        else:
            notes.append("access log ignored: the root is not served over HTTP")
    sequence = ds.sequence
    n = len(sequence)
    rank, world = ds.rank, ds.world_size
    if n == 0:
        raise SamplingError(
            f"rank {rank} of {world} owns no episodes ({ds.meta.total_episodes} episodes for "
            f"{world} ranks): run fewer ranks"
        )
    logger.info(
        "bench rank %d/%d: %d samples of %d episodes (%d touched), tracks %s",
        rank,
        world,
        n,
        sequence.shard_episodes.size,
        sequence.touched().size,
        ",".join(config.tracks),
    )

    warm_up_s = warm_up(config, ds)
    tracks: dict[str, dict[str, Any]] = {}
    logs = Path(tempfile.mkdtemp(prefix="episodestream-bench-logs-", dir=config.work_dir))
    try:
        fetch, fetched = run_fetch(config, ds, access, logs / "fetch.jsonl")
        try:
            decode = run_decode(config, ds, fetched)
        finally:
            fetched.close()
        if decode.get("cpu_fallback"):
            notes.append(
                f"torchcodec decoded some clips on the CPU, not {config.device}: "
                + "; ".join(decode["cpu_fallback"])
            )

        touched = sequence.touched()
        download: dict[str, Any] | None = None
        with tempfile.TemporaryDirectory(prefix="episodestream-bench-", dir=config.work_dir) as tmp:
            file_tracks = {"local", "floor", "lerobot", "download"} & set(config.tracks)
            # LeRobot loads every Parquet file of the copy: only a complete one will do
            complete_root = local_root or (
                Path(ds.location.path) if ds.location.kind == "local" else None
            )
            runners = _file_track_runners(config, ds, complete_root, notes)
            needs_copy = local_root is None and bool(file_tracks - {"lerobot"})
            if "download" in config.tracks or needs_copy:
                paths = ds.video_files_of(touched) + ds.data_files_of(touched)
                download = download_files(config, ds, Path(tmp), paths, logs / "download.jsonl")
                if local_root is None:
                    local_root = Path(tmp)
                    notes.append(
                        "LOCAL and FLOOR decode the files DOWNLOAD fetched (no --local-root)"
                    )
            run_local = "local" in config.tracks or "download" in config.tracks
            rows = None
            if local_root is not None and (run_local or "floor" in config.tracks):
                needed = ds.video_files_of(touched) + ds.data_files_of(touched)
                check_local_copy(ds, local_root, needed)
            if run_local:
                assert local_root is not None
                rows = LocalRangeReader(local_root)
                runners["local"] = lambda: run_file_track(
                    "local", config, ds, n, local_opener(config, local_root), rows
                )
            if "floor" in config.tracks:
                assert local_root is not None
                floor_root = local_root
                runners["floor"] = lambda: run_floor(config, ds, n, floor_root)
            # every round runs each track once, the order rotated a step per round (shared
            # machines drift: each track meets every position); each reports its median round
            rounds: dict[str, list[dict[str, Any]]] = {"stream": []}
            rounds.update({name: [] for name in runners})
            try:
                for round_number, order in enumerate(rotated_rounds(list(rounds), config.rounds)):
                    for name in order:
                        if name == "stream":
                            rounds["stream"].append(
                                run_stream(config, ds, access, logs / f"stream{round_number}.jsonl")
                            )
                        elif name in runners:
                            try:
                                rounds[name].append(runners[name]())
                            except LeRobotTrackError as error:
                                # LeRobot's own refusal is a finding, not a benchmark failure
                                notes.append(f"LEROBOT stopped: {error}")
                                del runners[name], rounds[name]
            finally:
                if rows is not None:
                    rows.close()
        stream = _median(rounds["stream"])
        tracks["stream"] = stream
        if not all(s["sequence_matches"] for s in rounds["stream"]):
            notes.append(
                "STREAM's order differs from the computed sequence: ratios compare different "
                "samples"
            )
        if config.rounds > 1:
            notes.append(
                f"{', '.join(name.upper() for name in rounds)} ran {config.rounds} interleaved "
                "rounds (order rotated each round); the tables show each one's median round, the "
                "JSON every round; the CPU ratios (over FLOOR, STREAM over LEROBOT, STREAM / "
                "LOCAL per CPU second) are the medians of each round's own ratio"
            )
        for name in ("floor", "lerobot"):
            if rounds.get(name):
                tracks[name] = _median(rounds[name])
        if "lerobot" in tracks and not tracks["lerobot"]["sequence_matches"]:
            notes.append("LEROBOT returned other samples than the sequence's")
        if run_local:
            local = _median(rounds["local"])
            if "local" in config.tracks:
                tracks["local"] = local
            if download is not None and "download" in config.tracks:
                total = download["seconds"] + local["seconds"]
                tracks["download"] = {
                    "samples": n,
                    "download_s": download["seconds"],
                    "decode_s": local["seconds"],
                    "seconds": total,
                    "samples_per_s": n / total if total > 0 else 0.0,
                    "steady_samples_per_s": local["steady_samples_per_s"],
                    "time_to_first_sample_s": download["seconds"]
                    + (local["time_to_first_sample_s"] or 0.0),
                    "files": download["files"],
                    "bytes": download["bytes"],
                    "mib_per_s": download["mib_per_s"],
                    "memory": local["memory"],
                }
                notes.append(
                    "DOWNLOAD's decode time is LOCAL's (the same decode of the same bytes)"
                )
        if "naive" in config.tracks:
            count = min(config.naive_samples, n)
            try:
                tracks["naive"] = run_file_track(
                    "naive", config, ds, count, remote_opener(config, ds), None
                )
                notes.append(
                    f"NAIVE decodes the first {count} samples (video only, no Parquet rows)"
                )
            except ImportError as error:  # fsspec's HTTP backend needs aiohttp
                notes.append(f"NAIVE skipped: {error}")
    finally:
        shutil.rmtree(logs, ignore_errors=True)

    scaling: dict[str, Any] = {}
    if config.num_workers:
        scaling = run_scaling(config, ds)

    keepup: dict[str, Any] = {}
    if config.effective_keepup_samples > 0:
        target, how = _pick_target(config, tracks)
        keepup = run_keepup(config, ds, target)
        keepup["target_from"] = how

    http: dict[str, Any] = {"stream": stream["http"], "fetch": fetch["http"]}
    if "server" in stream:
        http["stream_server"] = stream["server"]
    if "server" in fetch:
        http["fetch_server"] = fetch["server"]
    if download is not None:
        http["download"] = download["http"]

    local_track = tracks.get("local")
    ratios: dict[str, Any] = {
        "stream_over_local_steady": _ratio(
            stream["steady_samples_per_s"], local_track and local_track["steady_samples_per_s"]
        ),
        "stream_over_local": _ratio(
            stream["samples_per_s"], local_track and local_track["samples_per_s"]
        ),
        "stream_over_local_steady_median_of_rounds": (
            _paired(stream, local_track, "steady_samples_per_s") if local_track else None
        ),
        # samples per CPU second: LOCAL's CPU per sample over STREAM's, round by round
        "stream_over_local_per_cpu_second": (
            _paired(local_track, stream, _CPU) if local_track else None
        ),
        "stream_over_naive": _ratio(
            stream["samples_per_s"], tracks.get("naive", {}).get("samples_per_s")
        ),
        "stream_over_download": _ratio(
            stream["samples_per_s"], tracks.get("download", {}).get("samples_per_s")
        ),
        "download_first_sample_over_stream": _ratio(
            tracks.get("download", {}).get("time_to_first_sample_s"),
            stream["time_to_first_sample_s"],
        ),
        "stream_over_resident_decode": _ratio(
            stream["steady_samples_per_s"], decode.get("random_decode_samples_per_s")
        ),
        "bytes_fetched_over_video_bytes": stream["bytes_fetched_over_video_bytes"],
        "bytes_fetched_over_manifest_bytes": _ratio(
            stream["bytes_fetched"], stream["manifest_bytes_fetched_episodes"]
        ),
        "range_requests_per_episode_camera": stream["range_requests_per_episode_camera"]
        if stream["range_requests_per_episode_camera"] is not None
        else fetch["range_requests_per_episode_camera"],
        "peak_rss_delta_over_budget": (
            stream["memory"]["rss_peak_bytes"] - stream["memory"]["rss_start_bytes"]
        )
        / config.byte_budget,
        "peak_cache_bytes_over_budget": stream["peak_cache_bytes"] / config.byte_budget,
    }
    ratios.update(_cpu_ratios(tracks))
    # with several rounds, the median of each round's STREAM/LOCAL (adjacent runs share the
    # machine's load) is steadier than a ratio of the two tracks' separate medians
    paired = ratios["stream_over_local_steady_median_of_rounds"]
    targets = {
        "stream_over_local_steady": _target(
            paired
            if config.rounds > 1 and paired is not None
            else ratios["stream_over_local_steady"],
            TARGET_STREAM_OVER_LOCAL,
            ">=",
        ),
        "bytes_fetched_over_video_bytes": _target(
            ratios["bytes_fetched_over_video_bytes"], TARGET_BYTES_OVER_VIDEO, "<="
        ),
        "range_requests_per_episode_camera": _target(
            ratios["range_requests_per_episode_camera"], TARGET_REQUESTS_PER_EPISODE_CAMERA, "=="
        ),
    }
    memory = {
        "stream": stream["memory"],
        "local": local_track["memory"] if local_track else None,
        "process_rss_start_bytes": rss_at_start,
        "process_rss_end_bytes": rss_bytes(),
        "process_peak_rss_bytes": peak_rss_bytes(),
        "byte_budget": config.byte_budget,
        "stream_peak_cache_bytes": stream["peak_cache_bytes"],
    }
    host = {
        "hostname": socket.gethostname(),
        "shard_index": rank,
        "shard_count": world,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "versions": _versions(),
        "started_unix_s": time.time() - (time.perf_counter() - started),
    }
    sequence_info = {
        "samples": n,
        "digest": sequence.digest(),
        "touched_episodes": int(touched.size),
        "seed": config.seed,
        "pool_size": config.pool_size,
        "warm_up_s": warm_up_s,
    }
    timeline = stream.pop("timeline")
    return BenchReport(
        host=host,
        config=config.to_dict(),
        dataset=_dataset_summary(ds),
        sequence=sequence_info,
        tracks=tracks,
        fetch=fetch,
        http=http,
        decode=decode,
        randomness=randomness(sequence, config.batch_size),
        keepup=keepup,
        memory=memory,
        ratios=ratios,
        targets=targets,
        timeline=timeline,
        seconds=time.perf_counter() - started,
        notes=notes,
        scaling=scaling,
    )


def _target(value: float | None, target: float, relation: str) -> dict[str, Any]:
    if value is None:
        met = None
    elif relation == ">=":
        met = value >= target
    elif relation == "<=":
        met = value <= target
    else:
        met = abs(value - target) < 1e-9
    return {"value": value, "target": target, "relation": relation, "met": met}

"""``episodestream demo``: the demo dataset served through an emulated WAN, checked, benchmarked.

Steps: the demo dataset (:data:`DEMO_SPEC`, generated once and cached) → nginx + WAN emulator
(RTT 50 ms, 40 MiB/s per connection) → a dataset summary and a range-read check through the
emulator → :func:`run_bench` with every track → the report, its JSON and a plot.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import shutil
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from episodestream.errors import ConfigTypeError, EpisodeStreamError
from episodestream.helpers import FrozenDict, check_choice, check_number, check_options
from episodestream.lerobot import load_dataset_meta
from episodestream.storage import HttpRangeReader, Limits
from episodestream_tools.bench._bench import BenchReport, run_bench
from episodestream_tools.bench._config import BenchConfig
from episodestream_tools.bench._report import fmt, format_report, markdown_table, mib, write_plot
from episodestream_tools.serving import serve_dataset
from episodestream_tools.synthetic import (
    DEMO_SPEC,
    SyntheticSpec,
    default_cache_dir,
    ensure_synthetic_dataset,
)

__all__ = [
    "DEMO_BANDWIDTH_MIBPS",
    "DEMO_RTT_MS",
    "QUICK_DEMO_SPEC",
    "DemoConfig",
    "DemoResult",
    "check_range_reads",
    "format_demo",
    "run_demo",
]

logger = logging.getLogger(__name__)

DEMO_RTT_MS = 50.0
DEMO_BANDWIDTH_MIBPS = 40.0
#: ``--quick``: the demo's cameras, size and codec, 6 short episodes (seconds to generate).
QUICK_DEMO_SPEC = dataclasses.replace(
    DEMO_SPEC, episodes=6, min_length=20, max_length=30, episodes_per_file=3
)
# bench settings per mode: (samples, keep-up samples, NAIVE samples, decode samples)
_MODES: dict[str, dict[str, Any]] = {
    "quick": {
        "samples": 120,
        "keepup_samples": 64,
        "naive_samples": 12,
        "decode_samples": 24,
        "pool_size": 4,
        "prefetch_episodes": 2,
        "batch_size": 16,
    },
    # enough samples for the first pool to drain and replacements to stream in
    "default": {"samples": 2000, "keepup_samples": 2000, "naive_samples": 100, "rounds": 3},
    # every frame of the dataset once
    "full": {
        "samples": 1_000_000,
        "keepup_samples": 1_000_000,
        "naive_samples": 300,
        "decode_samples": 400,
        "rounds": 3,
    },
}
_RANGE_CHECKS = 12
_SMALL_RANGE_BYTES = 4096


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """What ``demo`` runs.

    Attributes:
        mode: "quick" (a small dataset and few samples, for tests), "default" or "full"
            (every sample of the demo dataset, for ``make bench``).
        dataset: a local LeRobot v3 dataset to use instead of the generated demo dataset.
        output_dir: where the JSON, plot, nginx log and index cache go (default
            ``<cache>/demo``; its previous contents are replaced).
        cache_dir: cache root of the generated dataset (default ``$EPISODESTREAM_CACHE``).
        rtt_ms, bandwidth_mibps: the emulated link.
        bench: overrides of :class:`BenchConfig` fields (``samples``, ``decoder``, ...).
        plot: draw the PNG plot (needs matplotlib).
        progress: progress bars / lines.
    """

    mode: str = "default"
    dataset: str | None = None
    output_dir: str | None = None
    cache_dir: str | None = None
    rtt_ms: float = DEMO_RTT_MS
    bandwidth_mibps: float = DEMO_BANDWIDTH_MIBPS
    bench: Mapping[str, Any] = field(default_factory=FrozenDict)
    plot: bool = True
    progress: bool = True

    def __post_init__(self) -> None:
        check_choice("mode", self.mode, sorted(_MODES))
        check_number("rtt_ms", self.rtt_ms, minimum=0.0)
        if self.bandwidth_mibps is not None:  # None: no cap, as WanSettings takes it
            check_number("bandwidth_mibps", self.bandwidth_mibps, above=0.0)
        if not isinstance(self.bench, Mapping):
            raise ConfigTypeError(f"bench must be a dict of BenchConfig fields, got {self.bench!r}")
        # a read-only copy: the caller's later changes cannot slip past the check below
        object.__setattr__(self, "bench", FrozenDict.of(self.bench))
        set_here = {"root", "local_root", "access_log", "cache_dir", "progress"}  # by run_demo
        fields = {f.name for f in dataclasses.fields(BenchConfig)} - set_here
        check_options("DemoConfig.bench", self.bench, fields)

    @property
    def spec(self) -> SyntheticSpec:
        return QUICK_DEMO_SPEC if self.mode == "quick" else DEMO_SPEC


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What ``demo`` produced: the dataset, the checks, the report and where its files are."""

    dataset_path: Path
    generated_s: float | None
    url: str
    summary: dict[str, Any]
    range_check: dict[str, Any]
    report: BenchReport
    json_path: Path
    plot_path: Path | None
    access_log_path: Path
    seconds: float


def _summary(url: str) -> dict[str, Any]:
    """What the dataset holds, read through the emulated link as any client would."""
    with HttpRangeReader(url) as reader:
        started = time.perf_counter()
        meta = load_dataset_meta(reader, root=url)
        seconds = time.perf_counter() - started
        files = [path for key in meta.video_keys for path in meta.video_files(key)]
        sizes = [reader.size(path) for path in files]
        requests = int(reader.metrics()["requests"])
    lengths = meta.episodes.length
    first = meta.feature(meta.video_keys[0]) if meta.video_keys else None
    return {
        "url": url,
        "episodes": meta.total_episodes,
        "frames": meta.total_frames,
        "episode_frames_min": int(lengths.min()),
        "episode_frames_max": int(lengths.max()),
        "fps": meta.fps,
        "cameras": list(meta.video_keys),
        "codec": first.codec if first else None,
        "width": first.width if first else None,
        "height": first.height if first else None,
        "video_files": len(files),
        "video_bytes": sum(sizes),
        "tasks": meta.total_tasks,
        "metadata_s": seconds,
        "requests": requests,
    }


def check_range_reads(url: str, root: Path, *, seed: int = 0) -> dict[str, Any]:
    """Random byte ranges of the dataset's video files read through ``url`` and compared with
    the files on disk; plus the kept-alive round trip of a small range."""
    rng = random.Random(seed)
    files = sorted(p.relative_to(root).as_posix() for p in root.glob("videos/**/*.mp4"))
    if not files:
        raise EpisodeStreamError(f"{root}: no video files to check")
    limits = Limits(max_connections_per_host=1, max_concurrency=1, split_threshold_bytes=0)
    exact = 0
    checked = 0
    small: list[float] = []
    with HttpRangeReader(url, limits=limits) as reader:
        for _ in range(_RANGE_CHECKS):
            path = rng.choice(files)
            data = (root / path).read_bytes()
            offset = rng.randrange(len(data))
            length = rng.randint(1, len(data) - offset)
            checked += 1
            exact += reader.read(path, offset, length) == data[offset : offset + length]
        path = files[0]
        size = (root / path).stat().st_size
        for _ in range(5):
            started = time.perf_counter()
            reader.read(path, rng.randrange(max(size - _SMALL_RANGE_BYTES, 1)), _SMALL_RANGE_BYTES)
            small.append(time.perf_counter() - started)
        started = time.perf_counter()
        whole = reader.read(path, 0, size)
        whole_s = time.perf_counter() - started
        metrics = reader.metrics()
    round_trip_ms = 1000.0 * statistics.median(small)
    return {
        "ranges": checked,
        "exact": exact,
        "all_exact": exact == checked,
        "small_range_round_trip_ms": round_trip_ms,
        "whole_file_bytes": len(whole),
        "whole_file_s": whole_s,
        "whole_file_mib_per_s": len(whole) / 2**20 / whole_s if whole_s > 0 else 0.0,
        "requests": int(metrics["requests"]),
        "statuses": {k: int(v) for k, v in metrics.items() if k.startswith("status_")},
    }


def run_demo(config: DemoConfig) -> DemoResult:
    """Generate (or reuse) the demo dataset, serve it over an emulated WAN, check and bench it."""
    started = time.perf_counter()
    base = Path(config.cache_dir) if config.cache_dir else default_cache_dir()
    out = Path(config.output_dir) if config.output_dir else base / "demo"
    if config.dataset is not None:
        dataset = Path(config.dataset).resolve()
        if not (dataset / "meta" / "info.json").is_file():
            raise EpisodeStreamError(f"{dataset}: not a LeRobot v3 dataset (no meta/info.json)")
        generated_s = None
    else:
        logger.info("demo dataset: preparing %s (generated once, then cached)", config.spec)
        t0 = time.perf_counter()
        dataset = ensure_synthetic_dataset(config.spec, cache_dir=base)
        generated_s = time.perf_counter() - t0
    for stale in ("nginx", "index-cache", "bench.json", "bench.png"):
        target = out / stale
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            target.unlink()
    out.mkdir(parents=True, exist_ok=True)
    served = serve_dataset(
        dataset,
        rtt_ms=config.rtt_ms,
        bandwidth_mibps=config.bandwidth_mibps,
        workdir=out / "nginx",
    )
    with served:
        url = served.url
        logger.info("serving %s at %s (%s)", dataset, served.url, served.settings.describe())
        summary = _summary(served.url)
        range_check = check_range_reads(served.url, dataset)
        settings = dict(_MODES[config.mode])
        settings.update(config.bench)
        bench = BenchConfig(
            root=served.url,
            local_root=str(dataset),
            access_log=str(served.nginx.access_log_path),
            cache_dir=str(out / "index-cache"),
            progress=config.progress,
            **settings,
        )
        report = run_bench(bench)
        access_log = served.nginx.access_log_path
    json_path = report.write_json(out / "bench.json")
    plot_path = None
    if config.plot:
        try:
            plot_path = write_plot(report, out / "bench.png")
        except ImportError as error:
            logger.warning("no plot: %s", error)
    return DemoResult(
        dataset_path=dataset,
        generated_s=generated_s,
        url=url,
        summary=summary,
        range_check=range_check,
        report=report,
        json_path=json_path,
        plot_path=plot_path,
        access_log_path=access_log,
        seconds=time.perf_counter() - started,
    )


def format_demo(result: DemoResult, *, rtt_ms: float, bandwidth_mibps: float) -> str:
    """The demo's output: dataset summary, range check, the bench report, the files."""
    s = result.summary
    r = result.range_check
    summary = markdown_table(
        [
            "episodes",
            "frames",
            "frames per episode",
            "cameras",
            "video",
            "fps",
            "video files",
            "video MiB",
            "metadata read s",
        ],
        [
            [
                s["episodes"],
                s["frames"],
                f"{s['episode_frames_min']}–{s['episode_frames_max']}",
                len(s["cameras"]),
                f"{s['width']}x{s['height']} {s['codec']}",
                fmt(s["fps"], 0),
                s["video_files"],
                mib(s["video_bytes"], 2),
                fmt(s["metadata_s"], 2),
            ]
        ],
    )
    check = markdown_table(
        [
            "random ranges",
            "exact",
            "4 KiB range round trip ms",
            "RTT setting ms",
            "whole file",
            "statuses",
        ],
        [
            [
                r["ranges"],
                f"{r['exact']} of {r['ranges']}",
                fmt(r["small_range_round_trip_ms"], 1),
                fmt(rtt_ms, 0),
                f"{mib(r['whole_file_bytes'], 2)} MiB in {fmt(r['whole_file_s'], 3)} s",
                ", ".join(
                    f"{k.removeprefix('status_')}: {v}" for k, v in sorted(r["statuses"].items())
                ),
            ]
        ],
    )
    generated = "given" if result.generated_s is None else f"ready in {result.generated_s:.1f} s"
    lines = [
        "# episodestream demo",
        "",
        f"Dataset {result.dataset_path} ({generated}), served by nginx behind a WAN emulator "
        f"(RTT {fmt(rtt_ms, 0)} ms, {fmt(bandwidth_mibps, 0)} MiB/s per connection) at "
        f"{result.url}.",
        "",
        "## Dataset",
        "",
        summary,
        "",
        "## Range reads through the emulator",
        "",
        check,
        "",
        format_report(result.report),
        "## Files",
        "",
        f"- JSON report: {result.json_path}",
        f"- plot: {result.plot_path if result.plot_path else '(not drawn)'}",
        f"- nginx access log: {result.access_log_path}",
        f"- demo finished in {result.seconds:.1f} s",
    ]
    return "\n".join(lines) + "\n"

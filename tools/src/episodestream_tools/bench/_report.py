"""A :class:`BenchReport` as Markdown tables, and STREAM's time series as a PNG plot."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from episodestream_tools.bench._bench import BenchReport

__all__ = ["format_report", "markdown_table", "write_plot"]

_MIB = 2**20
_TRACK_ORDER = ("floor", "local", "stream", "lerobot", "naive", "download")


def fmt(value: Any, digits: int = 2) -> str:
    """A table cell: numbers rounded, None as a dash, booleans as yes/no."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:  # NaN
            return "—"
        return f"{value:.{digits}f}"
    return str(value)


def mib(value: float | int | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value / _MIB:.{digits}f}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table; numeric-looking columns are right-aligned."""
    cells = [[fmt(c) if not isinstance(c, str) else c for c in row] for row in rows]

    def numeric(column: int) -> bool:
        values = [row[column] for row in cells if row[column] != "—"]
        return bool(values) and all(
            v.replace(".", "", 1).replace("-", "", 1).replace("%", "").replace("×", "").isdigit()
            for v in values
        )

    align = ["---:" if numeric(i) else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def _tracks(report: BenchReport) -> str:
    rows = []
    has_floor = "floor" in report.tracks
    for name in _TRACK_ORDER:
        track = report.tracks.get(name)
        if track is None:
            continue
        memory = track.get("memory") or {}
        cpu = track.get("cpu_ms_per_sample")
        rows.append(
            [
                name.upper(),
                track["samples"],
                fmt(track["seconds"]),
                fmt(track["samples_per_s"], 1),
                fmt(track.get("steady_samples_per_s"), 1),
                fmt(track.get("time_to_first_sample_s"), 3),
                fmt(cpu, 2),
                _over_floor(report, name) if has_floor else "—",
                mib(memory.get("rss_peak_bytes")),
            ]
        )
    return markdown_table(
        [
            "track",
            "samples",
            "seconds",
            "samples/s",
            "steady samples/s",
            "first sample s",
            "CPU ms per sample",
            "CPU / FLOOR",
            "peak RSS MiB",
        ],
        rows,
    )


def _over_floor(report: BenchReport, name: str) -> str:
    """A track's CPU per sample over FLOOR's: the ratio the report keeps for it (over rounds,
    the median of each round's ratio), else its figure over FLOOR's (NAIVE, DOWNLOAD)."""
    if name == "floor":
        return fmt(1.0, 3) if report.tracks["floor"].get("cpu_ms_per_sample") else "—"
    key = f"{name}_cpu_over_floor"
    if key in report.ratios:
        return fmt(report.ratios[key], 3)
    cpu = report.tracks[name].get("cpu_ms_per_sample")
    floor_cpu = report.tracks["floor"].get("cpu_ms_per_sample")
    return fmt(cpu / floor_cpu, 3) if cpu is not None and floor_cpu else "—"


def _ratios(report: BenchReport) -> str:
    r = report.ratios
    labels = [
        ("STREAM / LOCAL, steady samples/s", "stream_over_local_steady"),
        ("STREAM / LOCAL, steady, median of rounds", "stream_over_local_steady_median_of_rounds"),
        ("STREAM / LOCAL, samples/s", "stream_over_local"),
        ("STREAM / LOCAL, samples per CPU second", "stream_over_local_per_cpu_second"),
        ("STREAM / NAIVE, samples/s", "stream_over_naive"),
        ("STREAM / DOWNLOAD, samples/s (download included)", "stream_over_download"),
        ("DOWNLOAD / STREAM, time to first sample", "download_first_sample_over_stream"),
        ("STREAM CPU per sample / FLOOR's", "stream_cpu_over_floor"),
        ("LOCAL CPU per sample / FLOOR's", "local_cpu_over_floor"),
        ("LEROBOT CPU per sample / FLOOR's", "lerobot_cpu_over_floor"),
        ("STREAM CPU per sample / LEROBOT's", "stream_cpu_over_lerobot"),
        ("STREAM / LEROBOT, samples/s", "stream_over_lerobot"),
        ("STREAM steady / resident-pool random decode", "stream_over_resident_decode"),
        ("bytes fetched / the episodes' own video bytes", "bytes_fetched_over_video_bytes"),
        ("bytes fetched / manifest span bytes", "bytes_fetched_over_manifest_bytes"),
        ("range requests per episode-camera", "range_requests_per_episode_camera"),
        ("STREAM peak RSS growth / byte budget", "peak_rss_delta_over_budget"),
        ("STREAM peak cache bytes / byte budget", "peak_cache_bytes_over_budget"),
    ]
    return markdown_table(
        ["ratio", "value"], [[label, fmt(r.get(key), 3)] for label, key in labels if key in r]
    )


def _targets(report: BenchReport) -> str:
    rows = [
        [name, fmt(t["value"], 3), f"{t['relation']} {t['target']}", fmt(t["met"])]
        for name, t in report.targets.items()
    ]
    return markdown_table(["target", "value", "goal", "met"], rows)


def _fetch(report: BenchReport) -> str:
    f = report.fetch
    stages = f["ms_per_camera_job"]
    main = markdown_table(
        [
            "episodes",
            "MiB",
            "seconds",
            "MiB/s",
            "episodes/s",
            "MiB per episode-camera",
            "est. s, these episodes",
            "est. s, whole dataset",
        ],
        [
            [
                f["episodes"],
                mib(f["bytes"], 2),
                fmt(f["seconds"]),
                fmt(f["mib_per_s"]),
                fmt(f["episodes_per_s"]),
                fmt(f["mib_per_episode_camera"], 3),
                fmt(f["estimated_s_benchmark_episodes"]),
                fmt(f["estimated_s_whole_dataset"]),
            ]
        ],
    )
    stage_table = markdown_table(
        ["stage", "ms per camera job"],
        [
            ["manifest lookup", fmt(stages["manifest_lookup"], 3)],
            ["range fetch", fmt(stages["range_fetch"], 1)],
            ["clip write", fmt(stages["clip_write"], 3)],
            ["store", fmt(stages["store"], 4)],
            [
                "range fetch per episode (its cameras in parallel)",
                fmt(f["ms_per_episode_range_fetch"], 1),
            ],
        ],
    )
    return main + "\n\n" + stage_table


def _http(report: BenchReport) -> str:
    rows = []
    for phase in ("stream", "fetch", "download"):
        h = report.http.get(phase)
        if h is None:
            continue
        statuses = ", ".join(f"{k}: {v}" for k, v in sorted(h["status_counts"].items())) or "—"
        rows.append(
            [
                phase,
                h["requests"],
                h["connections"],
                fmt(h["connect_ms"], 1),
                fmt(h["headers_ms"], 1),
                fmt(h["first_byte_ms"], 1),
                fmt(h["body_ms"], 1),
                h["retries"],
                h["failures"],
                fmt(h.get("failed_attempt_s"), 2),
                fmt(h.get("retry_sleep_s"), 2),
                ", ".join(f"{k}: {v}" for k, v in (h.get("failures_by_cause") or {}).items())
                or "—",
                h.get("rate_limited", 0),
                fmt(h.get("quota_wait_s", 0.0), 1),
                statuses,
                fmt(h["bytes_per_request"] / 1024, 1),
            ]
        )
    client = markdown_table(
        [
            "reader (client side)",
            "requests",
            "connections",
            "connect ms",
            "headers ms",
            "first byte ms",
            "body ms",
            "retries",
            "failed",
            "failed-attempt s",
            "retry sleep s",
            "failed attempts by cause",
            "429 (quota)",
            "quota wait s",
            "statuses",
            "KiB per request",
        ],
        rows,
    )
    server_rows = []
    for phase in ("stream", "fetch"):
        s = report.http.get(f"{phase}_server")
        if s is None:
            continue
        kinds = ", ".join(f"{k}: {v}" for k, v in s["requests_by_kind"].items())
        statuses = ", ".join(f"{k}: {v}" for k, v in s["status_counts"].items())
        server_rows.append(
            [
                phase,
                s["requests"],
                kinds,
                statuses,
                s["failed_requests"],
                fmt(s["bytes_per_request"] / 1024, 1),
                fmt(s["server_ms_per_request"], 2),
                fmt(s.get("video_range_requests_per_episode_camera"), 3),
            ]
        )
    if not server_rows:
        return client
    server = markdown_table(
        [
            "nginx access log",
            "requests",
            "by kind",
            "statuses",
            "failed",
            "KiB per request",
            "server ms per request",
            "video ranges per episode-camera",
        ],
        server_rows,
    )
    return client + "\n\n" + server


def _decode(report: BenchReport) -> str:
    d = report.decode
    if not d.get("samples"):
        return "(no resident samples to decode)"
    local = report.tracks.get("local") or {}
    table = markdown_table(
        [
            "backend",
            "clip open CPU ms (median)",
            "full-file open CPU ms (LOCAL, median)",
            "ms per sample (median)",
            "ms per camera frame (median)",
            "resident-pool random decode samples/s",
            "decode threads",
        ],
        [
            [
                d["backend"],
                fmt(d.get("open_cpu_ms_median"), 2),
                fmt(local.get("open_cpu_ms_median"), 2),
                fmt(d["ms_per_sample_median"], 2),
                fmt(d["ms_per_sample_median"] / len(report.dataset["cameras"]), 2),
                fmt(d["random_decode_samples_per_s"], 1),
                d["decode_threads"],
            ]
        ],
    )
    agreement = d.get("device_vs_cpu")
    if agreement is None:
        return table
    return (
        table
        + "\n\n"
        + markdown_table(
            [
                f"{d['device']} vs CPU",
                "frames compared",
                "mean abs levels",
                "max abs levels",
                "decoded on the CPU instead (torchcodec)",
            ],
            [
                [
                    "uint8 frames of the same samples",
                    agreement["frames"],
                    fmt(agreement["mean_abs_levels"], 3),
                    agreement["max_abs_levels"],
                    "; ".join(d.get("cpu_fallback") or []) or "no",
                ]
            ],
        )
    )


def _on_device(config: dict[str, Any]) -> str:
    device = config.get("device", "cpu")
    return "" if device == "cpu" else f" on {device} (LEROBOT and NAIVE on the CPU)"


def _randomness(report: BenchReport) -> str:
    r = report.randomness
    if not r.get("samples"):
        return "(no samples)"
    return markdown_table(
        [
            "samples",
            "unique episodes",
            "of the shard's",
            "batch size",
            "unique episodes per batch, mean",
            "min",
            "samples per episode, mean",
            "max",
        ],
        [
            [
                r["samples"],
                r["unique_episodes"],
                r["shard_episodes"],
                r["batch_size"],
                fmt(r["unique_episodes_per_batch_mean"], 2),
                r["unique_episodes_per_batch_min"],
                fmt(r["samples_per_episode_mean"], 1),
                r["samples_per_episode_max"],
            ]
        ],
    )


def _keepup(report: BenchReport) -> str:
    k = report.keepup
    if not k:
        return "(not run)"
    return markdown_table(
        [
            "target samples/s",
            "actual samples/s",
            "samples",
            "first batch s",
            "refill waits",
            "refill wait s",
            "deadline misses",
            "stall % of wall",
            "replacements",
            "replacements/s",
            "kept up",
        ],
        [
            [
                f"{fmt(k['target_samples_s'], 1)} ({k.get('target_from', '')})",
                fmt(k["actual_samples_s"], 1),
                k["samples"],
                fmt(k["time_to_first_batch_s"], 3),
                k["refill_waits"],
                fmt(k["refill_wait_s"], 3),
                k["deadline_misses"],
                fmt(100 * k["stall_fraction_of_wall"], 2),
                k["replacements"],
                fmt(k["replacements_per_s"], 2),
                fmt(k["kept_up"]),
            ]
        ],
    )


def _memory(report: BenchReport) -> str:
    m = report.memory
    rows = []
    for name in ("stream", "local"):
        part = m.get(name)
        if part:
            rows.append(
                [
                    name.upper(),
                    mib(part["rss_start_bytes"]),
                    mib(part["rss_end_bytes"]),
                    mib(part["rss_delta_bytes"]),
                    mib(part["rss_peak_bytes"]),
                ]
            )
    rows.append(
        [
            "process",
            mib(m["process_rss_start_bytes"]),
            mib(m["process_rss_end_bytes"]),
            mib(m["process_rss_end_bytes"] - m["process_rss_start_bytes"]),
            mib(m["process_peak_rss_bytes"]),
        ]
    )
    table = markdown_table(["RSS MiB", "start", "end", "delta", "peak"], rows)
    return (
        table
        + f"\n\nbyte budget {mib(m['byte_budget'])} MiB; STREAM's cache peaked at "
        + f"{mib(m['stream_peak_cache_bytes'], 2)} MiB."
    )


def _scaling(report: BenchReport) -> str:
    scaling = report.scaling
    rows = [
        [
            r["workers"],
            r["timed_samples"],
            fmt(r["time_to_first_batch_s"], 2),
            fmt(r["samples_per_s"], 1),
            fmt(r["speedup"], 2),
            fmt(r["efficiency"], 3),
            fmt(r["cpu_ms_per_sample"], 2),
            fmt(r.get("cores_busy"), 2),  # absent from reports written before it
            mib(r["worker_rss_mean_bytes"]),
            mib(r["worker_uss_mean_bytes"]),
            mib(r["parent_rss_bytes"]),
            mib(r["total_rss_bytes"]),
            mib(r["total_uss_bytes"]),
        ]
        for r in scaling["rows"]
    ]
    table = markdown_table(
        [
            "workers",
            "samples timed",
            "first batch s",
            "samples/s",
            "speed-up",
            "efficiency",
            "CPU ms per sample (all processes)",
            "cores busy",
            "RSS per worker MiB",
            "USS per worker MiB",
            "parent RSS MiB",
            "total RSS MiB",
            "parent RSS + worker USS MiB",
        ],
        rows,
    )
    return (
        table
        + "\n\nSTREAM through torch's DataLoader, persistent workers, batch "
        + f"{scaling['batch_size']}, {scaling['image_dtype']} images, "
        + f"{scaling['decode_threads_per_worker']} decode threads per worker, "
        + f"{scaling['cpus']} cores; efficiency = samples/s(N) / (N x samples/s("
        + f"{scaling['baseline_workers']}) / {scaling['baseline_workers']})"
        + _scaling_rounds(scaling)
        + ". Worker RSS counts pages shared with the parent (fork); USS only the worker's own."
        + _scaling_bound(scaling)
    )


def _scaling_rounds(scaling: dict[str, Any]) -> str:
    rounds = scaling.get("rounds", 1)  # absent from reports written before it
    if rounds <= 1:
        return ""
    return (
        f", the median of {rounds} interleaved rounds' ratios (speed-up too, so it need not "
        + "equal the ratio of two rows' samples/s); each row is its median round"
    )


def _scaling_bound(scaling: dict[str, Any]) -> str:
    """Why efficiency stops short of N when the baseline already keeps over a core busy."""
    base = next(r for r in scaling["rows"] if r["workers"] == scaling["baseline_workers"])
    busy = base.get("cores_busy")
    if not busy or busy <= 1.1 * base["workers"]:
        return ""
    text = (
        f" {base['workers']} worker(s) already kept {busy:.2f} cores busy (the parent included): "
        + f"on {scaling['cpus']} cores no row can exceed about {scaling['cpus'] / busy:.2f}x "
        + "its samples/s."
    )
    if scaling["decode_threads_per_worker"] > 0:
        text += " Each worker decodes on threads beside its own; `--decode-threads 0` makes one "
        text += "worker one core."
    return text


def _index_scope(d: dict[str, Any]) -> str:
    """Says when the index (and so the video files and bytes above, and the fetch track's
    dataset figures) covers only a subset's episodes, not the whole dataset's."""
    count = d.get("index_episodes")
    if count is None:
        return ""
    return (
        f" of {count} episodes only (a subset's index: video files and bytes are those "
        "episodes', and no whole-dataset estimate is made)"
    )


def format_report(report: BenchReport) -> str:
    """The whole report as Markdown (headings and tables), as ``bench`` prints it."""
    d = report.dataset
    h = report.host
    c = report.config
    size = f"{d['width']}x{d['height']}" if d.get("width") else "?"
    codecs = sorted({codec for values in d["codecs"].values() for codec in values})
    header = (
        f"## episodestream bench: {d['root']}\n\n"
        f"{d['episodes']} episodes, {d['frames']} frames, {len(d['cameras'])} cameras {size} "
        f"{'/'.join(codecs)} at {fmt(d['fps'], 0)} fps, {d['video_files']} video files, "
        f"{mib(d['video_bytes'])} MiB of video; index: {d['index_origin']}"
        f"{_index_scope(d)}. "
        f"Rank {h['shard_index']} of {h['shard_count']} on {h['hostname']} "
        f"({h['cpus']} CPUs): {d['shard_episodes']} episodes, {d['shard_frames']} frames. "
        f"Sequence: {report.sequence['samples']} samples (seed {c['seed']}, pool "
        f"{c['pool_size']}, prefetch {c['prefetch_episodes']}, fetch workers "
        f"{c['fetch_workers']}, connections {c['connections']}, decoder {c['decoder']} with "
        f"{c['decode_threads']} decode threads x {c['ffmpeg_threads']} FFmpeg threads"
        f"{_on_device(c)}, torch "
        f"threads {h.get('torch_threads', '?')}, {c.get('image_dtype', 'float32')} images, "
        f"{c.get('range_backend', 'native')} range reader, {c.get('rounds', 1)} round(s), "
        "median shown); "
        f"{fmt(report.seconds, 1)} s in all."
    )
    sections = [
        header,
        "### Tracks\n\n" + _tracks(report),
        "### Ratios\n\n" + _ratios(report),
        "### Targets\n\n" + _targets(report),
        "### Fetch (byte cache alone, no decoding)\n\n" + _fetch(report),
        "### HTTP\n\n" + _http(report),
        "### Decode\n\n" + _decode(report),
        "### Randomness\n\n" + _randomness(report),
        "### Keep-up\n\n" + _keepup(report),
        "### Memory\n\n" + _memory(report),
    ]
    if report.scaling:
        sections.append("### DataLoader workers\n\n" + _scaling(report))
    if report.notes:
        sections.append("### Notes\n\n" + "\n".join(f"- {note}" for note in report.notes))
    return "\n\n".join(sections) + "\n"


def write_plot(report: BenchReport, path: str | os.PathLike[str]) -> Path:
    """STREAM's samples/s and resident cache bytes over time (matplotlib, Agg backend)."""
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError("plotting needs matplotlib: pip install 'episodestream[plot]'") from error
    matplotlib.use("Agg", force=True)
    from matplotlib import pyplot as plt

    points = report.timeline
    times = [p["t_s"] for p in points]
    samples = [p["samples"] for p in points]
    rates = [0.0]
    window = 5  # points (0.5 s) per rate estimate: smooths the per-batch jitter
    for i in range(1, len(points)):
        j = max(0, i - window)
        span = times[i] - times[j]
        rates.append((samples[i] - samples[j]) / span if span > 0 else 0.0)
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 5.5))
    top.plot(times, rates, color="tab:blue", label="STREAM")
    local = report.tracks.get("local")
    if local and local.get("steady_samples_per_s"):
        top.axhline(
            local["steady_samples_per_s"], color="tab:green", linestyle="--", label="LOCAL steady"
        )
    top.set_ylabel("samples/s")
    top.legend(loc="lower right")
    top.grid(alpha=0.3)
    # the cache is tiny next to the process: each on its own scale
    bottom.plot(
        times,
        [p["cache_bytes"] / _MIB for p in points],
        color="tab:orange",
        label="cache: resident + in flight",
    )
    bottom.set_ylabel("cache MiB", color="tab:orange")
    bottom.set_xlabel("seconds since the iteration started")
    bottom.grid(alpha=0.3)
    rss = bottom.twinx()
    rss.plot(times, [p["rss_bytes"] / _MIB for p in points], color="tab:gray", label="RSS")
    rss.set_ylabel("process RSS MiB", color="tab:gray")
    lines = bottom.get_lines() + rss.get_lines()
    bottom.legend(lines, [line.get_label() for line in lines], loc="lower right")
    figure.suptitle(f"episodestream STREAM: {report.dataset['root']}", fontsize=9)
    figure.tight_layout()
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, dpi=110)
    plt.close(figure)
    return target

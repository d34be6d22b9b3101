"""``bench-summary``: the per-rank JSON reports of a distributed run, aggregated."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from episodestream.errors import EpisodeStreamError
from episodestream_tools.bench._report import fmt, markdown_table

__all__ = ["RankRow", "RankSummary", "format_rank_summary", "summarize_ranks"]

_MIB = 2**20
_GIB = 2**30


@dataclass(frozen=True, slots=True)
class RankRow:
    """One rank's figures: what its FETCH phase moved and how fast its STREAM ran."""

    path: str
    hostname: str
    shard_index: int
    shard_count: int
    fetch_bytes: int
    fetch_seconds: float
    fetch_mib_per_s: float
    stream_bytes: int
    stream_samples: int
    stream_samples_per_s: float
    stream_steady_samples_per_s: float
    decode_samples_per_s: float | None
    kept_up: bool | None
    keepup_actual_samples_s: float | None
    keepup_target_samples_s: float | None
    stream_cpu_s: float | None = None
    stream_cpu_ms_per_sample: float | None = None
    stream_peak_rss_bytes: int | None = None
    process_peak_rss_bytes: int | None = None
    device: str = "cpu"


@dataclass(frozen=True, slots=True)
class RankSummary:
    """Aggregate of a distributed run.

    ``aggregate_mib_per_s`` is every rank's fetched bytes over the slowest rank's fetch time
    (what the cluster moved per second); ``summed_mib_per_s`` adds each rank's own rate.
    ``all_kept_up`` is None when no rank ran keep-up. ``summed_decode_samples_per_s`` adds
    each rank's resident-pool random decode rate (the decode ceiling with nothing to fetch);
    ``summed_keepup_*`` add the keep-up target and achieved rates of the ranks that ran it.
    ``cpu_ms_per_sample`` is every rank's STREAM CPU over every rank's STREAM samples;
    ``peak_rss_*`` are the ranks' STREAM peak RSS (None where no report carries it).
    """

    ranks: int
    shard_count: int
    missing_shards: list[int]
    duplicate_shards: list[int]
    total_bytes: int
    total_gib: float
    slowest_fetch_seconds: float
    aggregate_mib_per_s: float
    summed_mib_per_s: float
    summed_samples_per_s: float
    summed_steady_samples_per_s: float
    all_kept_up: bool | None
    rows: list[RankRow]
    summed_decode_samples_per_s: float | None = None
    summed_keepup_actual_samples_s: float | None = None
    summed_keepup_target_samples_s: float | None = None
    keepup_ranks: int = 0
    cpu_ms_per_sample: float | None = None
    peak_rss_max_bytes: int | None = None
    peak_rss_mean_bytes: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _row(path: Path) -> RankRow:
    try:
        data = json.loads(path.read_text())
        host, fetch, stream = data["host"], data["fetch"], data["tracks"]["stream"]
        keepup = data.get("keepup") or {}
        cpu_s = stream.get("cpu_s")
        return RankRow(
            path=str(path),
            hostname=str(host["hostname"]),
            shard_index=int(host["shard_index"]),
            shard_count=int(host["shard_count"]),
            fetch_bytes=int(fetch["bytes"]),
            fetch_seconds=float(fetch["seconds"]),
            fetch_mib_per_s=float(fetch["mib_per_s"]),
            stream_bytes=int(stream["bytes_fetched"]),
            stream_samples=int(stream["samples"]),
            stream_samples_per_s=float(stream["samples_per_s"]),
            stream_steady_samples_per_s=float(stream["steady_samples_per_s"]),
            decode_samples_per_s=(data.get("decode") or {}).get("random_decode_samples_per_s"),
            kept_up=keepup.get("kept_up"),
            keepup_actual_samples_s=keepup.get("actual_samples_s"),
            keepup_target_samples_s=keepup.get("target_samples_s"),
            stream_cpu_s=None if cpu_s is None else float(cpu_s),
            stream_cpu_ms_per_sample=stream.get("cpu_ms_per_sample"),
            stream_peak_rss_bytes=(stream.get("memory") or {}).get("rss_peak_bytes"),
            process_peak_rss_bytes=(data.get("memory") or {}).get("process_peak_rss_bytes"),
            device=str((data.get("config") or {}).get("device", "cpu")),
        )
    except FileNotFoundError:
        raise EpisodeStreamError(f"{path}: no such bench report") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise EpisodeStreamError(
            f"{path}: not an episodestream bench JSON report ({type(error).__name__}: {error})"
        ) from error


def summarize_ranks(paths: Iterable[str | os.PathLike[str]]) -> RankSummary:
    """Aggregate the ``bench --json`` files of the ranks of one run.

    Raises:
        EpisodeStreamError: no file, an unreadable or foreign file, or ranks that disagree on
            the shard count.
    """
    rows = sorted((_row(Path(p)) for p in paths), key=lambda r: (r.shard_index, r.path))
    if not rows:
        raise EpisodeStreamError("bench-summary needs at least one bench JSON report")
    counts = {r.shard_count for r in rows}
    if len(counts) != 1:
        raise EpisodeStreamError(f"the reports come from runs of different sizes: {sorted(counts)}")
    shard_count = counts.pop()
    seen = [r.shard_index for r in rows]
    duplicates = sorted({s for s in seen if seen.count(s) > 1})
    missing = sorted(set(range(shard_count)) - set(seen))
    total = sum(r.fetch_bytes for r in rows)
    slowest = max(r.fetch_seconds for r in rows)
    kept = [r.kept_up for r in rows if r.kept_up is not None]
    decode = [r.decode_samples_per_s for r in rows if r.decode_samples_per_s is not None]
    keepup = [r for r in rows if r.keepup_actual_samples_s is not None]
    cpu = [r for r in rows if r.stream_cpu_s is not None]
    cpu_samples = sum(r.stream_samples for r in cpu)
    rss = [r.stream_peak_rss_bytes for r in rows if r.stream_peak_rss_bytes is not None]
    return RankSummary(
        ranks=len(rows),
        shard_count=shard_count,
        missing_shards=missing,
        duplicate_shards=duplicates,
        total_bytes=total,
        total_gib=total / _GIB,
        slowest_fetch_seconds=slowest,
        aggregate_mib_per_s=total / _MIB / slowest if slowest > 0 else 0.0,
        summed_mib_per_s=sum(r.fetch_mib_per_s for r in rows),
        summed_samples_per_s=sum(r.stream_samples_per_s for r in rows),
        summed_steady_samples_per_s=sum(r.stream_steady_samples_per_s for r in rows),
        all_kept_up=all(kept) if kept else None,
        rows=rows,
        summed_decode_samples_per_s=sum(decode) if decode else None,
        summed_keepup_actual_samples_s=(
            sum(float(r.keepup_actual_samples_s or 0.0) for r in keepup) if keepup else None
        ),
        summed_keepup_target_samples_s=(
            sum(float(r.keepup_target_samples_s or 0.0) for r in keepup) if keepup else None
        ),
        keepup_ranks=len(keepup),
        cpu_ms_per_sample=(
            1000.0 * sum(float(r.stream_cpu_s or 0.0) for r in cpu) / cpu_samples
            if cpu and cpu_samples
            else None
        ),
        peak_rss_max_bytes=max(rss) if rss else None,
        peak_rss_mean_bytes=sum(rss) / len(rss) if rss else None,
    )


def _mib(value: float | None) -> str:
    return "—" if value is None else f"{value / _MIB:.1f}"


def format_rank_summary(summary: RankSummary) -> str:
    """The aggregate and the per-rank table, as Markdown."""
    aggregate = markdown_table(
        [
            "ranks",
            "total GiB",
            "aggregate MiB/s (total / slowest rank)",
            "summed rank MiB/s",
            "summed samples/s",
            "summed steady samples/s",
            "CPU ms per sample",
            "summed resident decode samples/s",
            "summed keep-up actual / target samples/s",
            "peak RSS per rank MiB, max / mean",
            "all ranks kept up",
        ],
        [
            [
                f"{summary.ranks} of {summary.shard_count}",
                fmt(summary.total_gib, 4),
                fmt(summary.aggregate_mib_per_s),
                fmt(summary.summed_mib_per_s),
                fmt(summary.summed_samples_per_s, 1),
                fmt(summary.summed_steady_samples_per_s, 1),
                fmt(summary.cpu_ms_per_sample, 2),
                fmt(summary.summed_decode_samples_per_s, 1),
                f"{fmt(summary.summed_keepup_actual_samples_s, 1)} / "
                f"{fmt(summary.summed_keepup_target_samples_s, 1)} "
                f"({summary.keepup_ranks} ranks)",
                f"{_mib(summary.peak_rss_max_bytes)} / {_mib(summary.peak_rss_mean_bytes)}",
                fmt(summary.all_kept_up),
            ]
        ],
    )
    per_rank = markdown_table(
        [
            "rank",
            "host",
            "device",
            "fetched MiB",
            "fetch s",
            "fetch MiB/s",
            "STREAM samples",
            "samples/s",
            "steady samples/s",
            "CPU ms per sample",
            "resident decode samples/s",
            "peak RSS MiB",
            "keep-up actual / target",
            "kept up",
        ],
        [
            [
                r.shard_index,
                r.hostname,
                r.device,
                fmt(r.fetch_bytes / _MIB, 2),
                fmt(r.fetch_seconds),
                fmt(r.fetch_mib_per_s),
                r.stream_samples,
                fmt(r.stream_samples_per_s, 1),
                fmt(r.stream_steady_samples_per_s, 1),
                fmt(r.stream_cpu_ms_per_sample, 2),
                fmt(r.decode_samples_per_s, 1),
                _mib(r.stream_peak_rss_bytes),
                f"{fmt(r.keepup_actual_samples_s, 1)} / {fmt(r.keepup_target_samples_s, 1)}",
                fmt(r.kept_up),
            ]
            for r in summary.rows
        ],
    )
    lines = ["## episodestream bench-summary", "", aggregate, "", per_rank]
    if summary.missing_shards:
        lines += ["", f"Missing ranks: {summary.missing_shards}."]
    if summary.duplicate_shards:
        lines += ["", f"Ranks reported more than once: {summary.duplicate_shards}."]
    return "\n".join(lines) + "\n"

"""The ``bench`` / ``bench-summary`` / ``demo`` library (episodestream-tools; docs/ARCHITECTURE.md).

- :func:`run_bench` runs STREAM / LOCAL / NAIVE / DOWNLOAD on one seeded sample sequence and
  returns a :class:`BenchReport`; :func:`format_report` prints it as Markdown,
  :func:`write_plot` draws STREAM's samples/s and resident bytes over time.
- :func:`summarize_ranks` aggregates the per-rank JSON reports of a distributed run.
- The cluster planner is a layer of the core: :mod:`episodestream.plan`.
- :func:`run_demo` serves the demo dataset through an emulated WAN and benchmarks it.
"""

from episodestream_tools.bench._bench import BenchReport, run_bench
from episodestream_tools.bench._config import ALL_TRACKS, BenchConfig, TrackName, detect_shard
from episodestream_tools.bench._demo import DemoConfig, DemoResult, format_demo, run_demo
from episodestream_tools.bench._report import format_report, write_plot
from episodestream_tools.bench._summary import (
    RankRow,
    RankSummary,
    format_rank_summary,
    summarize_ranks,
)

__all__ = [
    "ALL_TRACKS",
    "BenchConfig",
    "BenchReport",
    "DemoConfig",
    "DemoResult",
    "RankRow",
    "RankSummary",
    "TrackName",
    "detect_shard",
    "format_demo",
    "format_rank_summary",
    "format_report",
    "run_bench",
    "run_demo",
    "summarize_ranks",
    "write_plot",
]

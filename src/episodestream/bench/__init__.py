"""bench layer (see DESIGN.md): the ``bench`` / ``bench-summary`` / ``demo`` commands' library.

- :func:`run_bench` runs STREAM / LOCAL / NAIVE / DOWNLOAD on one seeded sample sequence and
  returns a :class:`BenchReport`; :func:`format_report` prints it as Markdown,
  :func:`write_plot` draws STREAM's samples/s and resident bytes over time.
- :func:`summarize_ranks` aggregates the per-rank JSON reports of a distributed run.
- :func:`run_demo` serves the demo dataset through an emulated WAN and benchmarks it.
"""

from episodestream.bench._bench import REPORT_VERSION, BenchReport, run_bench
from episodestream.bench._config import ALL_TRACKS, BenchConfig, TrackName, detect_shard
from episodestream.bench._demo import DemoConfig, DemoResult, format_demo, run_demo
from episodestream.bench._report import format_report, write_plot
from episodestream.bench._summary import (
    RankRow,
    RankSummary,
    format_rank_summary,
    summarize_ranks,
)

__all__ = [
    "ALL_TRACKS",
    "REPORT_VERSION",
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

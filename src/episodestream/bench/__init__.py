"""bench layer (docs/ARCHITECTURE.md): the ``bench`` / ``bench-summary`` / ``demo`` library.

- :func:`run_bench` runs STREAM / LOCAL / NAIVE / DOWNLOAD on one seeded sample sequence and
  returns a :class:`BenchReport`; :func:`format_report` prints it as Markdown,
  :func:`write_plot` draws STREAM's samples/s and resident bytes over time.
- :func:`summarize_ranks` aggregates the per-rank JSON reports of a distributed run.
- :func:`plan_cluster` computes what a cluster's epoch asks of storage (requests, bytes/s,
  quota windows, budgets) from :func:`read_plan_layout`'s dataset layout; :func:`format_plan`.
- :func:`run_demo` serves the demo dataset through an emulated WAN and benchmarks it.
"""

from episodestream.bench._bench import BenchReport, run_bench
from episodestream.bench._config import ALL_TRACKS, BenchConfig, TrackName, detect_shard
from episodestream.bench._demo import DemoConfig, DemoResult, format_demo, run_demo
from episodestream.bench._plan import (
    DEFAULT_RTT_S,
    HUB_RESOLVER_LIMITS,
    ClusterPlan,
    ClusterSpec,
    ColumnChunk,
    DataFile,
    DatasetLayout,
    HubLimits,
    PoolSpec,
    format_plan,
    plan_cluster,
    pool_size_for_unique,
    unique_episodes_per_batch,
)
from episodestream.bench._plan_layout import read_plan_layout
from episodestream.bench._report import format_report, write_plot
from episodestream.bench._summary import (
    RankRow,
    RankSummary,
    format_rank_summary,
    summarize_ranks,
)

__all__ = [
    "ALL_TRACKS",
    "DEFAULT_RTT_S",
    "HUB_RESOLVER_LIMITS",
    "BenchConfig",
    "BenchReport",
    "ClusterPlan",
    "ClusterSpec",
    "ColumnChunk",
    "DataFile",
    "DatasetLayout",
    "DemoConfig",
    "DemoResult",
    "HubLimits",
    "PoolSpec",
    "RankRow",
    "RankSummary",
    "TrackName",
    "detect_shard",
    "format_demo",
    "format_plan",
    "format_rank_summary",
    "format_report",
    "plan_cluster",
    "pool_size_for_unique",
    "read_plan_layout",
    "run_bench",
    "run_demo",
    "summarize_ranks",
    "unique_episodes_per_batch",
    "write_plot",
]

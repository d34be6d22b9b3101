"""Plan layer: what a training cluster's epoch asks of a dataset's storage.

From the dataset's layout (manifest spans, Parquet row groups, what opening it cost) and the
exact schedule of :class:`~episodestream.datasets.EpisodePoolDataset`: requests and bytes per
epoch, rates per node and per rate-limit window, the byte budget, which limit binds first.

- :func:`plan_dataset`: open a dataset by its root and plan (what ``episodestream plan`` runs).
- :func:`read_plan_layout` and :func:`plan_cluster`: the two steps, for a dataset already open.

Sits above ``datasets``; :func:`plan_cluster` itself is pure (no I/O).
"""

from episodestream.plan._layout import read_plan_layout
from episodestream.plan._open import plan_dataset
from episodestream.plan._plan import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_HOST_CEILING_BYTES_PER_S,
    DEFAULT_HUB_TIER,
    DEFAULT_PREFETCH_EPISODES,
    DEFAULT_RTT_S,
    DEFAULT_WINDOW_S,
    HUB_RESOLVER_LIMITS,
    HUB_RESOLVER_LIMITS_SOURCE,
    ClusterPlan,
    ClusterSpec,
    ColumnChunk,
    DataFile,
    DatasetLayout,
    HubLimits,
    PoolSpec,
    coalesce_ranges,
    format_plan,
    plan_cluster,
    pool_size_for_unique,
    unique_episodes_per_batch,
)

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
    "plan_dataset",
    "pool_size_for_unique",
    "read_plan_layout",
    "unique_episodes_per_batch",
]

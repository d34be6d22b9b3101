"""Plan a dataset by its root: open it as the pool would, read its layout, plan the epoch."""

from __future__ import annotations

import os

from episodestream._checks import MAX_BYTES
from episodestream.datasets import EpisodePoolDataset
from episodestream.plan._layout import read_plan_layout
from episodestream.plan._plan import ClusterPlan, ClusterSpec, HubLimits, PoolSpec, plan_cluster

__all__ = ["plan_dataset"]

# opened only to plan: the pool's budget check must not refuse what the plan should size
_UNBOUNDED_BUDGET = MAX_BYTES.value
_DEFAULT_POOL = PoolSpec()
_DEFAULT_HUB = HubLimits()


def plan_dataset(
    root: str | os.PathLike[str],
    *,
    cluster: ClusterSpec,
    pool: PoolSpec = _DEFAULT_POOL,
    hub: HubLimits = _DEFAULT_HUB,
    cache_dir: str | os.PathLike[str] | None = None,
) -> ClusterPlan:
    """What one epoch of ``pool`` on ``cluster`` asks of the storage holding ``root``.

    Opens the dataset the way :class:`~episodestream.datasets.EpisodePoolDataset` opens it
    (index, sidecar, metadata; what that cost is counted for every rank), reads its layout
    (:func:`read_plan_layout`) and plans (:func:`plan_cluster`). With
    ``pool.unique_per_batch``, the pool size is chosen by the plan; the dataset is opened
    with ``pool.params.pool_size``, which changes nothing the layout holds.
    """
    with EpisodePoolDataset(
        root,
        pool_size=pool.params.pool_size,
        prefetch_episodes=pool.prefetch_episodes,
        byte_budget=_UNBOUNDED_BUDGET,
        seed=pool.params.seed,
        cache_dir=cache_dir,
    ) as dataset:
        layout = read_plan_layout(dataset)
    return plan_cluster(layout, cluster=cluster, pool=pool, hub=hub)

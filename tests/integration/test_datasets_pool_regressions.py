"""Regressions found in review: pool stalls on a tight budget, prefetch churn, persistent
workers ignoring set_epoch, datasets dropped without close(), tokens in reprs."""

from __future__ import annotations

import gc
import threading

import numpy as np
import torch.utils.data

from episodestream import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.datasets._engine import check_budget


def _minimal_budget(root, cache_dir, pool_size: int, extra_episodes: int = 0) -> int:
    with EpisodePoolDataset(root, pool_size=pool_size, cache_dir=cache_dir) as probe:
        sizes = np.sort(probe.dataset.episode_nbytes)[::-1]
        budget = int(sizes[:pool_size].sum() + 2 * sizes[0] + sizes[:extra_episodes].sum())
        check_budget(probe.dataset, budget, resident_episodes=pool_size, what="budget")
    return budget


def test_tight_budget_with_many_pending_samples_completes(synthetic_many, datasets_cache_dir):
    # Leaving episodes used to stay pinned until their pending samples drained, while the
    # only thread that drains them blocked in wait_ready for the entering episode: a stall.
    budget = _minimal_budget(synthetic_many, datasets_cache_dir, pool_size=2)
    with EpisodePoolDataset(
        synthetic_many,
        pool_size=2,
        prefetch_episodes=0,
        byte_budget=budget,
        max_pending_samples=32,
        decode_threads=1,
        wait_timeout_s=20,
        cache_dir=datasets_cache_dir,
        image_dtype="uint8",
    ) as ds:
        indices = [int(sample["index"]) for sample in ds]
        assert sorted(indices) == list(range(ds.dataset.num_frames))


def test_prefetch_fetches_each_episode_once_under_a_tight_budget(
    synthetic_many, datasets_cache_dir
):
    # Prefetches used to evict the prefetched episodes about to enter (least recently used)
    # and fetch them again: up to 2.7 fetches per episode.
    budget = _minimal_budget(synthetic_many, datasets_cache_dir, pool_size=2, extra_episodes=3)
    with EpisodePoolDataset(
        synthetic_many,
        pool_size=2,
        prefetch_episodes=8,
        byte_budget=budget,
        decode_threads=1,
        cache_dir=datasets_cache_dir,
        image_dtype="uint8",
    ) as ds:
        total = ds.dataset.num_frames
        iterator = iter(ds)
        for _ in range(total):
            next(iterator)
        cache = ds.metrics()["cache"]
        assert next(iterator, None) is None
        video_bytes = int(ds.dataset.manifest.episode_bytes().sum())
    assert cache.peak_bytes <= budget
    assert cache.fetches == len(ds.dataset.episode_ids)
    assert cache.bytes_fetched <= 1.05 * video_bytes


def test_set_epoch_reaches_persistent_workers(synthetic_av1, datasets_cache_dir):
    with EpisodePoolDataset(
        synthetic_av1, pool_size=2, cache_dir=datasets_cache_dir, image_dtype="uint8"
    ) as ds:
        orders = {}
        for persistent in (False, True):
            loader = torch.utils.data.DataLoader(
                ds, batch_size=None, num_workers=1, persistent_workers=persistent
            )
            for epoch in range(2):
                ds.set_epoch(epoch)
                orders[persistent, epoch] = [int(s["index"]) for s in loader]
            del loader
    assert orders[True, 0] == orders[False, 0]
    assert orders[True, 1] == orders[False, 1]
    assert orders[True, 0] != orders[True, 1]
    assert sorted(orders[True, 1]) == sorted(orders[True, 0])


def test_a_dataset_dropped_without_close_leaves_no_threads(synthetic_av1, datasets_cache_dir):
    def ours() -> list[str]:
        return [t.name for t in threading.enumerate() if t.name.startswith("episodestream")]

    before = ours()
    for _ in range(2):
        ds = EpisodeStreamDataset(synthetic_av1, cache_dir=datasets_cache_dir)
        ds[0]
        assert len(ours()) > len(before)
        del ds
        gc.collect()
    assert ours() == before


def test_a_token_in_reader_options_stays_out_of_reprs(lerobot_sim5_url, datasets_cache_dir):
    token = "hf_reprSecret0123456789"
    with EpisodeStreamDataset(
        lerobot_sim5_url, cache_dir=datasets_cache_dir, reader_options={"token": token}
    ) as ds:
        assert token not in repr(ds.options)
        assert token not in repr(ds)
        assert token not in repr(ds.dataset.reader)

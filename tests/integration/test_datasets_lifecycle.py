"""EpisodePoolDataset's threads over many epochs: a pass that runs to its end keeps its fetch,
rows, decode and open threads for the next pass (fresh threads each pass grew RSS through glibc's
per-thread malloc arenas), in this process and in persistent DataLoader workers; a pass ended
early stops them; close(), garbage collection and a fork never leave or share one."""

from __future__ import annotations

import gc
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, get_worker_info

from episodestream import EpisodePoolDataset
from tests.support.threads import episodestream_threads

TOTAL_FRAMES = 104  # synthetic_av1: 6 episodes of 8..20 frames, 2 cameras
FETCH_WORKERS = 2
DECODE_THREADS = 2
ROWS_THREADS = 2


def _pool(root: Path, cache_dir: Path, **kwargs: Any) -> EpisodePoolDataset:
    kwargs.setdefault("pool_size", 3)
    kwargs.setdefault("prefetch_episodes", 2)
    kwargs.setdefault("byte_budget", "32MiB")
    kwargs.setdefault("decode_threads", DECODE_THREADS)
    kwargs.setdefault("fetch_workers", FETCH_WORKERS)
    kwargs.setdefault("image_dtype", "uint8")
    return EpisodePoolDataset(root, cache_dir=cache_dir, **kwargs)


def _described(threads: set[threading.Thread]) -> set[tuple[str, int | None]]:
    return {(t.name, t.ident) for t in threads}


def _kinds(threads: set[threading.Thread]) -> dict[str, int]:
    kinds = {"fetch": 0, "pool": 0, "rows": 0, "open": 0}
    for thread in threads:
        for kind in kinds:
            kinds[kind] += thread.name.startswith(f"episodestream-{kind}-")
    return kinds


@pytest.mark.parametrize("unit", ["episode", "window"])
def test_epochs_reuse_the_same_threads_and_close_joins_them(
    synthetic_av1: Path, datasets_cache_dir: Path, unit: str
) -> None:
    before = episodestream_threads()
    dataset = _pool(synthetic_av1, datasets_cache_dir, unit=unit, window_frames=4)
    after_epoch: list[set[threading.Thread]] = []
    orders = []
    for epoch in range(5):
        dataset.set_epoch(epoch)
        order = [int(sample["index"]) for sample in dataset]
        assert sorted(order) == list(range(TOTAL_FRAMES)), epoch  # every frame once
        orders.append(order)
        after_epoch.append(episodestream_threads() - before)
    assert len(set(map(tuple, orders))) == 5  # each epoch its own order
    kept = after_epoch[1]
    assert _kinds(kept) == {
        "fetch": FETCH_WORKERS,
        "pool": DECODE_THREADS,
        "rows": ROWS_THREADS,
        "open": 1,  # decoders are opened on a thread of their own (datasets/_engine.py)
    }
    # the very same threads (names and idents) after epochs 2 to 5: reused, none leaked
    for epoch, threads in enumerate(after_epoch[1:], start=2):
        assert _described(threads) == _described(kept), epoch
    assert after_epoch[0] == kept  # the first pass started them
    dataset.close()
    # close() returned: every one has been joined, none is left to wind down later
    assert [t.name for t in kept if t.is_alive()] == []
    assert episodestream_threads() - before == set()


def test_metrics_describe_the_current_pass_not_the_sum_of_passes(
    synthetic_av1: Path, datasets_cache_dir: Path
) -> None:
    episodes = 6
    with _pool(synthetic_av1, datasets_cache_dir, decode_threads=1) as dataset:
        for epoch in range(3):
            dataset.set_epoch(epoch)
            iterator = iter(dataset)
            for _ in range(TOTAL_FRAMES):
                next(iterator)
            metrics = dataset.metrics()
            assert next(iterator, None) is None
            # each pass fetches each episode once and opens its 2 cameras' decoders afresh
            assert metrics["samples"] == TOTAL_FRAMES
            assert metrics["cache"].fetches == episodes, epoch
            assert metrics["decoders"].opens == 2 * episodes, epoch


def test_an_epoch_ended_early_stops_its_threads_and_the_next_starts_afresh(
    synthetic_av1: Path, datasets_cache_dir: Path
) -> None:
    before = episodestream_threads()
    with _pool(synthetic_av1, datasets_cache_dir) as dataset:
        assert len(list(dataset)) == TOTAL_FRAMES
        kept = episodestream_threads() - before
        assert _kinds(kept)["fetch"] == FETCH_WORKERS
        for number, _ in enumerate(dataset):
            if number == 10:
                break  # the kept threads served this pass; it ended early: they stop
        gc.collect()
        assert [t.name for t in kept if t.is_alive()] == []
        assert episodestream_threads() - before == set()
        dataset.set_epoch(1)
        assert sorted(int(s["index"]) for s in dataset) == list(range(TOTAL_FRAMES))
        fresh = episodestream_threads() - before
        assert _kinds(fresh) == _kinds(kept) and not fresh & kept
    assert episodestream_threads() - before == set()


def test_a_dataset_dropped_after_an_epoch_joins_its_kept_threads(
    synthetic_av1: Path, datasets_cache_dir: Path
) -> None:
    before = episodestream_threads()
    dataset = _pool(synthetic_av1, datasets_cache_dir)
    assert len(list(dataset)) == TOTAL_FRAMES
    kept = episodestream_threads() - before
    assert _kinds(kept)["pool"] == DECODE_THREADS
    del dataset
    gc.collect()
    assert [t.name for t in kept if t.is_alive()] == []


def _census_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs in the DataLoader worker: the batch plus the worker's pid and live threads."""
    batch = torch.utils.data.default_collate(samples)
    info = get_worker_info()
    assert info is not None
    threads = sorted(_described(episodestream_threads()), key=repr)
    batch["census"] = (info.id, os.getpid(), threads)
    return batch


def test_persistent_workers_keep_their_threads_and_cover_every_epoch(
    synthetic_av1: Path, datasets_cache_dir: Path
) -> None:
    before = episodestream_threads()
    with _pool(synthetic_av1, datasets_cache_dir, decode_threads=1) as dataset:
        # this process iterates first: its kept threads must not reach the forked workers
        assert len(list(dataset)) == TOTAL_FRAMES
        parent = episodestream_threads() - before
        loader = DataLoader(
            dataset,
            batch_size=4,
            num_workers=2,
            persistent_workers=True,
            collate_fn=_census_collate,
        )
        orders = []
        censuses: list[dict[int, set[tuple[int, tuple[tuple[str, int | None], ...]]]]] = []
        for epoch in range(3):
            dataset.set_epoch(epoch)
            order: list[int] = []
            census: dict[int, set[tuple[int, tuple[tuple[str, int | None], ...]]]] = {}
            for batch in loader:
                order.extend(batch["index"].tolist())
                worker, pid, threads = batch["census"]
                census.setdefault(worker, set()).add((pid, tuple(threads)))
            assert sorted(order) == list(range(TOTAL_FRAMES)), epoch  # exact coverage
            orders.append(order)
            censuses.append(census)
        del loader
        assert orders[0] != orders[1] != orders[2]
        for worker in (0, 1):
            # one process, one set of threads, seen identically in every batch of every epoch
            seen = set().union(*(census[worker] for census in censuses))
            assert len(seen) == 1, (worker, seen)
            ((pid, threads),) = seen
            assert pid != os.getpid()
            names = [name for name, _ in threads]
            assert sum(n.startswith("episodestream-fetch-") for n in names) == FETCH_WORKERS
            assert sum(n.startswith("episodestream-pool-") for n in names) == 1
        # the parent's kept threads were never closed by a worker and serve its next pass
        assert all(t.is_alive() for t in parent)
        assert len(list(dataset)) == TOTAL_FRAMES
        assert _described(episodestream_threads() - before) == _described(parent)
    assert episodestream_threads() - before == set()

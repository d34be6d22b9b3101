"""WORKERS: STREAM through a real ``torch.utils.data.DataLoader`` with N persistent workers.

For each N: samples/s, CPU per sample of every process (the parent and its workers, from
``/proc``), RSS and USS per worker and in all. Efficiency is samples/s(N) / (N x samples/s(1)):
1.0 when the workers scale perfectly; with several rounds, the median of each round's ratio.
Cores busy (CPU seconds of every process over the wall seconds) says how far that can go: with
``decode_threads=0`` a worker decodes in its own thread and keeps one core busy; with decode
threads, one worker may already fill the machine. Timing starts at the first batch, so worker
start-up (fork, decoder libraries, first fetches) is excluded and reported as time to first
batch.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

import numpy as np
from torch.utils.data import DataLoader

from episodestream.datasets import EpisodePoolDataset
from episodestream_tools.bench._config import BenchConfig
from episodestream_tools.bench._measure import (
    Progress,
    child_pids,
    median_round,
    process_figures,
    rotated_rounds,
    rss_bytes,
    steady_rate,
)
from episodestream_tools.bench._sequence import BenchDataset
from episodestream_tools.bench._tracks import pool_arguments

__all__ = ["default_worker_counts", "run_scaling", "run_workers", "scaling_rows"]

logger = logging.getLogger(__name__)

# batches each worker prepares ahead (DataLoader's default)
_PREFETCH_FACTOR = 2


def default_worker_counts(cpus: int | None = None) -> tuple[int, ...]:
    """1, 2, 4, ... up to the cores present (the core count itself last)."""
    cpus = max(1, cpus if cpus is not None else len(os.sched_getaffinity(0)))
    counts = []
    n = 1
    while n < cpus:
        counts.append(n)
        n *= 2
    counts.append(cpus)
    return tuple(counts)


def run_workers(config: BenchConfig, ds: BenchDataset, workers: int) -> dict[str, Any]:
    """One scaling row: ``workers`` persistent DataLoader workers draw the rank's samples."""
    wanted = min(config.scaling_samples or config.samples, int(ds.sequence.shard_frames.sum()))
    pool = EpisodePoolDataset(**pool_arguments(config, ds), rank=ds.rank, world_size=ds.world_size)
    loader = DataLoader(
        pool,
        batch_size=config.batch_size,
        num_workers=workers,
        persistent_workers=True,
        prefetch_factor=_PREFETCH_FACTOR,
        timeout=config.wait_timeout_s,
    )
    before = child_pids()
    parent_rss_start = rss_bytes()
    arrivals: list[float] = []
    counts: list[int] = []
    opened = time.perf_counter()
    iterator = iter(loader)
    try:
        with Progress(
            wanted, f"WORKERS x{workers}", enabled=config.progress, unit="samples"
        ) as bar:
            batch = next(iterator)
            first_batch_s = time.perf_counter() - opened
            done = int(batch["episode_index"].numel())
            bar.update(done)
            # the workers are the children that appeared with the loader
            pids = sorted(child_pids() - before)
            start_figures = {pid: process_figures(pid) for pid in pids}
            parent_cpu_start = time.process_time()
            started = time.perf_counter()
            while done < wanted:
                try:
                    batch = next(iterator)
                except StopIteration:  # the epoch ended: a short shard
                    break
                size = int(batch["episode_index"].numel())
                done += size
                arrivals.append(time.perf_counter() - started)
                counts.append(size)
                bar.update(size)
            seconds = time.perf_counter() - started
            parent_cpu_s = time.process_time() - parent_cpu_start
            end_figures = {pid: process_figures(pid) for pid in pids}
        parent_rss_end = rss_bytes()
    finally:
        # persistent workers stop when the loader's iterator is collected
        del iterator
        del loader
        gc.collect()
        pool.close()
    timed = int(sum(counts))
    worker_cpu = [end_figures[p].cpu_s - start_figures[p].cpu_s for p in pids]
    cpu_s = parent_cpu_s + float(sum(worker_cpu))
    worker_rss = [end_figures[p].rss_bytes for p in pids]
    worker_uss = [u for p in pids if (u := end_figures[p].uss_bytes) is not None]
    uss_known = len(worker_uss) == len(pids)  # smaps_rollup needs Linux 4.14
    # each batch's arrival stands for its samples, for the steady (start-up excluded) rate
    per_sample = np.repeat(np.asarray(arrivals, dtype=np.float64), counts)
    return {
        "workers": workers,
        "worker_processes": len(pids),
        "samples": done,
        "timed_samples": timed,
        "time_to_first_batch_s": first_batch_s,
        "seconds": seconds,
        "samples_per_s": timed / seconds if seconds > 0 else 0.0,
        "steady_samples_per_s": steady_rate(per_sample),
        "cpu_s": cpu_s,
        # a worker that decodes on threads of its own keeps more than one core busy, and
        # N of them can then scale by at most cores / (its cores), not by N
        "cores_busy": cpu_s / seconds if seconds > 0 else None,
        "parent_cpu_s": parent_cpu_s,
        "worker_cpu_s": worker_cpu,
        "cpu_ms_per_sample": 1000.0 * cpu_s / timed if timed else None,
        "parent_rss_start_bytes": parent_rss_start,
        "parent_rss_bytes": parent_rss_end,
        "worker_rss_bytes": worker_rss,
        "worker_rss_mean_bytes": float(np.mean(worker_rss)) if worker_rss else None,
        "worker_rss_max_bytes": max(worker_rss) if worker_rss else None,
        "worker_uss_bytes": worker_uss if uss_known else None,
        "worker_uss_mean_bytes": float(np.mean(worker_uss)) if uss_known and pids else None,
        "total_rss_bytes": parent_rss_end + int(sum(worker_rss)),
        "total_uss_bytes": parent_rss_end + int(sum(worker_uss)) if uss_known else None,
        "byte_budget": config.byte_budget,
    }


def run_scaling(config: BenchConfig, ds: BenchDataset) -> dict[str, Any]:
    """Every worker count of ``config.num_workers`` in ``config.rounds`` interleaved rounds
    (the order rotated a step per round), in rows as :func:`scaling_rows` makes them."""
    counts = list(config.num_workers)
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in counts}
    for order in rotated_rounds(counts, config.rounds):
        for n in order:
            runs[n].append(run_workers(config, ds, n))
    rows = scaling_rows(runs)
    return {
        "rows": rows,
        "rounds": config.rounds,
        "baseline_workers": min(counts),
        "cpus": len(os.sched_getaffinity(0)),
        "image_dtype": config.image_dtype,
        "batch_size": config.batch_size,
        "decode_threads_per_worker": config.decode_threads,
    }


def scaling_rows(runs: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per worker count (``runs``: its rounds, in round order), its median round by
    samples/s. Speed-up and efficiency against the fewest workers (one worker when 1 ran) are
    the medians of each round's ratios: counts run side by side meet the same drift. A round
    whose baseline timed nothing has no ratio (None keeps the rounds aligned)."""
    base_workers = min(runs)
    rows = []
    for n, rounds in runs.items():
        row = dict(median_round(rounds, "samples_per_s"))
        speedups = [
            r["samples_per_s"] / b["samples_per_s"] if b["samples_per_s"] > 0 else None
            for r, b in zip(rounds, runs[base_workers], strict=True)
        ]
        known = [x for x in speedups if x is not None]
        row["round_samples_per_s"] = [r["samples_per_s"] for r in rounds]
        row["round_speedups"] = speedups
        row["speedup"] = float(np.median(known)) if known else None
        row["efficiency"] = row["speedup"] * base_workers / n if known else None
        rows.append(row)
    return rows

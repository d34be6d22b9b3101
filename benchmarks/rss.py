"""RSS over many pool passes with default malloc settings: threads kept across epochs vs
fresh threads per pass.

Run: ``python -m benchmarks.rss [--passes 50] [--episodes 3] [--budget 64MiB]``
(on the cached demo dataset, local disk, so the figure is about memory, not the network).

Three child processes (more when asked) run side by side, started together, each without
``MALLOC_ARENA_MAX``:

- ``kept``: every pass runs to its end, so the pool keeps its fetch, rows, decode and open threads
  for the next pass (what a training loop over epochs does);
- ``per-pass``: every pass takes all its samples, then closes the iterator before it reports
  the end; a pass ended early stops its threads, so the next pass starts fresh ones (how
  every pass ran before the threads were kept);
- ``kept, no trim``: as ``kept`` with the heap trimmer (``decode/_heap.py``: ``malloc_trim``
  when decoders close, rate-limited) turned off, as before it existed: the
  reference for its RSS and its CPU cost.

Each prints RSS after every pass; the report gives RSS(last)/RSS(2) per mode (target for
``kept``: at most 1.01), CPU per sample against ``kept, no trim`` and the growth side by side.
``--cpu-rounds N`` measures the trimmer's CPU cost instead: N rounds of two ``kept`` and two
``kept, no trim`` children started together, the ratio of their CPU per sample per round.
``--pass-end-trim`` adds ``kept+pass-end trim``: ``kept`` that also trims once after every
pass (what the pool could do at a pass end). ``--fixed-mmap-threshold`` adds a child
``kept, no trim, mmap128k``: ``kept, no trim`` with ``MALLOC_MMAP_THRESHOLD_=131072``: glibc
then stops raising its mmap threshold as large blocks are freed, so large buffers (frames,
clips) are mapped and unmapped instead of fragmenting the heaps; it tells how much of the
growth is that. ``--child kept --passes N --python-objects`` runs one ``kept`` child alone and
logs what Python's own allocations (``tracemalloc``) grew by from pass 10 to pass N.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import gc
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from dataclasses import asdict, dataclass
from typing import Literal

import psutil

from episodestream.datasets import EpisodePoolDataset, parse_bytes
from episodestream.decode import heap_trimmer
from episodestream_tools.synthetic import DEMO_SPEC, ensure_synthetic_dataset

__all__ = ["RssPass", "ThreadMode", "demo_pool", "measure_rss_passes"]

logger = logging.getLogger(__name__)
ThreadMode = Literal["kept", "per-pass"]
_MODES: tuple[ThreadMode, ...] = ("kept", "per-pass")
#: the diagnostic child: as ``_BEFORE`` with glibc's mmap threshold fixed at its default
_FIXED = "kept, no trim, mmap128k"
_FIXED_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}
#: kept threads as before the heap trimmer: ``heap_trimmer()`` turned off
_BEFORE = "kept, no trim"
#: kept threads, and a trim after every pass besides (``--pass-end-trim``)
_PASS_END = "kept+pass-end trim"
_MIB = 2**20
#: bound on one child's whole run (50 passes of a few hundred samples take minutes)
_CHILD_TIMEOUT_S = 3600.0
#: passes whose RSS the table shows (1-based), besides the last
_SHOWN = (1, 2, 3, 5, 10, 20, 30, 40)


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (all arenas): the heap bytes in use and free."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _heap_mib() -> tuple[float | None, float | None]:
    """malloc's bytes in use and free inside its heaps (MiB); None off glibc >= 2.33."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return None, None
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    return info.uordblks / _MIB, info.fordblks / _MIB


@dataclass(frozen=True, slots=True)
class RssPass:
    """One full epoch of the pool: samples, process RSS after it (MiB) and live threads."""

    epoch: int
    samples: int
    rss_after_mib: float
    threads: int
    cpu_ms_per_sample: float
    heap_in_use_mib: float | None
    heap_free_mib: float | None
    cache_peak_mib: float
    decoder_peak_mib: float
    heap_trims: int
    trim_ms: float
    minor_faults_per_sample: float


def demo_pool(
    *, episodes: int = 3, budget: str = "64MiB", cache_dir: str | None = None
) -> EpisodePoolDataset:
    """The pool every pass of this benchmark runs: the demo dataset's first ``episodes``,
    pool 2, prefetch 1, 2 decode threads, uint8."""
    return EpisodePoolDataset(
        ensure_synthetic_dataset(DEMO_SPEC),
        episodes=range(episodes),
        pool_size=2,
        prefetch_episodes=1,
        byte_budget=budget,
        image_dtype="uint8",
        decode_threads=2,
        cache_dir=cache_dir,
    )


def measure_rss_passes(
    *,
    passes: int = 50,
    episodes: int = 3,
    budget: str = "64MiB",
    threads: ThreadMode = "kept",
    cache_dir: str | None = None,
    trim: bool = True,
    trim_at_pass_end: bool = False,
    python_objects: bool = False,
) -> list[RssPass]:
    """Iterate ``passes`` epochs of one pool dataset; RSS after each (after ``gc.collect``).
    ``trim=False`` turns the process's heap trimmer off (decode/_heap.py);
    ``trim_at_pass_end`` also trims once the pass has ended (``heap_trimmer().trim_now()``,
    inside the pass's CPU time), as a pool could do at each pass end. ``python_objects``
    traces Python's allocations (``tracemalloc``) and logs what grew from pass 10 to the last."""
    heap_trimmer().enabled = trim
    snapshots = []
    if python_objects:
        tracemalloc.start(25)
    process = psutil.Process()
    results = []
    with demo_pool(episodes=episodes, budget=budget, cache_dir=cache_dir) as dataset:
        per_epoch = len(dataset)
        for epoch in range(passes):
            dataset.set_epoch(epoch)
            cpu_started = time.process_time()
            trims_before = heap_trimmer().stats()
            faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            iterator = iter(dataset)
            for _ in range(per_epoch):
                next(iterator)
            metrics = dataset.metrics()
            cache_peak = metrics["cache"].peak_bytes
            decoder_peak = metrics["decoders"].peak_bytes
            if threads == "kept":
                if next(iterator, None) is not None:
                    raise RuntimeError(f"epoch {epoch} yielded more than {per_epoch} samples")
            else:
                iterator.close()  # before its end: the pass stops its threads
            del iterator
            if trim_at_pass_end:
                heap_trimmer().trim_now()
            cpu_s = time.process_time() - cpu_started
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
            trims = heap_trimmer().stats()
            gc.collect()
            in_use, free = _heap_mib()
            results.append(
                RssPass(
                    epoch=epoch,
                    samples=per_epoch,
                    rss_after_mib=process.memory_info().rss / _MIB,
                    threads=threading.active_count(),
                    cpu_ms_per_sample=1000.0 * cpu_s / per_epoch,
                    heap_in_use_mib=in_use,
                    heap_free_mib=free,
                    cache_peak_mib=cache_peak / _MIB,
                    decoder_peak_mib=decoder_peak / _MIB,
                    heap_trims=trims.trims - trims_before.trims,
                    trim_ms=1000.0 * (trims.seconds - trims_before.seconds),
                    minor_faults_per_sample=faults / per_epoch,
                )
            )
            logger.info("%s pass %d: %s", threads, epoch + 1, results[-1])
            if python_objects and epoch + 1 in (min(10, passes - 1), passes):
                snapshots.append(tracemalloc.take_snapshot())
    if python_objects:
        tracemalloc.stop()
        _log_growth(*snapshots)
    return results


def _log_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot) -> None:
    """What Python allocated and still holds, grown between two snapshots (stderr)."""
    # what this benchmark and tracemalloc themselves allocated (the passes' records) is not
    # the library's: dropped by the allocating frame
    own = [
        tracemalloc.Filter(False, __file__, all_frames=False),
        tracemalloc.Filter(False, tracemalloc.__file__, all_frames=False),
    ]
    growth = after.filter_traces(own).compare_to(before.filter_traces(own), "traceback")
    total = sum(stat.size_diff for stat in growth)
    logger.warning("Python allocations still held grew by %+d bytes", total)
    for stat in growth[:5]:
        logger.warning(
            "%+d bytes, %+d blocks, at:\n%s",
            stat.size_diff,
            stat.count_diff,
            "\n".join(stat.traceback.format()[-6:]),
        )


def _run_children(args: argparse.Namespace) -> dict[str, list[RssPass]]:
    """Both modes in child processes started together, default malloc settings (and the
    diagnostic child when asked)."""
    env = _clean_env()
    ensure_synthetic_dataset(DEMO_SPEC)  # written once, before the children race for it
    runs: dict[str, tuple[ThreadMode, dict[str, str], list[str]]] = {
        mode: (mode, env, []) for mode in _MODES
    }
    runs[_BEFORE] = ("kept", env, ["--no-trim"])
    if args.pass_end_trim:
        runs[_PASS_END] = ("kept", env, ["--trim-at-pass-end"])
    if args.fixed_mmap_threshold:
        runs[_FIXED] = ("kept", {**env, **_FIXED_ENV}, ["--no-trim"])
    return _spawn(runs, args)


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    return env


def _cpu_rounds(args: argparse.Namespace) -> None:
    """The trimmer's CPU cost: rounds of two ``kept`` and two ``kept, no trim`` children
    started together; per round the ratio of the pairs' mean CPU per sample (medians of
    passes 2..n), and the median over rounds."""
    env = _clean_env()
    ensure_synthetic_dataset(DEMO_SPEC)
    ratios = []
    for round_ in range(args.cpu_rounds):
        runs: dict[str, tuple[ThreadMode, dict[str, str], list[str]]] = {}
        for i in (1, 2):
            runs[f"kept {i}"] = ("kept", env, [])
            runs[f"no trim {i}"] = ("kept", env, ["--no-trim"])
        results = _spawn(runs, args)
        cpu = {
            name: statistics.median(p.cpu_ms_per_sample for p in passes[1:])
            for name, passes in results.items()
        }
        trimmed = (cpu["kept 1"] + cpu["kept 2"]) / 2
        untrimmed = (cpu["no trim 1"] + cpu["no trim 2"]) / 2
        ratios.append(trimmed / untrimmed)
        trims = [sum(p.heap_trims for p in results[f"kept {i}"]) for i in (1, 2)]
        print(
            f"round {round_ + 1}: CPU ms per sample "
            + ", ".join(f"{name} {ms:.3f}" for name, ms in cpu.items())
            + f"; kept / no trim {ratios[-1]:.3f}; trims {trims}"
        )
    print(
        f"kept / kept, no trim, CPU per sample: median {statistics.median(ratios):.3f} over "
        f"{len(ratios)} rounds (range {min(ratios):.3f}-{max(ratios):.3f})"
    )


def _spawn(
    runs: dict[str, tuple[ThreadMode, dict[str, str], list[str]]], args: argparse.Namespace
) -> dict[str, list[RssPass]]:
    """One child per run, started together; each child's passes."""
    children = {
        name: subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.rss",
                "--child",
                mode,
                "--passes",
                str(args.passes),
                "--episodes",
                str(args.episodes),
                "--budget",
                args.budget,
                *extra,
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=child_env,
        )
        for name, (mode, child_env, extra) in runs.items()
    }
    results = {}
    try:
        for mode, child in children.items():
            out, _ = child.communicate(timeout=_CHILD_TIMEOUT_S)
            if child.returncode != 0:
                raise RuntimeError(f"{mode} child exited with {child.returncode}")
            results[mode] = [RssPass(**p) for p in json.loads(out.strip().splitlines()[-1])]
    finally:
        for child in children.values():  # interrupted or failed: no child outlives the run
            if child.poll() is None:
                child.kill()
                child.wait(10)
    return results


def _median_rss(passes: list[RssPass]) -> float:
    return statistics.median(p.rss_after_mib for p in passes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--budget", default="64MiB")
    parser.add_argument("--fixed-mmap-threshold", action="store_true")
    parser.add_argument("--child", choices=_MODES, help=argparse.SUPPRESS)
    parser.add_argument("--pass-end-trim", action="store_true")
    parser.add_argument(
        "--cpu-rounds",
        type=int,
        default=0,
        help="instead of the RSS report: this many rounds of 2 kept + 2 'kept, no trim' children",
    )
    parser.add_argument("--no-trim", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--trim-at-pass-end", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--python-objects",
        action="store_true",
        help="with --child: trace Python's allocations and log their growth from pass 10",
    )
    args = parser.parse_args()
    parse_bytes(args.budget)
    if args.passes < 2:
        parser.error(
            "--passes must be at least 2 (the report divides by pass 2; --cpu-rounds takes "
            "the median of passes 2..n)"
        )
    if args.child:
        passes = measure_rss_passes(
            passes=args.passes,
            episodes=args.episodes,
            budget=args.budget,
            threads=args.child,
            trim=not args.no_trim,
            trim_at_pass_end=args.trim_at_pass_end,
            python_objects=args.python_objects,
        )
        print(json.dumps([asdict(p) for p in passes]))
        return
    if args.cpu_rounds:
        _cpu_rounds(args)
        return
    results = _run_children(args)
    shown = [n for n in _SHOWN if n < args.passes] + [args.passes]
    print(
        f"RSS after pass n (MiB), {results['kept'][0].samples} samples per pass, default "
        f"malloc settings (no MALLOC_ARENA_MAX)"
        + ("" if _FIXED not in results else f"; {_FIXED} alone sets MALLOC_MMAP_THRESHOLD_=131072")
        + "\n"
    )
    print("| threads | " + " | ".join(str(n) for n in shown) + f" | RSS({args.passes})/RSS(2) |")
    print("|---|" + "---:|" * (len(shown) + 1))
    for mode in results:
        rss = [p.rss_after_mib for p in results[mode]]
        cells = " | ".join(f"{rss[n - 1]:.1f}" for n in shown)
        print(f"| {mode} | {cells} | {rss[-1] / rss[1]:.4f} |")
    # one pass's RSS swings with the moment of the last trim: the medians of ten passes too
    tail = max(1, min(10, (args.passes - 1) // 2))  # two windows that do not overlap
    print(
        f"median RSS of the last {tail} passes / median of passes 2..{tail + 1}: "
        + ", ".join(
            f"{mode} {_median_rss(p[-tail:]) / _median_rss(p[1 : tail + 1]):.4f}"
            for mode, p in results.items()
        )
    )
    for mode in results:
        counts = sorted({p.threads for p in results[mode]})
        print(f"{mode}: live threads after each pass: {counts}")
    cpu = {
        mode: statistics.median(p.cpu_ms_per_sample for p in passes[1:])
        for mode, passes in results.items()
    }
    base = cpu[_BEFORE]
    print(
        "CPU ms per sample, median of passes 2..n: "
        + ", ".join(f"{mode} {ms:.2f} ({ms / base:.3f}x {_BEFORE})" for mode, ms in cpu.items())
    )
    for mode, passes in results.items():
        trims = sum(p.heap_trims for p in passes)
        trim_ms = sum(p.trim_ms for p in passes)
        cpu_ms = sum(p.cpu_ms_per_sample * p.samples for p in passes)
        faults = statistics.median(p.minor_faults_per_sample for p in passes[1:])
        print(
            f"{mode}: malloc_trim {trims} calls in {len(passes)} passes, {trim_ms:.1f} ms "
            f"({trim_ms / cpu_ms:.4f} of the run's CPU); minor page faults per sample, median "
            f"of passes 2..n: {faults:.1f}"
        )
    for mode, passes in results.items():
        first, last = passes[1], passes[-1]
        if first.heap_in_use_mib is not None and last.heap_in_use_mib is not None:
            assert first.heap_free_mib is not None and last.heap_free_mib is not None
            print(
                f"{mode}: malloc heap from pass 2 to {args.passes}: in use "
                f"{last.heap_in_use_mib - first.heap_in_use_mib:+.1f} MiB, free inside the "
                f"heaps {last.heap_free_mib - first.heap_free_mib:+.1f} MiB"
            )
    growth = {mode: p[-1].rss_after_mib - p[1].rss_after_mib for mode, p in results.items()}
    print(
        f"RSS growth from pass 2 to {args.passes}: "
        + ", ".join(f"{mode} {mib:+.1f} MiB" for mode, mib in growth.items())
    )
    print(
        json.dumps(
            {mode: [round(p.rss_after_mib, 2) for p in passes] for mode, passes in results.items()}
        )
    )


if __name__ == "__main__":
    main()

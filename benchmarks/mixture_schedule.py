"""The mixture schedule's cost (issue 28): building an epoch's order, walking it, resuming.

    .venv/bin/python -m benchmarks.mixture_schedule [--samples 10000000] [--sources 200]

A mixture of ``--sources`` sources of 1,000-100,000 frames (a fixed seed), weights of all three
forms (proportions for most, ``repeat`` and ``choose`` for some), an epoch of ``--samples``.
Timed with ``time.perf_counter``, median of ``--rounds``:

- build: ``MixtureSchedule(...)`` (quotas, phases, the slot's part: the order itself is made
  lazily, block by block, so this does not grow with the epoch);
- walk: taking the whole epoch in batches of 65,536 (every block materialised once), with the
  samples per second, against ``numpy.random.permutation`` of as many items (what a plain
  shuffled epoch costs to make) as a ratio;
- resume: a schedule built at the epoch's middle (``start=``) and its first batch of 1,024;
- one slot of 8 ranks x 4 workers walking its part (a 32nd of the epoch);
- ``resident(sources)`` and ``upcoming(65536)`` from the start.

Not a test: figures depend on the machine and its load (printed with them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from benchmarks._common import add_json_option, put_out
from episodestream.sampling import MixtureSchedule, MixtureWeight, WorkerSlot, mixture_quotas

BATCH = 65_536


def _mixture(sources: int, seed: int = 0) -> tuple[np.ndarray, list[MixtureWeight]]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1_000, 100_000, size=sources)
    weights = []
    for i in range(sources):
        if i % 10 == 3:
            weights.append(MixtureWeight(repeat=float(rng.uniform(0.5, 3.0))))
        elif i % 10 == 7:
            weights.append(MixtureWeight(choose=int(rng.integers(100, 10_000))))
        else:
            weights.append(MixtureWeight(proportion=float(rng.uniform(0.1, 2.0))))
    return sizes, weights


def _timed(action: Callable[[], object], rounds: int) -> float:
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _walk(schedule: MixtureSchedule) -> int:
    taken = 0
    while schedule.remaining:
        taken += len(schedule.take(BATCH))
    return taken


def measure(samples: int, sources: int, rounds: int) -> dict[str, float | int]:
    sizes, weights = _mixture(sources)
    quotas = mixture_quotas(sizes, weights)
    fixed = sum(int(q) for q, w in zip(quotas, weights, strict=True) if w.kind != "proportion")
    # an epoch of `samples`: proportions fill what repeat and choose leave
    epoch_size = max(samples, fixed + sources)

    def build(**kwargs: object) -> MixtureSchedule:
        return MixtureSchedule(sizes, weights, 7, epoch_size=epoch_size, epoch=3, **kwargs)

    report: dict[str, float | int] = {
        "samples": epoch_size,
        "sources": sources,
        "load_average_1min": os.getloadavg()[0],
        "cpus": os.cpu_count() or 1,
    }
    report["quotas_s"] = _timed(lambda: mixture_quotas(sizes, weights, epoch_size), rounds)
    report["build_s"] = _timed(build, rounds)
    report["walk_s"] = _timed(lambda: _walk(build()), rounds)
    report["walk_samples_per_s"] = epoch_size / report["walk_s"]
    generator = np.random.default_rng(0)
    report["permutation_s"] = _timed(lambda: generator.permutation(epoch_size), rounds)
    report["walk_vs_permutation"] = report["walk_s"] / report["permutation_s"]
    report["resume_middle_s"] = _timed(lambda: build(start=epoch_size // 2).take(1024), rounds)
    slot = WorkerSlot(5, 8, 2, 4)
    report["slot_walk_s"] = _timed(lambda: _walk(build(slot=slot)), rounds)
    report["resident_all_s"] = _timed(lambda: build().resident(sources), rounds)
    report["upcoming_batch_s"] = _timed(lambda: build().upcoming(BATCH), rounds)
    return report


def format_report(report: dict[str, float | int]) -> str:
    rows = [
        ("quotas (mixture_quotas)", report["quotas_s"]),
        ("build (MixtureSchedule)", report["build_s"]),
        ("walk the whole epoch", report["walk_s"]),
        ("numpy permutation, same size", report["permutation_s"]),
        ("resume at the middle + 1,024", report["resume_middle_s"]),
        ("walk one slot of 8x4", report["slot_walk_s"]),
        (f"resident({report['sources']})", report["resident_all_s"]),
        (f"upcoming({BATCH})", report["upcoming_batch_s"]),
    ]
    lines = [
        f"mixture of {report['sources']} sources, epoch of {report['samples']:,} samples "
        f"(load average {report['load_average_1min']:.1f} on {report['cpus']} CPUs)",
        f"{'step':<34}{'seconds':>12}",
    ]
    lines += [f"{name:<34}{seconds:>12.4f}" for name, seconds in rows]
    lines.append(
        f"walk: {report['walk_samples_per_s'] / 1e6:.1f} M samples/s, "
        f"{report['walk_vs_permutation']:.2f}x the time of a numpy permutation"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000_000, help="samples per epoch")
    parser.add_argument("--sources", type=int, default=200, help="sources in the mixture")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (median)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    report = measure(args.samples, args.sources, args.rounds)
    return put_out(report, args.json, format_report(report))


if __name__ == "__main__":
    raise SystemExit(main())

"""RSS over repeated pool passes: bounded by budget + open decoders + a constant, no growth.

Run: ``python -m benchmarks.rss [--passes 4] [--episodes 12] [--budget 64MiB]``
(on the cached demo dataset, local disk, so the figure is about memory, not the network).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass

import psutil

from episodestream.datasets import EpisodePoolDataset, parse_bytes
from episodestream.demo import DEMO_SPEC, ensure_synthetic_dataset

__all__ = ["RssPass", "measure_rss_passes"]

logger = logging.getLogger(__name__)
_SAMPLE_EVERY_S = 0.05


@dataclass(frozen=True, slots=True)
class RssPass:
    """One full epoch of the pool: process RSS before, peak during and after (MiB)."""

    epoch: int
    samples: int
    seconds: float
    rss_before_mib: float
    rss_peak_mib: float
    rss_after_mib: float
    cache_peak_mib: float
    decoder_peak_mib: float


def measure_rss_passes(
    *, passes: int = 4, episodes: int = 12, budget: str = "64MiB", cache_dir: str | None = None
) -> list[RssPass]:
    root = ensure_synthetic_dataset(DEMO_SPEC)
    process = psutil.Process()
    results = []
    with EpisodePoolDataset(
        root,
        episodes=range(episodes),
        pool_size=4,
        prefetch_episodes=2,
        byte_budget=budget,
        image_dtype="uint8",
        decode_threads=2,
        cache_dir=cache_dir,
    ) as dataset:
        for epoch in range(passes):
            dataset.set_epoch(epoch)
            gc.collect()
            before = process.memory_info().rss
            peak = [before]
            stop = threading.Event()

            def watch(peak: list[int] = peak, stop: threading.Event = stop) -> None:
                while not stop.wait(_SAMPLE_EVERY_S):
                    peak[0] = max(peak[0], process.memory_info().rss)

            watcher = threading.Thread(target=watch, name="rss-watch")
            watcher.start()
            started = time.perf_counter()
            samples = 0
            cache_peak = decoder_peak = 0
            for _ in dataset:
                samples += 1
                if samples % 100 == 0:
                    metrics = dataset.metrics()
                    cache_peak = max(cache_peak, metrics["cache"].peak_bytes)
                    decoder_peak = max(decoder_peak, metrics["decoders"].peak_bytes)
            seconds = time.perf_counter() - started
            stop.set()
            watcher.join(5)
            gc.collect()
            mib = 2**20
            results.append(
                RssPass(
                    epoch=epoch,
                    samples=samples,
                    seconds=seconds,
                    rss_before_mib=before / mib,
                    rss_peak_mib=peak[0] / mib,
                    rss_after_mib=process.memory_info().rss / mib,
                    cache_peak_mib=cache_peak / mib,
                    decoder_peak_mib=decoder_peak / mib,
                )
            )
            logger.info("pass %d: %s", epoch, results[-1])
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--passes", type=int, default=4)
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--budget", default="64MiB")
    args = parser.parse_args()
    parse_bytes(args.budget)
    passes = measure_rss_passes(passes=args.passes, episodes=args.episodes, budget=args.budget)
    print(
        "| pass | samples | s | RSS before MiB | RSS peak MiB | RSS after MiB | cache peak MiB "
        "| decoders peak MiB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for p in passes:
        print(
            f"| {p.epoch} | {p.samples} | {p.seconds:.1f} | {p.rss_before_mib:.0f} | "
            f"{p.rss_peak_mib:.0f} | {p.rss_after_mib:.0f} | {p.cache_peak_mib:.1f} | "
            f"{p.decoder_peak_mib:.1f} |"
        )
    first, last = passes[0], passes[-1]
    print(f"\nlast/first pass peak RSS: {last.rss_peak_mib / first.rss_peak_mib:.3f}")
    print(json.dumps([asdict(p) for p in passes]))


if __name__ == "__main__":
    main()

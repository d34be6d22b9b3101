"""Where STREAM's CPU goes, thread by thread: CPU per sample of each of the pool's threads.

Run: ``python -m benchmarks.thread_cpu ROOT [--passes 3] [--image-dtype float32|uint8]``

``EpisodePoolDataset`` over ``ROOT`` (a local folder: the figure is about CPU, not the
network) for whole passes; after each, every thread's CPU time (``/proc/self/task/*/stat``)
over the pass's samples, grouped by the thread's name without its number
(``episodestream-pool`` for the decode threads, ``episodestream-fetch``, ``-rows``, ``-open``,
``MainThread`` for the loop that takes the samples). What the decode threads spend is what
LOCAL spends too (decoding, rows, the sample dict); the fetch, rows and open threads are the
streaming-only work. Linux only.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import threading
import time
from pathlib import Path

from benchmarks._common import add_json_option, put_out
from episodestream.datasets import EpisodePoolDataset

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_NUMBERED = re.compile(r"[-_]\d+(_\d+)?$")


def thread_cpu_seconds() -> dict[int, tuple[str, float]]:
    """Native thread id -> (name, CPU seconds so far) of every thread of this process."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    threads = {}
    for entry in os.listdir("/proc/self/task"):
        tid = int(entry)
        try:
            with open(f"/proc/self/task/{tid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            name = names.get(tid)
            if name is None:
                with open(f"/proc/self/task/{tid}/comm") as comm:
                    name = f"(native) {comm.read().strip()}"
        except OSError:
            continue  # ended meanwhile
        # utime and stime: fields 14 and 15 of stat, counted after the command's ")"
        threads[tid] = (name, (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS)
    return threads


def measure(root: str, passes: int, image_dtype: str) -> list[dict[str, object]]:
    rows = []
    with EpisodePoolDataset(root=root, image_dtype=image_dtype, seed=0) as dataset:
        for number in range(passes):
            before = thread_cpu_seconds()
            started = time.process_time()
            samples = sum(1 for _ in dataset)
            cpu = time.process_time() - started
            by_name: collections.Counter[str] = collections.Counter()
            for tid, (name, seconds) in thread_cpu_seconds().items():
                by_name[_NUMBERED.sub("", name)] += seconds - before.get(tid, (name, 0.0))[1]
            rows.append(
                {
                    "pass": number,
                    "samples": samples,
                    "process_cpu_ms_per_sample": 1000 * cpu / samples,
                    "threads_cpu_ms_per_sample": {
                        name: 1000 * seconds / samples
                        for name, seconds in by_name.most_common()
                        if seconds > 0
                    },
                }
            )
    return rows


def format_rows(rows: list[dict[str, object]]) -> str:
    names = sorted({n for r in rows for n in r["threads_cpu_ms_per_sample"]})  # type: ignore[attr-defined]
    lines = [
        "| pass | samples | process | " + " | ".join(names) + " |",
        "|---:|---:|---:|" + "---:|" * len(names),
    ]
    for r in rows:
        per = r["threads_cpu_ms_per_sample"]
        cells = [f"{per.get(n, 0.0):.3f}" for n in names]  # type: ignore[attr-defined]
        lines.append(
            f"| {r['pass']} | {r['samples']} | {r['process_cpu_ms_per_sample']:.2f} | "
            + " | ".join(cells)
            + " |"
        )
    return "CPU ms per sample, by thread\n\n" + "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="a local dataset folder")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--image-dtype", choices=("float32", "uint8"), default="float32")
    add_json_option(parser)
    args = parser.parse_args()
    if not Path(args.root).is_dir():
        parser.error(f"{args.root} is not a local folder")
    rows = measure(args.root, args.passes, args.image_dtype)
    return put_out(rows, args.json, format_rows(rows))


if __name__ == "__main__":
    raise SystemExit(main())

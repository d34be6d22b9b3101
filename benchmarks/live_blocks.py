"""Which heap blocks outlive a pool pass, and on which threads: the diagnosis behind
docs/BENCHMARKS.md, "Memory over 50 passes".

Run: ``python -m benchmarks.live_blocks [--passes 10] [--open-on-decode-threads]``
(needs a C compiler: ``cc``).

It compiles ``benchmarks/_live_blocks.c`` into a temporary folder and runs a child process
with it as ``LD_PRELOAD``: the shim records every heap block's size, allocating thread, the
pass it was allocated in and its call stack. The child runs the RSS benchmark's pool (the demo
dataset, 3 episodes, pool 2, 2 decode threads, uint8, heap trimmer off) for ``--passes``
passes and dumps the blocks still alive after the last one. The report counts them by thread
and by the pass that allocated them: blocks allocated in every pass and never freed are what
pins a malloc arena's pages. ``--open-on-decode-threads`` opens decoders on the decode threads,
as before ``StreamEngine`` had a thread for it, to show where the leaked blocks then sit.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

_SHIM_SOURCE = Path(__file__).with_name("_live_blocks.c")
#: thread name prefixes the report groups by; other threads count as "other"
_GROUPS = ("episodestream-pool", "episodestream-open", "episodestream-rows", "episodestream-fetch")
_CHILD_TIMEOUT_S = 1800.0


def _child(passes: int, out: Path, open_on_decode_threads: bool) -> None:
    shim = ctypes.CDLL(None)  # the preloaded shim's symbols are global
    shim.lb_start()
    from benchmarks.rss import demo_pool
    from episodestream.datasets import _engine
    from episodestream.decode import heap_trimmer

    if open_on_decode_threads:
        _engine.StreamEngine._open_on_own_thread = lambda self, open_clip, name: open_clip()
    heap_trimmer().enabled = False
    with demo_pool() as dataset:
        for number in range(1, passes + 1):
            shim.lb_pass(number)
            dataset.set_epoch(number)
            assert sum(1 for _ in dataset) == len(dataset)
            gc.collect()
        names = {t.native_id: t.name for t in threading.enumerate()}
        shim.lb_dump(str(out).encode())
    (out.with_suffix(".threads.json")).write_text(json.dumps(names))


def _group(name: str | None) -> str:
    for prefix in _GROUPS:
        if name is not None and name.startswith(prefix):
            return prefix
    return "other"


def _report(dump: Path, passes: int) -> None:
    names = {
        int(k): v for k, v in json.loads(dump.with_suffix(".threads.json").read_text()).items()
    }
    per_group: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    sizes: collections.Counter[str] = collections.Counter()
    sites: collections.Counter[str] = collections.Counter()
    for line in dump.read_text().splitlines():
        tid, allocated_in, size, _address, *stack = line.split()
        group = _group(names.get(int(tid)))
        per_group[group][int(allocated_in)] += 1
        sizes[group] += int(size)
        if group in ("episodestream-pool", "episodestream-open") and int(allocated_in) > 1:
            # the first frames outside the C/C++ runtime's allocators, symbols shortened
            frames = [f for f in stack if not f.startswith(("libc.so", "libstdc++"))][:3]
            sites[f"{group}: " + " <- ".join(f[:60] for f in frames)] += 1
    print(f"live heap blocks after {passes} passes, by allocating thread and pass (trims off)")
    print()
    print("| threads | blocks | KiB | allocated in pass 1 | per later pass (median) |")
    print("|---|---:|---:|---:|---:|")
    for group in sorted(per_group):
        counts = per_group[group]
        later = sorted(counts.get(n, 0) for n in range(2, passes))  # the last pass: in flight
        median = later[len(later) // 2] if later else 0
        print(
            f"| {group} | {sum(counts.values())} | {sizes[group] / 1024:.1f} | "
            f"{counts.get(1, 0)} | {median} |"
        )
    print()
    print("allocation sites of the decode and open threads' live blocks from passes 2 on:")
    for site, count in sites.most_common(8):
        print(f"{count:6d}  {site[:220]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--open-on-decode-threads", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.passes < 3:
        parser.error("--passes must be at least 3")
    if args.child:
        _child(args.passes, Path(args.child), args.open_on_decode_threads)
        return
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        sys.exit("live_blocks needs a C compiler (cc or gcc) on PATH")
    with tempfile.TemporaryDirectory(prefix="live-blocks-") as scratch:
        shim = Path(scratch) / "live_blocks.so"
        subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", str(shim), str(_SHIM_SOURCE), "-ldl"],
            check=True,
        )
        dump = Path(scratch) / "live.txt"
        command = [sys.executable, "-m", "benchmarks.live_blocks", "--passes", str(args.passes)]
        if args.open_on_decode_threads:
            command.append("--open-on-decode-threads")
        env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
        env["LD_PRELOAD"] = str(shim)
        subprocess.run(
            [*command, "--child", str(dump)], check=True, env=env, timeout=_CHILD_TIMEOUT_S
        )
        _report(dump, args.passes)


if __name__ == "__main__":
    main()

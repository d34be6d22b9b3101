"""Load: four processes stream EpisodePoolDataset epochs from one nginx at once.

Each process opens the dataset (all four race to build the same sidecar in one shared cache
folder: one builds under the file lock, the others load its result), streams two epochs,
checks every sample's frame identity and exact coverage, and counts its Python threads, native
threads, open file descriptors and sockets before opening, after each epoch and after close.
Decoding uses PyAV here (torchcodec's import alone costs seconds per process). No process
may fail; from one epoch to the next only the reader's bounded pools may grow; after close,
Python threads and sockets are back to where they started. Per-process throughput is printed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

CHILD = textwrap.dedent(
    r"""
    import gc, json, os, sys, threading, time
    from episodestream import EpisodePoolDataset
    from episodestream_tools.synthetic import read_frame_identity
    import av  # imported up front: open_s then measures the dataset, not imports

    def census():
        fds = os.listdir("/proc/self/fd")
        sockets = 0
        for fd in fds:
            try:
                sockets += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
            except OSError:
                pass
        return {
            "python_threads": sorted(t.name for t in threading.enumerate()),
            "native_threads": len(os.listdir("/proc/self/task")),
            "fds": len(fds),
            "sockets": sockets,
        }

    url, cache_dir, worker = sys.argv[1], sys.argv[2], int(sys.argv[3])
    report = {"worker": worker, "census": {"start": census()}}
    started = time.perf_counter()
    dataset = EpisodePoolDataset(
        url, pool_size=3, prefetch_episodes=3, byte_budget="4MiB", decode_threads=1,
        seed=worker, cache_dir=cache_dir, image_dtype="uint8", decoder="pyav",
    )
    report["open_s"] = time.perf_counter() - started
    cameras = dataset.samples.video_keys
    epochs = []
    for epoch in range(2):
        dataset.set_epoch(epoch)
        seen = set()
        began = time.perf_counter()
        for sample in dataset:
            identity = (int(sample["episode_index"]), int(sample["frame_index"]))
            for camera in cameras:
                assert read_frame_identity(sample[camera]) == identity, identity
            assert int(sample["index"]) not in seen
            seen.add(int(sample["index"]))
        seconds = time.perf_counter() - began
        gc.collect()
        report["census"][f"epoch{epoch}"] = census()
        epochs.append({"samples": len(seen), "seconds": seconds})
    report["epochs"] = epochs
    report["expected"] = dataset.dataset.num_frames
    report["reader"] = {k: v for k, v in dataset.dataset.reader.metrics().items()
                        if k in ("requests", "retries", "failures", "connections", "bytes")}
    dataset.close()
    del dataset
    gc.collect()
    report["census"]["closed"] = census()
    print("REPORT " + json.dumps(report))
    """
)
PROCESSES = 4
CHILD_TIMEOUT_S = 150.0


def test_four_processes_stream_pools_from_one_nginx(
    http_publish: Callable[..., str], synthetic_av1: Path, tmp_path: Path
) -> None:
    url = http_publish(synthetic_av1)
    cache = tmp_path / "shared-cache"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    started = time.perf_counter()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, url, str(cache), str(worker)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for worker in range(PROCESSES)
    ]
    reports = []
    try:
        for child in children:
            out, err = child.communicate(timeout=CHILD_TIMEOUT_S)
            assert child.returncode == 0, f"worker failed:\n{err[-3000:]}"
            line = next(x for x in out.splitlines() if x.startswith("REPORT "))
            reports.append(json.loads(line.removeprefix("REPORT ")))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait(10)
    wall = time.perf_counter() - started

    total_samples = 0
    for report in reports:
        census = report["census"]
        for epoch in report["epochs"]:
            assert epoch["samples"] == report["expected"]  # every frame exactly once
        assert report["reader"]["failures"] == 0 and report["reader"]["retries"] == 0
        # between epochs only the reader's pools may grow, and only within their bounds
        # (threads on demand up to Limits.max_concurrency, kept-alive connections up to
        # Limits.max_connections_per_host: 16 each by default); nothing else is left behind
        for moment in ("epoch0", "epoch1"):
            names = census[moment]["python_threads"]
            assert len([n for n in names if n.startswith("episodestream-http")]) <= 16, names
            assert census[moment]["sockets"] <= 16, census
            assert census[moment]["fds"] - census[moment]["sockets"] <= census["start"]["fds"] + 2
        steady = [n for n in census["epoch1"]["python_threads"] if "-http" not in n]
        assert steady == [n for n in census["epoch0"]["python_threads"] if "-http" not in n]
        # ... and close gives back every thread and socket it took
        assert census["closed"]["python_threads"] == census["start"]["python_threads"], census
        assert census["closed"]["sockets"] == census["start"]["sockets"], census
        assert census["closed"]["fds"] <= census["start"]["fds"] + 2, census  # torch libs
        rate = sum(e["samples"] for e in report["epochs"]) / sum(
            e["seconds"] for e in report["epochs"]
        )
        total_samples += sum(e["samples"] for e in report["epochs"])
        print(
            f"[load] process {report['worker']}: open {report['open_s']:.2f} s, "
            f"{rate:.0f} samples/s over 2 epochs, {report['reader']['requests']} requests on "
            f"{report['reader']['connections']} connections, threads "
            f"{len(census['start']['python_threads'])}->{len(census['epoch0']['python_threads'])}"
            f"->{len(census['closed']['python_threads'])} (python), sockets "
            f"{census['start']['sockets']}->{census['epoch0']['sockets']}->"
            f"{census['closed']['sockets']}"
        )
    print(f"[load] {PROCESSES} processes, {total_samples} samples in {wall:.1f} s wall")
    # the four raced for one sidecar: exactly one index file, no leftover temporary files
    sidecars = sorted(p.name for p in cache.rglob("*") if p.is_file())
    assert [n for n in sidecars if n.endswith(".arrow")] == ["index.arrow"], sidecars
    assert not [n for n in sidecars if ".download" in n or n.startswith(".index")], sidecars

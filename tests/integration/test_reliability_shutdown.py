"""Shutdown: however iteration ends — KeyboardInterrupt inside the loop, ``close()``, a
DataLoader whose workers exit, an exception in a worker — no thread, socket, child process or
temporary file of ours is left behind.

Each scenario runs in a fresh Python process (``TMPDIR`` pointed at an empty folder) that
reports its own census as JSON, so threads and sockets left by other tests in this pytest
process cannot hide or fake a leak.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CENSUS = textwrap.dedent(
    r"""
    import gc, json, os, sys, tempfile, threading, time

    def sockets():
        count = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
            except OSError:
                pass
        return count

    def children():
        import psutil
        return [p.pid for p in psutil.Process().children(recursive=True) if p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE]

    def census(settle_s=5.0):
        # threads being joined and worker processes being reaped get a bounded moment
        deadline = time.monotonic() + settle_s
        while True:
            gc.collect()
            state = {
                "threads": sorted(t.name for t in threading.enumerate()),
                "sockets": sockets(),
                "children": children(),
                "tmp": sorted(os.listdir(tempfile.gettempdir())),
            }
            quiet = state["threads"] == ["MainThread"] and not state["sockets"] \
                and not state["children"]
            if quiet or time.monotonic() > deadline:
                return state
            time.sleep(0.05)

    def report(**values):
        print("REPORT " + json.dumps(values), flush=True)
    """
)
CHILD_TIMEOUT_S = 120.0
# importing torchcodec makes torch create its compiler cache folder in TMPDIR (third-party,
# persistent by design, empty here); everything else there would be ours
THIRD_PARTY_TMP = {"torchinductor_root"}


@pytest.fixture
def served(http_publish: Callable[..., str], synthetic_av1: Path) -> str:
    return http_publish(synthetic_av1)


def run_child(body: str, tmp_path: Path, *args: str) -> dict[str, Any]:
    """Run ``CENSUS + body`` in a fresh interpreter; its REPORT line as a dict."""
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    env = {
        **os.environ,
        "TMPDIR": str(tmpdir),
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    child = subprocess.run(
        [sys.executable, "-c", CENSUS + textwrap.dedent(body), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=CHILD_TIMEOUT_S,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    line = next(x for x in child.stdout.splitlines() if x.startswith("REPORT "))
    result = json.loads(line.removeprefix("REPORT "))
    result["tmpdir_left"] = sorted(
        p.name for p in tmpdir.iterdir() if p.name not in THIRD_PARTY_TMP
    )
    return result


def check_clean(result: dict[str, Any], moment: str) -> None:
    state = result[moment]
    assert state["threads"] == ["MainThread"], (moment, state)
    assert state["sockets"] == 0, (moment, state)
    assert state["children"] == [], (moment, state)


def test_interrupted_iteration_leaves_nothing_running(served: str, tmp_path: Path) -> None:
    """In one fresh process, over HTTP: open (building the index), then end iteration by
    KeyboardInterrupt (pool and map-style), by close() from another thread mid-iteration, and
    by an exception in a decode thread. After each: no thread, socket or child process."""
    result = run_child(
        """
        import torch
        from episodestream import EpisodePoolDataset, EpisodeStreamDataset, EpisodeStreamError
        url, cache = sys.argv[1], sys.argv[2]
        out = {}

        def pool(**kw):
            return EpisodePoolDataset(url, cache_dir=cache, pool_size=2, prefetch_episodes=2,
                                      decode_threads=2, byte_budget="4MiB", **kw)

        # 1. building the index (progress off) then a few samples
        with EpisodeStreamDataset(url, cache_dir=cache) as dataset:
            dataset[0]
        out["after_build"] = census()

        # 2. KeyboardInterrupt raised inside a pool loop; the dataset not even closed yet
        dataset = pool()
        try:
            for number, sample in enumerate(dataset):
                if number == 10:
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            pass
        out["pool_interrupted"] = census()  # only the reader's pool may remain, until close
        dataset.close()
        out["pool_interrupted_closed"] = census()

        # 3. KeyboardInterrupt inside a map-style loop, then close
        dataset = EpisodeStreamDataset(url, cache_dir=cache)
        try:
            for index in range(len(dataset)):
                dataset[index]
                if index == 25:
                    raise KeyboardInterrupt
        except KeyboardInterrupt:
            pass
        dataset.close()
        out["map_interrupted_closed"] = census()

        # 4. close() from another thread while a pool iterates
        dataset = pool()
        seen, ended = [], []
        reached, closed = threading.Event(), threading.Event()
        def consume():
            try:
                for sample in dataset:
                    seen.append(1)
                    if len(seen) == 5:  # hold here until close() has run: the epoch
                        reached.set()   # cannot end first, however slow the machine
                        closed.wait(30)
                    time.sleep(0.01)
                ended.append("finished")
            except EpisodeStreamError as error:
                ended.append(type(error).__name__)
            except Exception as error:
                ended.append("untyped " + repr(error))
        consumer = threading.Thread(target=consume)
        consumer.start()
        reached.wait(60)
        dataset.close()
        closed.set()
        consumer.join(30)
        out["closed_mid_iteration"] = {"alive": consumer.is_alive(), "ended": ended,
                                       "samples": len(seen)}
        out["closed_mid_iteration_state"] = census()

        # 5. an exception in a decode thread (a failing image transform)
        def broken(frames):
            raise ValueError("transform failed")
        dataset = pool(image_transforms=broken)
        try:
            for sample in dataset:
                pass
        except ValueError as error:
            out["transform_error"] = str(error)
        dataset.close()
        out["transform_failed_closed"] = census()
        report(**out)
        """,
        tmp_path,
        served,
        str(tmp_path / "cache"),
    )
    for moment in (
        "after_build",
        "pool_interrupted_closed",
        "map_interrupted_closed",
        "closed_mid_iteration_state",
        "transform_failed_closed",
    ):
        check_clean(result, moment)
    # interrupted but not yet closed: fetch and decode threads are already gone; only the
    # reader's connection pool (threads and sockets) lives on until close()
    interrupted = result["pool_interrupted"]
    assert all(
        name == "MainThread" or name.startswith("episodestream-http")
        for name in interrupted["threads"]
    ), interrupted
    stopped = result["closed_mid_iteration"]
    assert not stopped["alive"], "iteration did not end after close()"
    # closed after 5 of 104 samples: the loop ends with a typed error, not silently
    assert stopped["ended"] and stopped["ended"][0] not in ("finished",), stopped
    assert not stopped["ended"][0].startswith("untyped"), stopped
    assert result["transform_error"] == "transform failed"
    assert result["tmpdir_left"] == []
    leftovers = [p.name for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert all(name.endswith((".arrow", ".lock")) for name in leftovers), leftovers


def test_dataloader_workers_leave_nothing_running(served: str, tmp_path: Path) -> None:
    """DataLoader(num_workers=2): abandoning the loop and dropping the loader, and a worker
    killed mid-epoch (the loader raises), both leave no worker process, thread or socket."""
    result = run_child(
        """
        import signal
        import torch.utils.data
        from episodestream import EpisodePoolDataset
        url, cache = sys.argv[1], sys.argv[2]
        out = {}
        dataset = EpisodePoolDataset(url, cache_dir=cache, pool_size=2, prefetch_episodes=2,
                                     decode_threads=1, byte_budget="4MiB")

        # 1. break out of the loop after a few batches, drop the iterator and the loader
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2)
        iterator = iter(loader)
        for _ in range(3):
            next(iterator)
        out["workers_running"] = len(children())
        del iterator, loader
        out["abandoned"] = census()  # the reader opened here keeps its sockets until close

        # 2. a worker dies (SIGKILL) mid-epoch: the loader must raise, not hang
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=2,
                                             timeout=60)
        iterator = iter(loader)
        next(iterator)
        victim = children()[0]
        os.kill(victim, signal.SIGKILL)
        try:
            for _ in iterator:
                pass
            out["worker_killed"] = "no error"
        except Exception as error:  # torch's RuntimeError, or a reset while passing a tensor
            out["worker_killed"] = type(error).__name__ + ": " + str(error)[:200]
        del iterator, loader
        dataset.close()
        out["killed_closed"] = census()
        report(**out)
        """,
        tmp_path,
        served,
        str(tmp_path / "cache"),
    )
    assert result["workers_running"] == 2
    abandoned = result["abandoned"]
    assert abandoned["children"] == [] and abandoned["threads"] == ["MainThread"], abandoned
    assert result["worker_killed"] != "no error"  # raised, did not hang or go on silently
    check_clean(result, "killed_closed")
    assert set(abandoned["tmp"]) <= THIRD_PARTY_TMP, abandoned["tmp"]
    # the SIGKILLed worker could not remove its multiprocessing folder (pymp-*/listener-*,
    # fd passing for shared tensors), and now and then an empty tmp* file of torch's or
    # multiprocessing's survives that kill; nothing else may be left
    tmpdir = tmp_path / "tmpdir"
    for name in result["tmpdir_left"]:
        path = tmpdir / name
        assert name.startswith("pymp-") or (
            name.startswith("tmp") and path.is_file() and path.stat().st_size == 0
        ), result["tmpdir_left"]

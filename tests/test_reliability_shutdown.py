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


def assert_clean(state: dict[str, Any]) -> None:
    assert state["threads"] == ["MainThread"], state
    assert state["sockets"] == 0, state
    assert state["children"] == [], state


def test_building_an_index_leaves_no_thread_behind(synthetic_av1: Path, tmp_path: Path) -> None:
    """A dataset opened without a sidecar builds one (progress off): nothing keeps running."""
    result = run_child(
        """
        from episodestream import EpisodeStreamDataset
        with EpisodeStreamDataset(sys.argv[1], cache_dir=sys.argv[2]) as dataset:
            dataset[0]
        report(after=census())
        """,
        tmp_path,
        str(synthetic_av1),
        str(tmp_path / "cache"),
    )
    assert_clean(result["after"])
    assert result["tmpdir_left"] == []


@pytest.fixture
def served(http_publish: Callable[..., str], synthetic_av1: Path) -> str:
    return http_publish(synthetic_av1)

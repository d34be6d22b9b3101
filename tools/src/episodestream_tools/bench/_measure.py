"""Measuring helpers: resident memory, a background sampler, progress output, timing series."""

from __future__ import annotations

import logging
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self, TypeVar

import numpy as np
import torch

from episodestream.helpers import Closing

__all__ = [
    "ProcessFigures",
    "Progress",
    "Sampler",
    "child_pids",
    "median_round",
    "peak_rss_bytes",
    "process_figures",
    "rotated_rounds",
    "rss_bytes",
    "steady_rate",
    "synchronize",
    "synchronized_end",
    "timing_figures",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: Interval of the background sampler (seconds).
SAMPLE_INTERVAL_S = 0.1
#: Without a terminal, a progress line at most this often (seconds).
LOG_INTERVAL_S = 5.0
_JOIN_TIMEOUT_S = 5.0


def rss_bytes() -> int:
    """Resident set size of this process now (psutil, else /proc, else the peak)."""
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        pass
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (``ru_maxrss`` is KiB on Linux)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) * (1 if sys.platform == "darwin" else 1024)


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """CPU and memory of one process (all its threads), read from ``/proc``.

    ``uss_bytes`` counts the pages only this process maps (``Private_*`` of smaps_rollup): what
    a forked DataLoader worker adds, where RSS also counts the pages it shares with its parent.
    """

    pid: int
    cpu_s: float
    rss_bytes: int
    uss_bytes: int | None


def process_figures(pid: int) -> ProcessFigures:
    """CPU seconds (user + system) and memory of process ``pid`` (Linux ``/proc``).

    Raises:
        OSError: no such process, or no ``/proc`` (not Linux).
    """
    with open(f"/proc/{pid}/stat", "rb") as stat:
        # the command name may hold spaces: fields are counted after its closing parenthesis
        fields = stat.read().rsplit(b")", 1)[1].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime
    with open(f"/proc/{pid}/statm", "rb") as statm:
        rss = int(statm.read().split()[1]) * _PAGE_BYTES
    uss: int | None = None
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as smaps:
            uss = 0
            for line in smaps:
                if line.startswith((b"Private_Clean:", b"Private_Dirty:")):
                    uss += int(line.split()[1]) * 1024
    except OSError:
        uss = None
    return ProcessFigures(pid=pid, cpu_s=cpu_s, rss_bytes=rss, uss_bytes=uss)


def child_pids(parent: int | None = None) -> set[int]:
    """Processes whose parent is ``parent`` (default: this one), from ``/proc``."""
    parent = os.getpid() if parent is None else parent
    children: set[int] = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:  # exited while listed
            continue
        if int(fields[1]) == parent:
            children.add(int(entry.name))
    return children


def synchronize(device: str) -> None:
    """Wait until ``device`` has finished the work queued on it (nothing to wait for on the
    CPU): a track's clock stops once its last frames exist, not when their decode was queued."""
    if device != "cpu":
        torch.cuda.synchronize(torch.device(device))


def synchronized_end(device: str, arrivals_s: np.ndarray, started: float) -> None:
    """After a track's loop: wait for ``device`` (:func:`synchronize`) and count the wait in
    the last sample's arrival (``arrivals_s``: seconds from ``started``, a perf_counter)."""
    if device == "cpu" or arrivals_s.size == 0:
        return
    synchronize(device)
    arrivals_s[-1] = max(arrivals_s[-1], time.perf_counter() - started)


def steady_rate(arrivals_s: np.ndarray, skip_fraction: float = 0.1) -> float:
    """Samples/s after the first ``skip_fraction`` of samples (start-up excluded)."""
    n = int(arrivals_s.size)
    if n < 2:
        return 0.0
    k = max(1, int(n * skip_fraction))
    k = min(k, n - 1)
    span = float(arrivals_s[-1] - arrivals_s[k - 1])
    return (n - k) / span if span > 0 else 0.0


def timing_figures(arrivals_s: np.ndarray, count: int, cpu_s: float) -> dict[str, Any]:
    """What every track reports of its timing: ``count`` samples that arrived at
    ``arrivals_s`` (seconds from the start) for ``cpu_s`` of process CPU."""
    seconds = float(arrivals_s[count - 1]) if count else 0.0
    return {
        "samples": count,
        "seconds": seconds,
        "samples_per_s": count / seconds if seconds > 0 else 0.0,
        "steady_samples_per_s": steady_rate(arrivals_s[:count]),
        "time_to_first_sample_s": float(arrivals_s[0]) if count else None,
        "cpu_s": cpu_s,
        "cpu_ms_per_sample": 1000.0 * cpu_s / count if count else None,
    }


class Sampler:
    """Samples RSS (and an optional probe) every ``interval_s`` on a thread, while in ``with``.

    ``probe()`` returns a dict of numbers recorded with each point (e.g. samples done, resident
    cache bytes); points are ``{"t_s": seconds since start, "rss_bytes": ..., **probe()}``.
    """

    def __init__(
        self,
        probe: Callable[[], dict[str, Any]] | None = None,
        *,
        interval_s: float = SAMPLE_INTERVAL_S,
    ) -> None:
        self._probe = probe
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.points: list[dict[str, Any]] = []
        self.start_rss = 0
        self.end_rss = 0
        self.peak_rss = 0
        self.started = 0.0

    def _point(self) -> None:
        rss = rss_bytes()
        self.peak_rss = max(self.peak_rss, rss)
        point: dict[str, Any] = {"t_s": time.perf_counter() - self.started, "rss_bytes": rss}
        if self._probe is not None:
            try:
                point.update(self._probe())
            except Exception:  # a probe racing with shutdown must not kill the sampler
                logger.debug("sampler probe failed", exc_info=True)
        self.points.append(point)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._point()

    def __enter__(self) -> Self:
        self.started = time.perf_counter()
        self.start_rss = rss_bytes()
        self.peak_rss = self.start_rss
        self._point()
        self._thread = threading.Thread(target=self._run, name="episodestream-bench-sampler")
        self._thread.daemon = True
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(_JOIN_TIMEOUT_S)
        self._point()
        self.end_rss = self.points[-1]["rss_bytes"]

    def memory(self) -> dict[str, int]:
        return {
            "rss_start_bytes": self.start_rss,
            "rss_end_bytes": self.end_rss,
            "rss_delta_bytes": self.end_rss - self.start_rss,
            "rss_peak_bytes": self.peak_rss,
        }


class Progress(Closing):
    """A tqdm bar on a terminal; otherwise a log line every ``LOG_INTERVAL_S`` and at the end.

    ``update(count, nbytes)`` is thread-safe; bytes given add GiB done and MiB/s to the bar or
    line. ``enabled=False`` stays silent. Output goes to stderr (tqdm) or the log, never stdout.
    """

    def __init__(self, total: int, description: str, *, enabled: bool = True, unit: str = "it"):
        self._total = total
        self._description = description
        self._unit = unit
        self._count = 0
        self._bytes = 0
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        self._last_log = self._started
        self._bar: Any = None
        self._enabled = enabled
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=description, unit=unit, leave=False)

    def update(self, count: int = 1, nbytes: int = 0) -> None:
        if not self._enabled:
            return
        with self._lock:
            self._count += count
            self._bytes += nbytes
            now = time.perf_counter()
            if self._bar is not None:
                if self._bytes:
                    self._bar.set_postfix_str(self._bytes_text(now), refresh=False)
                self._bar.update(count)
                return
            if now - self._last_log >= LOG_INTERVAL_S:
                self._last_log = now
                self._log(now)

    def _bytes_text(self, now: float) -> str:
        elapsed = now - self._started
        rate = self._bytes / 2**20 / elapsed if elapsed > 0 else 0.0
        return f"{self._bytes / 2**30:.3f} GiB done, {rate:.1f} MiB/s"

    def _log(self, now: float) -> None:
        elapsed = now - self._started
        rate = self._count / elapsed if elapsed > 0 else 0.0
        logger.info(
            "%s: %d/%d %s (%.1f %s/s)%s",
            self._description,
            self._count,
            self._total,
            self._unit,
            rate,
            self._unit,
            f", {self._bytes_text(now)}" if self._bytes else "",
        )

    def close(self) -> None:
        if not self._enabled:
            return
        with self._lock:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
            else:
                self._log(time.perf_counter())
            self._enabled = False


def rotated_rounds(items: Sequence[T], rounds: int) -> list[list[T]]:
    """Each round's order of ``items``: rotated a step further every round, so a machine that
    drifts over a run meets every item in every position alike."""
    return [[*items[r % len(items) :], *items[: r % len(items)]] for r in range(rounds) if items]


def median_round(rounds: Sequence[dict[str, Any]], key: str) -> dict[str, Any]:
    """The round whose ``key`` is the median (the lower middle of an even count): a round that
    happened, never the best one."""
    ordered = sorted(rounds, key=lambda r: r[key])
    return ordered[(len(ordered) - 1) // 2]

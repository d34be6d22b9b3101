"""Measuring helpers: resident memory, a background sampler, progress output, timing series."""

from __future__ import annotations

import logging
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self

import numpy as np

__all__ = ["Progress", "Sampler", "peak_rss_bytes", "rss_bytes", "steady_rate"]

logger = logging.getLogger(__name__)

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


def steady_rate(arrivals_s: np.ndarray, skip_fraction: float = 0.1) -> float:
    """Samples/s after the first ``skip_fraction`` of samples (start-up excluded)."""
    n = int(arrivals_s.size)
    if n < 2:
        return 0.0
    k = max(1, int(n * skip_fraction))
    k = min(k, n - 1)
    span = float(arrivals_s[-1] - arrivals_s[k - 1])
    return (n - k) / span if span > 0 else 0.0


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


class Progress:
    """A tqdm bar on a terminal; otherwise a log line every ``LOG_INTERVAL_S`` and at the end.

    Thread-safe ``update``; ``enabled=False`` stays silent.
    """

    def __init__(self, total: int, description: str, *, enabled: bool = True, unit: str = "it"):
        self._total = total
        self._description = description
        self._unit = unit
        self._count = 0
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        self._last_log = self._started
        self._bar: Any = None
        self._enabled = enabled
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=description, unit=unit, leave=False)

    def update(self, count: int = 1) -> None:
        if not self._enabled:
            return
        with self._lock:
            self._count += count
            if self._bar is not None:
                self._bar.update(count)
                return
            now = time.perf_counter()
            if now - self._last_log >= LOG_INTERVAL_S:
                self._last_log = now
                self._log(now)

    def _log(self, now: float) -> None:
        elapsed = now - self._started
        rate = self._count / elapsed if elapsed > 0 else 0.0
        logger.info(
            "%s: %d/%d %s (%.1f %s/s)",
            self._description,
            self._count,
            self._total,
            self._unit,
            rate,
            self._unit,
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

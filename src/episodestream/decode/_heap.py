"""Handing glibc's free heap pages back to the kernel now and then (``malloc_trim``).

Decode threads allocate frame-sized blocks (frames, FFmpeg/dav1d pictures, decoder state)
from their own malloc arenas. glibc raises its mmap threshold as large blocks are freed, so
these blocks come from the arenas, and blocks of different lifetimes (a frame waiting in a
queue, a decoder open for an episode) interleave there. An arena only shrinks from its top, so
the free space between live blocks keeps its pages: over many passes the process's RSS creeps
up while what malloc holds in use does not (docs/BENCHMARKS.md, "Memory over 50 passes").

``malloc_trim(0)`` (glibc >= 2.8) walks every arena and gives the whole free pages inside its
free blocks back (``MADV_DONTNEED``); the blocks stay free and usable, and a page reused later
is faulted in again. :class:`HeapTrimmer` calls it when decoders close (an episode left), at
most once per ``min_interval_s``, and only once the process has spent enough CPU since the
last trim that the trims' own CPU stays under ``max_cpu_share`` of the process's. Elsewhere
(musl, macOS, Windows, or a Python without ``ctypes``) it does nothing. Pages that a live block
shares with free space stay, so the heaps still creep up a little; trimming removes the free
pages' share of the growth.

The environment variable ``EPISODESTREAM_HEAP_TRIM=0`` (or ``false``, ``no``, ``off``) turns
the process's trimmer off. It is read when that trimmer is created, at this module's import,
so DataLoader workers started with spawn or forkserver honour it too (a forked worker
inherits its parent's trimmer, switch included); ``heap_trimmer().enabled`` changes it later in
one process only.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from episodestream._checks import check_number

try:
    import ctypes
except ImportError:  # a Python built without it: trimming is unavailable
    ctypes = None  # type: ignore[assignment]

__all__ = ["HeapTrimStats", "HeapTrimmer", "heap_trimmer"]

_LOG = logging.getLogger(__name__)

#: Shortest time between two trims.
DEFAULT_MIN_INTERVAL_S = 1.0
#: Bound on the trims' own CPU time as a share of the process's CPU time. Pages given back are
#: faulted in again when reused, and that costs more than the trim itself: with 0.002 (a trim
#: about every pass of benchmarks/rss.py) CPU per sample rose 1.01-1.06x; with 0.0005 (one
#: every five or six passes) no rise showed (0.98-1.00x) and RSS growth was cut about as much.
DEFAULT_MAX_CPU_SHARE = 0.0005
#: Environment variable: ``0`` (or ``false``/``no``/``off``) turns the process's trimmer off.
HEAP_TRIM_ENV = "EPISODESTREAM_HEAP_TRIM"
_OFF = frozenset({"0", "false", "no", "off"})


def _glibc_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (or is not glibc)."""
    if ctypes is None or not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the process's global symbols: the C library it runs on
        gnu_get_libc_version = libc.gnu_get_libc_version  # glibc only (musl lacks it)
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    del gnu_get_libc_version
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class HeapTrimStats:
    """Trims done and the CPU seconds they took (the trimming threads' own time)."""

    available: bool
    enabled: bool
    trims: int
    seconds: float


class HeapTrimmer:
    """Calls ``malloc_trim(0)`` when :meth:`maybe_trim` is asked and the last trim is old
    enough. Thread-safe: a :meth:`maybe_trim` call while another thread trims returns at once
    (False); a :meth:`trim_now` call waits for that trim to end, then trims again.

    :meth:`maybe_trim` runs on the caller's thread: for :class:`DecoderPool`, whichever thread
    closes decoders (ending a lease, evicting or discarding), and that thread pays for the trim.

    Args:
        min_interval_s: shortest wall time between two trims.
        max_cpu_share: after a trim, the next waits until the process has used the trim's CPU
            time over this share.
        trim: the trimming function (glibc's by default; None: trimming unavailable).
    """

    def __init__(
        self,
        *,
        min_interval_s: float = DEFAULT_MIN_INTERVAL_S,
        max_cpu_share: float = DEFAULT_MAX_CPU_SHARE,
        trim: Callable[[int], int] | None = None,
    ) -> None:
        check_number("min_interval_s", min_interval_s, minimum=0)
        check_number("max_cpu_share", max_cpu_share, above=0)
        self._min_interval_s = float(min_interval_s)
        self._max_cpu_share = float(max_cpu_share)
        self._trim = trim
        self._enabled = trim is not None
        self._lock = threading.Lock()
        self._next_at = 0.0  # time.monotonic() from which the next trim may run
        self._next_cpu = 0.0  # time.process_time() from which the next trim may run
        self._trims = 0
        self._seconds = 0.0

    @property
    def available(self) -> bool:
        return self._trim is not None

    @property
    def enabled(self) -> bool:
        return self._enabled

    @enabled.setter
    def enabled(self, value: bool) -> None:
        """Turn trimming off (e.g. under another allocator) or back on where available."""
        self._enabled = bool(value) and self._trim is not None

    def maybe_trim(self) -> bool:
        """Trim if enabled and due; True when this call trimmed."""
        if not self._enabled or time.monotonic() < self._next_at:
            return False
        if not self._lock.acquire(blocking=False):
            return False  # another thread is trimming
        try:
            if time.monotonic() < self._next_at or time.process_time() < self._next_cpu:
                return False
            self._trim_locked()
        finally:
            self._lock.release()
        return True

    def trim_now(self) -> bool:
        """Trim now if enabled, whenever the last trim was (for a caller that knows a burst
        of frees just ended, e.g. a pass's end); True when this call trimmed."""
        if not self._enabled:
            return False
        with self._lock:
            self._trim_locked()
        return True

    def _trim_locked(self) -> None:
        assert self._trim is not None
        started = time.thread_time()
        self._trim(0)
        took = time.thread_time() - started
        self._trims += 1
        self._seconds += took
        self._next_at = time.monotonic() + self._min_interval_s
        self._next_cpu = time.process_time() + took / self._max_cpu_share
        _LOG.debug("malloc_trim(0) took %.2f ms", 1000 * took)

    def stats(self) -> HeapTrimStats:
        return HeapTrimStats(
            available=self.available,
            enabled=self._enabled,
            trims=self._trims,
            seconds=self._seconds,
        )

    def _after_fork(self) -> None:
        # a lock held by another thread at fork time stays held in the child, and the
        # child's CPU clock starts afresh: its first trim must not wait for the parent's
        self._lock = threading.Lock()
        self._next_at = self._next_cpu = 0.0
        self._trims = 0
        self._seconds = 0.0


def _process_trimmer() -> HeapTrimmer:
    """The process's trimmer: glibc's ``malloc_trim`` where there is one, off when
    ``EPISODESTREAM_HEAP_TRIM`` says so."""
    trimmer = HeapTrimmer(trim=_glibc_malloc_trim())
    if os.environ.get(HEAP_TRIM_ENV, "").strip().lower() in _OFF:
        trimmer.enabled = False
        _LOG.debug("heap trimming off (%s=%s)", HEAP_TRIM_ENV, os.environ[HEAP_TRIM_ENV])
    return trimmer


_TRIMMER = _process_trimmer()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_TRIMMER._after_fork)


def heap_trimmer() -> HeapTrimmer:
    """The process's trimmer, asked by :class:`DecoderPool` whenever it closes decoders."""
    return _TRIMMER

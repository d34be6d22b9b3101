"""The HTTP reader's counters and time sums (what :meth:`HttpRangeReader.stats` reports)."""

from __future__ import annotations

import threading
import weakref

__all__ = ["Metrics"]


class _Holder:
    """Lives only in one thread's ``threading.local``: when the thread ends (or a foreign
    thread, such as one of Arrow's, gives up its Python thread state), Python drops it and its
    finalizer folds that thread's counts into the shared base."""

    __slots__ = ("__weakref__",)


def _fold(lock: threading.Lock, live: dict[int, dict], ended: dict, key: int) -> None:
    with lock:
        for name, amount in live.pop(key, {}).items():
            ended[name] = ended.get(name, 0) + amount


class Metrics:
    """Counters and time sums; ``snapshot`` is what the reader's ``stats()`` is made from.

    Each thread adds into its own dict (no lock on the hot path: eight lock round trips per
    request showed up when many threads ran small requests); a snapshot sums them. When a
    thread ends, its dict is folded into a shared base, so threads of short-lived pools do not
    pile up for the reader's life and no count is lost. Threads are not looked up by
    ``threading.current_thread()``: called from a thread that ``threading`` did not start (a
    parquet read on Arrow's I/O threads calls the reader), it would register a dummy thread
    that never goes away.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._live: dict[int, dict[str, float | int]] = {}  # each thread's dict that added
        self._ended: dict[str, float | int] = {}  # counts of threads that have ended

    def add(self, name: str, amount: float | int = 1) -> None:
        values = getattr(self._local, "values", None)
        if values is None:
            values = {}
            holder = _Holder()
            key = id(holder)
            with self._lock:
                self._live[key] = values
            # the callback holds the shared dicts, not self: a dropped reader is not kept alive
            weakref.finalize(holder, _fold, self._lock, self._live, self._ended, key)
            self._local.holder = holder
            self._local.values = values
        values[name] = values.get(name, 0) + amount

    def snapshot(self) -> dict[str, float | int]:
        base: dict[str, float | int] = {
            "requests": 0,
            "bytes": 0,
            "bytes_returned": 0,
            "reads": 0,
            "lookups": 0,
            "retries": 0,
            "resumes": 0,
            "redirects": 0,
            "reresolves": 0,
            "target_refusals": 0,
            "rate_limited": 0,
            "quota_wait_seconds": 0.0,
            "connections": 0,
            "connect_seconds": 0.0,
            "headers_seconds": 0.0,
            "first_byte_seconds": 0.0,
            "body_seconds": 0.0,
            "coalesced_requests": 0,
            "split_parts": 0,
            "failures": 0,
        }
        with self._lock:
            # dict() copies in one C call under the GIL: safe while the owner keeps adding.
            copies = [dict(self._ended)] + [dict(values) for values in self._live.values()]
        for values in copies:
            for name, amount in values.items():
                base[name] = base.get(name, 0) + amount
        return base

"""The HTTP reader's counters and time sums (what :meth:`HttpRangeReader.stats` reports)."""

from __future__ import annotations

import threading

__all__ = ["Metrics"]


class Metrics:
    """Counters and time sums; ``snapshot`` is what the reader's ``stats()`` is made from.

    Each thread adds into its own dict (no lock on the hot path: eight lock round trips per
    request showed up when many threads ran small requests); a snapshot sums them. The dict
    of a thread that has ended is folded into a shared base (when another thread first adds,
    and on every snapshot), so threads of short-lived pools do not pile up for the reader's
    life and no count is lost.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        # the dict of each thread that added, with its thread (to tell when it has ended)
        self._per_thread: list[tuple[threading.Thread, dict[str, float | int]]] = []
        self._ended: dict[str, float | int] = {}  # counts of threads that have ended

    def add(self, name: str, amount: float | int = 1) -> None:
        values = getattr(self._local, "values", None)
        if values is None:
            values = self._local.values = {}
            with self._lock:
                self._fold_ended()
                self._per_thread.append((threading.current_thread(), values))
        values[name] = values.get(name, 0) + amount

    def _fold_ended(self) -> None:
        """Fold the dicts of threads that have ended into ``_ended`` (under the lock): an
        ended thread adds no more, so its dict is final."""
        live = []
        for thread, values in self._per_thread:
            if thread.is_alive():
                live.append((thread, values))
                continue
            for key, amount in values.items():
                self._ended[key] = self._ended.get(key, 0) + amount
        self._per_thread = live

    def snapshot(self) -> dict[str, float | int]:
        base: dict[str, float | int] = {
            "requests": 0,
            "bytes": 0,
            "bytes_returned": 0,
            "reads": 0,
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
            self._fold_ended()
            # dict() copies in one C call under the GIL: safe while the owner keeps adding.
            copies = [dict(self._ended)] + [dict(values) for _, values in self._per_thread]
        for values in copies:
            for name, amount in values.items():
                base[name] = base.get(name, 0) + amount
        return base

"""The HTTP reader's counters and time sums (what :meth:`HttpRangeReader.stats` reports)."""

from __future__ import annotations

import threading

__all__ = ["Metrics"]


class Metrics:
    """Counters and time sums; ``snapshot`` is what the reader's ``stats()`` is made from.

    Each thread adds into its own dict (no lock on the hot path: eight lock round trips per
    request showed up when many threads ran small requests); a snapshot sums them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local = threading.local()
        self._per_thread: list[dict[str, float | int]] = []

    def add(self, name: str, amount: float | int = 1) -> None:
        values = getattr(self._local, "values", None)
        if values is None:
            values = self._local.values = {}
            with self._lock:
                self._per_thread.append(values)
        values[name] = values.get(name, 0) + amount

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
            # dict() copies in one C call under the GIL: safe while the owner keeps adding.
            copies = [dict(values) for values in self._per_thread]
        for values in copies:
            for name, amount in values.items():
                base[name] = base.get(name, 0) + amount
        return base

"""One shared back-off per host: when a server says its quota is exhausted, every thread of
every reader in the process waits for the same window instead of each spending its own
requests (and 429s) on finding out.

A gate is closed until a monotonic deadline. :meth:`HostGates.hold` closes it (or moves the
deadline later, never earlier) and logs once per closing, with the reason and the time left;
:meth:`HostGates.wait` blocks a caller until its host's gate opens, in slices, so a reader's
``close()`` interrupts the wait. DataLoader worker processes each hold their own gates (a
forked child starts with its parent's); each learns the window from its own first 429.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

from episodestream.storage._urls import origin_of

__all__ = ["HOST_GATES", "HostGates"]

logger = logging.getLogger("episodestream.storage")

Origin = tuple[str, str, int]


@dataclass(slots=True)
class _Gate:
    until: float  # time.monotonic() at which requests may go again
    reason: str


class HostGates:
    """Deadlines per origin (scheme, host, port) before which no request is sent; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._gates: dict[Origin, _Gate] = {}
        self._local = threading.local()

    def hold(self, url: str, seconds: float, reason: str) -> bool:
        """Keep requests to ``url``'s host back for ``seconds`` from now; ``True`` when this
        closed an open gate (and logged it), ``False`` when it only moved a closed one."""
        origin = origin_of(url)
        now = time.monotonic()
        until = now + max(0.0, seconds)
        with self._lock:
            gate = self._gates.get(origin)
            if gate is not None and gate.until > now:
                if until > gate.until:
                    gate.until, gate.reason = until, reason
                return False
            self._gates[origin] = _Gate(until, reason)
        host = origin[1] if origin[2] in (80, 443) else f"{origin[1]}:{origin[2]}"
        logger.warning(
            "%s rate-limits us: %s; every request to it waits %.0f s, until the window resets",
            host,
            reason,
            seconds,
        )
        return True

    def remaining(self, url: str) -> float:
        """Seconds until ``url``'s host may be asked again (0 when open)."""
        gate = self._gates.get(origin_of(url))  # a dict read is atomic: no lock on the hot path
        if gate is None:
            return 0.0
        return max(0.0, gate.until - time.monotonic())

    def wait(self, url: str, stop: threading.Event, *, slice_seconds: float = 1.0) -> float:
        """Block until ``url``'s host may be asked (or ``stop`` is set); seconds waited.

        Bounded by the deadline, which :meth:`hold` only sets from a bounded wait.
        """
        left = self.remaining(url)
        if left <= 0:
            return 0.0
        began = time.monotonic()
        while left > 0 and not stop.wait(min(left, slice_seconds)):
            left = self.remaining(url)
        waited = time.monotonic() - began
        self._local.seconds = self.waited_here() + waited
        return waited

    def waited_here(self) -> float:
        """Seconds this thread has spent waiting on gates, in all (to keep retry budgets fair:
        time spent waiting for a quota is not time spent failing)."""
        return float(getattr(self._local, "seconds", 0.0))

    def forget(self) -> None:
        """Open every gate (tests)."""
        with self._lock:
            self._gates.clear()

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()


HOST_GATES = HostGates()
os.register_at_fork(after_in_child=HOST_GATES._after_fork_in_child)

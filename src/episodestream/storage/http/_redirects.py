"""What the readers learn about redirect targets: may one be reused for another range?

A server that redirects a file (the Hub to its CDN, a web server to presigned S3 URLs) hands out
a target URL. Some targets serve any range of the file until they expire (CloudFront or S3
presigned URLs); others — the Hub's Xet CDN — are signed for the exact ``Range`` of the request
that was redirected, and refuse (403) any other range. Reusing a target saves a round trip to
the origin where it works and wastes one where it does not, so the readers learn it per CDN
host, once:

- ``UNKNOWN``: nothing known yet; the next cached target is tried for another range by one
  request at a time (the *probe*); meanwhile every other range goes through the origin.
- ``REUSABLE``: the probe got its bytes; cached targets on this host are reused until they
  expire (a later 403 there is an expiry, answered by asking the origin again).
- ``RANGE_BOUND``: the probe was refused; every range on this host is resolved through the
  origin with its own ``Range`` header, and its target is used for that request only.

So a run wastes at most one 403 per CDN host on learning. The book is shared by every reader in
the process (keyed by scheme, host and port) and holds no sockets; a forked DataLoader worker
inherits what its parent had learned.

Pure bookkeeping and URL parsing: no I/O, no sleeping.
"""

from __future__ import annotations

import calendar
import enum
import os
import threading
import time
import urllib.parse

from episodestream.storage._urls import origin_of

__all__ = ["REDIRECT_HOSTS", "HostMode", "RedirectBook", "signed_url_expiry"]


class HostMode(enum.Enum):
    """What is known of the targets one host serves (legal moves: see :class:`RedirectBook`)."""

    UNKNOWN = "unknown"
    PROBING = "probing"
    REUSABLE = "reusable"
    RANGE_BOUND = "range-bound"


Origin = tuple[str, str, int]


class RedirectBook:
    """Per-host verdicts on reusing redirect targets across ranges; thread-safe.

    Transitions: ``UNKNOWN -> PROBING`` (:meth:`may_reuse` lends the probe to one caller);
    ``PROBING -> REUSABLE | RANGE_BOUND`` (:meth:`report`); ``PROBING -> UNKNOWN``
    (:meth:`release`: the probe ended without a verdict, e.g. a timeout); :meth:`learn` does
    either from the status a reused target answered. ``REUSABLE`` and ``RANGE_BOUND`` are final
    for the life of the process.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._modes: dict[Origin, HostMode] = {}

    def mode(self, url: str) -> HostMode:
        with self._lock:
            return self._modes.get(origin_of(url), HostMode.UNKNOWN)

    def may_reuse(self, target: str) -> bool:
        """Whether ``target`` may be sent a range other than the one it was issued for.

        ``True`` for a ``REUSABLE`` host, and for an ``UNKNOWN`` one whose probe this caller now
        holds: it must then :meth:`report` the outcome or :meth:`release` the probe.
        """
        origin = origin_of(target)
        with self._lock:
            mode = self._modes.get(origin, HostMode.UNKNOWN)
            if mode is HostMode.UNKNOWN:
                self._modes[origin] = HostMode.PROBING
                return True
            return mode is HostMode.REUSABLE

    def report(self, target: str, *, refused: bool) -> bool:
        """The outcome of a reused ``target``; ``True`` when it taught something new.

        Only a probe teaches: a refusal on a host already known ``REUSABLE`` is an expired
        target, not a range-bound one.
        """
        origin = origin_of(target)
        with self._lock:
            if self._modes.get(origin) is not HostMode.PROBING:
                return False
            self._modes[origin] = HostMode.RANGE_BOUND if refused else HostMode.REUSABLE
            return True

    def learn(self, target: str, status: int) -> bool:
        """How a host answered ``target`` reused for another range (the answer's status): 403
        refuses it, 200 and 206 serve it, anything else ends a probe without a verdict.
        ``True`` when this refusal taught that the host's targets are range-bound."""
        if status == 403:
            return self.report(target, refused=True)
        if status in (200, 206):
            self.report(target, refused=False)
        else:
            self.release(target)
        return False

    def release(self, target: str) -> None:
        """A probe ended without a verdict: the next cached target may probe again."""
        origin = origin_of(target)
        with self._lock:
            if self._modes.get(origin) is HostMode.PROBING:
                self._modes[origin] = HostMode.UNKNOWN

    def forget(self) -> None:
        """Drop everything learned (tests)."""
        with self._lock:
            self._modes.clear()

    def _after_fork_in_child(self) -> None:
        # a parent thread may have held the lock at the fork; a probe in flight there is not
        # this process's
        self._lock = threading.Lock()
        for origin, mode in list(self._modes.items()):
            if mode is HostMode.PROBING:
                self._modes[origin] = HostMode.UNKNOWN


# One book per process: every reader and thread learns once per host.
REDIRECT_HOSTS = RedirectBook()
os.register_at_fork(after_in_child=REDIRECT_HOSTS._after_fork_in_child)


def signed_url_expiry(url: str) -> float | None:
    """When a presigned URL stops working (epoch seconds), as its query string says; ``None``
    when it says nothing we recognise.

    Recognised: AWS SigV4 / GCS V4 (``X-Amz-Date`` or ``X-Goog-Date`` plus ``…-Expires``
    seconds), CloudFront, S3 SigV2 and GCS V2 (``Expires``, epoch seconds) and lower-case
    ``expires`` (epoch seconds) as some CDNs and our stand-in write it.
    """
    try:
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    except ValueError:
        return None
    fields = {name.lower(): values[-1] for name, values in query.items() if values}
    for prefix in ("x-amz-", "x-goog-"):
        date, lifetime = fields.get(prefix + "date"), fields.get(prefix + "expires")
        if date is not None and lifetime is not None and lifetime.isdigit():
            try:
                issued = calendar.timegm(time.strptime(date, "%Y%m%dT%H%M%SZ"))
            except ValueError:
                return None
            return float(issued + int(lifetime))
    expires = fields.get("expires")
    if expires is not None and expires.isdigit():
        return float(expires)
    return None

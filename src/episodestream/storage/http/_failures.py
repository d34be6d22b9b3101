"""How the HTTP reader's failed exchanges become retries or typed errors.

- :class:`Retry`: the signal, inside the reader, that one attempt failed in a way that may pass;
- :func:`send_failure`: what a transport's exception (``_transport.py`` lists them) means;
- :func:`status_failure`: what an HTTP status other than the ones a read path takes means;
- :class:`Retrier`: after a failed attempt, log it, then wait (backoff, or a quota window the
  server announced) or give up with the typed error;
- :class:`FailureLog`: the JSONL file every failed or retried attempt is appended to (URL
  without query, range, attempt, error, delay — never a credential).
"""

from __future__ import annotations

import json
import logging
import random
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from episodestream.errors import (
    InvalidResponse,
    NotFound,
    ProxyError,
    StaleSourceError,
    StorageError,
    StorageTimeout,
)
from episodestream.storage._config import Limits, RetryPolicy, Timeouts
from episodestream.storage._messages import server_message
from episodestream.storage._urls import shown_url
from episodestream.storage.http._hostgate import HOST_GATES
from episodestream.storage.http._metrics import Metrics
from episodestream.storage.http._ratelimit import MAX_QUOTA_WAITS, RateLimit, parse_rate_limit
from episodestream.storage.http._rules import describe_error, unsatisfied_total
from episodestream.storage.http._transport import (
    PoolTimeout,
    ProtocolError,
    ProxyRefused,
    ProxyUnreachable,
)

if TYPE_CHECKING:
    from episodestream.storage._deadline import Deadline

__all__ = ["FailureLog", "Retrier", "Retry", "send_failure", "status_failure"]

logger = logging.getLogger(__name__)


class Retry(Exception):  # internal control flow, never escapes the reader
    """One attempt failed in a way worth retrying; carries the typed error to raise at the end."""

    def __init__(
        self,
        error: StorageError,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        quota: RateLimit | None = None,
    ) -> None:
        super().__init__(str(error))
        self.error = error
        self.status = status
        self.retry_after = retry_after
        self.quota = quota  # a 429 that said when its quota resets: wait, do not count it


def send_failure(
    error: Exception, url: str, timeouts: Timeouts, limits: Limits
) -> Retry | StorageError | None:
    """What ``error``, raised by a transport sending ``GET url``, becomes: a :class:`Retry`
    (it may pass), a typed error (retrying cannot help), or ``None`` (not a transport's)."""
    if isinstance(error, PoolTimeout):
        return Retry(
            StorageTimeout(
                f"{shown_url(url)}: no free connection within {timeouts.pool_seconds} s "
                f"(pool of {limits.max_connections_per_host})"
            )
        )
    if isinstance(error, ProxyRefused):
        # 502/503/504: the proxy could not reach the origin (may pass); others (407) do not
        refused = ProxyError(f"{shown_url(url)}: {error}")
        return Retry(refused, status=error.status) if error.status in (502, 503, 504) else refused
    if isinstance(error, ProxyUnreachable):
        return Retry(ProxyError(f"{shown_url(url)}: {error}"))
    if isinstance(error, ssl.SSLCertVerificationError):
        # A certificate problem does not fix itself; do not retry.
        return StorageError(f"{shown_url(url)}: TLS certificate error: {error}")
    if isinstance(error, TimeoutError):
        return Retry(StorageTimeout(f"{shown_url(url)}: timed out: {describe_error(error)}"))
    if isinstance(error, ProtocolError):
        return Retry(InvalidResponse(f"{shown_url(url)}: {error}"))
    if isinstance(error, ValueError):
        # an unsafe request target or header the transport refuses to send: not retried
        return StorageError(f"{shown_url(url)}: {error}")
    if isinstance(error, OSError):
        return Retry(StorageError(f"{shown_url(url)}: connection failed: {describe_error(error)}"))
    return None


def status_failure(
    status: int,
    headers: Mapping[str, str],
    body: bytes | None,
    where: str,
    *,
    retry: RetryPolicy,
    credentials: Mapping[str, str],
    known_size: int | None,
) -> Retry | StorageError:
    """What an answer with ``status`` (and its small ``body``, if read) to a request for
    ``where`` means; ``credentials`` are kept out of any server message shown, ``known_size``
    (the pinned size) tells a 416 of a changed file."""
    if retry.is_retryable_status(status):
        quota = parse_rate_limit(headers) if status == 429 else None
        announced = quota is not None and quota.wait_seconds is not None
        return Retry(
            StorageError(f"{where}: HTTP {status}"),
            status=status,
            retry_after=RetryPolicy.parse_retry_after(headers.get("Retry-After")),
            quota=quota if announced else None,
        )
    if status in (404, 410):
        return NotFound(f"{where}: HTTP {status}, no such file")
    if status in (401, 403):
        hint = " (a token may be missing or lack access)" if status == 401 else ""
        secrets = [v for value in credentials.values() for v in (value, value.split()[-1])]
        said = server_message(headers, body, secrets)
        reason = f" — the server says: {said}" if said else ""
        return StorageError(f"{where}: HTTP {status}, access denied{hint}{reason}")
    if status == 416:
        total = unsatisfied_total(headers.get("Content-Range"))
        if total is not None and known_size is not None and total != known_size:
            return StaleSourceError(f"{where}: file size changed from {known_size} to {total}")
        size_text = f"{total} bytes" if total is not None else "unknown size"
        return InvalidResponse(f"{where}: range not satisfiable (file of {size_text})")
    return InvalidResponse(f"{where}: unexpected HTTP {status}")


class FailureLog:
    """Appends one JSON line per failed or retried attempt to ``path`` (none when ``None``)."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = threading.Lock()

    def write(
        self,
        label: str,
        start: int,
        end: int,
        attempt: int,
        failure: Retry,
        delay: float | None,
    ) -> None:
        """``label``: the URL as errors show it (redacted); ``delay``: ``None`` when giving up."""
        if self._path is None:
            return
        record = {
            "time": time.time(),
            "url": label,
            "range": [start, end - 1],
            "attempt": attempt,
            "status": failure.status,
            "error": type(failure.error).__name__,
            "message": str(failure.error),
            "retry": delay is not None,
            "delay_seconds": delay,
        }
        line = json.dumps(record) + "\n"
        with self._lock:
            try:
                with open(self._path, "a", encoding="utf-8") as handle:
                    handle.write(line)
            except OSError as error:
                logger.warning("cannot append to failure log %s: %s", self._path, error)


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Retrier:
    """What a failed attempt of ``owner`` (a weak reference to a reader, named in errors)
    leads to.

    Weak: the reader holds its retrier, so a strong reference back would be a cycle that
    keeps a dropped reader's connections open until the cyclic GC runs.

    ``rng`` draws the backoff jitter under ``lock``; ``stop`` set means the owner was closed:
    no retry, no wait. Every attempt counted goes to ``metrics`` and ``log``.
    """

    owner: Callable[[], object | None]
    retry: RetryPolicy
    rng: random.Random
    lock: threading.Lock
    stop: threading.Event
    metrics: Metrics
    log: FailureLog

    def _name(self) -> str:
        reader = self.owner()
        return "the reader" if reader is None else repr(reader)

    def _deadline(self) -> Deadline | None:
        """The deadline of the operation the owner serves now (``_deadline.py``), if any."""
        return getattr(self.owner(), "_deadline", None)

    def after_failure(
        self, label: str, start: int, end: int, attempt: int, started: float, failure: Retry
    ) -> None:
        """Log a failed attempt, then sleep before the next one or raise the typed error."""
        if self.stop.is_set():
            # close() interrupted this attempt (shut its connection down): no retry, no log
            raise StorageError(f"{self._name()} was closed during the read") from failure.error
        elapsed = time.monotonic() - started
        with self.lock:
            delay = self.retry.next_delay(attempt, self.rng, failure.retry_after)
        retrying = self.retry.should_retry(attempt, elapsed, delay)
        deadline = self._deadline()
        out_of_time = deadline is not None and not deadline.allows_wait(delay if retrying else 0)
        retrying = retrying and not out_of_time
        self.metrics.add("retries" if retrying else "failures")
        self.log.write(label, start, end, attempt, failure, delay if retrying else None)
        if out_of_time:
            assert deadline is not None
            # the operation's deadline, not this read's policy, ends it: say which
            raise deadline.error() from failure.error
        if not retrying:
            error = failure.error
            error.args = (f"{error} — gave up after {attempt} attempt(s) in {elapsed:.1f} s",)
            raise error from failure.__cause__
        logger.debug("retrying %s in %.2f s: %s", label, delay, failure.error)
        self.metrics.add("retry_sleep_seconds", delay)
        if self.stop.wait(delay):
            closed = StorageError(f"{self._name()} was closed while waiting to retry")
            raise closed from failure.error

    def hold_for_quota(
        self, label: str, url: str, start: int, end: int, limited: int, failure: Retry
    ) -> None:
        """A 429 announced when its quota resets: close the host's gate for that long (every
        thread waits before sending), or give up when the wait is beyond the policy's bound."""
        quota = failure.quota
        assert quota is not None
        wait = quota.wait_seconds or 0.0
        bound = self.retry.rate_limit_max_seconds
        self.metrics.add("rate_limited")
        deadline = self._deadline()
        if deadline is not None and not deadline.allows_wait(wait):
            self.metrics.add("failures")
            self.log.write(label, start, end, limited, failure, None)
            raise deadline.error() from failure.error
        giving_up = wait > bound or limited > MAX_QUOTA_WAITS
        self.log.write(label, start, end, limited, failure, None if giving_up else wait)
        if self.stop.is_set():
            raise StorageError(f"{self._name()} was closed during the read") from failure.error
        if giving_up:
            error = failure.error
            reason = (
                f"the quota resets in {wait:.0f} s, beyond retry.rate_limit_max_seconds={bound:g}"
                if wait > bound
                else f"rate-limited {limited} times in a row"
            )
            error.args = (f"{error}: {quota.describe()}; {reason}",)
            self.metrics.add("failures")
            raise error
        self.metrics.add("retries")  # a retry like any other, just not a failed attempt
        HOST_GATES.hold(url, wait, quota.describe())

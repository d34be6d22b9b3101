"""Native HTTP(S) range reader on a minimal HTTP/1.1 transport (chosen by measurement:
docs/HTTP_CLIENTS.md; see ``_wire.py``), reached through the ``Transport`` seam
(``_transport.py``); the rules applied to answers, apart from any socket, are ``_rules.py``.
This module holds the reader's lifecycle, public reads and their planning; one exchange is
``_exchange.py``, checking its answer ``_answers.py``. Around them: body reading
(``_body.py``), failures, retries and the failure log (``_failures.py``), counters
(``_metrics.py``), the bounded thread runner behind ``read_many`` and split ranges
(``storage/_runner.py``).

One exchange = one ``GET`` with a single ``Range``. Every answer is checked before a byte of it is
trusted: status, ``Content-Range`` start/end/total, body length and the file's validator (ETag or
Last-Modified), pinned at first contact and sent back as ``If-Range``. Failures that may pass
(connection errors, timeouts, short bodies, 408/425/429/5xx) are retried under a
:class:`RetryPolicy`; a short body resumes from the first missing byte. Redirects are followed by
hand: a target belongs to the request that got it, and is reused for other ranges only on hosts
known to allow it (``_redirects.py``); a refused or expired target is resolved again through the
origin, a bounded number of times. Credentials go only to the origin they were given for.
``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY`` are honoured per origin, as
requests honours them (``_proxy.py``); a proxy that refuses or cannot be reached is a
:class:`ProxyError` naming the variable.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from episodestream.errors import ConfigError, ConfigTypeError, InvalidResponse, StorageError
from episodestream.storage._base import (
    DEFAULT_READ_FILE_MAX_BYTES,
    FileInfo,
    ReaderStats,
    ReadRequest,
    normalize_relative_path,
)
from episodestream.storage._config import (
    DEFAULT_LIMITS,
    DEFAULT_RETRY,
    DEFAULT_TIMEOUTS,
    Limits,
    ReaderOptions,
    RetryPolicy,
    Timeouts,
)
from episodestream.storage._deadline import body_deadline_seconds
from episodestream.storage._location import Location
from episodestream.storage._runner import TrackedPool, run_bounded, shut_down
from episodestream.storage._urls import basic_authorization, origin_of, shown_url, split_userinfo
from episodestream.storage.http._answers import _count_connect
from episodestream.storage.http._exchange import HttpExchanges
from episodestream.storage.http._failures import FailureLog, Retrier
from episodestream.storage.http._metrics import Metrics
from episodestream.storage.http._ratelimit import MAX_QUOTA_WAITS
from episodestream.storage.http._rules import coalesce_ranges, split_range
from episodestream.storage.http._state import (
    DEFAULT_MAX_SKIP_BYTES,
    MAX_REDIRECTS,
    MAX_TARGET_REFUSALS,
    FileState,
)
from episodestream.storage.http._transport import Transport, TransportFactory, TransportOptions
from episodestream.storage.http._wire import WireTransport

__all__ = ["DEFAULT_MAX_SKIP_BYTES", "HttpRangeReader"]

logger = logging.getLogger(__name__)


def _check_options(**given: Any) -> None:
    """The constructor's arguments, checked as :class:`ReaderOptions` checks them (a
    :class:`ConfigError` naming the argument); ``None`` is refused where it would only
    fail at the first read."""
    for name in ("timeouts", "limits", "retry", "max_skip_bytes", "verify", "transport"):
        if given[name] is None:
            raise ConfigTypeError(f"{name} must not be None (leave it out for the default)")
    ReaderOptions(**given)


class HttpRangeReader(HttpExchanges):
    """Exact byte ranges of the files under an HTTP(S) base URL.

    Args:
        base_url: the dataset root, e.g. ``"https://host/datasets/x"`` (or its parsed
            :class:`Location`); a file's URL is ``base_url + "/" + quote(path)``. A
            ``user:password@`` in it is sent as Basic auth to its origin only and never kept
            in the URL the reader shows (``root``, ``base_url``, messages).
        token: sent as ``Authorization: Bearer …`` to the base URL's origin only.
        headers: extra request headers, treated as credentials: sent to the base URL's origin
            only, never after a redirect to another host.
        timeouts, limits, retry: see :class:`Timeouts`, :class:`Limits`, :class:`RetryPolicy`.
        failure_log: a JSONL file to which every failed or retried attempt is appended
            (URL without query, range, attempt, error, delay) — never a credential.
        max_skip_bytes: a server that ignores ``Range`` is read past at most this many bytes to
            reach a range (streamed, never buffered); further on, :class:`RangeNotSupported`.
        verify: TLS certificate verification: ``True``, ``False`` or a CA bundle path.
        seed: seeds the backoff jitter (tests); ``None`` draws from the OS.
        transport: makes the client that carries the bytes (``_transport.py``: a callable
            from :class:`TransportOptions` to a ``Transport``); default our HTTP/1.1 wire,
            measured against urllib3 and httpx in docs/HTTP_CLIENTS.md.

    Thread-safe; ``read_many`` runs on a bounded pool of ``limits.max_concurrency`` threads,
    joined by :meth:`close`. Pickles without sockets or threads; pinned validators and resolved
    redirects travel with it.
    """

    def __init__(
        self,
        base_url: str | Location,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        limits: Limits = DEFAULT_LIMITS,
        retry: RetryPolicy = DEFAULT_RETRY,
        failure_log: str | os.PathLike[str] | None = None,
        max_skip_bytes: int = DEFAULT_MAX_SKIP_BYTES,
        verify: bool | str = True,
        seed: int | None = None,
        transport: TransportFactory = WireTransport,
    ) -> None:
        if isinstance(base_url, Location):
            if base_url.kind != "http":
                raise StorageError(f"not an http(s) URL: {base_url.url!r}")
            base_url, userinfo = base_url.path, base_url.credentials
        elif isinstance(base_url, str):
            base_url, userinfo = split_userinfo(base_url)
        else:
            raise ConfigTypeError(f"base_url must be a str URL, got {type(base_url).__name__}")
        parts = urllib.parse.urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StorageError(f"not an http(s) URL: {shown_url(base_url)!r}")
        try:
            parts.port  # noqa: B018 - raises on a port out of range or not a number
        except ValueError as error:
            raise StorageError(f"invalid port in {shown_url(base_url)!r}: {error}") from None
        self._base_url = base_url.rstrip("/")
        if token is not None and (isinstance(token, bool) or not isinstance(token, str)):
            # True/False mean "look one up" / "send none" for hf:// roots only
            raise ConfigTypeError(
                f"token for an http(s) URL must be a str, got {token!r} (True/False apply to "
                "hf:// roots)"
            )
        _check_options(
            headers=headers,
            timeouts=timeouts,
            limits=limits,
            retry=retry,
            failure_log=failure_log,
            max_skip_bytes=max_skip_bytes,
            verify=verify,
            seed=seed,
            transport=transport,
        )
        credentials = dict(headers or {})
        if token:
            credentials["Authorization"] = f"Bearer {token}"
        if userinfo is not None:
            if any(name.lower() == "authorization" for name in credentials):
                raise ConfigError(
                    f"{shown_url(base_url)!r}: credentials in the URL (user:password@) and a "
                    "token or Authorization header: give one of them"
                )
            credentials["Authorization"] = basic_authorization(*userinfo)
        self._credentials = credentials
        self._auth_origin = origin_of(self._base_url)
        self._timeouts = timeouts
        self._limits = limits
        self._retry = retry
        self._failure_log = None if failure_log is None else Path(failure_log)
        self._max_skip_bytes = max_skip_bytes
        self._verify = verify
        self._seed = seed
        self._transport_factory = transport
        self._files: dict[str, FileState] = {}
        self._init_runtime()

    # ----------------------------------------------------------------- lifecycle and pickling

    def _init_runtime(self) -> None:
        self._track_forks()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._closed = False
        self._headers_by_url: dict[str, dict[str, str]] = {}
        self._executor: TrackedPool | None = None
        self._metrics = Metrics()
        self._rng = random.Random(self._seed)
        log = FailureLog(self._failure_log)
        # A weak reference, not the reader: no reader <-> retrier cycle keeping a dropped
        # reader (and its sockets) alive until the cyclic GC runs.
        self._retrier = Retrier(
            weakref.ref(self), self._retry, self._rng, self._lock, self._stop, self._metrics, log
        )
        self._transport: Transport = self._transport_factory(
            TransportOptions(
                timeouts=self._timeouts,
                max_connections_per_host=self._limits.max_connections_per_host,
                verify=self._verify,
                on_connect=partial(_count_connect, self._metrics),  # no bound method: no cycle
            )
        )

    def __getstate__(self) -> dict[str, Any]:
        state = {
            key: value
            for key, value in self.__dict__.items()
            if key
            not in {
                "_lock",
                "_stop",
                "_closed",
                "_transport",
                "_headers_by_url",
                "_executor",
                "_metrics",
                "_rng",
                "_retrier",
                "_deadline",
            }
        }
        with self._lock:
            state["_files"] = {
                path: FileState(f.url, f.label, f.target, f.size, f.etag, f.last_modified)
                for path, f in self._files.items()
            }
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def _after_fork_in_child(self) -> None:
        """In a forked child (a DataLoader worker): start afresh, keeping pinned validators
        and resolved redirects.

        The child inherits the parent's kept-alive sockets — two processes on one socket read
        each other's responses — and a thread pool whose threads did not survive the fork, so
        work submitted to it would never run. Locks may have been held by parent threads.
        """
        closed = self._closed
        inherited = self._transport
        self._init_runtime()
        self._closed = closed
        inherited.drop_after_fork()

    def __repr__(self) -> str:
        # Never the credentials.
        return f"{type(self).__name__}({shown_url(self._base_url)!r})"

    def close(self) -> None:
        """Stop waiting retries, interrupt reads in flight, close every connection and join the
        worker threads (for at most one connect and one read timeout; a thread still running
        then is logged and left); a read interrupted by close raises :class:`StorageError`
        (no retry)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
            self._headers_by_url = {}
        # Stop first, then shut the connections down (a read blocked on a silent server wakes
        # at once and is not retried), and only then join the threads that were reading.
        self._stop.set()
        self._transport.close()
        if executor is not None:
            # Woken reads end at once; a connect in progress ends within its timeout. Beyond
            # that, a thread is logged and left rather than joined without bound.
            shut_down(executor, self._close_join_seconds(), repr(self))

    def _close_join_seconds(self) -> float:
        """How long :meth:`close` waits for its worker threads: one connect and one read
        timeout (every wait of theirs ends at once on close, or within those)."""
        return self._timeouts.connect_seconds + self._timeouts.read_seconds

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def timeouts(self) -> Timeouts:
        return self._timeouts

    @property
    def root(self) -> str:
        return self._base_url

    # ----------------------------------------------------------------------- public reads

    def size(self, path: str) -> int:
        """Size in bytes of the file at ``path`` (one 1-byte range request, then cached)."""
        return self.file_info(path).size

    def file_info(self, path: str) -> FileInfo:
        """Size and validators of ``path`` as first seen (pinned) by this reader."""
        state = self._state(normalize_relative_path(path))
        with self._lock:
            known = state.size
        if known is None:
            self._probe(state)
        with self._lock:
            assert state.size is not None
            return FileInfo(state.size, state.etag, state.last_modified)

    def read(self, path: str, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of ``path``: exactly ``length`` bytes or an error."""
        ReadRequest(path, offset, length)  # validates the numbers
        state = self._state(normalize_relative_path(path))
        self._metrics.add("reads")
        if length == 0:
            return b""
        self._check_bounds(state, offset, length)
        data = self._fetch_split(state, offset, length)
        self._metrics.add("bytes_returned", length)
        return data

    def read_file(self, path: str, *, max_bytes: int = DEFAULT_READ_FILE_MAX_BYTES) -> bytes:
        """The whole file at ``path`` in one request (``Range: bytes=0-…``, checked and pinned
        like any range); a file larger than ``max_bytes`` is an error before its body is read."""
        state = self._state(normalize_relative_path(path))
        self._metrics.add("reads")
        with self._lock:
            size = state.size
        if size is None:
            data = self._fetch(state, 0, max_bytes, to_end=True)
        elif size > max_bytes:
            raise InvalidResponse(
                f"{state.label}: file of {size} bytes is larger than read_file's "
                f"max_bytes={max_bytes}; read it by ranges"
            )
        else:
            data = self._fetch_split(state, 0, size) if size else b""
        self._metrics.add("bytes_returned", len(data))
        return data

    def read_many(self, requests: Sequence[ReadRequest]) -> list[bytes]:
        """All ``requests``, concurrently; results in request order.

        Ranges of one file that touch or lie within ``limits.coalesce_gap_bytes`` of each other
        are fetched as one request (up to ``limits.coalesce_max_bytes``); long ranges are split
        into parallel sub-ranges. The first error cancels what has not started and is raised
        once everything started has finished.
        """
        requests = list(requests)
        results: list[bytes] = [b""] * len(requests)
        groups: dict[str, list[int]] = {}
        states: dict[str, FileState] = {}
        for index, request in enumerate(requests):
            clean = normalize_relative_path(request.path)
            if clean not in states:
                states[clean] = self._state(clean)
            if request.length:
                groups.setdefault(clean, []).append(index)
        self._metrics.add("reads", len(requests))
        for clean, indices in groups.items():
            for index in indices:
                self._check_bounds(states[clean], requests[index].offset, requests[index].length)
        units: list[tuple[FileState, int, int, list[int]]] = []
        for clean, indices in groups.items():
            for start, end, members in self._coalesce(requests, indices):
                units.append((states[clean], start, end, members))
                if len(members) > 1:
                    self._metrics.add("coalesced_requests", len(members) - 1)
        # Every unit's parts go to the pool as one flat list: no task waits on another task.
        parts: list[tuple[FileState, int, int]] = []
        owners: list[int] = []
        for number, (state, start, end, _) in enumerate(units):
            for part_start, part_size in self._split(start, end - start):
                parts.append((state, part_start, part_size))
                owners.append(number)
        pieces: list[list[bytes]] = [[] for _ in units]
        for number, piece in zip(owners, self._run_all(parts), strict=True):
            pieces[number].append(piece)
        for (_, start, end, members), got in zip(units, pieces, strict=True):
            data = got[0] if len(got) == 1 else b"".join(got)
            for index in members:
                request = requests[index]
                if request.offset == start and request.end == end:
                    results[index] = data  # the common case: no copy
                else:
                    low = request.offset - start
                    results[index] = data[low : low + request.length]
        self._metrics.add("bytes_returned", sum(r.length for r in requests))
        return results

    def _check_bounds(self, state: FileState, offset: int, length: int) -> None:
        """A range past the end of a file of known size fails before any request."""
        with self._lock:
            size = state.size
        if size is not None and offset + length > size:
            raise InvalidResponse(
                f"{state.label} bytes {offset}-{offset + length - 1}: beyond the end "
                f"of the file ({size} bytes)"
            )

    def stats(self) -> ReaderStats:
        """Counters since creation: requests, bytes (received), bytes_returned, retries, resumes,
        redirects, reresolves (a redirect target refused, resolved again), target_refusals
        (reused targets refused: learning a per-range signed host), rate_limited (429s that
        announced their window; also counted in retries), connections, failures,
        ``status_<code>`` counts, and time sums in seconds: connect, headers (request sent →
        headers, includes connect), first_byte (request sent → first body byte), body (first →
        last body byte), quota_wait (waiting for a host's rate-limit window); in ``other``,
        failed_attempt_seconds (ranges' failed attempts, send to failure) and
        retry_sleep_seconds (the backoff slept before retries), once any attempt failed."""
        return ReaderStats.from_counters(self._metrics.snapshot())

    # ------------------------------------------------------------------------- planning

    def _state(self, clean: str) -> FileState:
        with self._lock:
            if self._closed:
                raise StorageError(f"{self!r} is closed")
            state = self._files.get(clean)
            if state is None:
                url = self._url_for(clean)
                state = self._files[clean] = FileState(url, shown_url(url))
            return state

    def _url_for(self, clean: str) -> str:
        """The URL of relative path ``clean`` (subclasses map paths differently)."""
        return f"{self._base_url}/{urllib.parse.quote(clean, safe='/')}"

    def _split(self, offset: int, length: int) -> list[tuple[int, int]]:
        """``[(start, size)]`` sub-ranges of one range, per ``limits.split_*``."""
        limits = self._limits
        parts = split_range(offset, length, limits.split_threshold_bytes, limits.split_part_bytes)
        if len(parts) > 1:
            self._metrics.add("split_parts", len(parts))
        return parts

    def _coalesce(
        self, requests: list[ReadRequest], indices: list[int]
    ) -> list[tuple[int, int, list[int]]]:
        """Merge ranges of one file into ``[(start, end, member indices)]``."""
        spans = [(requests[i].offset, requests[i].end) for i in indices]
        merged = coalesce_ranges(
            spans, self._limits.coalesce_gap_bytes, self._limits.coalesce_max_bytes
        )
        return [(start, end, [indices[m] for m in members]) for start, end, members in merged]

    def _run_all(self, parts: list[tuple[FileState, int, int]]) -> list[bytes]:
        """Fetch ``(state, offset, length)`` parts on the reader's pool, at most
        ``limits.max_concurrency`` at once; the wait for helper threads is bounded by
        :meth:`_longest_read_seconds` of the largest part."""
        tasks: list[Callable[[], bytes]] = [partial(self._fetch, *part) for part in parts]

        def describe(index: int) -> str:
            state, offset, length = parts[index]
            return f"{state.label} bytes {offset}-{offset + length - 1}"

        longest = max((length for _, _, length in parts), default=0)
        return run_bounded(
            tasks,
            self._limits.max_concurrency,
            self._pool_executor,
            wait_seconds=self._longest_read_seconds(longest),
            describe=describe,
        )

    def _longest_read_seconds(self, length: int) -> float:
        """The longest one read of ``length`` bytes may take under this reader's timeouts and
        retry policy: the retry budget, every quota window it may wait out, and the
        exchanges of its last attempt (redirect hops and refused targets included), each a
        pool wait, a connection, the headers, a skip past an ignored ``Range`` and the body
        at the minimum rate."""
        timeouts, retry = self._timeouts, self._retry
        exchange = (
            timeouts.pool_seconds
            + timeouts.connect_seconds
            + timeouts.read_seconds
            + body_deadline_seconds(timeouts.read_seconds, self._max_skip_bytes)
            + body_deadline_seconds(timeouts.read_seconds, length)
        )
        return (
            retry.max_elapsed_seconds
            + retry.rate_limit_max_seconds * MAX_QUOTA_WAITS
            + (1 + MAX_REDIRECTS + MAX_TARGET_REFUSALS) * exchange
        )

    def _fetch_split(self, state: FileState, offset: int, length: int) -> bytes:
        parts = self._split(offset, length)
        if len(parts) == 1:
            return self._fetch(state, offset, length)
        return b"".join(self._run_all([(state, s, n) for s, n in parts]))

    def _pool_executor(self) -> TrackedPool:
        with self._lock:
            if self._closed:
                raise StorageError(f"{self!r} is closed")
            if self._executor is None:
                self._executor = TrackedPool(self._limits.max_concurrency, "episodestream-http")
            return self._executor

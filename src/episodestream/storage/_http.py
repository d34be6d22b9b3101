"""Native HTTP(S) range reader on a minimal HTTP/1.1 transport (chosen by measurement:
docs/HTTP_CLIENTS.md; see ``_wire.py``), reached through the ``Transport`` seam
(``_transport.py``); the rules applied to answers, apart from any socket, are ``_httprules.py``.
Around the read path here: body reading (``_httpbody.py``), failures, retries and the failure
log (``_failures.py``), counters (``_httpmetrics.py``), the bounded thread runner behind
``read_many`` and split ranges (``_runner.py``).

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
import time
import urllib.parse
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from episodestream.errors import (
    ConfigError,
    ConfigTypeError,
    InvalidResponse,
    RangeNotSupported,
    StaleSourceError,
    StorageError,
)
from episodestream.storage._base import (
    DEFAULT_READ_FILE_MAX_BYTES,
    BaseRangeReader,
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
from episodestream.storage._failures import (
    FailureLog,
    Retrier,
    Retry,
    send_failure,
    status_failure,
)
from episodestream.storage._hostgate import HOST_GATES
from episodestream.storage._httpbody import (
    body_deadline_seconds,
    read_body,
    read_small_body,
    skip_body,
)
from episodestream.storage._httpmetrics import Metrics
from episodestream.storage._httprules import (
    REDIRECT_STATUSES,
    AnswerError,
    Identity,
    body_encoding,
    check_partial,
    check_partial_framing,
    coalesce_ranges,
    declared_length,
    if_range_validator,
    pin_identity,
    redirect_target,
    split_range,
    target_is_fresh,
    unsatisfied_total,
)
from episodestream.storage._location import Location
from episodestream.storage._ratelimit import MAX_QUOTA_WAITS
from episodestream.storage._redirects import REDIRECT_HOSTS
from episodestream.storage._runner import TrackedPool, run_bounded, shut_down
from episodestream.storage._transport import (
    Response,
    Transport,
    TransportFactory,
    TransportOptions,
    exchange_deadline,
)
from episodestream.storage._urls import basic_authorization, origin_of, redact_url, split_userinfo
from episodestream.storage._wire import WireTransport

__all__ = ["DEFAULT_MAX_SKIP_BYTES", "HttpRangeReader"]

logger = logging.getLogger(__name__)

# A server that ignores Range sends the whole file from byte 0: we stream past at most this many
# bytes to reach a range (never buffering them); beyond it, RangeNotSupported.
DEFAULT_MAX_SKIP_BYTES = 8 * 1024 * 1024
MAX_REDIRECTS = 5
# Refused (403) redirect targets in a row, each followed by a fresh resolve, before a read
# gives up; reset whenever bytes arrive.
MAX_TARGET_REFUSALS = 3
_MAX_ROUTES = 4096  # URLs whose request headers are kept (signed URLs must not pile up)
# read_file() refuses files larger than this unless told otherwise (metadata, not videos).
# Error bodies, redirect bodies and API documents are read whole only up to this size.
MAX_SMALL_BODY_BYTES = 64 * 1024 * 1024
_USER_AGENT = "episodestream/0.1"


def _check_options(**given: Any) -> None:
    """The constructor's arguments, checked as :class:`ReaderOptions` checks them (a
    :class:`ConfigError` naming the argument); ``None`` is refused where it would only
    fail at the first read."""
    for name in ("timeouts", "limits", "retry", "max_skip_bytes", "verify", "transport"):
        if given[name] is None:
            raise ConfigTypeError(f"{name} must not be None (leave it out for the default)")
    ReaderOptions(**given)


@dataclass(slots=True)
class _FileState:
    """What the reader knows of one file; fields change only under the reader's lock."""

    url: str
    label: str = ""  # the URL as error messages show it (redacted), computed once
    target: str | None = None  # last redirect target, reused where its host allows
    size: int | None = None
    etag: str | None = None
    last_modified: str | None = None


class HttpRangeReader(BaseRangeReader):
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
            raise StorageError(f"not an http(s) URL: {redact_url(base_url)!r}")
        try:
            parts.port  # noqa: B018 - raises on a port out of range or not a number
        except ValueError as error:
            raise StorageError(f"invalid port in {redact_url(base_url)!r}: {error}") from None
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
                    f"{redact_url(base_url)!r}: credentials in the URL (user:password@) and a "
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
        self._files: dict[str, _FileState] = {}
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
                path: _FileState(f.url, f.label, f.target, f.size, f.etag, f.last_modified)
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
        return f"{type(self).__name__}({redact_url(self._base_url)!r})"

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
        states: dict[str, _FileState] = {}
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
        units: list[tuple[_FileState, int, int, list[int]]] = []
        for clean, indices in groups.items():
            for start, end, members in self._coalesce(requests, indices):
                units.append((states[clean], start, end, members))
                if len(members) > 1:
                    self._metrics.add("coalesced_requests", len(members) - 1)
        # Every unit's parts go to the pool as one flat list: no task waits on another task.
        parts: list[tuple[_FileState, int, int]] = []
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

    def _check_bounds(self, state: _FileState, offset: int, length: int) -> None:
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

    def _state(self, clean: str) -> _FileState:
        with self._lock:
            if self._closed:
                raise StorageError(f"{self!r} is closed")
            state = self._files.get(clean)
            if state is None:
                url = self._url_for(clean)
                state = self._files[clean] = _FileState(url, redact_url(url))
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

    def _run_all(self, parts: list[tuple[_FileState, int, int]]) -> list[bytes]:
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

    def _fetch_split(self, state: _FileState, offset: int, length: int) -> bytes:
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

    # ------------------------------------------------------------------------- transport

    def _headers_for(self, url: str) -> dict[str, str]:
        headers = {"User-Agent": _USER_AGENT, "Accept-Encoding": "identity"}
        if self._credentials and origin_of(url) == self._auth_origin:
            headers.update(self._credentials)
        return headers

    def _base_headers(self, url: str) -> dict[str, str]:
        """The headers every request to ``url`` carries, decided once per URL."""
        headers = self._headers_by_url.get(url)
        if headers is None:
            headers = self._headers_for(url)
            if len(self._headers_by_url) > _MAX_ROUTES:
                self._headers_by_url.clear()
            self._headers_by_url[url] = headers
        return headers

    def _send(self, url: str, extra: dict[str, str] | None = None) -> Response:
        """One GET through the transport, its body left unread; transport failures become
        ``Retry`` (or, where retrying cannot help, a typed error).

        Waits first while the host's quota gate is closed (a 429 announced its window). An
        operation's deadline (``_deadline.py``) bounds that wait and the exchange."""
        deadline = self._deadline
        gate = HOST_GATES.remaining(url)
        if gate > 0:
            if deadline is not None and not deadline.allows_wait(gate):
                raise deadline.error()
            waited = HOST_GATES.wait(url, self._stop)
            self._metrics.add("quota_wait_seconds", waited)
            if self._stop.is_set():
                raise StorageError(f"{self!r} was closed while waiting for a rate limit")
        base = self._base_headers(url)
        headers = {**base, **extra} if extra else base
        started = time.perf_counter()
        try:
            if deadline is None:
                response = self._transport.get(url, headers)
            else:
                with exchange_deadline(deadline.expires):
                    response = self._transport.get(url, headers)
        except Exception as error:
            failure = send_failure(error, url, self._timeouts, self._limits)
            if failure is None:
                raise
            raise failure from error
        finally:
            self._metrics.add("headers_seconds", time.perf_counter() - started)
        self._metrics.add("requests")
        self._metrics.add(f"status_{response.status}")
        return response

    # -------------------------------------------------------------------------- exchanges

    def _probe(self, state: _FileState) -> None:
        """Learn and pin size and validators with one ``bytes=0-0`` request.

        A GET rather than a HEAD: signed CDN URLs are often valid for GET only.
        """
        self._fetch(state, 0, 1, probe=True)

    def _fetch(
        self,
        state: _FileState,
        offset: int,
        length: int,
        *,
        probe: bool = False,
        to_end: bool = False,
    ) -> bytes:
        """Bytes ``[offset, offset + length)`` of the file over as many exchanges as it takes.

        Each body is read straight into a new ``bytes`` (no intermediate buffer), so the common
        case — one exchange — returns the very object the socket filled. With ``to_end``,
        ``length`` is only an upper bound: the read stops at the end of the file, and a file
        larger than ``offset + length`` is an error before its body is read.
        """
        end = offset + length
        limit = end if to_end else None
        pieces: list[bytes] = []
        done = 0
        attempt = 0
        hops = 0
        refusals = 0
        # the target this range was redirected to: (url, start, end); it serves that range only
        own: tuple[str, int, int] | None = None
        limited = 0
        started = time.monotonic()
        gate_mark = HOST_GATES.waited_here()
        while done < end - offset:
            if self._stop.is_set():
                raise StorageError(f"{self!r} is closed")
            self._check_deadline()
            start = offset + done
            if own is not None and own[1:] == (start, end):
                url, reused = own[0], False
            else:
                own = None
                url, reused = self._choose_url(state)
            trusted = self._trusts_validators(url)
            headers = {"Range": f"bytes={start}-{end - 1}"}
            with self._lock:
                if_range = if_range_validator(state.etag, state.last_modified) if trusted else None
            if if_range:
                headers["If-Range"] = if_range
            sent = time.perf_counter()
            try:
                try:
                    response = self._send(url, headers)
                    if probe:
                        self._metrics.add("lookups")
                except Retry as failure:
                    if reused:
                        REDIRECT_HOSTS.release(url)
                    failure.error.args = (f"{failure.error} (bytes {start}-{end - 1})",)
                    raise
                with response:  # released when fully read, else discarded
                    status = response.status
                    if reused:
                        self._learn_reuse(state, url, status)
                    if status in REDIRECT_STATUSES:
                        target = self._follow(state, response, url, start, end)
                        hops += 1
                        if hops > MAX_REDIRECTS:
                            raise InvalidResponse(
                                f"{state.label} bytes {start}-{end - 1}: too many redirects"
                            )
                        own = (target, start, end)
                        with self._lock:
                            state.target = target
                        continue
                    if status == 206:
                        received, failure = self._take_partial(
                            state, response, start, end, sent, limit, trusted=trusted
                        )
                        if received:
                            pieces.append(received)
                            done += len(received)
                            refusals = hops = limited = 0
                        if to_end:
                            end = self._clip_to_size(state, end)
                        if failure is None:
                            continue
                        if received:
                            # Progress made: resume from the first missing byte.
                            self._metrics.add("resumes")
                            attempt = 0
                        raise failure
                    if status == 200:
                        if to_end:
                            declared = declared_length(response.headers)
                            self._check_total(state, response, declared, limit)
                        whole = self._take_whole(state, response, start, end, probe, sent, trusted)
                        if probe:
                            return b""
                        pieces.append(whole)
                        done += len(whole)
                        refusals = hops = limited = 0
                        if to_end:
                            end = self._clip_to_size(state, end)
                        continue
                    if status == 416 and (probe or to_end):
                        total = unsatisfied_total(response.headers.get("Content-Range"))
                        read_small_body(
                            response, 64 * 1024, read_seconds=self._timeouts.read_seconds
                        )
                        if total is not None and total <= start:
                            # The file ends exactly where we are (an empty file, for a probe).
                            self._pin(state, response.headers, total, start, end, trusted=trusted)
                            break
                        raise InvalidResponse(
                            f"{state.label}: HTTP 416 for bytes {start}- of a file of "
                            f"{total if total is not None else 'unknown'} bytes"
                        )
                    if status == 403 and url != state.url and refusals < MAX_TARGET_REFUSALS:
                        # A redirect target refused: expired, or signed for another range. Ask the
                        # origin again for this very range (bounded; reset when bytes arrive).
                        read_small_body(
                            response, 64 * 1024, read_seconds=self._timeouts.read_seconds
                        )
                        with self._lock:
                            if state.target == url:
                                state.target = None
                        refusals += 1
                        own = None
                        self._metrics.add("reresolves")
                        continue
                    self._raise_for_status(state, response, start, end)
            except Retry as failure:
                if failure.quota is not None:
                    limited += 1
                    self._retrier.hold_for_quota(state.label, url, start, end, limited, failure)
                    continue
                attempt += 1
                # what failing costs, apart from the sleeps between attempts
                self._metrics.add("failed_attempt_seconds", time.perf_counter() - sent)
                # time spent waiting for a quota window is not time spent failing
                waited = HOST_GATES.waited_here() - gate_mark
                self._retrier.after_failure(
                    state.label, start, end, attempt, started + waited, failure
                )
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    # ------------------------------------------------------------------ redirect targets

    def _choose_url(self, state: _FileState) -> tuple[str, bool]:
        """(URL to send a new range to, whether it is a cached target reused for it)."""
        with self._lock:
            target = state.target
        if (
            target is not None
            and target_is_fresh(target, time.time())
            and REDIRECT_HOSTS.may_reuse(target)
        ):
            return target, True
        return state.url, False

    def _learn_reuse(self, state: _FileState, target: str, status: int) -> None:
        """Report how a host answered a target reused for another range (see _redirects)."""
        if status == 403:
            self._metrics.add("target_refusals")
        if REDIRECT_HOSTS.learn(target, status):
            logger.info(
                "%s: redirect targets on %s are signed per range; every range on that "
                "host is now resolved through %s",
                state.label,
                urllib.parse.urlsplit(target).netloc,
                urllib.parse.urlsplit(state.url).netloc,
            )

    def _follow(self, state: _FileState, response: Response, url: str, start: int, end: int) -> str:
        """The checked absolute target of a redirect answer (its body drained)."""
        headers = response.headers
        target = self._redirect_target(response, url, f"{state.label} bytes {start}-{end - 1}")
        self._metrics.add("redirects")
        if url == state.url or self._trusts_validators(url):
            self._on_resolve(state, headers, start, end)
        return target

    def _redirect_target(self, response: Response, url: str, where: str) -> str:
        """Every redirect goes through here (ranges and documents): its small body drained so
        the connection is reused, its ``Location`` checked and made absolute."""
        location = response.headers.get("Location")
        read_small_body(response, 64 * 1024, read_seconds=self._timeouts.read_seconds)
        try:
            return redirect_target(url, location)
        except AnswerError as error:
            raise InvalidResponse(f"{where}: {error}") from None

    def _on_resolve(
        self, state: _FileState, headers: Mapping[str, str], start: int, end: int
    ) -> None:
        """The origin redirected the file: subclasses read what it says of the file's identity
        (the Hub: ``X-Linked-Size``, ``X-Linked-Etag``). Plain HTTP: nothing."""

    def _trusts_validators(self, url: str) -> bool:
        """Whether ETag / Last-Modified in answers from ``url`` identify the file's version.

        Plain HTTP: every answer's (the file is pinned on first sight). The Hub overrides it:
        its CDN hosts' validators differ between hosts for the very same bytes.
        """
        return True

    def _take_partial(
        self,
        state: _FileState,
        response: Response,
        start: int,
        end: int,
        sent: float,
        limit: int | None = None,
        *,
        trusted: bool = True,
    ) -> tuple[bytes, Retry | None]:
        """Check a 206 and read its body: (bytes received, failure or None)."""
        where = f"{state.label} bytes {start}-{end - 1}"
        try:
            answered = check_partial(response.headers.get("Content-Range"), start, end)
        except AnswerError as error:
            return b"", Retry(InvalidResponse(f"{where}: {error}"))
        self._pin(state, response.headers, answered.total, start, end, trusted=trusted)
        self._check_total(state, response, answered.total, limit)
        expected = answered.length
        try:
            check_partial_framing(response.headers, expected)
        except AnswerError as error:
            return b"", Retry(InvalidResponse(f"{where}: {error}"))
        encoding = body_encoding(response.headers)
        if encoding is not None:
            raise InvalidResponse(f"{where}: body sent with Content-Encoding {encoding!r}")
        received, failure = self._read_body(response, expected, where, sent)
        return received, failure

    def _take_whole(
        self,
        state: _FileState,
        response: Response,
        start: int,
        end: int,
        probe: bool,
        sent: float,
        trusted: bool = True,
    ) -> bytes:
        """A 200 to a range request: a changed file (If-Range) or a server ignoring ranges."""
        where = f"{state.label} bytes {start}-{end - 1}"
        total = declared_length(response.headers)
        self._pin(state, response.headers, total, start, end, trusted=trusted)
        if probe:
            if total is None:
                raise RangeNotSupported(
                    f"{where}: server ignores Range and sends no Content-Length"
                )
            return b""
        if start > self._max_skip_bytes:
            raise RangeNotSupported(
                f"{where}: server ignores Range (HTTP 200); reaching byte {start} would mean "
                f"streaming past more than max_skip_bytes={self._max_skip_bytes}"
            )
        self._metrics.add("range_ignored")
        skipped = skip_body(
            response, start, where, self._metrics, read_seconds=self._timeouts.read_seconds
        )
        if skipped < start:
            raise InvalidResponse(f"{where}: file ends at byte {skipped}")
        stop = end if total is None else min(end, total)
        received, failure = self._read_body(response, stop - start, where, sent)
        if failure is not None:
            raise failure
        return received

    def _check_total(
        self, state: _FileState, response: Response, total: int | None, limit: int | None
    ) -> None:
        if limit is not None and total is not None and total > limit:
            raise InvalidResponse(
                f"{state.label}: file of {total} bytes is larger than read_file's "
                f"max_bytes={limit}; read it by ranges"
            )

    def _clip_to_size(self, state: _FileState, end: int) -> int:
        with self._lock:
            size = state.size
        return end if size is None else min(end, size)

    def _read_body(
        self, response: Response, wanted: int, where: str, sent: float
    ) -> tuple[bytes, Retry | None]:
        read_seconds = self._timeouts.read_seconds
        return read_body(
            response, wanted, where, sent, read_seconds=read_seconds, metrics=self._metrics
        )

    def _pin(
        self,
        state: _FileState,
        headers: Mapping[str, str],
        total: int | None,
        start: int,
        end: int,
        *,
        trusted: bool = True,
    ) -> None:
        """Pin size and validators at first sight; later answers must agree.

        An answer whose validators do not identify the file (``trusted=False``: a Hub CDN
        host) has only its size checked, and a different size there is a bad answer
        (:class:`InvalidResponse`), not a changed file: only the origin says that.
        """
        seen = Identity(total, headers.get("ETag"), headers.get("Last-Modified"))
        with self._lock:
            known = Identity(state.size, state.etag, state.last_modified)
            verdict = pin_identity(known, seen, trusted=trusted)
            if verdict.foreign_size is not None:
                raise InvalidResponse(
                    f"{state.label} bytes {start}-{end - 1}: a redirect target reports "
                    f"a size of {verdict.foreign_size} bytes, the origin {state.size}"
                )
            if verdict.changes:
                raise StaleSourceError(
                    f"{state.label} changed while being read (bytes {start}-{end - 1}): "
                    + ", ".join(verdict.changes)
                )
            pinned = verdict.pinned
            state.size, state.etag, state.last_modified = (
                pinned.size,
                pinned.etag,
                pinned.last_modified,
            )

    def _raise_for_status(
        self,
        state: _FileState,
        response: Response,
        start: int | None,
        end: int | None,
    ) -> None:
        status = response.status
        where = state.label
        if start is not None and end is not None:
            where = f"{where} bytes {start}-{end - 1}"
        body = read_small_body(response, 64 * 1024, read_seconds=self._timeouts.read_seconds)
        with self._lock:
            known = state.size
        raise status_failure(
            status,
            response.headers,
            body,
            where,
            retry=self._retry,
            credentials=self._credentials,
            known_size=known,
        )

    # ----------------------------------------------------------------- small documents (API)

    def _get_document(
        self, url: str, *, max_bytes: int = MAX_SMALL_BODY_BYTES
    ) -> tuple[bytes, Mapping[str, str]]:
        """GET a small whole document (API JSON), with the same retries and auth rules."""
        attempt = 0
        hops = 0
        limited = 0
        started = time.monotonic()
        gate_mark = HOST_GATES.waited_here()
        state = _FileState(url, redact_url(url))
        while True:
            if self._stop.is_set():
                raise StorageError(f"{self!r} is closed")
            self._check_deadline()
            try:
                response = self._send(url)
                self._metrics.add("lookups")
                with response:
                    status = response.status
                    if status in REDIRECT_STATUSES:
                        hops += 1
                        if hops > MAX_REDIRECTS:
                            raise InvalidResponse(f"{redact_url(url)}: too many redirects")
                        url = self._redirect_target(response, url, redact_url(url))
                        continue
                    if status == 200:
                        headers = response.headers
                        body = read_small_body(
                            response,
                            max_bytes,
                            read_seconds=self._timeouts.read_seconds,
                            strict=True,
                            where=redact_url(url),
                        )
                        assert body is not None
                        self._metrics.add("bytes", len(body))
                        return body, headers
                    self._raise_for_status(state, response, None, None)
            except Retry as failure:
                if failure.quota is not None:
                    limited += 1
                    self._retrier.hold_for_quota(state.label, url, 0, 1, limited, failure)
                    continue
                attempt += 1
                waited = HOST_GATES.waited_here() - gate_mark
                self._retrier.after_failure(state.label, 0, 1, attempt, started + waited, failure)


def _count_connect(metrics: Metrics, seconds: float) -> None:
    """The transport's ``on_connect``: it counts into the reader's metrics, never through
    the reader (the reader holds the transport; a reference back would be a cycle)."""
    metrics.add("connections")
    metrics.add("connect_seconds", seconds)

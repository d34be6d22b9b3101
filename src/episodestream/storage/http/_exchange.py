"""The HTTP reader's exchanges: the request headers each URL gets, sending through the
transport, and one range read from first request to verified bytes (``_fetch``: redirects,
retries, resumption of a short body). The answers' checks are ``_answers.py``; the public
reads and their planning, ``_reader.py``."""

from __future__ import annotations

import logging
import time

from episodestream.errors import InvalidResponse, StorageError
from episodestream.storage._urls import origin_of
from episodestream.storage.http._answers import HttpAnswers
from episodestream.storage.http._body import read_small_body
from episodestream.storage.http._failures import Retry, send_failure
from episodestream.storage.http._hostgate import HOST_GATES
from episodestream.storage.http._redirects import REDIRECT_HOSTS
from episodestream.storage.http._rules import (
    REDIRECT_STATUSES,
    declared_length,
    if_range_validator,
    unsatisfied_total,
)
from episodestream.storage.http._state import (
    MAX_REDIRECTS,
    MAX_ROUTES,
    MAX_TARGET_REFUSALS,
    USER_AGENT,
    FileState,
)
from episodestream.storage.http._transport import Response, exchange_deadline

__all__ = ["HttpExchanges"]

logger = logging.getLogger(__name__)


class HttpExchanges(HttpAnswers):
    """Requests and range exchanges of :class:`~episodestream.storage.http._reader.HttpRangeReader`
    (the reader's state they use is declared on :class:`HttpAnswers`)."""

    # ------------------------------------------------------------------------- transport

    def _headers_for(self, url: str) -> dict[str, str]:
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if self._credentials and origin_of(url) == self._auth_origin:
            headers.update(self._credentials)
        return headers

    def _base_headers(self, url: str) -> dict[str, str]:
        """The headers every request to ``url`` carries, decided once per URL."""
        headers = self._headers_by_url.get(url)
        if headers is None:
            headers = self._headers_for(url)
            if len(self._headers_by_url) > MAX_ROUTES:
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

    def _probe(self, state: FileState) -> None:
        """Learn and pin size and validators with one ``bytes=0-0`` request.

        A GET rather than a HEAD: signed CDN URLs are often valid for GET only.
        """
        self._fetch(state, 0, 1, probe=True)

    def _fetch(
        self,
        state: FileState,
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

"""The HTTP reader's answers: where redirects lead and when a target is reused, checking a
partial or whole answer against what was asked and pinned (validators, totals), turning a
status into its error, and small whole documents (API answers)."""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Mapping

from episodestream.errors import InvalidResponse, RangeNotSupported, StaleSourceError, StorageError
from episodestream.storage._base import BaseRangeReader
from episodestream.storage._config import Limits, RetryPolicy, Timeouts
from episodestream.storage._urls import shown_url
from episodestream.storage.http._body import read_body, read_small_body, skip_body
from episodestream.storage.http._failures import Retrier, Retry, status_failure
from episodestream.storage.http._hostgate import HOST_GATES
from episodestream.storage.http._metrics import Metrics
from episodestream.storage.http._redirects import REDIRECT_HOSTS
from episodestream.storage.http._rules import (
    REDIRECT_STATUSES,
    AnswerError,
    Identity,
    body_encoding,
    check_partial,
    check_partial_framing,
    declared_length,
    pin_identity,
    redirect_target,
    target_is_fresh,
)
from episodestream.storage.http._state import MAX_REDIRECTS, MAX_SMALL_BODY_BYTES, FileState
from episodestream.storage.http._transport import Response, Transport

__all__ = ["HttpAnswers"]

logger = logging.getLogger(__name__)


class HttpAnswers(BaseRangeReader):
    """Answer handling of :class:`~episodestream.storage.http._reader.HttpRangeReader`.

    The state it works on is the reader's, declared here and set up by the reader's
    ``__init__`` and ``_init_runtime``; ``_send`` is :class:`HttpExchanges`'.
    """

    _auth_origin: tuple[str, str, int]
    _credentials: dict[str, str]
    _headers_by_url: dict[str, dict[str, str]]
    _limits: Limits
    _lock: threading.Lock
    _max_skip_bytes: int
    _metrics: Metrics
    _retrier: Retrier
    _retry: RetryPolicy
    _stop: threading.Event
    _timeouts: Timeouts
    _transport: Transport

    def _send(self, url: str, extra: dict[str, str] | None = None) -> Response:
        raise NotImplementedError  # HttpExchanges sends

    # ------------------------------------------------------------------ redirect targets

    def _choose_url(self, state: FileState) -> tuple[str, bool]:
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

    def _learn_reuse(self, state: FileState, target: str, status: int) -> None:
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

    def _follow(self, state: FileState, response: Response, url: str, start: int, end: int) -> str:
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
        self, state: FileState, headers: Mapping[str, str], start: int, end: int
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
        state: FileState,
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
        state: FileState,
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
        self, state: FileState, response: Response, total: int | None, limit: int | None
    ) -> None:
        if limit is not None and total is not None and total > limit:
            raise InvalidResponse(
                f"{state.label}: file of {total} bytes is larger than read_file's "
                f"max_bytes={limit}; read it by ranges"
            )

    def _clip_to_size(self, state: FileState, end: int) -> int:
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
        state: FileState,
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
        state: FileState,
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
        state = FileState(url, shown_url(url))
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
                            raise InvalidResponse(f"{shown_url(url)}: too many redirects")
                        url = self._redirect_target(response, url, shown_url(url))
                        continue
                    if status == 200:
                        headers = response.headers
                        body = read_small_body(
                            response,
                            max_bytes,
                            read_seconds=self._timeouts.read_seconds,
                            strict=True,
                            where=shown_url(url),
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

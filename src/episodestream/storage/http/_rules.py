"""The HTTP reader's rules, apart from any socket: what an answer means and what to do with it.

Pure functions over header values and numbers — no I/O, no threads, no clock (callers pass
``now``) — so each rule is tested alone, table by table (``tests/unit/test_storage_http_rules.py``):

- ``Content-Range`` of a 206 and of a 416 (:func:`parse_content_range`,
  :func:`unsatisfied_total`), and whether a 206 answers the range asked (:func:`check_partial`);
- a file's identity (size, ETag, Last-Modified): pinned at first sight, later answers compared
  with it (:func:`pin_identity`), and the validator sent back as ``If-Range``
  (:func:`if_range_validator`);
- splitting one long range into parallel parts and coalescing nearby ranges of one file
  (:func:`split_range`, :func:`coalesce_ranges`);
- redirect targets: a ``Location`` is checked and made absolute in one place
  (:func:`redirect_target`); a cached signed target is reused only while it is fresh
  (:func:`target_is_fresh`).

Errors are :class:`AnswerError` carrying the text the reader puts after the file and range it
names; the reader decides whether a failure is retried.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from episodestream.storage._urls import shown_url
from episodestream.storage.http._redirects import signed_url_expiry

__all__ = [
    "EXPIRY_MARGIN_SECONDS",
    "REDIRECT_STATUSES",
    "AnswerError",
    "ContentRange",
    "Identity",
    "PinVerdict",
    "body_encoding",
    "check_partial",
    "check_partial_framing",
    "coalesce_ranges",
    "declared_length",
    "describe_error",
    "if_range_validator",
    "parse_content_range",
    "pin_identity",
    "redirect_target",
    "split_range",
    "target_is_fresh",
    "unsatisfied_total",
]

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# A cached target this close to the expiry its query string announces is not reused.
EXPIRY_MARGIN_SECONDS = 2.0

_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)
_UNSATISFIED_RANGE = re.compile(r"^\s*bytes\s+\*/(\d+)\s*$", re.IGNORECASE)
# Control characters and whitespace: URL parsing silently drops some (tab, CR, LF) and the rest
# would go out in a request line, where a CR splits it (request smuggling).
_UNSAFE_IN_URL = re.compile(r"[\x00-\x20\x7f]")
_URL_IN_TEXT = re.compile(r"https?://\S+")


class AnswerError(ValueError):
    """An answer that does not fit the request; the message says how (no file, no range)."""


@dataclass(frozen=True, slots=True)
class ContentRange:
    """``Content-Range: bytes first-last/total`` (``total`` ``None`` for ``*``)."""

    first: int
    last: int
    total: int | None

    @property
    def length(self) -> int:
        return self.last - self.first + 1


def parse_content_range(value: str | None) -> ContentRange | None:
    """The satisfied range a 206 announces; ``None`` when absent or malformed."""
    match = _CONTENT_RANGE.match(value or "")
    if match is None:
        return None
    total = None if match.group(3) == "*" else int(match.group(3))
    return ContentRange(int(match.group(1)), int(match.group(2)), total)


def unsatisfied_total(value: str | None) -> int | None:
    """The file size a 416 announces (``bytes */total``); ``None`` when it says none."""
    match = _UNSATISFIED_RANGE.match(value or "")
    return int(match.group(1)) if match else None


def declared_length(headers: Mapping[str, str]) -> int | None:
    """``Content-Length`` when it is a plain non-negative integer, else ``None``."""
    declared = headers.get("Content-Length")
    return int(declared) if declared is not None and declared.strip().isdigit() else None


def check_partial(content_range: str | None, start: int, end: int) -> ContentRange:
    """The ``Content-Range`` of a 206 to ``Range: bytes=start-(end-1)``, checked.

    It must start where asked and end inside the range (a shorter answer is resumed from its
    end); anything else — another range, an inverted one, past the end — is an
    :class:`AnswerError`.
    """
    parsed = parse_content_range(content_range)
    if parsed is None:
        raise AnswerError(f"206 with Content-Range {content_range or ''!r}")
    if parsed.first != start or parsed.last < parsed.first or parsed.last > end - 1:
        raise AnswerError(f"server answered Content-Range {content_range!r}")
    if parsed.total is not None and parsed.last >= parsed.total:
        raise AnswerError(f"server answered Content-Range {content_range!r}")
    return parsed


def check_partial_framing(headers: Mapping[str, str], expected: int) -> None:
    """A 206's ``Content-Length`` (when sent) must equal its ``Content-Range`` span."""
    declared = headers.get("Content-Length")
    if declared is not None and declared.strip() != str(expected):
        raise AnswerError(
            f"Content-Length {declared} does not match Content-Range "
            f"{headers.get('Content-Range', '')!r}"
        )


def body_encoding(headers: Mapping[str, str]) -> str | None:
    """The ``Content-Encoding`` of a body that is not the bytes themselves; ``None`` if it is."""
    encoding = (headers.get("Content-Encoding") or "identity").strip().lower()
    return None if encoding in ("identity", "") else encoding


# ----------------------------------------------------------------------------- identity


@dataclass(frozen=True, slots=True)
class Identity:
    """What identifies one version of a file: size and validators (any may be unknown)."""

    size: int | None = None
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True, slots=True)
class PinVerdict:
    """The outcome of comparing an answer with a pinned identity.

    ``pinned``: the identity to keep (unknown fields filled from the answer); ``changes``: why
    the file is not the one pinned (``"size 10 -> 12"``, ``"ETag "a" -> "b""``), empty when it
    is; ``foreign_size``: a size from an answer whose validators are not trusted (a CDN host)
    that differs from the pinned one — a bad answer, not a changed file.
    """

    pinned: Identity
    changes: tuple[str, ...] = ()
    foreign_size: int | None = None


def pin_identity(known: Identity, seen: Identity, *, trusted: bool = True) -> PinVerdict:
    """Compare what an answer says (``seen``) with what was pinned (``known``).

    Trusted answers (the origin) identify the file: a different size, a different ETag, or —
    only when the two have no ETags to compare — a different Last-Modified is a change. An
    untrusted answer (a CDN host, whose validators differ between hosts for the same bytes)
    has only its size compared and its validators ignored. Nothing is pinned over a change.
    """
    etag = seen.etag if trusted else None
    last_modified = seen.last_modified if trusted else None
    total = seen.size
    if total is not None and known.size is not None and total != known.size and not trusted:
        return PinVerdict(known, foreign_size=total)
    changes: list[str] = []
    if total is not None and known.size is not None and total != known.size:
        changes.append(f"size {known.size} -> {total}")
    if etag and known.etag and etag != known.etag:
        changes.append(f"ETag {known.etag} -> {etag}")
    elif (
        last_modified
        and known.last_modified
        and last_modified != known.last_modified
        and not (etag and known.etag)
    ):
        changes.append(f"Last-Modified {known.last_modified} -> {last_modified}")
    if changes:
        return PinVerdict(known, tuple(changes))
    pinned = Identity(
        known.size if known.size is not None else total,
        known.etag if known.etag is not None else (etag or None),
        known.last_modified if known.last_modified is not None else (last_modified or None),
    )
    return PinVerdict(pinned)


def if_range_validator(etag: str | None, last_modified: str | None) -> str | None:
    """The validator to send as ``If-Range``: a strong ETag, else Last-Modified (RFC 9110
    13.1.5 forbids a weak ETag there); ``None`` when there is neither."""
    if etag and not etag.startswith("W/"):
        return etag
    return last_modified or None


# ----------------------------------------------------------------------- ranges: planning


def split_range(offset: int, length: int, threshold: int, part: int) -> list[tuple[int, int]]:
    """``[(start, size)]``: one range as it is, or, longer than ``threshold`` (0: never), in
    even parts of at most ``part`` bytes, so the last one is not a straggler."""
    if threshold == 0 or length <= threshold:
        return [(offset, length)]
    count = -(-length // part)
    even = -(-length // count)
    return [(offset + i * even, min(even, length - i * even)) for i in range(count)]


def coalesce_ranges(
    spans: Sequence[tuple[int, int]], gap: int, ceiling: int
) -> list[tuple[int, int, list[int]]]:
    """Merge ``[(start, end)]`` ranges of one file into ``[(start, end, member indices)]``.

    Ranges (in start order) join the previous group when they begin at most ``gap`` bytes
    after its end (overlapping and touching ranges always qualify) and the group stays within
    ``ceiling`` bytes; ``gap < 0`` merges nothing. Indices refer to ``spans``.
    """
    ordered = sorted(range(len(spans)), key=lambda i: spans[i])
    merged: list[tuple[int, int, list[int]]] = []
    for index in ordered:
        start_i, end_i = spans[index]
        if merged and gap >= 0:
            start, end, members = merged[-1]
            new_end = max(end, end_i)
            if start_i - end <= gap and new_end - start <= ceiling:
                merged[-1] = (start, new_end, [*members, index])
                continue
        merged.append((start_i, end_i, [index]))
    return merged


# ----------------------------------------------------------------------------- redirects


def redirect_target(url: str, location: str | None) -> str:
    """The absolute URL a redirect from ``url`` points at, or :class:`AnswerError`.

    Refused: no ``Location``; one with control characters or whitespace (checked before any
    parsing, which would drop some of them silently); a target that is not http(s), names no
    host or an invalid port (``http://host:99999/``).
    """
    if not location:
        raise AnswerError("redirect without Location")
    if _UNSAFE_IN_URL.search(location):
        raise AnswerError(
            f"redirect Location with control characters or whitespace {shown_url(location)!r}"
        )
    try:
        target = urllib.parse.urljoin(url, location)
        parts = urllib.parse.urlsplit(target)
    except ValueError as error:  # e.g. an invalid IPv6 literal
        raise AnswerError(f"redirect to an invalid URL {shown_url(location)!r}") from error
    if parts.scheme not in ("http", "https"):
        raise AnswerError(f"redirect to a non-HTTP URL {shown_url(target)!r}")
    try:
        parts.port  # noqa: B018 - raises on a port out of range or not a number
    except ValueError as error:
        raise AnswerError(
            f"redirect to a URL with an invalid port {shown_url(target)!r}"
        ) from error
    if not parts.hostname:
        raise AnswerError(f"redirect to a URL without a host {shown_url(target)!r}")
    return target


def target_is_fresh(target: str, now: float, margin_seconds: float = EXPIRY_MARGIN_SECONDS) -> bool:
    """Whether a cached redirect target may still be sent a request: its query string
    announces no expiry, or one more than ``margin_seconds`` after ``now`` (epoch seconds)."""
    expiry = signed_url_expiry(target)
    return expiry is None or expiry - now > margin_seconds


def describe_error(error: BaseException) -> str:
    """A short description of a transport error, without URLs (they may carry signatures)."""
    reason = getattr(error, "reason", None)
    base = reason if isinstance(reason, BaseException) else error
    text = _URL_IN_TEXT.sub("<url>", str(base))
    return f"{type(base).__name__}: {text}" if text else type(base).__name__

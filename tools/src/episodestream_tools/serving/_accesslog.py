"""The access log our private nginx writes, and a parser for it.

One line per request, tab-separated, in the order of :data:`ACCESS_LOG_FIELDS`. nginx escapes
``"``, ``\\`` and bytes outside printable ASCII as ``\\xHH`` (so a tab inside a value can never
split a line) and writes ``-`` for an empty value.
"""

from __future__ import annotations

import collections
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from episodestream.errors import ServingError
from episodestream.helpers import FrozenDict

__all__ = [
    "ACCESS_LOG_FIELDS",
    "AccessLogRecord",
    "AccessSummary",
    "parse_access_log_line",
    "read_access_log",
    "summarize_access",
]

# (record field, nginx variable) in log order; the nginx log_format is generated from this.
ACCESS_LOG_FIELDS: tuple[tuple[str, str], ...] = (
    ("time_s", "$msec"),
    ("remote_addr", "$remote_addr"),
    ("method", "$request_method"),
    ("uri", "$request_uri"),
    ("status", "$status"),
    ("range_header", "$http_range"),
    ("content_range", "$sent_http_content_range"),
    ("body_bytes", "$body_bytes_sent"),
    ("sent_bytes", "$bytes_sent"),
    ("request_bytes", "$request_length"),
    ("request_time_s", "$request_time"),
    ("connection", "$connection"),
    ("connection_requests", "$connection_requests"),
    ("etag", "$sent_http_etag"),
    ("user_agent", "$http_user_agent"),
)

_ESCAPE = re.compile(rb"\\x([0-9A-Fa-f]{2})")


def access_log_format() -> str:
    """The body of nginx's ``log_format`` directive for :data:`ACCESS_LOG_FIELDS`."""
    return "\\t".join(variable for _, variable in ACCESS_LOG_FIELDS)


@dataclass(frozen=True, slots=True)
class AccessLogRecord:
    """One request as nginx logged it (after the response was sent).

    ``range_header``, ``content_range``, ``etag`` and ``user_agent`` are ``None`` when the
    request or reply had no such header. ``body_bytes`` counts the body only; ``sent_bytes``
    includes the status line and headers. ``connection`` is nginx's connection serial number,
    so distinct values count TCP connections.
    """

    time_s: float
    remote_addr: str
    method: str
    uri: str
    status: int
    range_header: str | None
    content_range: str | None
    body_bytes: int
    sent_bytes: int
    request_bytes: int
    request_time_s: float
    connection: int
    connection_requests: int
    etag: str | None
    user_agent: str | None


def _unescape(value: bytes) -> str | None:
    if value == b"-":
        return None
    return _ESCAPE.sub(lambda m: bytes([int(m.group(1), 16)]), value).decode(
        "utf-8", errors="replace"
    )


def parse_access_log_line(line: str | bytes) -> AccessLogRecord:
    """Parse one access-log line; raises :class:`ServingError` naming the line when malformed."""
    raw = line.encode("utf-8", errors="surrogateescape") if isinstance(line, str) else line
    parts = raw.rstrip(b"\r\n").split(b"\t")
    if len(parts) != len(ACCESS_LOG_FIELDS):
        raise ServingError(
            f"access-log line has {len(parts)} fields, expected {len(ACCESS_LOG_FIELDS)}: "
            f"{raw[:200]!r}"
        )
    text = [_unescape(part) for part in parts]
    try:
        return AccessLogRecord(
            time_s=float(text[0] or "nan"),
            remote_addr=text[1] or "",
            method=text[2] or "",
            uri=text[3] or "",
            status=int(text[4] or ""),
            range_header=text[5],
            content_range=text[6],
            body_bytes=int(text[7] or "0"),
            sent_bytes=int(text[8] or "0"),
            request_bytes=int(text[9] or "0"),
            request_time_s=float(text[10] or "0"),
            connection=int(text[11] or ""),
            connection_requests=int(text[12] or ""),
            etag=text[13],
            user_agent=text[14],
        )
    except ValueError as error:
        raise ServingError(f"malformed access-log line ({error}): {raw[:200]!r}") from error


def read_access_log(
    path: str | os.PathLike[str], since: int = 0
) -> tuple[list[AccessLogRecord], int]:
    """Records of the complete lines from byte offset ``since`` on, and the offset after them.

    A trailing line without its newline (nginx still writing it) is left for the next call.
    """
    try:
        with Path(path).open("rb") as file:
            file.seek(since)
            data = file.read()
    except FileNotFoundError:
        return [], since
    except OSError as error:
        raise ServingError(f"cannot read access log {os.fspath(path)!r}: {error}") from error
    end = data.rfind(b"\n") + 1
    records = [parse_access_log_line(line) for line in data[:end].splitlines() if line]
    return records, since + end


@dataclass(frozen=True, slots=True)
class AccessSummary:
    """Totals over access-log records (what a benchmark reports per track)."""

    requests: int
    body_bytes: int
    sent_bytes: int
    connections: int
    status_counts: Mapping[int, int]  # read-only (FrozenDict)


def summarize_access(records: Iterable[AccessLogRecord]) -> AccessSummary:
    """Count requests, bytes, distinct connections and statuses."""
    requests = body = sent = 0
    connections: set[int] = set()
    statuses: collections.Counter[int] = collections.Counter()
    for record in records:
        requests += 1
        body += record.body_bytes
        sent += record.sent_bytes
        connections.add(record.connection)
        statuses[record.status] += 1
    return AccessSummary(
        requests=requests,
        body_bytes=body,
        sent_bytes=sent,
        connections=len(connections),
        status_counts=FrozenDict(sorted(statuses.items())),
    )

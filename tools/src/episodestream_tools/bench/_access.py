"""Server-side figures from our nginx's access log, for one phase of the benchmark."""

from __future__ import annotations

import collections
import os
import re
import time
import urllib.parse
from typing import Any

from episodestream_tools.serving import AccessLogRecord, read_access_log

__all__ = ["AccessLog"]

# nginx writes a line just after replying: wait until the log stops growing, at most this long
_SETTLE_MAX_S = 3.0
_SETTLE_QUIET_S = 0.25
_RANGE = re.compile(r"bytes=(\d+)-(\d+)")


class AccessLog:
    """Reads the access-log records of one dataset root (by URL path) since a mark."""

    def __init__(self, path: str | os.PathLike[str], root_url: str) -> None:
        self.path = os.fspath(path)
        prefix = urllib.parse.urlsplit(root_url).path.rstrip("/")
        self._prefix = prefix + "/"

    def mark(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

    def records(self, since: int) -> list[AccessLogRecord]:
        """This root's records after ``since``, once nginx has finished writing them."""
        deadline = time.monotonic() + _SETTLE_MAX_S
        size = -1
        while time.monotonic() < deadline:
            current = self.mark()
            if current == size:
                break
            size = current
            time.sleep(_SETTLE_QUIET_S)
        records, _ = read_access_log(self.path, since)
        return [r for r in records if urllib.parse.unquote(r.uri).startswith(self._prefix)]

    def relative(self, record: AccessLogRecord) -> str:
        path = urllib.parse.unquote(urllib.parse.urlsplit(record.uri).path)
        return path[len(self._prefix) :]


def range_length(record: AccessLogRecord) -> int | None:
    """Bytes asked for by a single ``Range: bytes=a-b`` header, else None."""
    if not record.range_header:
        return None
    match = _RANGE.fullmatch(record.range_header.strip())
    return None if match is None else int(match.group(2)) - int(match.group(1)) + 1


def range_start(record: AccessLogRecord) -> int | None:
    """First byte of a single ``Range: bytes=a-b`` header, else None."""
    if not record.range_header:
        return None
    match = _RANGE.fullmatch(record.range_header.strip())
    return None if match is None else int(match.group(1))


def summarize(log: AccessLog, records: list[AccessLogRecord]) -> dict[str, Any]:
    """Requests by kind (video ranges, 1-byte probes, other files), statuses, bytes, times."""
    kinds: collections.Counter[str] = collections.Counter()
    statuses: collections.Counter[int] = collections.Counter()
    video_body = 0
    body = sent = 0
    times: list[float] = []
    connections: set[int] = set()
    for record in records:
        relative = log.relative(record)
        length = range_length(record)
        if length == 1:
            kind = "probe"
        elif relative.startswith("videos/"):
            kind = "video_range" if length is not None else "video_whole"
            video_body += record.body_bytes
        elif relative.startswith("data/"):
            kind = "data"
        else:
            kind = "meta"
        kinds[kind] += 1
        statuses[record.status] += 1
        body += record.body_bytes
        sent += record.sent_bytes
        times.append(record.request_time_s)
        connections.add(record.connection)
    n = len(records)
    return {
        "requests": n,
        "requests_by_kind": dict(sorted(kinds.items())),
        "status_counts": {str(k): v for k, v in sorted(statuses.items())},
        "failed_requests": sum(v for k, v in statuses.items() if k >= 400),
        "body_bytes": body,
        "sent_bytes": sent,
        "video_body_bytes": video_body,
        "connections": len(connections),
        "bytes_per_request": body / n if n else 0.0,
        "server_ms_per_request": 1000.0 * sum(times) / n if n else 0.0,
    }

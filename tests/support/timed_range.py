"""A timed HTTP range download from offset 0: what the WAN emulator's throughput test and its
benchmark both measure (the rate from the first byte to the last)."""

from __future__ import annotations

import http.client
import time
import urllib.parse
from dataclasses import dataclass

_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class TimedRange:
    status: int
    body: bytes
    started: float  # perf_counter as the request went out (the connection not yet open)
    first_byte: float  # perf_counter once the first byte of the body arrived
    finished: float  # perf_counter once the last byte arrived

    @property
    def rate(self) -> float:
        """Bytes/s from the first byte to the last (the first byte itself not counted)."""
        return (len(self.body) - 1) / (self.finished - self.first_byte)


def timed_range_get(url: str, length: int, *, timeout_s: float = 30.0) -> TimedRange:
    """GET bytes ``0..length-1`` of ``url`` on a fresh connection, timing the body."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout_s)
    try:
        started = time.perf_counter()
        conn.request("GET", parts.path, headers={"Range": f"bytes=0-{length - 1}"})
        response = conn.getresponse()
        body = bytearray(response.read(1))
        first_byte = time.perf_counter()
        chunk = bytearray(_CHUNK)
        while (n := response.readinto(chunk)) > 0:
            body += chunk[:n]
        finished = time.perf_counter()
    finally:
        conn.close()
    return TimedRange(response.status, bytes(body), started, first_byte, finished)

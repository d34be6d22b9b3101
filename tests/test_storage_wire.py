"""Hardening of the HTTP/1.1 transport: ambiguous framing, unsafe redirects, high descriptors."""

from __future__ import annotations

import random

import pytest

from episodestream import InvalidResponse
from episodestream.storage import HttpRangeReader, Limits, RetryPolicy, Timeouts
from episodestream.storage._wire import WireError, WirePool
from tests.plugins.storage import Fault, FaultServer

pytestmark = pytest.mark.timeout(60)

DATA = random.Random(3).randbytes(50_000)
PATH = "videos/file-000.mp4"
FAST = RetryPolicy(max_attempts=2, backoff_initial_seconds=0.01, backoff_max_seconds=0.02)


def _reader(server: FaultServer) -> HttpRangeReader:
    return HttpRangeReader(
        server.url,
        retry=FAST,
        limits=Limits(split_threshold_bytes=0),
        timeouts=Timeouts(connect_seconds=2, read_seconds=2),
        seed=0,
    )


def _pool(server: FaultServer) -> WirePool:
    host, port = server.url.removeprefix("http://").split(":")
    return WirePool(
        "http", host, int(port), maxsize=2, connect_timeout=2, read_timeout=2, pool_timeout=2
    )


def test_differing_duplicate_content_lengths_are_rejected(fault_server: FaultServer):
    fault_server.put(PATH, DATA)
    fault_server.inject(PATH, *[Fault("conflicting_length")] * 3)
    pool = _pool(fault_server)
    try:
        # a 200 (no Range) has no Content-Range to cross-check: the transport must refuse
        with pytest.raises(WireError, match="Content-Length"):
            pool.get(f"/{PATH}", {})
    finally:
        pool.close()
    with _reader(fault_server) as reader:
        with pytest.raises(InvalidResponse, match="Content-Length"):
            reader.read(PATH, 0, 1000)
        # the pool stayed sane: the next (well-framed) answer is read exactly
        assert reader.read(PATH, 100, 1000) == DATA[100:1100]

"""Hardening of the HTTP/1.1 transport: ambiguous framing, unsafe redirects, high descriptors."""

from __future__ import annotations

import fcntl
import random
import socket

import pytest

from episodestream import InvalidResponse
from episodestream.storage import HttpRangeReader, Limits, RetryPolicy, Timeouts
from episodestream.storage.http._wire import WireError, WirePool, _Connection
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


@pytest.mark.parametrize("location", ["/moved/x\rX-Injected: 1", "/moved/a b", "/moved/\x01"])
def test_redirect_location_with_control_characters_or_spaces_is_refused(
    fault_server: FaultServer, location: str
):
    fault_server.put(PATH, DATA)
    fault_server.put("moved/x", DATA)
    fault_server.inject(PATH, Fault("redirect", location=location))
    with _reader(fault_server) as reader, pytest.raises(InvalidResponse, match="Location"):
        reader.read(PATH, 0, 10)
    assert [r.path for r in fault_server.requests] == [f"/{PATH}"]  # never followed


def test_the_transport_refuses_to_send_an_unsafe_request_target(fault_server: FaultServer):
    pool = _pool(fault_server)
    try:
        for target in ("/a\rX-Injected: 1", "/a b", "/a\n"):
            with pytest.raises(ValueError, match="request target"):
                pool.get(target, {})
        with pytest.raises(ValueError, match="header"):
            pool.get("/a", {"X-Test": "v\r\nX-Injected: 1"})
    finally:
        pool.close()
    assert not fault_server.requests


def test_idle_liveness_check_works_for_descriptors_above_1024():
    ours, peer = socket.socketpair()
    high = fcntl.fcntl(ours.fileno(), fcntl.F_DUPFD, 1500)  # select() cannot watch fd >= 1024
    ours.close()
    connection = _Connection(socket.socket(fileno=high), read_timeout=5.0)
    try:
        assert connection.sock.fileno() >= 1024
        assert not connection.dropped()  # alive and quiet: kept
        peer.close()
        assert connection.dropped()  # closed by the other end: replaced
    finally:
        connection.close()

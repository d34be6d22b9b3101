"""The WAN emulator: it delays (at least the RTT, half each way), it caps (never faster than
the setting, either direction), bytes stay exact and in order, buffers stay bounded, and close
leaves no thread or connection behind.

The timing checks are one-sided, bounds a loaded machine cannot break (load only adds delay
and slows transfers). How close the timing comes to the settings is measured, as ratios, by
``python -m benchmarks.wan``.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import os
import socket
import statistics
import threading
import time
import urllib.parse
from pathlib import Path

import numpy as np
import pytest

from episodestream.errors import ServingError
from episodestream_tools.serving import NginxServer, WanEmulator, WanSettings, serve_dataset
from episodestream_tools.serving._loop import LoopThread
from tests.plugins.serving import run_clients
from tests.support.timed_range import timed_range_get

MIB = 1024 * 1024
BIG_BYTES = 16 * MIB + 123
# asyncio may fire a timer up to its clock resolution early; nginx stamps to the millisecond
EARLY_SLACK = 0.05
# a cap is enforced over the transfer, not per packet: a short burst is allowed
CAP_SLACK = 0.20


@pytest.fixture(scope="module")
def big_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wan-big")
    data = np.random.default_rng(11).integers(0, 256, BIG_BYTES, dtype=np.uint8).tobytes()
    (folder / "big.bin").write_bytes(data)
    return folder


@pytest.fixture(scope="module")
def big_data(big_dir: Path) -> bytes:
    return (big_dir / "big.bin").read_bytes()


def _connect(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)


def _get(conn: http.client.HTTPConnection, url: str, range_header: str) -> tuple[int, bytes]:
    conn.request("GET", urllib.parse.urlsplit(url).path, headers={"Range": range_header})
    response = conn.getresponse()
    return response.status, response.read()


def _at_least(measured: float, setting: float) -> bool:
    return measured >= setting * (1 - EARLY_SLACK)


def _at_most(measured: float, setting: float) -> bool:
    return measured <= setting * (1 + CAP_SLACK)


def test_round_trip_is_delayed_by_the_rtt(wan_emulator_factory, http_publish, big_dir, big_data):
    rtt_s = 0.100
    emulator = wan_emulator_factory(rtt_ms=rtt_s * 1000)
    url = emulator.rebase_url(f"{http_publish(big_dir)}/big.bin")
    conn = _connect(url)
    assert _get(conn, url, "bytes=0-99") == (206, big_data[:100])  # opens the connection
    kept_alive = []
    for i in range(5):
        started = time.perf_counter()
        status, body = _get(conn, url, f"bytes={i * 1000}-{i * 1000 + 99}")
        kept_alive.append(time.perf_counter() - started)
        assert (status, body) == (206, big_data[i * 1000 : i * 1000 + 100])
    conn.close()
    assert _at_least(min(kept_alive), rtt_s), kept_alive
    # a fresh connection first pays the handshake (connect_rtts=1), then the request's RTT
    fresh = []
    for _ in range(3):
        conn = _connect(url)
        conn.connect()
        started = time.perf_counter()
        conn.request("GET", urllib.parse.urlsplit(url).path, headers={"Range": "bytes=0-9"})
        response = conn.getresponse()
        fresh.append(time.perf_counter() - started)
        assert response.read() == big_data[:10]
        conn.close()
    assert _at_least(min(fresh), 2 * rtt_s), fresh


def test_delay_is_half_the_rtt_in_each_direction(
    wan_emulator_factory, http_server: NginxServer, http_publish, big_dir
):
    emulator = wan_emulator_factory(rtt_ms=100)
    url = emulator.rebase_url(f"{http_publish(big_dir)}/big.bin")
    conn = _connect(url)
    _get(conn, url, "bytes=0-0")
    sent, received = [], []
    mark = http_server.log_mark()
    for i in range(5):
        sent.append(time.time())
        _get(conn, url, f"bytes={i}-{i + 9}")
        received.append(time.time())
    conn.close()
    # nginx stamps each log line (to the millisecond) as it finishes a reply
    logged = [r.time_s for r in http_server.wait_for_records(5, since=mark)]
    upstream = statistics.median(log - s for log, s in zip(logged, sent, strict=True))
    downstream = statistics.median(r - log for log, r in zip(logged, received, strict=True))
    # each way is delayed (not the whole RTT on one side)
    assert _at_least(upstream, 0.050), (upstream, downstream)
    assert _at_least(downstream, 0.050), (upstream, downstream)


def test_throughput_is_capped_and_bytes_exact_despite_delay(
    wan_emulator_factory, http_publish, big_dir, big_data
):
    rate = 8 * MIB
    emulator = wan_emulator_factory(rtt_ms=100, bandwidth_mibps=rate / MIB)
    url = emulator.rebase_url(f"{http_publish(big_dir)}/big.bin")
    got = timed_range_get(url, 16 * MIB)
    assert got.status == 206
    assert got.body == big_data[: 16 * MIB]  # exact, in order
    # the delay only adds latency: handshake + request round trip before the first byte
    handshake_s = 0.2
    assert got.first_byte - got.started >= handshake_s
    # paced from the earliest moment the first byte can leave, not from when this thread
    # read it (a client that reads late sees what was due meanwhile arrive in one burst)
    paced = len(got.body) / (got.finished - got.started - handshake_s)
    assert _at_most(paced, rate), paced / MIB


class _Sink:
    """A plain TCP server that reads one connection to its end and times the bytes."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(10)
        self.port = self.socket.getsockname()[1]
        self.first: float | None = None
        self.last: float | None = None
        self.total = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        conn, _ = self.socket.accept()
        conn.settimeout(10)
        with conn:
            while data := conn.recv(65536):
                now = time.perf_counter()
                self.first = self.first or now
                self.last = now
                self.total += len(data)

    def close(self) -> None:
        self.thread.join(15)
        self.socket.close()


def test_upload_direction_is_capped_too():
    sink = _Sink()
    rate = 8 * MIB
    payload = bytes(range(256)) * (4 * MIB // 256)
    with WanEmulator(("127.0.0.1", sink.port), WanSettings(bandwidth_mibps=rate / MIB)) as emu:
        with socket.create_connection(("127.0.0.1", emu.port), timeout=10) as client:
            started = time.perf_counter()  # no byte can reach the sink before this
            client.sendall(payload)
            client.shutdown(socket.SHUT_WR)
            sink.close()
        stats = emu.stats()
    assert sink.total == len(payload) == stats.bytes_to_upstream
    # from the send, not from the sink's first read: a sink thread that starts reading late
    # sees the bytes due meanwhile in one burst, which the cap does not forbid
    measured = sink.total / (sink.last - started)
    assert _at_most(measured, rate), measured / MIB


def test_concurrent_connections_get_exact_bytes(
    wan_emulator_factory, http_publish, big_dir, big_data
):
    emulator = wan_emulator_factory(rtt_ms=20)
    url = emulator.rebase_url(f"{http_publish(big_dir)}/big.bin")
    before = emulator.stats()
    failures: list[str] = []

    def client(seed: int) -> None:
        rng = np.random.default_rng(seed)
        conn = _connect(url)
        for _ in range(5):
            start = int(rng.integers(0, BIG_BYTES - 1))
            end = min(BIG_BYTES, start + int(rng.integers(1, 2 * MIB)))
            status, body = _get(conn, url, f"bytes={start}-{end - 1}")
            if status != 206 or body != big_data[start:end]:
                failures.append(f"{start}-{end}: {status}, {len(body)} bytes")
        conn.close()

    run_clients(client, 8, timeout_s=60)
    assert failures == []
    assert emulator.stats().connections_opened - before.connections_opened == 8


def test_buffers_stay_bounded_when_the_client_does_not_read(
    http_server: NginxServer, http_publish, big_dir, big_data
):
    limit = 1 * MIB
    settings = WanSettings(rtt_ms=10, buffer_bytes=limit)
    path = urllib.parse.urlsplit(f"{http_publish(big_dir)}/big.bin").path
    with WanEmulator((http_server.host, http_server.port), settings) as emulator:
        client = socket.socket()
        # a small receive window that cannot auto-tune, so the kernel cannot absorb the body
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        client.settimeout(10)
        client.connect(("127.0.0.1", emulator.port))
        client.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nRange: bytes=0-\r\n\r\n".encode())
        time.sleep(0.5)  # nginx could send all 16 MiB by now; the emulator must not take it
        stalled = emulator.stats()
        # one socket read may overshoot the bound before reading pauses
        assert stalled.peak_queued_bytes <= limit + 256 * 1024, stalled
        assert stalled.bytes_to_client < BIG_BYTES // 2, stalled
        # reading resumes: every byte arrives, exact and in order
        received = bytearray()
        while b"\r\n\r\n" not in received:
            received += client.recv(65536)
        head, _, body = bytes(received).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 206")
        body = bytearray(body)
        while len(body) < BIG_BYTES and (data := client.recv(MIB)):
            body += data
        client.close()
        assert bytes(body) == big_data


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the peer ends the connection (EOF or reset) within 5 s."""
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_close_ends_connections_and_joins_thread(http_server: NginxServer, http_publish, big_dir):
    settings = WanSettings(rtt_ms=10, bandwidth_mibps=1)
    emulator = WanEmulator((http_server.host, http_server.port), settings).start()
    name = emulator.thread_name
    assert name in {t.name for t in threading.enumerate()}
    path = urllib.parse.urlsplit(f"{http_publish(big_dir)}/big.bin").path
    idle = socket.create_connection(("127.0.0.1", emulator.port), timeout=5)
    busy = socket.create_connection(("127.0.0.1", emulator.port), timeout=5)
    busy.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nRange: bytes=0-\r\n\r\n".encode())
    assert busy.recv(100).startswith(b"HTTP/1.1 206")  # mid-transfer at 1 MiB/s
    port = emulator.port
    emulator.close()
    assert name not in {t.name for t in threading.enumerate()}
    assert not emulator.running and emulator.stats().connections_active == 0
    assert _closed_by_peer(idle) and _closed_by_peer(busy)
    idle.close()
    busy.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    emulator.close()  # idempotent


def test_unreachable_upstream_closes_the_client():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead_port = unused.getsockname()[1]
    with WanEmulator(("127.0.0.1", dead_port)) as emulator:
        with socket.create_connection(("127.0.0.1", emulator.port), timeout=5) as client:
            client.sendall(b"GET / HTTP/1.1\r\n\r\n")
            assert _closed_by_peer(client)
        assert emulator.stats().connections_active == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rtt_ms": -1}, "rtt_ms"),
        ({"rtt_ms": float("nan")}, "rtt_ms"),
        ({"bandwidth_mibps": 0}, "bandwidth_mibps"),
        ({"bandwidth_mibps": float("inf")}, "bandwidth_mibps"),
        ({"connect_rtts": -0.5}, "connect_rtts"),
        ({"buffer_bytes": 1000}, "buffer_bytes"),
    ],
)
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WanSettings(**kwargs)


def test_settings_size_the_buffer_to_the_link():
    assert WanSettings().queue_limit_bytes == 16 * MIB
    # 100 MiB/s x 50 ms one way = 5 MiB in flight; the lane holds twice that
    assert WanSettings(rtt_ms=100, bandwidth_mibps=100).queue_limit_bytes >= 10 * MIB
    assert WanSettings(rtt_ms=1, bandwidth_mibps=1).queue_limit_bytes == 4 * MIB
    assert WanSettings(rtt_ms=50, bandwidth_mibps=40).describe() == (
        "rtt 50 ms, 40 MiB/s per connection"
    )


def test_emulator_refuses_a_taken_port():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        emulator = WanEmulator(("127.0.0.1", 1), port=taken.getsockname()[1])
        with pytest.raises(ServingError, match="could not listen"):
            emulator.start()
        assert not emulator.running


def test_a_listen_failing_otherwise_than_with_an_os_error_fails_start():
    async def listen(loop: asyncio.AbstractEventLoop) -> asyncio.Server:
        raise RuntimeError("no server for you")

    async def abort() -> None:
        pass

    runner = LoopThread(
        "test proxy",
        "test-proxy",
        host="127.0.0.1",
        port=0,
        start_timeout_s=30.0,
        stop_timeout_s=30.0,
        log=logging.getLogger(__name__),
    )
    with pytest.raises(ServingError, match=r"test proxy could not listen.*no server for you"):
        runner.start(listen, abort)
    assert not runner.running
    with pytest.raises(ServingError, match="not running"):
        _ = runner.port


def test_serve_dataset_serves_both_urls_and_stops_both(lerobot_fixture_root: Path):
    expected = (lerobot_fixture_root / "meta" / "info.json").read_bytes()
    with serve_dataset(lerobot_fixture_root, rtt_ms=10, bandwidth_mibps=40) as served:
        pid = served.nginx.pid
        thread = served.emulator.thread_name
        assert served.url != served.nginx_url
        for url in (served.url_for("meta/info.json"), f"{served.nginx_url}/meta/info.json"):
            conn = _connect(url)
            assert _get(conn, url, "bytes=0-") == (206, expected)
            conn.close()
        assert served.emulator.stats().bytes_to_client > len(expected)
    assert thread not in {t.name for t in threading.enumerate()}
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ValueError, match="not both"):
        serve_dataset(lerobot_fixture_root, rtt_ms=5, settings=WanSettings())

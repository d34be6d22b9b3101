"""FaultProxy: each fault kind acts on a real nginx exchange, and HttpRangeReader, through a
WAN emulator, still returns exactly the bytes asked for (or a typed error) in bounded time."""

from __future__ import annotations

import collections
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from episodestream import InvalidResponse, StorageError
from episodestream.storage import HttpRangeReader, RetryPolicy, Timeouts
from episodestream_tools.serving import NginxServer, WanEmulator, WanSettings
from tests.support.faults import (
    FAULT_KINDS,
    Fault,
    FaultProxy,
    ProxiedRequest,
    RandomFaults,
    ScriptedFaults,
)

QUICK_RETRY = RetryPolicy(backoff_initial_seconds=0.01, backoff_max_seconds=0.1)
SHORT_TIMEOUTS = Timeouts(connect_seconds=2.0, read_seconds=0.5, pool_seconds=5.0)
# for the faults that are not stalls: a read timeout no loaded machine comes near, so the
# retries and resumes counted are the injected fault's alone
LONG_TIMEOUTS = Timeouts(connect_seconds=5.0, read_seconds=5.0, pool_seconds=5.0)
# one representative of every kind; stalls outlast the reader's 0.5 s read timeout
ONE_OF_EACH = {
    "status": Fault("status", status=503, burst=2),
    "retry_after": Fault("retry_after", retry_after_s=1),
    "reset_before": Fault("reset_before"),
    "reset_body": Fault("reset_body", body_fraction=0.4),
    "truncate": Fault("truncate", body_fraction=0.7),
    "stall_headers": Fault("stall_headers", stall_s=3.0),
    "stall_body": Fault("stall_body", body_fraction=0.5, stall_s=3.0),
    "wrong_range": Fault("wrong_range", shift_bytes=7),
    "bad_content_range": Fault("bad_content_range", shift_bytes=-3),
    "ignore_range": Fault("ignore_range"),
}


@pytest.fixture(scope="module")
def payload(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    folder = tmp_path_factory.mktemp("fault-files")
    data = os.urandom(3_000_000)
    (folder / "blob.bin").write_bytes(data)
    return folder, data


@pytest.fixture(scope="module")
def proxied(
    http_server: NginxServer, payload: tuple[Path, bytes]
) -> Iterator[tuple[FaultProxy, str]]:
    folder, _ = payload
    url = http_server.publish(folder, f"fault-files-{os.getpid()}")
    with (
        FaultProxy((http_server.host, http_server.port), io_timeout_s=10.0) as proxy,
        WanEmulator(proxy.address, WanSettings(rtt_ms=2.0)) as emulator,
    ):
        yield proxy, emulator.rebase_url(url)


def test_every_fault_kind_is_covered_here() -> None:
    assert set(ONE_OF_EACH) == set(FAULT_KINDS)


@pytest.mark.parametrize("kind", sorted(ONE_OF_EACH))
def test_reader_survives_each_fault_with_exact_bytes(
    kind: str, proxied: tuple[FaultProxy, str], payload: tuple[Path, bytes]
) -> None:
    proxy, url = proxied
    _, data = payload
    fault = ONE_OF_EACH[kind]
    proxy.set_plan(ScriptedFaults(("blob.bin", fault)))
    before = len(proxy.records())
    try:
        timeouts = SHORT_TIMEOUTS if kind.startswith("stall") else LONG_TIMEOUTS
        with HttpRangeReader(url, timeouts=timeouts, retry=QUICK_RETRY, seed=1) as reader:
            started = time.monotonic()
            got = reader.read("blob.bin", 100_000, 2_000_000)
            elapsed = time.monotonic() - started
            metrics = reader.metrics()
    finally:
        proxy.set_plan(None)
    assert got == data[100_000:2_100_000]
    applied = collections.Counter(r.fault for r in proxy.records()[before:] if r.fault)
    assert applied[fault.label] == fault.burst
    if kind == "ignore_range":
        assert metrics["status_200"] == 1 and metrics["retries"] == 0
    else:
        assert metrics["retries"] >= 1
    if kind == "truncate":
        assert metrics["resumes"] == 1  # the second request asked only for the missing tail
    if kind == "reset_body":
        # a reset discards what the kernel had not handed over yet: resumed, or started over
        assert metrics["resumes"] <= 1
    if kind == "retry_after":
        assert elapsed >= 0.9  # Retry-After: 1 was honoured
    assert elapsed < 10


def test_persistent_faults_end_in_a_typed_error_naming_url_and_range(
    proxied: tuple[FaultProxy, str],
) -> None:
    proxy, url = proxied
    proxy.set_plan(ScriptedFaults(*[("blob.bin", Fault("wrong_range", shift_bytes=5))] * 3))
    try:
        with (
            HttpRangeReader(
                url,
                timeouts=SHORT_TIMEOUTS,
                retry=RetryPolicy(max_attempts=3, backoff_initial_seconds=0.01),
            ) as reader,
            pytest.raises(InvalidResponse) as caught,
        ):
            reader.read("blob.bin", 10, 1000)
    finally:
        proxy.set_plan(None)
    message = str(caught.value)
    assert "blob.bin bytes 10-1009" in message and "gave up after 3 attempt" in message


def test_random_plan_is_seeded_and_bursts_repeat_per_path() -> None:
    menu = [Fault("status", status=503, burst=3), Fault("truncate")]

    def draw(seed: int) -> list[str | None]:
        plan = RandomFaults(menu, rate=0.5, seed=seed)
        out = []
        for i in range(40):
            fault = plan.choose(ProxiedRequest("GET", f"/f{i % 3}", {}))
            out.append(None if fault is None else fault.label)
        return out

    assert draw(1) == draw(1)
    assert draw(1) != draw(2)
    plan = ScriptedFaults(("/a", Fault("status", status=503, burst=3)))
    labels = [plan.choose(ProxiedRequest("GET", p, {})) for p in ("/a", "/b", "/a", "/a", "/a")]
    assert [None if f is None else f.label for f in labels] == [
        "status_503",
        None,
        "status_503",
        "status_503",
        None,
    ]


def test_close_ends_stalled_connections_and_joins_its_thread(
    http_server: NginxServer,
) -> None:
    proxy = FaultProxy(
        (http_server.host, http_server.port),
        ScriptedFaults(("", Fault("stall_headers", stall_s=30.0))),
    ).start()
    name = f"episodestream-faults-{proxy.port}"
    client = socket.create_connection(proxy.address, timeout=5)
    client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.2)  # the proxy is now holding the connection silent
    started = time.monotonic()
    proxy.close()
    assert time.monotonic() - started < 5
    assert name not in {t.name for t in threading.enumerate()}
    client.settimeout(5)
    try:
        assert client.recv(1) == b""  # closed, not left hanging
    except ConnectionResetError:
        pass
    finally:
        client.close()


def test_reader_error_is_storage_error_when_server_always_fails(
    proxied: tuple[FaultProxy, str],
) -> None:
    proxy, url = proxied
    proxy.set_plan(RandomFaults([Fault("status", status=503)], rate=1.0, seed=0))
    try:
        with (
            HttpRangeReader(
                url, timeouts=SHORT_TIMEOUTS, retry=RetryPolicy(max_attempts=2)
            ) as reader,
            pytest.raises(StorageError, match=r"HTTP 503.*gave up after 2"),
        ):
            reader.read("blob.bin", 0, 10)
    finally:
        proxy.set_plan(None)

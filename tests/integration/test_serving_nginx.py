"""The private nginx: exact byte ranges, 416s, ETags, the access log, publishing, clean stop."""

from __future__ import annotations

import http.client
import random
import socket
import time
import urllib.parse
from pathlib import Path

import numpy as np
import psutil
import pytest

from episodestream.errors import ServingError
from episodestream_tools.serving import (
    ACCESS_LOG_FIELDS,
    NginxServer,
    parse_access_log_line,
    read_access_log,
    summarize_access,
)
from tests.plugins.serving import run_clients

BLOB_BYTES = 3 * 1024 * 1024 + 17


@pytest.fixture(scope="module")
def blob_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("nginx-blob")
    data = np.random.default_rng(7).integers(0, 256, BLOB_BYTES, dtype=np.uint8).tobytes()
    (folder / "blob.bin").write_bytes(data)
    (folder / "sub dir").mkdir()
    (folder / "sub dir" / "small.txt").write_bytes(b"hello ranges\n")
    return folder


def _connect(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)


def _get(
    conn: http.client.HTTPConnection, url: str, range_header: str | None = None
) -> tuple[int, http.client.HTTPResponse, bytes]:
    headers = {"Range": range_header} if range_header else {}
    conn.request("GET", urllib.parse.urlsplit(url).path, headers=headers)
    response = conn.getresponse()
    return response.status, response, response.read()


def _random_ranges(size: int, count: int, seed: int) -> list[tuple[str, int, int]]:
    """(Range header, first byte, end exclusive) of explicit, suffix and open-ended kinds."""
    rng = random.Random(seed)
    ranges = []
    for i in range(count):
        kind = i % 3
        if kind == 0:
            start = rng.randrange(size)
            end = min(size, start + rng.randrange(1, 300_000))
            ranges.append((f"bytes={start}-{end - 1}", start, end))
        elif kind == 1:
            length = rng.randrange(1, min(size, 200_000))
            ranges.append((f"bytes=-{length}", size - length, size))
        else:
            start = rng.randrange(size - 1000, size)
            ranges.append((f"bytes={start}-", start, size))
    return ranges


@pytest.mark.parametrize("which", ["mp4", "blob"])
def test_random_ranges_return_exact_bytes(
    which: str,
    http_publish,
    blob_dir: Path,
    lerobot_sim5_url: str,
    lerobot_fixture_root: Path,
) -> None:
    if which == "mp4":
        relative = "videos/observation.images.cam_high/chunk-000/file-001.mp4"
        local = lerobot_fixture_root / relative
        url = f"{lerobot_sim5_url}/{relative}"
    else:
        local = blob_dir / "blob.bin"
        url = f"{http_publish(blob_dir)}/blob.bin"
    data = local.read_bytes()
    conn = _connect(url)
    status, full, body = _get(conn, url)
    assert status == 200 and body == data
    etag = full.getheader("ETag")
    assert etag and etag.startswith('"')
    assert full.getheader("Last-Modified")
    assert full.getheader("Accept-Ranges") == "bytes"
    for header, start, end in _random_ranges(len(data), 60, seed=len(data)):
        status, response, body = _get(conn, url, header)
        assert status == 206, header
        assert response.getheader("Content-Range") == f"bytes {start}-{end - 1}/{len(data)}"
        assert int(response.getheader("Content-Length")) == end - start
        assert response.getheader("ETag") == etag
        assert body == data[start:end], header
    conn.close()


def test_unsatisfiable_ranges_get_416_and_overlong_ones_are_cut(
    http_publish, blob_dir: Path
) -> None:
    url = f"{http_publish(blob_dir)}/blob.bin"
    size = BLOB_BYTES
    conn = _connect(url)
    for header in (f"bytes={size}-", f"bytes={size}-{size + 10}", f"bytes={size + 5000}-"):
        status, response, _ = _get(conn, url, header)
        assert status == 416, header
        assert response.getheader("Content-Range") == f"bytes */{size}"
    # a range running past the end is satisfiable: the reply stops at the last byte
    status, response, body = _get(conn, url, f"bytes={size - 10}-{size + 100}")
    assert status == 206
    assert response.getheader("Content-Range") == f"bytes {size - 10}-{size - 1}/{size}"
    assert body == (blob_dir / "blob.bin").read_bytes()[-10:]
    conn.close()


def test_access_log_records_status_range_and_bytes(
    http_server: NginxServer, http_publish, blob_dir: Path
) -> None:
    url = f"{http_publish(blob_dir)}/blob.bin"
    mark = http_server.log_mark()
    conn = _connect(url)
    _, ok, _ = _get(conn, url, "bytes=100-1099")
    _get(conn, url, f"bytes={BLOB_BYTES}-")
    small_url = f"{http_publish(blob_dir)}/sub%20dir/small.txt"
    _get(conn, small_url)
    conn.close()
    records = http_server.wait_for_records(3, since=mark)
    assert [r.status for r in records] == [206, 416, 200]
    first, refused, whole = records
    assert first.range_header == "bytes=100-1099"
    assert first.content_range == f"bytes 100-1099/{BLOB_BYTES}"
    assert first.body_bytes == 1000 and first.sent_bytes > 1000
    assert first.etag == ok.getheader("ETag")
    assert first.uri == urllib.parse.urlsplit(url).path and first.method == "GET"
    assert refused.content_range == f"bytes */{BLOB_BYTES}" and refused.etag is None
    assert whole.range_header is None and whole.body_bytes == len(b"hello ranges\n")
    assert whole.uri.endswith("/sub%20dir/small.txt")
    # one keep-alive connection carried all three
    assert {r.connection for r in records} == {first.connection}
    assert [r.connection_requests for r in records] == [1, 2, 3]
    summary = summarize_access(records)
    assert summary.requests == 3 and summary.connections == 1
    assert summary.status_counts == {200: 1, 206: 1, 416: 1}
    assert summary.body_bytes == sum(r.body_bytes for r in records)
    # a second reader from the returned offset sees nothing new
    everything, offset = read_access_log(http_server.access_log_path, mark)
    assert everything == records and read_access_log(http_server.access_log_path, offset)[0] == []


def test_access_log_parser_unescapes_and_rejects_malformed_lines() -> None:
    fields = [
        "1700000000.123",
        "127.0.0.1",
        "GET",
        "/a/b.mp4",
        "206",
        "bytes=0-9",
        "bytes 0-9/100",
        "10",
        "250",
        "120",
        "0.004",
        "17",
        "2",
        "\\x226b0f-64\\x22",
        "-",
    ]
    assert len(fields) == len(ACCESS_LOG_FIELDS)
    record = parse_access_log_line("\t".join(fields) + "\n")
    assert record.etag == '"6b0f-64"' and record.user_agent is None
    assert (record.status, record.body_bytes, record.connection) == (206, 10, 17)
    assert record.time_s == pytest.approx(1700000000.123)
    with pytest.raises(ServingError, match="fields"):
        parse_access_log_line("only\tthree\tfields")
    with pytest.raises(ServingError, match="malformed"):
        parse_access_log_line("\t".join(["x" if i == 4 else f for i, f in enumerate(fields)]))


def test_publish_rejects_bad_names_and_conflicting_paths(
    http_server: NginxServer, tmp_path: Path, blob_dir: Path
) -> None:
    for bad in ("", "..", "a/b", ".hidden", "sp ace"):
        with pytest.raises(ServingError, match="cannot publish"):
            http_server.publish(blob_dir, bad)
    with pytest.raises(ServingError, match="no such"):
        http_server.publish(tmp_path / "missing", "missing-thing")
    url = http_server.publish(tmp_path, "conflict-test")
    assert http_server.publish(tmp_path, "conflict-test") == url  # idempotent
    with pytest.raises(ServingError, match="already published"):
        http_server.publish(blob_dir, "conflict-test")
    http_server.unpublish("conflict-test")
    conn = _connect(url)
    assert _get(conn, url + "/")[0] == 404
    conn.close()


def _nginx_children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if "nginx" in (p.name() or "")}


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_explicit_root_serves_at_slash_and_stops_cleanly(blob_dir: Path, tmp_path: Path) -> None:
    server = NginxServer(blob_dir, workers=2, workdir=tmp_path / "nginx")
    with server:
        pid = server.pid
        assert pid is not None and server.pid_file.read_text().strip() == str(pid)
        # the master writes its pid file before forking workers: give them a moment
        deadline = time.monotonic() + 5
        while len(workers := [p.pid for p in psutil.Process(pid).children()]) < 2:
            assert time.monotonic() < deadline, workers
            time.sleep(0.02)
        conn = _connect(server.url)
        status, _, body = _get(conn, server.url_for("sub dir/small.txt"), "bytes=0-4")
        assert (status, body) == (206, b"hello")
        with pytest.raises(ServingError, match="root=None"):
            server.publish(blob_dir, "x")
        # an idle keep-alive connection must not hold up the stop
    assert not server.running and server.pid is None
    assert _gone(pid) and all(_gone(w) for w in workers)
    conn.close()
    # a given workdir keeps the logs
    assert server.access_log_path.read_text().count("\n") == 1
    assert "[emerg]" not in server.error_log_path.read_text()


def test_start_fails_clearly_and_leaves_nothing(tmp_path: Path, blob_dir: Path) -> None:
    with pytest.raises(ServingError, match="not a folder"):
        NginxServer(tmp_path / "nope")
    before = _nginx_children()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = NginxServer(blob_dir, port=port)
        with pytest.raises(ServingError, match="Address already in use"):
            server.start()
        assert not server.running
    assert _nginx_children() == before
    with pytest.raises(ValueError, match="workers"):
        NginxServer(blob_dir, workers=0)


def test_many_clients_at_once_get_exact_bytes(http_publish, blob_dir: Path) -> None:
    url = f"{http_publish(blob_dir)}/blob.bin"
    data = (blob_dir / "blob.bin").read_bytes()
    failures: list[str] = []

    def client(seed: int) -> None:
        conn = _connect(url)
        for header, start, end in _random_ranges(len(data), 10, seed):
            status, _, body = _get(conn, url, header)
            if status != 206 or body != data[start:end]:
                failures.append(f"{header}: {status}")
        conn.close()

    run_clients(client, 8, timeout_s=30)
    assert failures == []

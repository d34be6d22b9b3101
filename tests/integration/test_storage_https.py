"""The native HTTP reader over TLS: exact ranges with a trusted CA, a typed error otherwise."""

from __future__ import annotations

import os
import re
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from episodestream import StorageError
from episodestream.storage import HttpRangeReader, ReadRequest

_RANGE = re.compile(r"bytes=(\d+)-(\d+)")


class _TlsRangeServer:
    def __init__(self, files: dict[str, bytes], cert: Path, key: Path) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10

            def do_GET(self) -> None:
                data = files.get(self.path.lstrip("/"))
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                match = _RANGE.fullmatch(self.headers.get("Range", ""))
                start, end = (0, len(data) - 1) if match is None else map(int, match.groups())
                end = min(end, len(data) - 1)
                self.send_response(206 if match else 200)
                if match:
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                self.send_header("Content-Length", str(end - start + 1))
                self.send_header("ETag", '"v1"')
                self.end_headers()
                self.wfile.write(data[start : end + 1])

            def log_message(self, format: str, *args: object) -> None:
                pass

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self.url = f"https://localhost:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[_TlsRangeServer, Path, bytes]]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    data = os.urandom(3 * 2**20 + 17)
    server = _TlsRangeServer({"videos/a.mp4": data}, cert, key)
    try:
        yield server, cert, data
    finally:
        server.close()


def test_exact_ranges_over_tls_with_a_trusted_ca(tls_server):
    server, cert, data = tls_server
    with HttpRangeReader(server.url, verify=str(cert)) as reader:
        assert reader.size("videos/a.mp4") == len(data)
        requests = [
            ReadRequest("videos/a.mp4", o, n)
            for o, n in [(0, 10), (5000, 70000), (len(data) - 5, 5)]
        ]
        assert reader.read_many(requests) == [data[r.offset : r.end] for r in requests]
        assert reader.read("videos/a.mp4", 123, 2**20 + 3) == data[123 : 123 + 2**20 + 3]


def test_untrusted_certificate_is_a_typed_error_naming_the_url(tls_server):
    server, _cert, _data = tls_server
    with HttpRangeReader(server.url, verify=True) as reader, pytest.raises(StorageError) as error:
        reader.read("videos/a.mp4", 0, 10)
    assert "localhost" in str(error.value)

"""A small forward proxy and a TLS front for tests (asyncio, each on its own loop thread).

* :class:`ConnectProxy`: an http forward proxy on 127.0.0.1. ``CONNECT host:port`` opens a
  tunnel and relays bytes both ways; ``GET http://host:port/path`` (absolute form) is forwarded
  to the origin in origin form and its response relayed (Content-Length bodies, one request at
  a time per client connection). With ``credentials=("user", "pass")`` anything without the
  matching ``Proxy-Authorization: Basic`` gets 407. Every request head is recorded.
* :class:`TlsFront`: TLS termination in front of a plain upstream (the session's nginx), with
  a throw-away certificate for ``localhost`` made by ``openssl``; ``cert`` is its CA file.

Fixtures: ``tls_front`` (one per session, in front of ``http_server``; ``rebase_url`` turns a
URL from ``http_publish`` into the same file over https) and ``connect_proxy`` (a fresh proxy
without credentials).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import ssl
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from episodestream_tools.serving import NginxServer
from episodestream_tools.serving._loop import LoopThread

__all__ = ["ConnectProxy", "ProxyRecord", "TlsFront", "make_localhost_cert"]

_log = logging.getLogger(__name__)
_MAX_HEAD = 64 * 1024


@dataclass
class ProxyRecord:
    """One request head the proxy received."""

    method: str
    target: str
    headers: dict[str, str]
    status: int = 0  # what the proxy answered itself (200 tunnel, 407) or relayed
    tunnelled_bytes: int = 0  # origin -> client bytes relayed through a CONNECT tunnel


@dataclass
class _Book:
    records: list[ProxyRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, count=None) -> None:
    try:
        while chunk := await reader.read(256 * 1024):
            if count is not None:
                count(len(chunk))
            writer.write(chunk)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None


def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return method, target, headers


class _Served:
    """The loop thread and the open connections of one test server."""

    def __init__(self, label: str) -> None:
        self._thread = LoopThread(
            label,
            f"test-{label.replace(' ', '-')}",
            host="127.0.0.1",
            port=0,
            start_timeout_s=10,
            stop_timeout_s=10,
            log=_log,
        )
        self._writers: set[asyncio.StreamWriter] = set()

    def _start(self, handle, ssl_context: ssl.SSLContext | None = None) -> None:
        async def serve(reader, writer):
            self._writers.add(writer)
            try:
                await handle(reader, writer)
            except Exception as error:  # a test server never dies of one connection
                _log.debug("connection ended: %r", error)
            finally:
                self._writers.discard(writer)
                with contextlib.suppress(Exception):
                    writer.close()

        async def listen(loop):
            return await asyncio.start_server(
                serve, "127.0.0.1", 0, ssl=ssl_context, limit=_MAX_HEAD
            )

        self._thread.start(listen, self._abort)

    async def _abort(self) -> None:
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                writer.transport.abort()

    @property
    def port(self) -> int:
        return self._thread.port

    def close(self) -> None:
        self._thread.close(self._abort)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ConnectProxy(_Served):
    def __init__(self, credentials: tuple[str, str] | None = None) -> None:
        super().__init__("connect proxy")
        self._book = _Book()
        self._expected = None
        if credentials is not None:
            pair = f"{credentials[0]}:{credentials[1]}".encode()
            self._expected = "Basic " + base64.b64encode(pair).decode()
        self._start(self._handle)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def records(self) -> list[ProxyRecord]:
        with self._book.lock:
            return list(self._book.records)

    def clear(self) -> None:
        with self._book.lock:
            self._book.records.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        upstream_key: tuple[str, int] | None = None
        try:
            while (head := await _read_head(reader)) is not None:
                method, target, headers = _parse_head(head)
                record = ProxyRecord(method, target, headers)
                with self._book.lock:
                    self._book.records.append(record)
                if self._expected is not None and headers.get("proxy-authorization") != (
                    self._expected
                ):
                    record.status = 407
                    writer.write(
                        b"HTTP/1.1 407 Proxy Authentication Required\r\n"
                        b'Proxy-Authenticate: Basic realm="test"\r\n'
                        b"Content-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                    await writer.drain()
                    return
                if method == "CONNECT":
                    await self._tunnel(target, record, reader, writer)
                    return
                parts = urllib.parse.urlsplit(target)
                key = (parts.hostname or "", parts.port or 80)
                if upstream is None or upstream_key != key:
                    if upstream is not None:
                        upstream[1].close()
                    upstream = await asyncio.open_connection(*key)
                    upstream_key = key
                lines = [
                    f"{method} {parts.path or '/'}{'?' + parts.query if parts.query else ''}"
                    " HTTP/1.1"
                ]
                lines += [
                    f"{name}: {value}"
                    for name, value in headers.items()
                    if not name.startswith("proxy-")
                ]
                upstream[1].write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
                await upstream[1].drain()
                answer = await _read_head(upstream[0])
                if answer is None:
                    return
                _, status_text, answer_headers = _parse_head(answer)
                record.status = int(status_text)
                length = int(answer_headers.get("content-length", "0"))
                body = await upstream[0].readexactly(length) if length else b""
                writer.write(answer + body)
                await writer.drain()
        finally:
            if upstream is not None:
                upstream[1].close()

    async def _tunnel(self, target, record, reader, writer) -> None:
        host, _, port = target.rpartition(":")
        try:
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
        except OSError:
            record.status = 502
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return
        record.status = 200
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()

        def count(n: int) -> None:
            record.tunnelled_bytes += n

        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer, count))


class TlsFront(_Served):
    """TLS on 127.0.0.1 in front of ``upstream`` (host, port); reach it as ``localhost``."""

    def __init__(self, upstream: tuple[str, int], cert: Path, key: Path) -> None:
        super().__init__("tls front")
        self.cert = cert
        self._upstream = upstream
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._start(self._handle, context)

    @property
    def url(self) -> str:
        return f"https://localhost:{self.port}"

    def rebase_url(self, direct_url: str) -> str:
        """``direct_url`` (on the upstream) as the same URL through this front."""
        return self.url + urllib.parse.urlsplit(direct_url).path

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


def make_localhost_cert(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for ``localhost`` (and 127.0.0.1): (cert, key)."""
    cert, key = folder / "localhost.pem", folder / "localhost.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture(scope="session")
def tls_front(
    http_server: NginxServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TlsFront]:
    cert, key = make_localhost_cert(tmp_path_factory.mktemp("tls-front"))
    with TlsFront((http_server.host, http_server.port), cert, key) as front:
        yield front


@pytest.fixture
def connect_proxy() -> Iterator[ConnectProxy]:
    with ConnectProxy() as server:
        yield server

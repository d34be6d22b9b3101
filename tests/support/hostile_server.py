"""A hostile HTTP/1.1 server on 127.0.0.1: serves a folder with byte ranges, keep-alive and
validators as nginx does, and misbehaves as a :class:`Hostility` says for the paths it matches.

========================  ===================================================================
kind                      what a client asking a matched path gets
========================  ===================================================================
``none``                  the honest answer (what nginx would send)
``early_hints``           ``103 Early Hints`` replies, one every ``interval_s``, without end
                          (until the client leaves or the server's own bound passes)
``trickle_head``          the honest answer, its head sent one byte every ``interval_s``
``trickle_body``          the honest head at once, its body one byte every ``interval_s``
``lying_content_range``   206 with the bytes asked for under a ``Content-Range`` whose start
                          is off by one
``zero_rows``             every ``meta/episodes/chunk-*/file-*.parquet`` (any index, present
                          or not) is a valid Parquet of the real schema with no rows
``huge``                  the file is ``huge_bytes`` long: its real bytes, then zeros made on
                          the fly (never held)
``redirect``              302 to ``location``
========================  ===================================================================

A stdlib socket server rather than ``http.server``: the head itself must be trickled and 1xx
replies sent, which the handler class does not allow. Every wait of its own is bounded
(:data:`MAX_HOSTILE_SECONDS` per connection, socket timeouts); :meth:`HostileServer.close`
shuts every connection down and joins every thread.
"""

from __future__ import annotations

import contextlib
import email.utils
import fnmatch
import io
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pyarrow.parquet as pq

__all__ = ["MAX_HOSTILE_SECONDS", "HostileServer", "Hostility", "SeenRequest"]

# No connection of the server's is served longer than this, whatever it is asked to do.
MAX_HOSTILE_SECONDS = 120.0
_HEAD_LIMIT = 64 * 1024
_SOCKET_TIMEOUT_S = 10.0
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
_EPISODES_FILE = re.compile(r"^meta/episodes/chunk-\d+/file-\d+\.parquet$")
_EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </meta/info.json>; rel=preload\r\n\r\n"
_CHUNK = 64 * 1024

HostileKind = Literal[
    "none",
    "early_hints",
    "trickle_head",
    "trickle_body",
    "lying_content_range",
    "zero_rows",
    "huge",
    "redirect",
]


@dataclass(frozen=True)
class Hostility:
    """How the server misbehaves, and for which paths (an ``fnmatch`` pattern relative to
    the served folder; ``zero_rows`` applies to the episodes files whatever it says)."""

    kind: HostileKind = "none"
    paths: str = "*"
    interval_s: float = 0.2
    huge_bytes: int = 1 << 40
    location: str = ""


@dataclass
class SeenRequest:
    """One request as the server read it."""

    path: str
    headers: dict[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


@dataclass(frozen=True)
class _Body:
    """What a file answer sends: its size, its version time and its bytes by range."""

    size: int
    mtime_ns: int
    data: bytes | None = None
    path: Path | None = None

    @classmethod
    def of_file(cls, path: Path) -> _Body:
        stat = path.stat()
        return cls(stat.st_size, stat.st_mtime_ns, path=path)

    @classmethod
    def of_bytes(cls, data: bytes) -> _Body:
        return cls(len(data), 1_700_000_000 * 10**9, data=data)

    def read(self, offset: int, count: int) -> bytes:
        if self.data is not None:
            return self.data[offset : offset + count]
        assert self.path is not None
        with self.path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(count)


class _Gone(Exception):
    """The client left, or the server is closing or out of time: stop this connection."""


class HostileServer:
    """Serves ``root`` on 127.0.0.1 with ``hostility``; a context manager (closes on exit)."""

    def __init__(self, root: Path, hostility: Hostility | None = None) -> None:
        self.root = Path(root)
        self.hostility = hostility or Hostility()
        self.requests: list[SeenRequest] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._connections: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._zero_rows: bytes | None = None
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self._listener.settimeout(0.1)
        self.port = self._listener.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._acceptor = threading.Thread(target=self._accept, name="hostile-accept", daemon=True)
        self._acceptor.start()

    # ---------------------------------------------------------------------------- lifecycle

    def __enter__(self) -> HostileServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._closed.set()
        self._acceptor.join(5)
        self._listener.close()
        with self._lock:
            connections = list(self._connections)
            threads = list(self._threads)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        for thread in threads:
            thread.join(5)

    def seen(self, path: str) -> list[SeenRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    # ----------------------------------------------------------------------------- serving

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(_SOCKET_TIMEOUT_S)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(
                target=self._serve, args=(connection,), name="hostile-conn", daemon=True
            )
            with self._lock:
                self._connections.add(connection)
                self._threads = [t for t in self._threads if t.is_alive()]
                self._threads.append(thread)
            thread.start()

    def _serve(self, connection: socket.socket) -> None:
        started = time.monotonic()
        reader = connection.makefile("rb")
        try:
            while not self._closed.is_set():
                request = self._read_request(reader)
                if request is None:
                    return
                self._answer(connection, request, started)
        except (_Gone, OSError, ValueError):
            return
        finally:
            with self._lock:
                self._connections.discard(connection)
            with contextlib.suppress(OSError):
                reader.close()
                connection.close()

    def _read_request(self, reader: io.BufferedReader) -> SeenRequest | None:
        line = reader.readline(_HEAD_LIMIT)
        if not line:
            return None
        method, target, _ = line.decode("latin-1").split(" ", 2)
        headers: dict[str, str] = {}
        while True:
            field_line = reader.readline(_HEAD_LIMIT)
            if field_line in (b"\r\n", b"\n", b""):
                break
            name, _, value = field_line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        path = urllib.parse.unquote(urllib.parse.urlsplit(target).path).lstrip("/")
        request = SeenRequest(path, headers)
        with self._lock:
            self.requests.append(request)
        if method != "GET":
            raise _Gone()
        return request

    def _matches(self, path: str) -> bool:
        return fnmatch.fnmatchcase(path, self.hostility.paths)

    def _answer(self, connection: socket.socket, request: SeenRequest, started: float) -> None:
        hostility = self.hostility
        kind = hostility.kind if self._matches(request.path) else "none"
        if hostility.kind == "zero_rows" and _EPISODES_FILE.match(request.path):
            self._send_ranged(connection, request, self._zero_rows_file(), "none", started)
            return
        if kind == "redirect":
            head = f"HTTP/1.1 302 Found\r\nLocation: {hostility.location}\r\n"
            connection.sendall((head + "Content-Length: 0\r\n\r\n").encode("latin-1"))
            return
        if kind == "early_hints":
            while True:
                connection.sendall(_EARLY_HINTS)
                self._pause(hostility.interval_s, started)
        path = self.root / request.path
        if not request.path or not path.is_file():
            connection.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        self._send_ranged(connection, request, _Body.of_file(path), kind, started)

    def _zero_rows_file(self) -> _Body:
        """A Parquet file of the real episodes schema with no rows (made once, in memory)."""
        with self._lock:
            if self._zero_rows is None:
                real = pq.read_table(self.root / "meta/episodes/chunk-000/file-000.parquet")
                sink = io.BytesIO()
                pq.write_table(real.slice(0, 0), sink)
                self._zero_rows = sink.getvalue()
            return _Body.of_bytes(self._zero_rows)

    def _send_ranged(
        self,
        connection: socket.socket,
        request: SeenRequest,
        body: _Body,
        kind: str,
        started: float,
    ) -> None:
        real_size = body.size
        size = max(real_size, self.hostility.huge_bytes) if kind == "huge" else real_size
        etag = f'"{body.mtime_ns:x}-{size:x}"'
        modified = email.utils.formatdate(body.mtime_ns / 1e9, usegmt=True)
        match = _RANGE.match(request.header("range") or "")
        if match is None:
            first, last, status = 0, size - 1, 200
        else:
            first = int(match.group(1))
            last = min(int(match.group(2)) if match.group(2) else size - 1, size - 1)
            status = 206
            if first >= size or first > last:
                head = f"HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{size}\r\n"
                connection.sendall((head + "Content-Length: 0\r\n\r\n").encode("latin-1"))
                return
        lines = [
            f"HTTP/1.1 {status} {'Partial Content' if status == 206 else 'OK'}",
            "Accept-Ranges: bytes",
            f"ETag: {etag}",
            f"Last-Modified: {modified}",
            f"Content-Length: {last - first + 1}",
        ]
        if status == 206:
            shift = 1 if kind == "lying_content_range" else 0
            lines.append(f"Content-Range: bytes {first + shift}-{last + shift}/{size}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        if kind == "trickle_head":
            self._trickle(connection, head, started)
        else:
            connection.sendall(head)
        position = first
        while position <= last:
            count = min(_CHUNK, last + 1 - position)
            if position < real_size:
                piece = body.read(position, min(count, real_size - position))
            else:
                piece = bytes(count)
            if kind == "trickle_body":
                self._trickle(connection, piece, started)
            else:
                connection.sendall(piece)
            position += len(piece)

    def _trickle(self, connection: socket.socket, data: bytes, started: float) -> None:
        for index in range(len(data)):
            connection.sendall(data[index : index + 1])
            self._pause(self.hostility.interval_s, started)

    def _pause(self, seconds: float, started: float) -> None:
        if self._closed.wait(seconds) or time.monotonic() - started > MAX_HOSTILE_SECONDS:
            raise _Gone()

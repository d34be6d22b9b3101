"""A minimal HTTP/1.1 client transport: persistent connections, one GET at a time per socket.

Why our own: a range read is a GET with three headers and a fixed-length body, and measured on
this hardware (docs/HTTP_CLIENTS.md) the general clients spend 8x more CPU per small request
than the exchange needs — mostly parsing response headers through ``email.feedparser``. Here a
response head is read with ``BufferedReader.readline`` (C) and split by hand, and a body is read
with one ``BufferedReader.read(n)``, which fills a fresh ``bytes`` straight from the socket.

Scope, deliberately small: GET only, no request bodies, no compression (we send
``Accept-Encoding: identity``), HTTP/1.0 and 1.1 responses, Content-Length, chunked and
close-delimited bodies, 1xx responses skipped (at most :data:`MAX_INTERIM_RESPONSES`). TLS
through :mod:`ssl` with certificate and host-name checks on by default. Every wait is bounded
by a socket timeout, and every exchange as a whole — request, 1xx replies, head and body — by
its deadline (``_transport.py``, "Deadlines"): each socket read goes through
:class:`_SocketStream`, which shortens the wait to what the deadline leaves.

Through an http proxy (``_proxy.py`` decides which): https origins are reached through a
``CONNECT`` tunnel (TLS end to end, the proxy sees only the host and port), http origins by
sending requests to the proxy in absolute form (``GET http://host/path``). Proxy credentials
go as ``Proxy-Authorization`` to the proxy only.
"""

from __future__ import annotations

import collections
import contextlib
import io
import re
import select
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping

from episodestream.storage._urls import origin_of
from episodestream.storage.http._proxy import Proxy, proxy_for
from episodestream.storage.http._tls import client_context
from episodestream.storage.http._transport import (
    MIN_BYTES_PER_SECOND,
    ExchangeTooSlow,
    PoolTimeout,
    ProtocolError,
    ProxyRefused,
    ProxyUnreachable,
    TransportOptions,
    current_exchange_deadline,
)

__all__ = [
    "MAX_INTERIM_RESPONSES",
    "Headers",
    "PoolTimeout",
    "ProxyRefused",
    "ProxyUnreachable",
    "WireError",
    "WirePool",
    "WireResponse",
    "WireTransport",
]

_MAX_LINE_BYTES = 64 * 1024
_MAX_HEADERS = 200
# 1xx replies (100 Continue, 103 Early Hints) skipped before the answer; more is a server
# stalling with them (they count against the exchange's deadline as well)
MAX_INTERIM_RESPONSES = 16
_READ_BUFFER_BYTES = 256 * 1024
_RECHECK_IDLE_SECONDS = 1.0
# Never sent: a CR or LF would end the request line or a header early (request smuggling).
_UNSAFE_IN_TARGET = re.compile(r"[\x00-\x20\x7f]")
_UNSAFE_IN_HEADER = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


# URLs whose (pool, request target) are kept parsed; signed URLs must not pile up
MAX_ROUTES = 4096


class WireError(ProtocolError):
    """A malformed or truncated HTTP response head; the connection is unusable."""


class Headers(Mapping[str, str]):
    """Response headers, case-insensitive; repeated fields joined with ``", "``."""

    __slots__ = ("_items",)

    def __init__(self, items: dict[str, str]) -> None:
        self._items = items  # keys already lower-case

    def __getitem__(self, name: str) -> str:
        return self._items[name.lower()]

    def get(self, name: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return self._items.get(name.lower(), default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Headers({self._items!r})"


class _SocketStream(io.RawIOBase):
    """The raw stream under a connection's buffered reader: ``recv_into``, each wait bounded
    by the read timeout and by what the current exchange's deadline leaves.

    An exchange may take ``read_timeout`` plus the time its bytes take at
    :data:`MIN_BYTES_PER_SECOND` (counted from :meth:`begin`), and never runs past the
    deadline the reader set for it. Past either, a read raises :class:`ExchangeTooSlow`. Pure
    Python like the ``socket.SocketIO`` it stands in for, so a read costs no more; bodies are
    still read by one ``BufferedReader.read(n)`` straight into a fresh ``bytes``.
    """

    def __init__(self, sock: socket.socket, read_timeout: float) -> None:
        super().__init__()
        self._sock = sock
        self._read_timeout = read_timeout
        self._waiting = read_timeout  # the socket's timeout now: set again only on change
        self._started = time.monotonic()
        self._received = 0
        self._deadline: float | None = None

    def begin(self, deadline: float | None) -> None:
        """An exchange starts now (its request is about to go), to end by ``deadline``
        (``time.monotonic()``) at the latest."""
        self._started = time.monotonic()
        self._received = 0
        self._deadline = deadline
        if self._waiting != self._read_timeout:  # shortened near the last one's deadline
            self._sock.settimeout(self._read_timeout)
            self._waiting = self._read_timeout

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview | bytearray) -> int:  # type: ignore[override]
        allowed = self._started + self._read_timeout + self._received / MIN_BYTES_PER_SECOND
        deadline = self._deadline
        imposed = deadline is not None and deadline < allowed
        if imposed:
            allowed = deadline  # type: ignore[assignment]
        left = allowed - time.monotonic()
        if left <= 0:
            raise self._too_slow(imposed)
        wait = left if left < self._read_timeout else self._read_timeout
        if wait != self._waiting:
            self._sock.settimeout(wait)
            self._waiting = wait
        try:
            count = self._sock.recv_into(buffer)
        except TimeoutError as error:
            if wait < self._read_timeout:  # the deadline, not the read timeout, ran out
                raise self._too_slow(imposed) from error
            raise
        self._received += count
        return count

    def _too_slow(self, imposed: bool) -> ExchangeTooSlow:
        elapsed = time.monotonic() - self._started
        got = f"{self._received} bytes in {elapsed:.1f} s"
        if imposed:
            why = "the deadline set for it passed"
        else:
            why = (
                f"it took longer than a {self._read_timeout:g} s read timeout's grace plus "
                f"{MIN_BYTES_PER_SECOND // 1024} KiB/s"
            )
        return ExchangeTooSlow(f"the exchange was slower than allowed: {why} ({got})")


class _Connection:
    """One socket to one origin, with a buffered reader for response heads and bodies."""

    def __init__(self, sock: socket.socket, read_timeout: float) -> None:
        self.sock = sock
        self.stream = _SocketStream(sock, read_timeout)
        self.reader = io.BufferedReader(self.stream, _READ_BUFFER_BYTES)
        self.idle_since = time.monotonic()

    def close(self) -> None:
        try:
            self.reader.close()
        finally:
            self.sock.close()

    def dropped(self) -> bool:
        """Whether an idle connection was closed by the server (readable = EOF or junk).

        ``poll`` rather than ``select``: select() fails for descriptors >= 1024, which a
        process with many open files reaches — every idle connection would look dropped.
        """
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN | select.POLLERR | select.POLLHUP)
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True


class WireResponse:
    """A response whose body is read on demand; holds its connection's pool slot until
    :meth:`release` (connection kept when the body was fully read, closed otherwise) or
    :meth:`discard` (closed). A context manager: leaving ``with`` releases it.
    """

    def __init__(
        self,
        pool: WirePool,
        connection: _Connection,
        status: int,
        headers: Headers,
        *,
        keep_alive: bool,
        length: int | None,
        chunked: bool,
    ) -> None:
        self.status = status
        self.headers = headers
        self._pool = pool
        self._connection: _Connection | None = connection
        self._keep_alive = keep_alive
        self._remaining = length  # None: chunked or until close
        self._chunked = chunked
        self._chunk_left = 0
        self._done = length == 0
        self._broken = False

    @property
    def complete(self) -> bool:
        return self._done

    def peek(self) -> None:
        """Block until the first body byte is buffered (time to first byte), consuming none."""
        if self._connection is not None and not self._done:
            self._connection.reader.peek(1)

    def read(self, amount: int | None = None) -> bytes:
        """Up to ``amount`` body bytes (all when None); ``b""`` at the end or after a short body.

        A body shorter than announced yields the bytes that came, then ``b""``: the caller sees
        fewer bytes than it asked for.
        """
        if self._done or self._broken or self._connection is None:
            return b""
        if self._chunked:
            return self._read_chunked(amount)
        reader = self._connection.reader
        if self._remaining is None:  # delimited by close
            data = reader.read() if amount is None else reader.read(amount)
            if not data or amount is None:
                self._done = True
                self._keep_alive = False
            return data
        wanted = self._remaining if amount is None else min(amount, self._remaining)
        data = reader.read(wanted)
        self._remaining -= len(data)
        if len(data) < wanted:
            self._broken = True
        elif self._remaining == 0:
            self._done = True
        return data

    def _read_chunked(self, amount: int | None) -> bytes:
        assert self._connection is not None
        reader = self._connection.reader
        parts: list[bytes] = []
        got = 0
        while amount is None or got < amount:
            if self._chunk_left == 0:
                line = reader.readline(_MAX_LINE_BYTES + 1)
                if not line.endswith(b"\n"):
                    self._broken = True
                    break
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self._broken = True
                    break
                if size == 0:
                    # Trailers, then the blank line that ends the message.
                    for _ in range(_MAX_HEADERS + 1):
                        trailer = reader.readline(_MAX_LINE_BYTES + 1)
                        if trailer in (b"\r\n", b"\n"):
                            break
                        if not trailer.endswith(b"\n"):
                            self._broken = True
                            break
                    else:
                        self._broken = True
                    if not self._broken:
                        self._done = True
                    break
                self._chunk_left = size
            take = self._chunk_left if amount is None else min(self._chunk_left, amount - got)
            data = reader.read(take)
            parts.append(data)
            got += len(data)
            self._chunk_left -= len(data)
            if len(data) < take:
                self._broken = True
                break
            if self._chunk_left == 0 and reader.read(2) not in (b"\r\n",):
                self._broken = True
                break
        return b"".join(parts)

    def __enter__(self) -> WireResponse:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        """Give the connection back: kept for reuse when the body was fully read, closed
        otherwise — the one place that decides (``with response:`` calls it on the way out)."""
        connection, self._connection = self._connection, None
        if connection is not None:
            reusable = self._done and self._keep_alive and not self._broken
            self._pool._put(connection, reusable)

    def discard(self) -> None:
        """Close the connection (its body is abandoned) and free its slot."""
        connection, self._connection = self._connection, None
        if connection is not None:
            self._pool._put(connection, False)


class WirePool:
    """Persistent connections to one origin, at most ``maxsize`` open at once.

    Args:
        scheme, host, port: the origin.
        maxsize: connections open at once; a request beyond it waits up to ``pool_timeout``.
        connect_timeout, read_timeout: seconds for connection set-up and any single wait for
            bytes afterwards.
        ssl_context: for https.
        on_connect: called with the seconds each new connection took (metrics).
        proxy: an http proxy to go through: a ``CONNECT`` tunnel for https, absolute-form
            requests for http.
    """

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        *,
        maxsize: int,
        connect_timeout: float,
        read_timeout: float,
        pool_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        on_connect: Callable[[float], None] | None = None,
        proxy: Proxy | None = None,
    ) -> None:
        self.scheme = scheme
        self.host = host
        self.port = port
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._pool_timeout = pool_timeout
        self._ssl_context = ssl_context
        self._on_connect = on_connect
        self._slots = threading.BoundedSemaphore(maxsize)
        self._idle: collections.deque[_Connection] = collections.deque()
        # Connections handed out and not yet given back: close() shuts them down, so a thread
        # blocked reading one wakes at once instead of after its read timeout.
        self._in_use: set[_Connection] = set()
        self._lock = threading.Lock()
        self._closed = False
        default_port = 443 if scheme == "https" else 80
        host_text = f"[{host}]" if ":" in host else host
        self._host_header = host_text if port == default_port else f"{host_text}:{port}"
        self.proxy = proxy
        # http through a proxy: every request names its origin (absolute form) and carries the
        # proxy's credentials; https: the tunnel carries the origin-form requests unchanged
        self._target_prefix = ""
        self._proxy_headers: list[str] = []
        if proxy is not None and scheme != "https":
            self._target_prefix = f"{scheme}://{self._host_header}"
            authorization = proxy.authorization()
            if authorization is not None:
                self._proxy_headers.append(f"Proxy-Authorization: {authorization}")

    def _connect(self, deadline: float | None) -> _Connection:
        started = time.perf_counter()
        connect_timeout = _within(self._connect_timeout, deadline)
        if self.proxy is None:
            sock = socket.create_connection((self.host, self.port), timeout=connect_timeout)
        else:
            sock = self._connect_proxy(self.proxy, connect_timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.proxy is not None and self.scheme == "https":
                self._tunnel(sock, self.proxy)
                sock.settimeout(connect_timeout)  # the TLS handshake's, as without a proxy
            if self._ssl_context is not None:
                sock = self._ssl_context.wrap_socket(sock, server_hostname=self.host)
            sock.settimeout(self._read_timeout)
        except BaseException:
            sock.close()
            raise
        if self._on_connect is not None:
            self._on_connect(time.perf_counter() - started)
        return _Connection(sock, self._read_timeout)

    def _connect_proxy(self, proxy: Proxy, connect_timeout: float) -> socket.socket:
        try:
            return socket.create_connection((proxy.host, proxy.port), timeout=connect_timeout)
        except OSError as error:
            raise ProxyUnreachable(
                f"cannot connect to the proxy {proxy.label}: {type(error).__name__}: "
                f"{error.strerror or error}"
            ) from error

    def _tunnel(self, sock: socket.socket, proxy: Proxy) -> None:
        """Open a ``CONNECT`` tunnel to the origin through ``sock`` (connected to the proxy).

        The answer is read with ``recv`` up to its blank line and no further: nothing may be
        left in a buffer, since the origin's TLS bytes follow on the same socket. The whole
        answer must come within the connect timeout (a proxy trickling it cannot hold us).
        """
        host_text = f"[{self.host}]" if ":" in self.host else self.host
        authority = f"{host_text}:{self.port}"  # CONNECT always names the port
        lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
        authorization = proxy.authorization()
        if authorization is not None:
            lines.append(f"Proxy-Authorization: {authorization}")
        answer_by = time.monotonic() + self._connect_timeout
        try:
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                if len(head) > _MAX_LINE_BYTES:
                    raise WireError(f"the proxy {proxy.label} sent an oversized CONNECT answer")
                left = answer_by - time.monotonic()
                if left <= 0:
                    raise TimeoutError("CONNECT answer too slow")
                sock.settimeout(left)
                # one byte at a time: the answer is short, and never read past its end
                byte = sock.recv(1)
                if not byte:
                    raise ProxyUnreachable(
                        f"the proxy {proxy.label} closed the connection instead of answering "
                        f"CONNECT {authority}"
                    )
                head += byte
        except TimeoutError as error:
            raise ProxyUnreachable(
                f"the proxy {proxy.label} did not answer CONNECT {authority} within "
                f"{self._connect_timeout} s"
            ) from error
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1", "replace")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise WireError(f"the proxy {proxy.label} answered CONNECT with {status_line[:80]!r}")
        status = int(parts[1])
        if not 200 <= status < 300:
            reason = parts[2].strip()[:80] if len(parts) > 2 else ""
            hint = ""
            if status == 407:
                hint = (
                    "; its credentials were refused"
                    if proxy.has_credentials
                    else "; it wants credentials: http://user:password@host:port"
                )
            raise ProxyRefused(
                f"the proxy {proxy.label} refused CONNECT {authority}: HTTP {status} "
                f"{reason}{hint}",
                status,
            )

    def _take(self, deadline: float | None) -> tuple[_Connection, bool]:
        """A connection (reused or new) holding a slot: (connection, reused)."""
        pool_timeout = _within(self._pool_timeout, deadline)
        if not self._slots.acquire(timeout=pool_timeout):
            raise PoolTimeout(
                f"no free connection to {self.host}:{self.port} within {pool_timeout:g} s"
            )
        try:
            while True:
                with self._lock:
                    if self._closed:
                        raise OSError("connection pool is closed")
                    connection = self._idle.pop() if self._idle else None
                if connection is None:
                    return self._lend(self._connect(deadline)), False
                # Only a connection idle for a while is worth a liveness check: a server drops
                # idle keep-alives after seconds, and a rare miss is caught by the stale retry.
                if time.monotonic() - connection.idle_since < _RECHECK_IDLE_SECONDS:
                    return self._lend(connection), True
                if not connection.dropped():
                    return self._lend(connection), True
                connection.close()
        except BaseException:
            self._slots.release()
            raise

    def _lend(self, connection: _Connection) -> _Connection:
        with self._lock:
            closed = self._closed
            if not closed:
                self._in_use.add(connection)
        if closed:  # closed while this connection was being made or checked
            with contextlib.suppress(OSError):
                connection.close()
            raise OSError("connection pool is closed")
        return connection

    def _put(self, connection: _Connection, reusable: bool) -> None:
        with self._lock:
            self._in_use.discard(connection)
            keep = reusable and not self._closed
            if keep:
                connection.idle_since = time.monotonic()
                self._idle.append(connection)
        if not keep:
            with contextlib.suppress(OSError):
                connection.close()
        self._slots.release()

    def get(self, target: str, headers: Mapping[str, str]) -> WireResponse:
        """Send ``GET target`` and read the response head; the body is left to the caller.

        A reused connection that turns out closed by the server before any answer byte is
        replaced once by a new connection (a GET is safe to repeat). The exchange — this head
        and the body read later — ends by the deadline the reader set (``_transport.py``).
        """
        if _UNSAFE_IN_TARGET.search(target):
            raise ValueError(f"request target with control characters or spaces: {target[:80]!r}")
        for name, value in headers.items():
            if _UNSAFE_IN_HEADER.search(name) or _UNSAFE_IN_HEADER.search(value):
                raise ValueError(f"header {name[:40]!r} with control characters")
        lines = [f"GET {self._target_prefix}{target} HTTP/1.1", f"Host: {self._host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        lines += self._proxy_headers
        request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        deadline = current_exchange_deadline()
        for _ in range(2):
            connection, reused = self._take(deadline)
            try:
                connection.stream.begin(deadline)
                try:
                    connection.sock.sendall(request)
                except (BrokenPipeError, ConnectionResetError):
                    raise _StaleConnection() from None
                return self._read_head(connection)
            except _StaleConnection:
                self._put(connection, False)
                if not reused:
                    raise WireError("server closed the connection without answering") from None
            except BaseException:
                self._put(connection, False)
                raise
        raise WireError("server closed the connection without answering")

    def _read_head(self, connection: _Connection) -> WireResponse:
        reader = connection.reader
        interim = 0
        while True:
            try:
                line = reader.readline(_MAX_LINE_BYTES + 1)
            except ConnectionResetError:
                raise _StaleConnection() from None
            if not line:
                raise _StaleConnection()
            parts = line.split(None, 2)
            if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
                raise WireError(f"bad status line {line[:80]!r}")
            try:
                status = int(parts[1])
            except ValueError as error:
                raise WireError(f"bad status line {line[:80]!r}") from error
            version = parts[0]
            fields: dict[str, str] = {}
            for _ in range(_MAX_HEADERS + 1):
                field = reader.readline(_MAX_LINE_BYTES + 1)
                if field in (b"\r\n", b"\n"):
                    break
                if not field.endswith(b"\n"):
                    raise WireError("response head truncated or a header line too long")
                name, colon, value = field.partition(b":")
                if not colon:
                    raise WireError(f"bad header line {field[:80]!r}")
                key = name.strip().decode("latin-1").lower()
                text = value.strip().decode("latin-1")
                fields[key] = f"{fields[key]}, {text}" if key in fields else text
            else:
                raise WireError(f"more than {_MAX_HEADERS} response headers")
            if 100 <= status < 200:
                # 100 Continue, 103 Early Hints: the real answer follows (within the
                # exchange's deadline, and after a bounded number of them)
                interim += 1
                if interim > MAX_INTERIM_RESPONSES:
                    raise WireError(
                        f"more than {MAX_INTERIM_RESPONSES} interim (1xx) responses before "
                        "the answer"
                    )
                continue
            break
        declared_lengths = fields.get("content-length")
        if declared_lengths is not None and "," in declared_lengths:
            # Repeated Content-Length fields: one length sent twice is harmless (RFC 9112 6.3),
            # differing ones make the body's end ambiguous (a response-splitting vector).
            values = {value.strip() for value in declared_lengths.split(",")}
            if len(values) != 1:
                raise WireError(f"differing Content-Length values {declared_lengths[:80]!r}")
            fields["content-length"] = values.pop()
        headers = Headers(fields)
        connection_tokens = (headers.get("Connection") or "").lower()
        keep_alive = (
            "close" not in connection_tokens
            if version == b"HTTP/1.1"
            else "keep-alive" in connection_tokens
        )
        chunked = "chunked" in (headers.get("Transfer-Encoding") or "").lower()
        length: int | None = None
        if status in (204, 304):
            length = 0
        elif not chunked:
            declared = headers.get("Content-Length")
            if declared is not None:
                try:
                    length = int(declared)
                except ValueError as error:
                    raise WireError(f"bad Content-Length {declared!r}") from error
                if length < 0:
                    raise WireError(f"bad Content-Length {declared!r}")
            else:
                keep_alive = False  # the body ends when the server closes
        return WireResponse(
            self,
            connection,
            status,
            headers,
            keep_alive=keep_alive,
            length=length,
            chunked=chunked,
        )

    def drop_after_fork(self) -> None:
        """In a forked child: close this process's descriptors of the idle connections.

        Only the forking thread exists in the child, so no lock (a parent thread may have held
        it); a plain close leaves the parent's connection intact (no shutdown).
        """
        for connection in list(self._idle):
            with contextlib.suppress(OSError):
                connection.close()
        self._idle = collections.deque()

    def close(self) -> None:
        """Close idle connections and shut down those in use.

        A connection in use is shut down, not closed: the thread reading it wakes with EOF or
        an error at once (closing a descriptor another thread is blocked on does not wake it,
        and its number could be reused); that thread closes it when giving it back.
        """
        with self._lock:
            self._closed = True
            idle, self._idle = list(self._idle), collections.deque()
            in_use = list(self._in_use)
        for connection in idle:
            with contextlib.suppress(OSError):
                connection.close()
        for connection in in_use:
            with contextlib.suppress(OSError):
                # the plain-socket shutdown, also under TLS: SSLSocket.shutdown would drop the
                # TLS state under the reading thread's feet
                socket.socket.shutdown(connection.sock, socket.SHUT_RDWR)


def _within(seconds: float, deadline: float | None) -> float:
    """``seconds``, or less when ``deadline`` (``time.monotonic()``) comes sooner; never 0
    (a timeout of 0 would mean "do not wait" where the caller expects a timeout error)."""
    if deadline is None:
        return seconds
    return max(0.001, min(seconds, deadline - time.monotonic()))


class _StaleConnection(Exception):
    """The server closed a connection before answering (an idle keep-alive timed out)."""


class WireTransport:
    """The default transport (``_transport.Transport``): one :class:`WirePool` per origin,
    made at first use with the proxy the environment names for it then (a redirect to a CDN
    host in ``NO_PROXY`` goes direct, the origin through the proxy)."""

    def __init__(self, options: TransportOptions) -> None:
        self._options = options
        self._lock = threading.Lock()
        self._pools: dict[tuple[str, str, int], WirePool] = {}
        # url -> (pool, request target), parsed once per URL: the hot path skips urlsplit
        self._routes: dict[str, tuple[WirePool, str]] = {}
        self._closed = False

    def get(self, url: str, headers: Mapping[str, str]) -> WireResponse:
        route = self._routes.get(url)
        if route is None:
            route = self._route(url)
        pool, target = route
        response = pool.get(target, headers)
        if response.status == 407 and pool.proxy is not None:
            # an http request the proxy itself refused (a CONNECT refusal is raised earlier)
            with response:  # its body is not wanted: the connection is closed
                proxy = pool.proxy
                hint = (
                    "its credentials were refused"
                    if proxy.has_credentials
                    else "it wants credentials: http://user:password@host:port"
                )
                raise ProxyRefused(f"the proxy {proxy.label} answered HTTP 407; {hint}", 407)
        return response

    def _route(self, url: str) -> tuple[WirePool, str]:
        parts = urllib.parse.urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        route = (self._pool_for(url), target)
        with self._lock:
            if len(self._routes) > MAX_ROUTES:
                self._routes.clear()
            self._routes[url] = route
        return route

    def _pool_for(self, url: str) -> WirePool:
        scheme, host, port = origin = origin_of(url)
        with self._lock:
            if self._closed:
                raise OSError("the transport is closed")
            pool = self._pools.get(origin)
            if pool is None:
                options = self._options
                timeouts = options.timeouts
                pool = self._pools[origin] = WirePool(
                    scheme,
                    host,
                    port,
                    maxsize=options.max_connections_per_host,  # a hard cap per host
                    connect_timeout=timeouts.connect_seconds,
                    read_timeout=timeouts.read_seconds,
                    pool_timeout=timeouts.pool_seconds,
                    ssl_context=client_context(options.verify) if scheme == "https" else None,
                    on_connect=options.on_connect,
                    proxy=proxy_for(url),
                )
            return pool

    def drop_after_fork(self) -> None:
        """In a forked child: let go of the parent's idle connections (no lock: a parent
        thread may have held it at the fork)."""
        pools, self._pools, self._routes = list(self._pools.values()), {}, {}
        for pool in pools:
            pool.drop_after_fork()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pools, self._pools, self._routes = list(self._pools.values()), {}, {}
        for pool in pools:
            pool.close()

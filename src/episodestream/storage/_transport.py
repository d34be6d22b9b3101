"""The seam between :class:`HttpRangeReader` and the HTTP client that carries its bytes.

A transport sends one ``GET`` with the headers it is given and returns the response with its
body unread; everything above — redirects, credentials per origin, retries, ``Content-Range``
and validator checks, splitting and coalescing — is the reader's and the same whichever
transport carries the bytes. The default is our HTTP/1.1 wire (:class:`WireTransport` in
``_wire.py``); the benchmark puts urllib3 and httpx behind this same seam
(``benchmarks/transports.py``) to compare clients like for like (docs/HTTP_CLIENTS.md).

The reader takes a *factory* (``transport=``: a callable from :class:`TransportOptions` to a
:class:`Transport`, e.g. the class itself), so a pickled or forked reader makes its own.

What a transport raises, so that the reader classes failures the same for every client:

- :class:`PoolTimeout`: no connection slot for the host within ``timeouts.pool_seconds``;
- :class:`ProxyUnreachable` (an ``OSError``) / :class:`ProxyRefused` (with the status; 407
  also for a plain-http request the proxy itself refused);
- :class:`ProtocolError`: a malformed or truncated response head;
- ``ssl.SSLCertVerificationError``: a certificate that does not verify (never retried);
- ``TimeoutError``: no bytes within ``timeouts.connect_seconds`` / ``read_seconds``;
- ``ValueError``: a request target or header it refuses to send (control characters);
- ``OSError``: anything else on the connection.

A response's body read may raise ``TimeoutError``, ``OSError`` or ``ValueError``, and a body
shorter than announced reads as fewer bytes, then ``b""``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, Self

from episodestream.storage._config import DEFAULT_TIMEOUTS, Timeouts

__all__ = [
    "PoolTimeout",
    "ProtocolError",
    "ProxyRefused",
    "ProxyUnreachable",
    "Response",
    "Transport",
    "TransportFactory",
    "TransportOptions",
]


class ProtocolError(Exception):
    """A malformed or truncated HTTP response head; the connection is unusable."""


class PoolTimeout(Exception):
    """No connection slot for the host became free in time."""


class ProxyUnreachable(OSError):
    """The proxy could not be connected to, or did not answer a ``CONNECT`` in time."""


class ProxyRefused(Exception):
    """The proxy refused: a ``CONNECT`` answered with something other than 2xx, or a 407 to a
    request sent through it."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class TransportOptions:
    """What the reader tells the transport it makes.

    Args:
        timeouts: connect, read (each wait for bytes) and pool (waiting for a slot) seconds.
        max_connections_per_host: connections open at once to one origin (a hard cap).
        verify: TLS certificate verification: ``True``, ``False`` or a CA bundle path.
        on_connect: called with the seconds each new connection took (the reader's metrics).
    """

    timeouts: Timeouts = DEFAULT_TIMEOUTS
    max_connections_per_host: int = 16
    verify: bool | str = True
    on_connect: Callable[[float], None] | None = None


class Response(Protocol):
    """A response whose body is read on demand; it holds a connection until released.

    ``with response:`` releases it on the way out: the connection is kept when the body was
    read to its end, closed otherwise.
    """

    @property
    def status(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]:
        """Case-insensitive; repeated fields joined with ``", "``."""
        ...

    def peek(self) -> None:
        """Block until the first body byte has arrived, consuming none (time to first byte)."""
        ...

    def read(self, amount: int | None = None) -> bytes:
        """Up to ``amount`` body bytes (all when ``None``); ``b""`` at the end."""
        ...

    def release(self) -> None:
        """Give the connection back: kept when the body was fully read, closed otherwise."""
        ...

    def discard(self) -> None:
        """Close the connection: the rest of the body is not wanted."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...


class Transport(Protocol):
    """Sends ``GET``s over persistent connections; thread-safe."""

    def get(self, url: str, headers: Mapping[str, str]) -> Response:
        """Send ``GET url`` with exactly ``headers`` (no redirect followed, no retry) and
        return once the response head has arrived."""
        ...

    def drop_after_fork(self) -> None:
        """In a forked child: let go of the parent's connections without shutting them down
        (the parent still uses them); the reader makes a new transport afterwards."""
        ...

    def close(self) -> None:
        """Close every connection; one in use is shut down so its reader wakes at once."""
        ...


TransportFactory = Callable[[TransportOptions], Transport]

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
  :class:`ExchangeTooSlow` (a ``TimeoutError``) for an exchange that bytes kept arriving on
  but too slowly (see "Deadlines" below);
- ``ValueError``: a request target or header it refuses to send (control characters);
- ``OSError``: anything else on the connection.

A response's body read may raise ``TimeoutError``, ``OSError`` or ``ValueError``, and a body
shorter than announced reads as fewer bytes, then ``b""``.

Deadlines. A per-wait timeout does not bound an exchange: a server sending one byte just
inside each timeout (or ``103 Early Hints`` without end) keeps it going for ever. So the
exchange as a whole — request, every 1xx reply, the head and the body — must end within
``timeouts.read_seconds`` plus the time its bytes take at :data:`MIN_BYTES_PER_SECOND`, and
by the instant :func:`exchange_deadline` names when the reader sets one (an operation's
deadline, such as opening a dataset: ``_deadline.py``). The default wire enforces both at
every socket wait; a transport that cannot is bounded by its own timeouts and by the reader's
checks between attempts.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol, Self

from episodestream.storage._config import DEFAULT_TIMEOUTS, Timeouts
from episodestream.storage._deadline import MIN_BYTES_PER_SECOND

__all__ = [
    "MIN_BYTES_PER_SECOND",
    "ExchangeTooSlow",
    "PoolTimeout",
    "ProtocolError",
    "ProxyRefused",
    "ProxyUnreachable",
    "Response",
    "Transport",
    "TransportFactory",
    "TransportOptions",
    "current_exchange_deadline",
    "exchange_deadline",
]


# The instant (``time.monotonic()``) by which the exchanges sent in this context must end.
_EXCHANGE_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "episodestream_exchange_deadline", default=None
)


@contextlib.contextmanager
def exchange_deadline(expires: float | None) -> Iterator[None]:
    """Within the block, a transport's ``get`` bounds the exchange it starts (head and body,
    read later on the same connection) by ``expires`` (``time.monotonic()``); ``None``: no
    deadline beyond the exchange's own."""
    token = _EXCHANGE_DEADLINE.set(expires)
    try:
        yield
    finally:
        _EXCHANGE_DEADLINE.reset(token)


def current_exchange_deadline() -> float | None:
    """What :func:`exchange_deadline` set for the exchange about to start, if anything."""
    return _EXCHANGE_DEADLINE.get()


class ProtocolError(Exception):
    """A malformed or truncated HTTP response head; the connection is unusable."""


class ExchangeTooSlow(TimeoutError):
    """Bytes kept coming, but the exchange passed its deadline: slower than the minimum rate,
    more 1xx replies than the head allows time for, or past the deadline the reader set."""


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

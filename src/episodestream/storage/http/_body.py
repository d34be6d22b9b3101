"""Reading the HTTP reader's response bodies: a range's bytes, a small whole body, a skip.

Each function reads from a :class:`~episodestream.storage.http._transport.Response` the caller holds
in a ``with`` (released when read to its end, else its connection closed) and turns a short or
broken transfer into a :class:`~episodestream.storage.http._failures.Retry`.
"""

from __future__ import annotations

import time

from episodestream.errors import InvalidResponse, StorageError, StorageTimeout
from episodestream.storage._deadline import body_deadline_seconds
from episodestream.storage.http._failures import Retry
from episodestream.storage.http._metrics import Metrics
from episodestream.storage.http._rules import describe_error
from episodestream.storage.http._transport import ExchangeTooSlow, Response

__all__ = ["read_body", "read_small_body", "skip_body"]

# Small bodies and skips go in calls of this size: the minimum-rate deadline is checked
# between calls (one call blocks until its bytes are there or the read timeout passes).
_READ_CHUNK_BYTES = 64 * 1024
# One body read call fills one bytes object straight from the socket; ranges up to this size
# (episode spans, split parts) arrive with no copy at all.
_BODY_CALL_BYTES = 16 * 1024 * 1024
_SKIP_CHUNK_BYTES = 64 * 1024


def read_body(
    response: Response,
    wanted: int,
    where: str,
    sent: float,
    *,
    read_seconds: float,
    metrics: Metrics,
) -> tuple[bytes, Retry | None]:
    """Up to ``wanted`` body bytes; a short or broken body yields what came and a ``Retry``.

    Reads go in calls of up to ``_BODY_CALL_BYTES``, each filling a fresh ``bytes`` straight
    from the socket; every socket wait is bounded by the read timeout (``read_seconds``), and
    the attempt as a whole by a minimum rate, so a trickling server cannot hold a read forever.
    ``sent`` (``perf_counter`` when the request went) times the first byte.
    """
    pieces: list[bytes] = []
    position = 0
    deadline = time.monotonic() + body_deadline_seconds(read_seconds, wanted)
    failure: Retry | None = None
    body_started: float | None = None
    try:
        # Time to first byte: wait until the first body byte is buffered (not consumed).
        response.peek()
        body_started = time.perf_counter()
        metrics.add("first_byte_seconds", body_started - sent)
        while position < wanted:
            chunk = response.read(min(_BODY_CALL_BYTES, wanted - position))
            if not chunk:
                failure = Retry(
                    InvalidResponse(f"{where}: body ended after {position} of {wanted} bytes")
                )
                break
            pieces.append(chunk)
            position += len(chunk)
            if position < wanted and time.monotonic() > deadline:
                failure = Retry(StorageTimeout(f"{where}: body slower than the attempt deadline"))
                break
    except TimeoutError as error:
        failure = Retry(
            StorageTimeout(
                f"{where}: {_silence(error, read_seconds)} after {position} of {wanted} bytes"
            )
        )
        failure.__cause__ = error
    except (OSError, ValueError) as error:
        # ValueError: peek/read on a socket file the server already closed.
        failure = Retry(
            StorageError(
                f"{where}: body broken after {position} of {wanted} bytes: {describe_error(error)}"
            )
        )
        failure.__cause__ = error
    if body_started is not None:
        metrics.add("body_seconds", time.perf_counter() - body_started)
    metrics.add("bytes", position)
    return (pieces[0] if len(pieces) == 1 else b"".join(pieces)), failure


def read_small_body(
    response: Response,
    limit: int,
    *,
    read_seconds: float,
    strict: bool = False,
    where: str = "response body",
) -> bytes | None:
    """The whole body when it fits in ``limit`` bytes (the response's ``with`` then keeps
    its connection).

    A larger (declared or actual) body, or a broken or too slow one (the same deadline as
    :func:`read_body`'s, for ``limit`` bytes), is left unread (the ``with`` closes the
    connection) and gives ``None`` — or, with ``strict``, raises: ``InvalidResponse`` for
    too large, ``Retry`` for a broken or too slow transfer. ``where`` (a redacted URL) begins
    the messages.
    """
    deadline = time.monotonic() + body_deadline_seconds(read_seconds, limit)
    length = response.headers.get("Content-Length")
    if length is not None and (not length.strip().isdigit() or int(length) > limit):
        if strict:
            raise InvalidResponse(f"{where}: body of {length} bytes exceeds {limit}")
        return None
    parts: list[bytes] = []
    total = 0
    try:
        while True:
            # Read to the end (declared length or chunked EOF) so the response is complete
            # and its connection reusable; never more than ``limit`` + 1 bytes.
            chunk = response.read(min(_READ_CHUNK_BYTES, limit + 1 - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
            if total > limit:
                if strict:
                    raise InvalidResponse(f"{where}: body larger than {limit} bytes")
                return None
            more = length is None or total < int(length)
            if more and time.monotonic() > deadline:
                if strict:
                    raise Retry(
                        StorageTimeout(
                            f"{where}: body slower than the attempt deadline ({total} bytes read)"
                        )
                    )
                return None
    except TimeoutError as error:  # before OSError, its base: a silent server is a timeout
        if strict:
            silent = StorageTimeout(
                f"{where}: {_silence(error, read_seconds)} ({total} bytes read)"
            )
            raise Retry(silent) from error
        return None
    except (OSError, ValueError) as error:
        if strict:
            broken = StorageError(f"{where}: body broken: {describe_error(error)}")
            raise Retry(broken) from error
        return None
    return b"".join(parts)


def skip_body(
    response: Response, count: int, where: str, metrics: Metrics, *, read_seconds: float
) -> int:
    """Stream past (never buffer) up to ``count`` body bytes; how many there were.

    A broken transfer, or one slower than :func:`read_body`'s deadline for ``count`` bytes,
    raises ``Retry``; fewer than ``count`` means the body ended.
    """
    skipped = 0
    deadline = time.monotonic() + body_deadline_seconds(read_seconds, count)
    try:
        while skipped < count:
            chunk = response.read(min(_SKIP_CHUNK_BYTES, count - skipped))
            if not chunk:
                break
            skipped += len(chunk)
            metrics.add("bytes", len(chunk))
            if skipped < count and time.monotonic() > deadline:
                raise Retry(
                    StorageTimeout(
                        f"{where}: skipping to byte {count} slower than the attempt deadline "
                        f"({skipped} bytes skipped)"
                    )
                )
    except TimeoutError as error:  # before OSError, its base: a silent server is a timeout
        silent = StorageTimeout(
            f"{where}: {_silence(error, read_seconds)} while skipping ({skipped} bytes skipped)"
        )
        raise Retry(silent) from error
    except (OSError, ValueError) as error:
        raise Retry(StorageError(f"{where}: {describe_error(error)}")) from error
    return skipped


def _silence(error: TimeoutError, read_seconds: float) -> str:
    """What a timed-out body read says: no data at all, or data too slow (the wire's)."""
    if isinstance(error, ExchangeTooSlow):
        return str(error)
    return f"no data for {read_seconds} s"

"""urllib3 and httpx behind the reader's ``Transport`` seam (benchmark only, not in the wheel).

Each adapter makes one client the way its documentation recommends for threads — a
``urllib3.PoolManager`` with a blocking per-host pool, one ``httpx.Client`` — and translates its
exceptions into the ones the seam names (``storage/http/_transport.py``), so
:class:`~episodestream.storage.HttpRangeReader` runs on it unchanged: same redirects, checks,
retries, splitting and threads; only the bytes' carrier differs. Neither follows redirects,
retries, or decodes bodies itself.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping
from typing import Any, Self

from episodestream.storage.http._transport import (
    PoolTimeout,
    ProtocolError,
    TransportOptions,
)

__all__ = ["TRANSPORTS", "HttpxTransport", "Urllib3Transport"]


class Urllib3Transport:
    """``urllib3.PoolManager(maxsize=N, block=True)``; bodies streamed with ``read(n)``."""

    def __init__(self, options: TransportOptions) -> None:
        import urllib3

        self._urllib3 = urllib3
        timeouts = options.timeouts
        self._pool_seconds = timeouts.pool_seconds
        verify = options.verify
        tls: dict[str, Any] = {"cert_reqs": "CERT_REQUIRED" if verify else "CERT_NONE"}
        if isinstance(verify, str):
            tls["ca_certs"] = verify
        self._manager = urllib3.PoolManager(
            maxsize=options.max_connections_per_host,
            block=True,  # a hard per-host cap, as the wire's
            timeout=urllib3.Timeout(connect=timeouts.connect_seconds, read=timeouts.read_seconds),
            retries=False,
            **tls,
        )

    def get(self, url: str, headers: Mapping[str, str]) -> _Urllib3Response:
        errors = self._urllib3.exceptions
        try:
            response = self._manager.request(
                "GET",
                url,
                headers=dict(headers),
                preload_content=False,
                decode_content=False,
                redirect=False,
                retries=False,
                pool_timeout=self._pool_seconds,
            )
        except errors.EmptyPoolError as error:
            raise PoolTimeout(str(error)) from error
        except (errors.ConnectTimeoutError, errors.ReadTimeoutError) as error:
            raise TimeoutError(str(error)) from error
        except errors.ProtocolError as error:
            raise OSError(str(error)) from error
        except errors.HTTPError as error:
            raise ProtocolError(str(error)) from error
        return _Urllib3Response(response, errors)

    def drop_after_fork(self) -> None:
        self._manager = None  # type: ignore[assignment]  # the child makes a new transport

    def close(self) -> None:
        if self._manager is not None:
            self._manager.clear()


class _Urllib3Response:
    def __init__(self, response: Any, errors: Any) -> None:
        self._response = response
        self._errors = errors
        self.status: int = response.status
        self.headers: Mapping[str, str] = response.headers  # HTTPHeaderDict: case-insensitive
        self._ended = response.length_remaining == 0

    def peek(self) -> None:
        """Not offered by urllib3: the first read waits instead."""

    def read(self, amount: int | None = None) -> bytes:
        try:
            data = self._response.read(amount)
        except self._errors.ReadTimeoutError as error:
            raise TimeoutError(str(error)) from error
        except self._errors.HTTPError as error:  # a short body: IncompleteRead
            raise OSError(str(error)) from error
        if amount is None or not data or self._response.length_remaining == 0:
            self._ended = True
        return data

    def release(self) -> None:
        if not self._ended:
            self._response.close()  # the rest is not wanted: the connection goes
        self._response.release_conn()

    def discard(self) -> None:
        self._ended = False
        self.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class HttpxTransport:
    """One ``httpx.Client`` (``Limits(max_connections=N)``); bodies streamed with
    ``iter_raw``."""

    def __init__(self, options: TransportOptions) -> None:
        import httpx

        self._httpx = httpx
        timeouts = options.timeouts
        verify: Any = options.verify
        if isinstance(verify, str):
            verify = ssl.create_default_context(cafile=verify)
        connections = options.max_connections_per_host
        self._client = httpx.Client(
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            timeout=httpx.Timeout(
                connect=timeouts.connect_seconds,
                read=timeouts.read_seconds,
                write=timeouts.read_seconds,
                pool=timeouts.pool_seconds,
            ),
            verify=verify,
            follow_redirects=False,
            trust_env=False,
        )

    def get(self, url: str, headers: Mapping[str, str]) -> _HttpxResponse:
        httpx = self._httpx
        try:
            request = self._client.build_request("GET", url, headers=dict(headers))
            response = self._client.send(request, stream=True)
        except httpx.PoolTimeout as error:
            raise PoolTimeout(str(error)) from error
        except httpx.TimeoutException as error:
            raise TimeoutError(str(error)) from error
        except httpx.ProtocolError as error:
            raise ProtocolError(str(error)) from error
        except httpx.TransportError as error:
            raise OSError(str(error)) from error
        return _HttpxResponse(response, httpx)

    def drop_after_fork(self) -> None:
        self._client = None  # type: ignore[assignment]  # the child makes a new transport

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


class _HttpxResponse:
    def __init__(self, response: Any, httpx: Any) -> None:
        self._response = response
        self._httpx = httpx
        self.status: int = response.status_code
        self.headers: Mapping[str, str] = response.headers  # httpx.Headers: case-insensitive
        self._chunks: Iterator[bytes] = response.iter_raw()
        self._pending = b""
        # an error met after some bytes of a read: those bytes are returned first, as the
        # seam asks (a short body reads as fewer bytes), and the error raised by the next read
        self._error: BaseException | None = None

    def peek(self) -> None:
        """Not offered by httpx: the first read waits instead."""

    def read(self, amount: int | None = None) -> bytes:
        parts = [self._pending] if self._pending else []
        got = len(self._pending)
        self._pending = b""
        if self._error is not None and not parts:
            error, self._error = self._error, None
            raise error
        try:
            while amount is None or got < amount:
                chunk = next(self._chunks, None)
                if chunk is None:
                    break
                parts.append(chunk)
                got += len(chunk)
        except self._httpx.RemoteProtocolError:
            pass  # a short body: the bytes that came, then b""
        except self._httpx.TimeoutException as error:
            self._error = TimeoutError(str(error))
        except self._httpx.TransportError as error:
            self._error = OSError(str(error))
        if self._error is not None and not parts:
            error, self._error = self._error, None
            raise error
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        if amount is not None and len(data) > amount:
            data, self._pending = data[:amount], data[amount:]
        return data

    def release(self) -> None:
        # httpcore keeps the connection when the body was read to its end, closes it otherwise
        self._response.close()

    def discard(self) -> None:
        self._response.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


TRANSPORTS = {"urllib3": Urllib3Transport, "httpx": HttpxTransport}

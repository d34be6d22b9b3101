"""One named daemon thread running its own asyncio event loop around one listening server.

The lifecycle the loopback proxies share: start the thread and wait (bounded) until it
listens; close by stopping the server and the owner's connections on the loop, stopping the
loop and joining the thread (bounded), idempotently.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import threading
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Self, TypeAlias

from episodestream.errors import ConfigError, ServingError
from episodestream.helpers import Closing

__all__ = ["LoopProxy", "LoopThread"]

#: Opens the server on the given loop (run there by the loop thread).
Listen: TypeAlias = Callable[[asyncio.AbstractEventLoop], Awaitable[asyncio.Server]]


class LoopThread:
    """The thread, loop and server of one loopback proxy; ``label`` (e.g. ``"fault proxy"``)
    starts every error and log message, ``thread_name`` names the thread (``-<port>`` is
    appended once it listens), ``log`` takes the owner's messages."""

    def __init__(
        self,
        label: str,
        thread_name: str,
        *,
        host: str,
        port: int,
        start_timeout_s: float,
        stop_timeout_s: float,
        log: logging.Logger,
    ) -> None:
        self._log = log
        self._label = label
        self._thread_name = thread_name
        self._host = host
        self._requested_port = port
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None

    def start(
        self,
        listen: Listen,
        abort: Callable[[], Awaitable[None]],
    ) -> None:
        """Start the thread, run ``listen(loop)`` on its loop and wait until it listens
        (``abort`` as for :meth:`close`, used when it does not start in time)."""
        if self._thread is not None:
            raise ServingError(f"{self._label} already started")
        self._ready.clear()
        self._start_error = None
        self._thread = threading.Thread(
            target=self._run, args=(listen,), name=self._thread_name, daemon=True
        )
        self._thread.start()
        if not self._ready.wait(self._start_timeout_s):
            self.close(abort)
            raise ServingError(f"{self._label} did not start within {self._start_timeout_s} s")
        if self._start_error is not None or self._port is None:
            error = self._start_error or ServingError("its thread ended before it listened")
            self._thread.join(self._stop_timeout_s)
            self._thread = None
            raise ServingError(
                f"{self._label} could not listen on {self._host}:{self._requested_port}: {error}"
            ) from error
        self._thread.name = f"{self._thread_name}-{self._port}"

    def _run(self, listen: Listen) -> None:
        loop = asyncio.new_event_loop()
        try:
            try:
                self._server = loop.run_until_complete(listen(loop))
                self._port = int(self._server.sockets[0].getsockname()[1])
            except Exception as error:  # a taken port, or anything else: start() reports it
                self._start_error = error
                return
            self._loop = loop
            self._ready.set()
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._ready.set()

    async def _shutdown(self, abort: Callable[[], Awaitable[None]]) -> None:
        if self._server is not None:
            self._server.close()
        await abort()
        if self._server is not None:
            await self._server.wait_closed()

    def close(self, abort: Callable[[], Awaitable[None]]) -> None:
        """Stop listening, run ``abort()`` on the loop to end the owner's connections, stop the
        loop and join the thread (bounded); idempotent."""
        thread, loop = self._thread, self._loop
        self._thread = None
        if thread is None:
            return
        if loop is not None and loop.is_running():
            future = asyncio.run_coroutine_threadsafe(self._shutdown(abort), loop)
            try:
                future.result(timeout=self._stop_timeout_s)
            except Exception as error:  # still stop the loop; report after joining
                self._log.warning("%s shutdown: %r", self._label, error)
            loop.call_soon_threadsafe(loop.stop)
        thread.join(self._stop_timeout_s)
        self._loop = None
        if thread.is_alive():
            raise ServingError(
                f"{self._label} thread {thread.name} still alive "
                f"{self._stop_timeout_s} s after stop"
            )
        self._log.info("%s on port %s stopped", self._label, self._port)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self._port is not None

    @property
    def thread_name(self) -> str | None:
        return self._thread.name if self._thread is not None else None

    @property
    def port(self) -> int:
        """The listening port; :class:`ServingError` when not running."""
        if self._port is None or not self.running:
            raise ServingError(f"{self._label} is not running")
        return self._port


class LoopProxy(Closing, abc.ABC):
    """What the loopback proxies share on top of their :class:`LoopThread`: close, context
    manager, start-up, and where they listen. Subclasses call :meth:`_set_up` first and define
    ``_listen()`` (their server) and ``_abort()`` (coroutine aborting their connections on the
    loop)."""

    _host: str
    _runner: LoopThread
    _label: str
    _log: logging.Logger
    upstream: tuple[str, int]

    def _set_up(
        self,
        label: str,
        thread_name: str,
        upstream: tuple[str, int] | str,
        *,
        host: str,
        port: int | None,
        start_timeout_s: float,
        stop_timeout_s: float,
        log: logging.Logger,
    ) -> None:
        """What a proxy's ``__init__`` does first: ``upstream`` (``(host, port)`` or an
        ``http://host:port`` URL), where to listen (``port=None``: a free port) and the loop
        thread (see :class:`LoopThread` for ``label``, ``thread_name`` and ``log``).

        Raises:
            ConfigError: an upstream URL without a host or a port.
        """
        if isinstance(upstream, str):
            parsed = urllib.parse.urlsplit(upstream)
            if parsed.hostname is None or parsed.port is None:
                raise ConfigError(f"upstream URL needs a host and a port: {upstream!r}")
            upstream = (parsed.hostname, parsed.port)
        self.upstream = upstream
        self._label = label
        self._log = log
        self._host = host
        self._requested_port = port or 0
        self._runner = LoopThread(
            label,
            thread_name,
            host=host,
            port=self._requested_port,
            start_timeout_s=start_timeout_s,
            stop_timeout_s=stop_timeout_s,
            log=log,
        )

    def start(self) -> Self:
        """Start the proxy thread and wait until it listens; returns ``self``."""
        self._runner.start(self._listen, self._abort)
        self._log.info("%s %s -> %s:%d%s", self._label, self.url, *self.upstream, self._note())
        return self

    def _note(self) -> str:
        """What the start-up log line adds after the addresses (e.g. the link's settings)."""
        return ""

    @abc.abstractmethod
    def _listen(self, loop: asyncio.AbstractEventLoop) -> Awaitable[asyncio.Server]:
        """Start the subclass's server on ``loop`` (runs on the loop thread)."""

    @abc.abstractmethod
    async def _abort(self) -> None:
        """Abort the subclass's connections (runs on the loop)."""

    def close(self) -> None:
        """Abort every connection, stop listening and join the thread (bounded); idempotent."""
        self._runner.close(self._abort)

    def __enter__(self) -> Self:
        return self.start()

    @property
    def running(self) -> bool:
        return self._runner.running

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        return self._runner.port

    @property
    def url(self) -> str:
        """``http://host:port`` of the proxy (no trailing slash)."""
        return f"http://{self._host}:{self.port}"

    def rebase_url(self, url: str) -> str:
        """``url`` (on the upstream server) rewritten to go through this proxy."""
        parts = urllib.parse.urlsplit(url)
        return urllib.parse.urlunsplit(("http", f"{self._host}:{self.port}", *parts[2:]))

"""A fault-injecting HTTP/1.1 proxy on loopback, for reliability tests and demos of failure.

:class:`FaultProxy` sits in front of an HTTP server (normally the private nginx) and forwards
each request; a :class:`FaultPlan` decides, request by request, whether to answer normally or
to misbehave. The faults act on real HTTP exchanges, not on raw bytes:

========================  ===================================================================
kind                      what the client sees
========================  ===================================================================
``status``                ``status`` (503 by default) without asking upstream; ``burst`` > 1
                          answers the next ``burst - 1`` requests for the same path alike
``retry_after``           429 with ``Retry-After: retry_after_s`` (same ``burst`` rule)
``reset_before``          a TCP reset right after the request, before any response byte
``reset_body``            the real headers and part of the body, then a TCP reset
``truncate``              the real headers (full ``Content-Length``) and part of the body,
                          then a clean close (FIN)
``stall_headers``         nothing at all for ``stall_s`` seconds, then a close
``stall_body``            the real headers and part of the body, then nothing for
                          ``stall_s`` seconds, then a close
``wrong_range``           the server answers another range than the one asked for (the
                          ``Range`` start moved by ``shift_bytes``), with its honest
                          ``Content-Range``
``bad_content_range``     the asked-for bytes, under a ``Content-Range`` header whose start is
                          off by ``shift_bytes``
``ignore_range``          ``Range``/``If-Range`` dropped upstream: ``200`` and the whole file
========================  ===================================================================

"Part of the body" is ``body_fraction`` of it (at least one byte short of the whole). A file
replaced mid-run is not a proxy fault: replace it on disk under nginx (its ETag is the file's
mtime and size), which is what a real origin does.

Why a separate proxy and not hooks inside :class:`~episodestream_tools.serving.WanEmulator`: the
emulator moves opaque bytes with exact pacing; faults need the HTTP framing (where the head ends,
how long the body is), so they live in an HTTP-aware layer. Chain the two for faults over a slow
link: ``WanEmulator(fault_proxy.address, settings)`` in front of ``FaultProxy(nginx.address)``.

The proxy runs on its own event loop in one daemon thread; every wait is bounded (``stall_s`` is
capped by :data:`MAX_STALL_S`, reads by ``io_timeout_s``); :meth:`FaultProxy.close` aborts every
connection and joins the thread.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import random
import socket
import struct
import threading
import urllib.parse
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from episodestream._checks import check_choice, check_int, check_number
from episodestream.errors import ConfigError
from episodestream_tools.serving._loop import LoopProxy
from episodestream_tools.serving._net import LOOPBACK_HOST

__all__ = [
    "FAULT_KINDS",
    "MAX_STALL_S",
    "Fault",
    "FaultPlan",
    "FaultProxy",
    "FaultRecord",
    "ProxiedRequest",
    "RandomFaults",
    "ScriptedFaults",
]

logger = logging.getLogger(__name__)

FaultKind = Literal[
    "status",
    "retry_after",
    "reset_before",
    "reset_body",
    "truncate",
    "stall_headers",
    "stall_body",
    "wrong_range",
    "bad_content_range",
    "ignore_range",
]
FAULT_KINDS: tuple[str, ...] = FaultKind.__args__  # type: ignore[attr-defined]

#: no fault holds a connection silent longer than this, whatever it asks
MAX_STALL_S = 30.0
DEFAULT_IO_TIMEOUT_S = 30.0
DEFAULT_START_TIMEOUT_S = 5.0
DEFAULT_STOP_TIMEOUT_S = 5.0
_MAX_HEAD_BYTES = 64 * 1024
_RELAY_CHUNK_BYTES = 256 * 1024
_REASONS = {
    200: "OK",
    206: "Partial Content",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


@dataclass(frozen=True, slots=True)
class Fault:
    """One misbehaviour (see the module docstring for each ``kind``).

    Args:
        kind: what goes wrong.
        status: the status of a ``status`` fault.
        retry_after_s: ``Retry-After`` seconds sent with a ``status``/``retry_after`` answer
            (``None``: no header for ``status``; ``retry_after`` always sends one, default 1).
        burst: a ``status``/``retry_after`` fault also answers the next ``burst - 1``
            requests for the same path.
        body_fraction: share of the body sent before a ``reset_body``, ``truncate`` or
            ``stall_body`` fault strikes.
        stall_s: silence of a stall, capped at :data:`MAX_STALL_S`.
        shift_bytes: offset error of ``wrong_range`` and ``bad_content_range``.
    """

    kind: FaultKind
    status: int = 503
    retry_after_s: float | None = None
    burst: int = 1
    body_fraction: float = 0.5
    stall_s: float = 2.0
    shift_bytes: int = 1

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, FAULT_KINDS)
        if not 100 <= check_int("status", self.status) <= 599:
            raise ConfigError(f"status must be an HTTP status, got {self.status}")
        if self.retry_after_s is not None:
            check_number("retry_after_s", self.retry_after_s, minimum=0.0)
        check_int("burst", self.burst, minimum=1)
        if not 0.0 <= check_number("body_fraction", self.body_fraction) < 1.0:
            raise ConfigError(f"body_fraction must lie in [0, 1), got {self.body_fraction}")
        check_number("stall_s", self.stall_s, minimum=0.0)
        if check_int("shift_bytes", self.shift_bytes) == 0:
            raise ConfigError("shift_bytes must not be 0")

    @property
    def label(self) -> str:
        """Short name for tables: the kind, with the status for ``status`` faults."""
        return f"status_{self.status}" if self.kind == "status" else self.kind


@dataclass(frozen=True, slots=True)
class ProxiedRequest:
    """What the plan sees of one request: method, path (no query), headers (lower-case)."""

    method: str
    path: str
    headers: dict[str, str]

    @property
    def range(self) -> str | None:
        return self.headers.get("range")


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """One request the proxy handled and the fault it applied (``None``: forwarded as is)."""

    number: int
    path: str
    range: str | None
    fault: str | None


class FaultPlan(Protocol):
    """Chooses the fault of each request; called on the proxy's loop thread only."""

    def choose(self, request: ProxiedRequest) -> Fault | None: ...


class _Bursts:
    """Status faults that repeat for the next requests of the same path."""

    def __init__(self) -> None:
        self._left: dict[str, tuple[Fault, int]] = {}

    def take(self, path: str) -> Fault | None:
        pending = self._left.get(path)
        if pending is None:
            return None
        fault, left = pending
        if left <= 1:
            del self._left[path]
        else:
            self._left[path] = (fault, left - 1)
        return fault

    def start(self, path: str, fault: Fault) -> None:
        if fault.kind in ("status", "retry_after") and fault.burst > 1:
            self._left[path] = (fault, fault.burst - 1)


class RandomFaults:
    """Each request misbehaves with probability ``rate``, drawing a fault from ``menu``.

    Seeded: the sequence of choices is a function of ``seed`` and of the order requests arrive.
    Paths matching none of ``paths_containing`` (when given) are always forwarded as is.
    """

    def __init__(
        self,
        menu: Sequence[Fault],
        *,
        rate: float,
        seed: int,
        paths_containing: Sequence[str] = (),
    ) -> None:
        if not menu:
            raise ConfigError("menu must hold at least one fault")
        check_number("rate", rate, minimum=0.0, maximum=1.0)
        self.menu = tuple(menu)
        self.rate = rate
        self._rng = random.Random(seed)
        self._paths = tuple(paths_containing)
        self._bursts = _Bursts()

    def choose(self, request: ProxiedRequest) -> Fault | None:
        repeated = self._bursts.take(request.path)
        if repeated is not None:
            return repeated
        if self._paths and not any(part in request.path for part in self._paths):
            return None
        if self._rng.random() >= self.rate:
            return None
        fault = self._rng.choice(self.menu)
        self._bursts.start(request.path, fault)
        return fault


class ScriptedFaults:
    """Faults given in advance: each applies once, to the next request whose path contains
    its pattern (``""`` matches every path), in the order given."""

    def __init__(self, *script: tuple[str, Fault]) -> None:
        self._script: collections.deque[tuple[str, Fault]] = collections.deque(script)
        self._bursts = _Bursts()

    def add(self, pattern: str, fault: Fault) -> None:
        self._script.append((pattern, fault))

    @property
    def pending(self) -> int:
        return len(self._script)

    def choose(self, request: ProxiedRequest) -> Fault | None:
        repeated = self._bursts.take(request.path)
        if repeated is not None:
            return repeated
        for item in list(self._script):
            pattern, fault = item
            if pattern in request.path:
                self._script.remove(item)
                self._bursts.start(request.path, fault)
                return fault
        return None


class _NoFaults:
    def choose(self, request: ProxiedRequest) -> Fault | None:
        return None


@dataclass(slots=True)
class _Head:
    first_line: str
    headers: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str) -> str | None:
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return None

    def without(self, *names: str) -> None:
        drop = {n.lower() for n in names}
        self.headers = [(k, v) for k, v in self.headers if k.lower() not in drop]

    def set(self, name: str, value: str) -> None:
        self.without(name)
        self.headers.append((name, value))

    def encode(self) -> bytes:
        lines = [self.first_line, *(f"{k}: {v}" for k, v in self.headers), "", ""]
        return "\r\n".join(lines).encode("latin-1")


class _Closed(Exception):
    """The client or upstream connection ended; stop serving this client."""


def _parse_head(raw: bytes) -> _Head:
    text = raw.decode("latin-1").rstrip("\r\n")
    lines = text.split("\r\n")
    head = _Head(lines[0])
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise _Closed(f"malformed header line {line!r}")
        head.headers.append((name.strip(), value.strip()))
    return head


def _shift_range(value: str, shift: int) -> str:
    """``bytes=a-b`` with both ends moved by ``shift`` (kept >= 0)."""
    unit, _, spec = value.partition("=")
    first, _, last = spec.partition("-")
    if not first.strip().isdigit():
        return value
    start = max(0, int(first) + shift)
    end = "" if not last.strip().isdigit() else str(max(start, int(last) + shift))
    return f"{unit}={start}-{end}"


def _shift_content_range(value: str, shift: int) -> str:
    """``bytes a-b/n`` with the start moved by ``shift`` (the claim no longer matches)."""
    unit, _, rest = value.partition(" ")
    span, _, total = rest.partition("/")
    first, _, last = span.partition("-")
    if not (first.isdigit() and last.isdigit()):
        return value
    start = max(0, int(first) + shift)
    return f"{unit} {start}-{int(last) + shift}/{total}"


class _ClientSession:
    """Serves one client connection: request by request, one upstream connection (lazy)."""

    def __init__(
        self, proxy: FaultProxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.proxy = proxy
        self.reader = reader
        self.writer = writer
        self.up_reader: asyncio.StreamReader | None = None
        self.up_writer: asyncio.StreamWriter | None = None

    async def run(self) -> None:
        try:
            while True:
                try:
                    raw = await asyncio.wait_for(
                        self.reader.readuntil(b"\r\n\r\n"), self.proxy.idle_timeout_s
                    )
                except (
                    asyncio.IncompleteReadError,
                    asyncio.LimitOverrunError,
                    TimeoutError,
                    ConnectionError,
                ):
                    return
                head = _parse_head(raw)
                parts = head.first_line.split(" ")
                if len(parts) != 3:
                    return
                method, target, _version = parts
                path = urllib.parse.urlsplit(target).path
                request = ProxiedRequest(method, path, {k.lower(): v for k, v in head.headers})
                fault = self.proxy._plan.choose(request)
                self.proxy._record(path, request.range, fault)
                if not await self._answer(head, method, fault):
                    return
        except _Closed:
            return
        except (ConnectionError, OSError, TimeoutError):
            return
        finally:
            self._abort_upstream(reset=False)
            with contextlib.suppress(Exception):
                self.writer.close()

    # -- faults that need no upstream ----------------------------------------------------

    async def _answer(self, head: _Head, method: str, fault: Fault | None) -> bool:
        """Serve one request; False when the client connection must end."""
        kind = fault.kind if fault is not None else None
        if fault is not None and kind in ("status", "retry_after"):
            status = 429 if kind == "retry_after" else fault.status
            retry_after = fault.retry_after_s
            if kind == "retry_after" and retry_after is None:
                retry_after = 1.0
            body = f"injected fault: HTTP {status}\n".encode()
            lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Fault')}"]
            lines += ["Content-Type: text/plain", f"Content-Length: {len(body)}"]
            if retry_after is not None:
                lines.append(f"Retry-After: {max(0, round(retry_after))}")
            self.writer.write(("\r\n".join([*lines, "", ""])).encode() + body)
            await self._drain()
            return True
        if kind == "reset_before":
            self._reset_client()
            return False
        if fault is not None and kind == "stall_headers":
            await self._stall(fault.stall_s)
            return False
        # -- forward upstream ------------------------------------------------------------
        if fault is not None and kind == "ignore_range":
            head.without("Range", "If-Range")
        if fault is not None and kind == "wrong_range":
            asked = head.get("Range")
            if asked is not None:
                head.set("Range", _shift_range(asked, fault.shift_bytes))
        response = await self._exchange(head)
        status_line = response.first_line.split(" ", 2)
        status = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else 0
        if fault is not None and kind == "bad_content_range":
            claimed = response.get("Content-Range")
            if claimed is not None:
                response.set("Content-Range", _shift_content_range(claimed, fault.shift_bytes))
        declared = response.get("Content-Length")
        has_body = method != "HEAD" and status not in (204, 304) and status >= 200
        length = int(declared) if declared is not None and declared.isdigit() else None
        close_after = (response.get("Connection") or "").lower() == "close"
        chunked = "chunked" in (response.get("Transfer-Encoding") or "").lower()
        if has_body and length is None and not chunked:
            close_after = True  # a body without length or chunks ends when upstream closes
        self.writer.write(response.encode())
        if not has_body:
            await self._drain()
            return not close_after
        if chunked:
            # (API listings; nginx's static files always declare a length) relayed whole:
            # body faults apply to Content-Length bodies only
            await self._relay_chunked()
            await self._drain()
            if close_after:
                self._abort_upstream(reset=False)
            return not close_after
        cut: int | None = None
        if fault is not None and kind in ("reset_body", "truncate", "stall_body"):
            whole = length if length is not None else 0
            cut = min(int(whole * fault.body_fraction), max(whole - 1, 0))
        sent = await self._relay(length, cut)
        if cut is not None and fault is not None:
            assert sent == cut
            if kind == "reset_body":
                self._abort_upstream(reset=False)
                self._reset_client()
            elif kind == "truncate":
                self._abort_upstream(reset=False)
                await self._drain()
            else:  # stall_body
                await self._drain()
                self._abort_upstream(reset=False)
                await self._stall(fault.stall_s)
            return False
        await self._drain()
        if length is None or close_after:
            self._abort_upstream(reset=False)
            return False
        return True

    # -- upstream ------------------------------------------------------------------------

    async def _exchange(self, head: _Head) -> _Head:
        """Send ``head`` upstream (opening a connection if needed); the response head."""
        for attempt in range(2):
            fresh = self.up_writer is None
            if fresh:
                host, port = self.proxy.upstream
                self.up_reader, self.up_writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), self.proxy.io_timeout_s
                )
            assert self.up_reader is not None and self.up_writer is not None
            try:
                self.up_writer.write(head.encode())
                await asyncio.wait_for(self.up_writer.drain(), self.proxy.io_timeout_s)
                raw = await asyncio.wait_for(
                    self.up_reader.readuntil(b"\r\n\r\n"), self.proxy.io_timeout_s
                )
                return _parse_head(raw)
            except (asyncio.IncompleteReadError, ConnectionError):
                # a kept-alive upstream connection nginx closed meanwhile: one fresh try
                self._abort_upstream(reset=False)
                if fresh or attempt:
                    raise _Closed("upstream closed") from None
        raise _Closed("upstream closed")

    async def _relay(self, length: int | None, cut: int | None) -> int:
        """Copy the upstream body to the client: ``length`` bytes (or to EOF), stopping at
        ``cut`` bytes when given. Returns the bytes sent."""
        assert self.up_reader is not None
        limit = cut if cut is not None else length
        sent = 0
        while limit is None or sent < limit:
            want = _RELAY_CHUNK_BYTES if limit is None else min(_RELAY_CHUNK_BYTES, limit - sent)
            chunk = await asyncio.wait_for(self.up_reader.read(want), self.proxy.io_timeout_s)
            if not chunk:
                if limit is None:
                    break
                raise _Closed("upstream body ended early")
            self.writer.write(chunk)
            sent += len(chunk)
            await self._drain()
        return sent

    async def _relay_chunked(self) -> None:
        """Copy a chunked body as is, through its last chunk and trailers."""
        assert self.up_reader is not None
        timeout = self.proxy.io_timeout_s
        while True:
            line = await asyncio.wait_for(self.up_reader.readuntil(b"\r\n"), timeout)
            self.writer.write(line)
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    trailer = await asyncio.wait_for(self.up_reader.readuntil(b"\r\n"), timeout)
                    self.writer.write(trailer)
                    if trailer == b"\r\n":
                        return
            self.writer.write(await asyncio.wait_for(self.up_reader.readexactly(size + 2), timeout))
            await self._drain()

    async def _stall(self, seconds: float) -> None:
        """Say nothing for ``seconds`` (capped), or until the client gives up and closes."""
        with contextlib.suppress(TimeoutError, ConnectionError, OSError):
            await asyncio.wait_for(self.reader.read(1), min(seconds, MAX_STALL_S))

    async def _drain(self) -> None:
        await asyncio.wait_for(self.writer.drain(), self.proxy.io_timeout_s)

    def _reset_client(self) -> None:
        """Close the client's socket with a TCP reset (RST), not a clean FIN."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    def _abort_upstream(self, *, reset: bool) -> None:
        writer, self.up_writer, self.up_reader = self.up_writer, None, None
        if writer is not None:
            writer.transport.abort()


class FaultProxy(LoopProxy):
    """An HTTP/1.1 proxy on loopback that injects the faults ``plan`` chooses.

    Use as a context manager, or call :meth:`start` and :meth:`close`.

    Args:
        upstream: ``(host, port)`` of the real server, or an ``http://host:port`` URL.
        plan: a :class:`FaultPlan` (e.g. :class:`RandomFaults`, :class:`ScriptedFaults`);
            ``None`` forwards everything untouched.
        host, port: where to listen (``port=None`` picks a free one).
        io_timeout_s: bound on every wait for upstream or for the client to take bytes.
        idle_timeout_s: a client connection idle this long between requests is closed.
    """

    def __init__(
        self,
        upstream: tuple[str, int] | str,
        plan: FaultPlan | None = None,
        *,
        host: str = LOOPBACK_HOST,
        port: int | None = None,
        io_timeout_s: float = DEFAULT_IO_TIMEOUT_S,
        idle_timeout_s: float = 60.0,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
    ) -> None:
        self._set_up(
            "fault proxy",
            "episodestream-faults",
            upstream,
            host=host,
            port=port,
            start_timeout_s=start_timeout_s,
            stop_timeout_s=stop_timeout_s,
            log=logger,
        )
        self._plan: FaultPlan = plan if plan is not None else _NoFaults()
        self.io_timeout_s = io_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._records: list[FaultRecord] = []
        self._records_lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    # -- plan and records ----------------------------------------------------------------

    def set_plan(self, plan: FaultPlan | None) -> None:
        """Replace the plan (takes effect from the next request)."""
        self._plan = plan if plan is not None else _NoFaults()

    def _record(self, path: str, range_header: str | None, fault: Fault | None) -> None:
        with self._records_lock:
            self._records.append(
                FaultRecord(
                    len(self._records), path, range_header, None if fault is None else fault.label
                )
            )

    def records(self) -> list[FaultRecord]:
        """Every request handled so far, in arrival order."""
        with self._records_lock:
            return list(self._records)

    # -- lifecycle -----------------------------------------------------------------------

    def _listen(self, loop: asyncio.AbstractEventLoop) -> Awaitable[asyncio.Server]:
        return asyncio.start_server(
            self._accept,
            self._host,
            self._requested_port,
            reuse_address=True,
            backlog=1024,
            limit=_MAX_HEAD_BYTES,
        )

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await _ClientSession(self, reader, writer).run()
        except asyncio.CancelledError:
            # close() cancelled us: end quietly (re-raising makes asyncio's stream callback
            # log the cancellation as an error)
            with contextlib.suppress(Exception):
                writer.transport.abort()
        except Exception as error:  # a proxy bug must not kill the loop; the client sees a close
            logger.warning("fault proxy: connection handler failed: %r", error)
            with contextlib.suppress(Exception):
                writer.transport.abort()
        finally:
            self._tasks.discard(task)

    async def _abort(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self._stop_timeout_s)

    def __repr__(self) -> str:
        where = self.url if self.running else "stopped"
        return f"FaultProxy({where} -> {self.upstream[0]}:{self.upstream[1]})"

    # -- where -----------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """``(host, port)`` to put another proxy (e.g. a WanEmulator) in front of this one."""
        return self._host, self.port

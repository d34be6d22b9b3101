"""An emulated wide-area link on loopback: an asyncio TCP proxy adding delay and a rate cap.

``tc netem`` is not available on these machines, so the link is emulated in user space. Every
proxied connection has two lanes (client → upstream and upstream → client). A lane models a
bottleneck link followed by a propagation delay:

* bytes are time-stamped when they arrive; a byte starts on the link when the link is free
  (``bandwidth`` per lane and connection, zero burst: a byte leaves at ``start + size / rate``),
  then takes ``rtt / 2`` more to arrive. Delivery times only grow, so order is preserved, and
  the delay is pipelined — it adds latency, never throughput loss, as long as the lane's buffer
  holds a bandwidth-delay product;
* a new connection is charged ``connect_rtts`` round trips before its first byte may leave
  (the TCP handshake a real client would wait for; loopback completes it instantly);
* each lane buffers at most ``queue_limit_bytes``; beyond that the proxy stops reading its
  source (TCP backpressure to the sender) and it never lets the destination's socket buffer
  grow past a small high-water mark either.

The proxy runs on its own event loop in one daemon thread; :meth:`WanEmulator.close` aborts
every connection and joins the thread. Faults (5xx bursts, 429, resets mid-body, truncated
bodies, stalls, wrong ranges) need the HTTP framing, which this byte-level proxy does not
parse: they live in the test suite's fault proxy (``tests/support/faults.py``); chain the two
(``WanEmulator(fault_proxy.address, settings)``) for faults over a slow link.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import urllib.parse
from collections.abc import Awaitable
from dataclasses import dataclass

from episodestream.helpers import check_int, check_number
from episodestream_tools.serving._loop import LoopProxy
from episodestream_tools.serving._net import LOOPBACK_HOST

__all__ = [
    "DEFAULT_UNLIMITED_QUEUE_BYTES",
    "WanEmulator",
    "WanSettings",
    "WanStats",
]

logger = logging.getLogger(__name__)

MIB = 1024 * 1024
# A lane without a rate cap still buffers what is "in flight": at most this much, so one
# connection carries at most DEFAULT_UNLIMITED_QUEUE_BYTES / (rtt / 2) per second — like a
# real TCP window, and far above what the benchmarks' links carry.
DEFAULT_UNLIMITED_QUEUE_BYTES = 16 * MIB
# a capped lane holds its bandwidth-delay product in flight plus a backlog that keeps the
# link busy while reading from the source resumes
_MIN_QUEUE_BYTES = 4 * MIB
_BACKLOG_BYTES = 2 * MIB
_MIN_CUSTOM_QUEUE_BYTES = 64 * 1024
# pacing granularity of a capped lane: slices of about this much link time
_SLICE_SECONDS = 0.005
_MIN_SLICE_BYTES = 4 * 1024
_MAX_SLICE_BYTES = 256 * 1024
# the destination transport's own buffer stays small; the lane queue is the real buffer
_SINK_HIGH_WATER_BYTES = 256 * 1024
# The selector rounds its timeout up to whole milliseconds, so a timer set for the exact
# delivery time fires 0-1 ms late (0.5 ms on average) and every lane would add that lag.
# Timers fire half that early instead and deliver what is due within the same slack: errors
# of either sign, about zero on average. Short delays get a proportionally smaller slack.
_DELIVERY_SLACK_S = 0.0005
DEFAULT_START_TIMEOUT_S = 5.0
DEFAULT_STOP_TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class WanSettings:
    """An emulated link, per connection.

    Args:
        rtt_ms: round-trip time added; each direction is delayed by half of it.
        bandwidth_mibps: rate cap per connection and direction in MiB/s; ``None`` = no cap.
        connect_rtts: round trips charged when a connection opens before its first byte
            moves (1 = a TCP handshake; 2 would model TCP + TLS 1.3).
        buffer_bytes: per-lane buffer bound; ``None`` picks twice the bandwidth-delay product
            plus 2 MiB (at least 4 MiB), or :data:`DEFAULT_UNLIMITED_QUEUE_BYTES` without a
            rate cap.
    """

    rtt_ms: float = 0.0
    bandwidth_mibps: float | None = None
    connect_rtts: float = 1.0
    buffer_bytes: int | None = None

    def __post_init__(self) -> None:
        check_number("rtt_ms", self.rtt_ms, minimum=0.0)
        if self.bandwidth_mibps is not None:  # None: no cap
            check_number("bandwidth_mibps", self.bandwidth_mibps, above=0.0)
        check_number("connect_rtts", self.connect_rtts, minimum=0.0)
        if self.buffer_bytes is not None:
            check_int("buffer_bytes", self.buffer_bytes, minimum=_MIN_CUSTOM_QUEUE_BYTES)

    @property
    def one_way_delay_s(self) -> float:
        return self.rtt_ms / 2000.0

    @property
    def bandwidth_bytes_per_s(self) -> float | None:
        return None if self.bandwidth_mibps is None else self.bandwidth_mibps * MIB

    @property
    def queue_limit_bytes(self) -> int:
        """The bound on bytes one lane holds."""
        if self.buffer_bytes is not None:
            return self.buffer_bytes
        rate = self.bandwidth_bytes_per_s
        if rate is None:
            return DEFAULT_UNLIMITED_QUEUE_BYTES
        return max(_MIN_QUEUE_BYTES, int(2 * rate * self.one_way_delay_s) + _BACKLOG_BYTES)

    def describe(self) -> str:
        rate = "unlimited" if self.bandwidth_mibps is None else f"{self.bandwidth_mibps:g} MiB/s"
        return f"rtt {self.rtt_ms:g} ms, {rate} per connection"


@dataclass(frozen=True, slots=True)
class WanStats:
    """Counters since the emulator started (a snapshot; read while traffic flows)."""

    connections_opened: int
    connections_active: int
    bytes_to_upstream: int
    bytes_to_client: int
    peak_queued_bytes: int


class _Counters:
    """Mutated only on the emulator's loop thread."""

    def __init__(self) -> None:
        self.connections_opened = 0
        self.connections_active = 0
        self.bytes_to_upstream = 0
        self.bytes_to_client = 0
        self.peak_queued_bytes = 0


class _Lane:
    """One direction of one connection: bytes read from ``source`` reach ``sink`` late."""

    def __init__(self, link: _Link, *, to_upstream: bool) -> None:
        self.link = link
        self.to_upstream = to_upstream
        settings = link.settings
        self.delay_s = settings.one_way_delay_s
        self.slack_s = min(_DELIVERY_SLACK_S, self.delay_s / 4)
        self.rate = settings.bandwidth_bytes_per_s
        self.limit = settings.queue_limit_bytes
        # resume reading well before the queue runs dry, so the link never idles waiting
        self.resume_below = self.limit * 3 // 4
        self.slice_bytes = (
            _MAX_SLICE_BYTES
            if self.rate is None
            else min(_MAX_SLICE_BYTES, max(_MIN_SLICE_BYTES, int(self.rate * _SLICE_SECONDS)))
        )
        # (delivery time, bytes) in order; ``None`` bytes is the sender's EOF
        self.queue: collections.deque[tuple[float, memoryview | None]] = collections.deque()
        self.queued_bytes = 0
        self.link_free_at = 0.0
        self.source: asyncio.Transport | None = None
        self.sink: asyncio.Transport | None = None
        self.source_paused = False
        self.sink_paused = False
        self.eof_queued = False
        self.finished = False  # EOF delivered, or the sink is gone
        self.timer: asyncio.TimerHandle | None = None

    def _start_time(self) -> float:
        return max(self.link.loop.time(), self.link.ready_at, self.link_free_at)

    def feed(self, data: bytes) -> None:
        if self.finished or self.eof_queued:
            return
        view = memoryview(data)
        if self.rate is None:
            self.queue.append((self._start_time() + self.delay_s, view))
        else:
            for offset in range(0, len(view), self.slice_bytes):
                piece = view[offset : offset + self.slice_bytes]
                self.link_free_at = self._start_time() + len(piece) / self.rate
                self.queue.append((self.link_free_at + self.delay_s, piece))
        self.queued_bytes += len(view)
        counters = self.link.counters
        counters.peak_queued_bytes = max(counters.peak_queued_bytes, self.queued_bytes)
        if self.queued_bytes >= self.limit and not self.source_paused and self.source:
            self.source_paused = True
            self.source.pause_reading()
        self._schedule()

    def feed_eof(self) -> None:
        """The sender finished; its EOF travels behind its last byte."""
        if self.finished or self.eof_queued:
            return
        self.eof_queued = True
        self.queue.append((self._start_time() + self.delay_s, None))
        self._schedule()

    def set_sink(self, sink: asyncio.Transport) -> None:
        self.sink = sink
        self._schedule()

    def pause_sink(self) -> None:
        self.sink_paused = True

    def resume_sink(self) -> None:
        self.sink_paused = False
        self._schedule()

    def drop(self) -> None:
        """The sink is gone: discard what is queued and stop."""
        self.finished = True
        self.queue.clear()
        self.queued_bytes = 0
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _schedule(self) -> None:
        if (
            self.timer is None
            and self.queue
            and self.sink is not None
            and not self.sink_paused
            and not self.finished
        ):
            self.timer = self.link.loop.call_at(self.queue[0][0] - self.slack_s, self._deliver)

    def _deliver(self) -> None:
        self.timer = None
        sink = self.sink
        if sink is None or self.sink_paused or self.finished:
            return
        due = self.link.loop.time() + self.slack_s
        batch: list[memoryview] = []
        eof = False
        while self.queue and self.queue[0][0] <= due:
            _, data = self.queue.popleft()
            if data is None:
                eof = True
                break
            batch.append(data)
        if batch:
            size = sum(len(piece) for piece in batch)
            self.queued_bytes -= size
            counters = self.link.counters
            if self.to_upstream:
                counters.bytes_to_upstream += size
            else:
                counters.bytes_to_client += size
            sink.writelines(batch)  # may call pause_sink() synchronously
        if eof:
            self.finished = True
            try:
                if sink.can_write_eof():
                    sink.write_eof()
                else:
                    sink.close()
            except OSError:
                # the destination reset while we were not reading from it (its lane full):
                # shutdown() fails and no connection_lost will come; end the link as a reset
                self.link.abort()
                return
            self.link.lane_finished()
            return
        if self.source_paused and self.queued_bytes <= self.resume_below and self.source:
            self.source_paused = False
            self.source.resume_reading()
        self._schedule()


class _Side(asyncio.Protocol):
    """The protocol on one socket of a link (the client's or the upstream's)."""

    def __init__(self, link: _Link, *, is_client: bool) -> None:
        self.link = link
        self.is_client = is_client

    @property
    def outgoing(self) -> _Lane:
        """The lane this socket's bytes feed."""
        return self.link.up if self.is_client else self.link.down

    @property
    def incoming(self) -> _Lane:
        """The lane that writes into this socket."""
        return self.link.down if self.is_client else self.link.up

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.set_write_buffer_limits(high=_SINK_HIGH_WATER_BYTES)
        with contextlib.suppress(OSError):
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.link.side_made(self, transport)

    def data_received(self, data: bytes) -> None:
        self.outgoing.feed(data)

    def eof_received(self) -> bool:
        self.outgoing.feed_eof()
        return True  # keep the socket open: the other direction may still carry data

    def pause_writing(self) -> None:
        self.incoming.pause_sink()

    def resume_writing(self) -> None:
        self.incoming.resume_sink()

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.side_lost(self, exc)


class _Link:
    """One proxied connection: a client socket, an upstream socket and two lanes."""

    def __init__(self, emulator: WanEmulator, settings: WanSettings) -> None:
        self.emulator = emulator
        self.loop = asyncio.get_running_loop()
        self.counters = emulator._counters
        self.settings = settings
        self.ready_at = self.loop.time() + settings.connect_rtts * settings.rtt_ms / 1000.0
        self.up = _Lane(self, to_upstream=True)
        self.down = _Lane(self, to_upstream=False)
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.connect_task: asyncio.Task[None] | None = None
        self.closed = False

    def side_made(self, side: _Side, transport: asyncio.Transport) -> None:
        if side.is_client:
            self.client = transport
            self.up.source = transport
            self.down.set_sink(transport)
            self.emulator._links.add(self)
            self.counters.connections_opened += 1
            self.counters.connections_active += 1
            self.connect_task = self.loop.create_task(self.connect_upstream())
        else:
            self.upstream = transport
            self.down.source = transport
            self.up.set_sink(transport)

    async def connect_upstream(self) -> None:
        host, port = self.emulator.upstream
        try:
            await self.loop.create_connection(lambda: _Side(self, is_client=False), host, port)
        except OSError as error:
            logger.warning("WAN emulator: upstream %s:%d refused: %s", host, port, error)
            self.abort()

    def lane_finished(self) -> None:
        if self.up.finished and self.down.finished:
            self.close()

    def side_lost(self, side: _Side, exc: Exception | None) -> None:
        if self.closed:
            return
        if exc is not None:
            # a reset on one side is passed on as a reset, not as a clean end
            self.abort()
            return
        side.incoming.drop()
        side.outgoing.feed_eof()
        self.lane_finished()

    def close(self) -> None:
        if self.closed:
            return
        self._forget()
        for transport in (self.client, self.upstream):
            if transport is not None:
                transport.close()

    def abort(self) -> None:
        if self.closed:
            return
        self._forget()
        for transport in (self.client, self.upstream):
            if transport is not None:
                transport.abort()

    def _forget(self) -> None:
        self.closed = True
        self.up.drop()
        self.down.drop()
        if self.connect_task is not None and not self.connect_task.done():
            self.connect_task.cancel()
        if self in self.emulator._links:
            self.emulator._links.discard(self)
            self.counters.connections_active -= 1


class WanEmulator(LoopProxy):
    """A TCP proxy on loopback that makes ``upstream`` look far away (see module docstring).

    Use as a context manager, or call :meth:`start` and :meth:`close`.

    Args:
        upstream: ``(host, port)`` to forward to, or an ``http://host:port`` URL.
        settings: the emulated link; defaults to no delay and no cap.
        host: address to listen on.
        port: port to listen on; ``None`` picks a free one.
    """

    def __init__(
        self,
        upstream: tuple[str, int] | str,
        settings: WanSettings | None = None,
        *,
        host: str = LOOPBACK_HOST,
        port: int | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
    ) -> None:
        self._set_up(
            "WAN emulator",
            "episodestream-wan",
            upstream,
            host=host,
            port=port,
            start_timeout_s=start_timeout_s,
            stop_timeout_s=stop_timeout_s,
            log=logger,
        )
        self.settings = settings if settings is not None else WanSettings()
        self._counters = _Counters()
        self._links: set[_Link] = set()

    # -- lifecycle -------------------------------------------------------------------------

    def _note(self) -> str:
        return f" ({self.settings.describe()})"

    def _listen(self, loop: asyncio.AbstractEventLoop) -> Awaitable[asyncio.Server]:
        return loop.create_server(
            self._accept,
            self._host,
            self._requested_port,
            reuse_address=True,
            backlog=1024,
        )

    def _accept(self) -> _Side:
        return _Side(_Link(self, self.settings), is_client=True)

    async def _abort(self) -> None:
        for link in list(self._links):
            link.abort()
        # let the aborted transports run connection_lost and close their sockets
        for _ in range(3):
            await asyncio.sleep(0)

    def __repr__(self) -> str:
        where = self.url if self.running else "stopped"
        return f"WanEmulator({where} -> {self.upstream[0]}:{self.upstream[1]}, {self.settings})"

    # -- where and how much ----------------------------------------------------------------

    @property
    def thread_name(self) -> str | None:
        """Name of the proxy thread while running (``episodestream-wan-<port>``)."""
        return self._runner.thread_name

    def url_for(self, path: str = "") -> str:
        """URL of ``path`` on the upstream server, reached through the emulated link."""
        return f"{self.url}/{urllib.parse.quote(path.lstrip('/'))}"

    def stats(self) -> WanStats:
        counters = self._counters
        return WanStats(
            connections_opened=counters.connections_opened,
            connections_active=counters.connections_active,
            bytes_to_upstream=counters.bytes_to_upstream,
            bytes_to_client=counters.bytes_to_client,
            peak_queued_bytes=counters.peak_queued_bytes,
        )

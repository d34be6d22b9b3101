"""WanEmulator under hostile peers: a client that resets while the upstream half-closes."""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time

import pytest

from episodestream_tools.serving import WanEmulator, WanSettings


def test_upstream_eof_towards_a_reset_client_closes_the_link(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client resets while the emulator has stopped reading from it (its lane is full);
    the upstream then half-closes. Passing that EOF on must not raise inside the event loop
    (``shutdown`` on a reset socket), and the link must end instead of staying open forever."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    half_close = threading.Event()

    def upstream() -> None:
        connection, _ = listener.accept()  # never reads: the client's bytes back up
        accepted.append(connection)
        half_close.wait(10)
        connection.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=upstream, daemon=True)
    thread.start()
    settings = WanSettings(buffer_bytes=64 * 1024)
    with (
        caplog.at_level(logging.ERROR, logger="asyncio"),
        WanEmulator(listener.getsockname(), settings) as emulator,
    ):
        client = socket.create_connection((emulator.host, emulator.port))
        client.setblocking(False)
        chunk = b"x" * 65536
        deadline = time.monotonic() + 10
        stalled_since = None
        # fill every buffer until the emulator stops reading from the client
        while time.monotonic() < deadline:
            try:
                client.send(chunk)
                stalled_since = None
            except BlockingIOError:
                stalled_since = stalled_since or time.monotonic()
                if time.monotonic() - stalled_since > 0.5:
                    break
                time.sleep(0.01)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # RST, unseen by the emulator while it is not reading
        time.sleep(0.1)
        half_close.set()
        thread.join(10)
        deadline = time.monotonic() + 3
        while emulator.stats().connections_active and time.monotonic() < deadline:
            time.sleep(0.02)
        active = emulator.stats().connections_active
    for connection in accepted:
        connection.close()
    listener.close()
    assert active == 0, "the link stayed open: its sockets leak until the emulator closes"
    loop_errors = [r for r in caplog.records if r.name == "asyncio"]
    assert not loop_errors, loop_errors[0].getMessage()

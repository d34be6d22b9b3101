"""Run a function in a forked child and hand its text reply back to the parent."""

from __future__ import annotations

import os
import select
import signal
import time
from collections.abc import Callable

#: How long the parent waits for a child's reply and exit before it kills the child.
DEFAULT_TIMEOUT_S = 60.0


def reply_from_fork(child: Callable[[], str], *, timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """``child()`` run in a forked copy of this process; its returned text, read back through
    a pipe once the child has exited (an empty reply when the child raised). The child leaves
    with ``os._exit``, so none of the parent's cleanups run twice. A child that has not replied
    and exited within ``timeout_s`` (a lock inherited held, say) is killed, and the test fails
    saying so instead of hanging."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write_end, child().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + timeout_s
    chunks: list[bytes] = []
    try:
        while True:  # read to the end of the pipe: the child wrote and exited
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_end], [], [], left)[0]:
                _kill(pid)
                raise AssertionError(
                    f"forked child {pid} sent no complete reply within {timeout_s:g} s "
                    f"(killed; read so far: {b''.join(chunks)[:200]!r})"
                )
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
    while os.waitpid(pid, os.WNOHANG) == (0, 0):  # closed its pipe end: exiting now
        if time.monotonic() >= deadline:
            _kill(pid)
            raise AssertionError(f"forked child {pid} did not exit within {timeout_s:g} s")
        time.sleep(0.01)
    return b"".join(chunks).decode()


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)

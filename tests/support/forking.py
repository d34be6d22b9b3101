"""Run a function in a forked child and hand its text reply back to the parent."""

from __future__ import annotations

import os
from collections.abc import Callable


def reply_from_fork(child: Callable[[], str]) -> str:
    """``child()`` run in a forked copy of this process; its returned text, read back through
    a pipe once the child has exited (an empty reply when the child raised). The child leaves
    with ``os._exit``, so none of the parent's cleanups run twice."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.write(write_end, child().encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        reply = pipe.read().decode()
    os.waitpid(pid, 0)
    return reply

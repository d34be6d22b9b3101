"""Small socket helpers shared by nginx and the WAN emulator."""

from __future__ import annotations

import socket
import time

__all__ = ["free_port", "wait_until_accepting"]

LOOPBACK_HOST = "127.0.0.1"


def free_port(host: str = LOOPBACK_HOST) -> int:
    """A TCP port the kernel just reported free on ``host`` (another process may still take it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def port_accepts(host: str, port: int, timeout_s: float = 0.2) -> bool:
    """Whether a TCP connect to ``host:port`` succeeds within ``timeout_s``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_until_accepting(host: str, port: int, timeout_s: float) -> bool:
    """Poll ``host:port`` until it accepts a connection or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if port_accepts(host, port):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)

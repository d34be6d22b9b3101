"""pytest fixtures: serving — one nginx per test session, WAN emulators in front of it.

* ``http_server``: the session's :class:`~episodestream_tools.serving.NginxServer` (private root).
  ``http_server.publish(path, name)`` serves a file or folder at ``/<name>`` and returns its
  URL; ``http_server.access_records(since=http_server.log_mark())`` reads the access log.
* ``http_publish(path, name=None) -> url``: publish under a name derived from the absolute
  path when none is given (same path, same URL; safe to call from many tests).
* ``lerobot_sim5_url``: tests/data/lerobot_sim5 over HTTP, direct (no trailing slash).
* ``wan_emulator_factory(rtt_ms=0, bandwidth_mibps=None, connect_rtts=1.0) -> WanEmulator``:
  an emulator in front of ``http_server``, one per distinct setting for the whole session
  (so its ``stats()`` are shared: compare differences). ``emulator.rebase_url(direct_url)``
  turns a URL from ``publish`` into the same URL through the emulated link.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from episodestream_tools.serving import NginxServer, WanEmulator, WanSettings

HttpPublish = Callable[..., str]
WanEmulatorFactory = Callable[..., WanEmulator]


@pytest.fixture(scope="session")
def http_server() -> Iterator[NginxServer]:
    with NginxServer() as server:
        yield server


@pytest.fixture(scope="session")
def http_publish(http_server: NginxServer) -> HttpPublish:
    def publish(path: str | os.PathLike[str], name: str | None = None) -> str:
        resolved = Path(path).resolve()
        if name is None:
            digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
            stem = "".join(c if c.isalnum() or c in "._-" else "_" for c in resolved.name)
            name = f"{stem or 'root'}-{digest}"
        return http_server.publish(resolved, name)

    return publish


@pytest.fixture(scope="session")
def lerobot_sim5_url(http_publish: HttpPublish, lerobot_fixture_root: Path) -> str:
    return http_publish(lerobot_fixture_root, "lerobot_sim5")


@pytest.fixture(scope="session")
def wan_emulator_factory(http_server: NginxServer) -> Iterator[WanEmulatorFactory]:
    emulators: dict[WanSettings, WanEmulator] = {}

    def make(
        rtt_ms: float = 0.0, bandwidth_mibps: float | None = None, connect_rtts: float = 1.0
    ) -> WanEmulator:
        settings = WanSettings(
            rtt_ms=rtt_ms, bandwidth_mibps=bandwidth_mibps, connect_rtts=connect_rtts
        )
        if settings not in emulators:
            emulators[settings] = WanEmulator((http_server.host, http_server.port), settings)
            emulators[settings].start()
        return emulators[settings]

    yield make
    for emulator in emulators.values():
        emulator.close()


def run_clients(client: Callable[[int], None], count: int, timeout_s: float) -> None:
    """``client(0)``, ..., ``client(count - 1)`` at once, one thread each; fails when one is
    still running after ``timeout_s``."""
    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout_s)
    assert not any(thread.is_alive() for thread in threads), f"a client ran past {timeout_s} s"

"""nginx and a WAN emulator in front of it, started and stopped together."""

from __future__ import annotations

import contextlib
import os
import urllib.parse
from pathlib import Path

from episodestream.errors import ConfigError
from episodestream.helpers import Closing
from episodestream_tools.serving._nginx import NginxServer
from episodestream_tools.serving._wan import WanEmulator, WanSettings

__all__ = ["ServedDataset", "serve_dataset"]


class ServedDataset(Closing):
    """A folder served by nginx behind an emulated link; close it to stop both.

    ``url`` goes through the emulator, ``nginx_url`` straight to nginx. Both end without a
    slash; the folder's files are at ``url + "/" + relative_path``.
    """

    def __init__(self, nginx: NginxServer, emulator: WanEmulator) -> None:
        self.nginx = nginx
        self.emulator = emulator

    @property
    def root(self) -> Path:
        return self.nginx.root

    @property
    def url(self) -> str:
        return self.emulator.url

    @property
    def nginx_url(self) -> str:
        return self.nginx.url

    @property
    def settings(self) -> WanSettings:
        return self.emulator.settings

    def url_for(self, path: str = "") -> str:
        """URL of ``path`` (relative to the served folder) through the emulated link."""
        return f"{self.url}/{urllib.parse.quote(path.lstrip('/'))}"

    def close(self) -> None:
        """Stop the emulator (aborting its connections), then nginx; idempotent."""
        try:
            self.emulator.close()
        finally:
            self.nginx.close()

    def __repr__(self) -> str:
        return (
            f"ServedDataset({str(self.root)!r}, url={self.url}, nginx_url={self.nginx_url}, "
            f"{self.settings.describe()})"
        )


def serve_dataset(
    root: str | os.PathLike[str],
    *,
    rtt_ms: float = 0.0,
    bandwidth_mibps: float | None = None,
    settings: WanSettings | None = None,
    port: int | None = None,
    nginx_port: int | None = None,
    workdir: str | os.PathLike[str] | None = None,
    workers: int = 1,
) -> ServedDataset:
    """Serve ``root`` with nginx on loopback behind a WAN emulator; returns the running pair.

    Args:
        root: folder to serve at ``/``.
        rtt_ms: round-trip time the emulator adds.
        bandwidth_mibps: per-connection rate cap in MiB/s; ``None`` = no cap.
        settings: full emulator settings; when given, ``rtt_ms`` and ``bandwidth_mibps`` must
            be left at their defaults.
        port: the emulator's port (the URL clients use); ``None`` picks a free one.
        nginx_port: nginx's own port; ``None`` picks a free one.
        workdir: nginx's working folder (kept after close); ``None`` = temporary.
        workers: nginx worker processes.
    """
    if settings is None:
        settings = WanSettings(rtt_ms=rtt_ms, bandwidth_mibps=bandwidth_mibps)
    elif rtt_ms != 0.0 or bandwidth_mibps is not None:
        raise ConfigError("give either settings= or rtt_ms=/bandwidth_mibps=, not both")
    nginx = NginxServer(root, port=nginx_port, workdir=workdir, workers=workers).start()
    try:
        emulator = WanEmulator((nginx.host, nginx.port), settings, port=port).start()
    except BaseException:
        with contextlib.suppress(Exception):
            nginx.close()
        raise
    return ServedDataset(nginx, emulator)

"""Loopback serving for tests, benchmarks and the demo: a private nginx and a WAN emulator.

:class:`NginxServer` runs Debian's nginx with its own config on 127.0.0.1 (byte ranges, ETags,
an access log we can parse); :class:`WanEmulator` is a TCP proxy in front of it adding a
round-trip delay and a per-connection rate cap; :func:`serve_dataset` starts both.
The fault-injecting proxy the reliability tests use lives with them (``tests/support/faults.py``).
"""

from episodestream_tools.serving._accesslog import (
    ACCESS_LOG_FIELDS,
    AccessLogRecord,
    AccessSummary,
    parse_access_log_line,
    read_access_log,
    summarize_access,
)
from episodestream_tools.serving._nginx import NginxServer
from episodestream_tools.serving._serve import ServedDataset, serve_dataset
from episodestream_tools.serving._wan import (
    WanEmulator,
    WanSettings,
    WanStats,
)

__all__ = [
    "ACCESS_LOG_FIELDS",
    "AccessLogRecord",
    "AccessSummary",
    "NginxServer",
    "ServedDataset",
    "WanEmulator",
    "WanSettings",
    "WanStats",
    "parse_access_log_line",
    "read_access_log",
    "serve_dataset",
    "summarize_access",
]

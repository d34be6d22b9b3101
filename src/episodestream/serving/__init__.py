"""Loopback serving for tests, benchmarks and the demo: a private nginx and a WAN emulator.

:class:`NginxServer` runs Debian's nginx with its own config on 127.0.0.1 (byte ranges, ETags,
an access log we can parse); :class:`WanEmulator` is a TCP proxy in front of it adding a
round-trip delay and a per-connection rate cap; :func:`serve_dataset` starts both.
:class:`FaultProxy` is an HTTP-aware proxy injecting faults (5xx bursts, 429, resets, truncated
bodies, stalls, wrong ranges) chosen by a :class:`FaultPlan`.
"""

from episodestream.serving._accesslog import (
    ACCESS_LOG_FIELDS,
    AccessLogRecord,
    AccessSummary,
    parse_access_log_line,
    read_access_log,
    summarize_access,
)
from episodestream.serving._faults import (
    FAULT_KINDS,
    Fault,
    FaultPlan,
    FaultProxy,
    FaultRecord,
    ProxiedRequest,
    RandomFaults,
    ScriptedFaults,
)
from episodestream.serving._nginx import DEFAULT_NGINX_PATH, NginxServer, find_nginx
from episodestream.serving._serve import ServedDataset, serve_dataset
from episodestream.serving._wan import (
    DEFAULT_UNLIMITED_QUEUE_BYTES,
    WanEmulator,
    WanSettings,
    WanStats,
)

__all__ = [
    "ACCESS_LOG_FIELDS",
    "DEFAULT_NGINX_PATH",
    "DEFAULT_UNLIMITED_QUEUE_BYTES",
    "FAULT_KINDS",
    "AccessLogRecord",
    "AccessSummary",
    "Fault",
    "FaultPlan",
    "FaultProxy",
    "FaultRecord",
    "NginxServer",
    "ProxiedRequest",
    "RandomFaults",
    "ScriptedFaults",
    "ServedDataset",
    "WanEmulator",
    "WanSettings",
    "WanStats",
    "find_nginx",
    "parse_access_log_line",
    "read_access_log",
    "serve_dataset",
    "summarize_access",
]

"""WAN emulator accuracy: what the emulated link measures, as ratios to its settings.

Run: ``python -m benchmarks.wan [--rounds N] [--json PATH]``.

The tests check that the emulator delays, caps and forwards bytes exactly (one-sided bounds a
loaded machine cannot break); how *close* its timing comes to the settings depends on the
machine's load, so it is measured here. nginx serves a random file; one emulator (RTT 100 ms)
and one with a cap (RTT 100 ms, 8 MiB/s per connection) sit in front of it. Each round measures
every figure once, in the same order (rounds interleave the figures), and the table reports the
median ratio measured / setting over the rounds with the lowest and highest round, and whether
the median falls within ±20 %:

- ``round trip (kept alive)``: a 100-byte range on an open connection, against the RTT;
- ``round trip (fresh connection)``: connect + the same request, against 2 x RTT
  (``connect_rtts=1``);
- ``upstream half`` / ``downstream half``: request sent → nginx's log stamp, and log stamp →
  response received, each against RTT / 2 (nginx stamps to the millisecond);
- ``download rate`` / ``upload rate``: 4 MiB through the capped emulator, each way, against the
  cap (after the first byte, so the delay is not counted).
"""

from __future__ import annotations

import argparse
import http.client
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

from tests.support.timed_range import timed_range_get

from benchmarks._common import add_json_option, put_out
from episodestream_tools.serving import NginxServer, WanEmulator, WanSettings

__all__ = ["main", "run_wan_bench"]

MIB = 1024 * 1024
RTT_SECONDS = 0.100
CAP_BYTES_PER_SECOND = 8 * MIB
TRANSFER_BYTES = 4 * MIB
FILE_BYTES = TRANSFER_BYTES + 1000
BAND = 0.20
REQUESTS_PER_ROUND = 5
IO_TIMEOUT_SECONDS = 30.0

FIGURES = (
    "round trip (kept alive)",
    "round trip (fresh connection)",
    "upstream half",
    "downstream half",
    "download rate",
    "upload rate",
)


def _connect(url: str) -> http.client.HTTPConnection:
    parts = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=IO_TIMEOUT_SECONDS)


def _get(conn: http.client.HTTPConnection, url: str, first: int, last: int) -> bytes:
    conn.request("GET", urllib.parse.urlsplit(url).path, headers={"Range": f"bytes={first}-{last}"})
    response = conn.getresponse()
    body = response.read()
    if response.status != 206 or len(body) != last - first + 1:
        raise RuntimeError(f"{url}: HTTP {response.status}, {len(body)} bytes for {first}-{last}")
    return body


def _round_trips(url: str, data: bytes) -> tuple[float, float]:
    """(median kept-alive round trip, median fresh-connection round trip), seconds."""
    conn = _connect(url)
    _get(conn, url, 0, 99)  # opens the connection
    kept = []
    for i in range(REQUESTS_PER_ROUND):
        started = time.perf_counter()
        body = _get(conn, url, i * 1000, i * 1000 + 99)
        kept.append(time.perf_counter() - started)
        if body != data[i * 1000 : i * 1000 + 100]:
            raise RuntimeError("the emulator changed the bytes")
    conn.close()
    fresh = []
    for _ in range(3):
        conn = _connect(url)
        started = time.perf_counter()
        conn.connect()
        _get(conn, url, 0, 9)
        fresh.append(time.perf_counter() - started)
        conn.close()
    return statistics.median(kept), statistics.median(fresh)


def _halves(url: str, nginx: NginxServer) -> tuple[float, float]:
    """(median request → nginx stamp, median nginx stamp → response), seconds."""
    conn = _connect(url)
    _get(conn, url, 0, 0)
    mark = nginx.log_mark()
    sent, received = [], []
    for i in range(REQUESTS_PER_ROUND):
        sent.append(time.time())
        _get(conn, url, i, i + 9)
        received.append(time.time())
    conn.close()
    logged = [r.time_s for r in nginx.wait_for_records(REQUESTS_PER_ROUND, since=mark)]
    upstream = statistics.median(log - s for log, s in zip(logged, sent, strict=True))
    downstream = statistics.median(r - log for log, r in zip(logged, received, strict=True))
    return upstream, downstream


def _download_rate(url: str, data: bytes) -> float:
    got = timed_range_get(url, TRANSFER_BYTES, timeout_s=IO_TIMEOUT_SECONDS)
    if got.body != data[:TRANSFER_BYTES]:
        raise RuntimeError("the emulator changed the bytes")
    return got.rate


def _upload_rate() -> float:
    """Bytes/s a plain TCP sink receives through a capped emulator (first to last byte)."""
    payload = bytes(range(256)) * (TRANSFER_BYTES // 256)
    times: list[float] = []
    total = [0]
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(IO_TIMEOUT_SECONDS)

        def sink() -> None:
            conn, _ = server.accept()
            conn.settimeout(IO_TIMEOUT_SECONDS)
            with conn:
                while data := conn.recv(65536):
                    times.append(time.perf_counter())
                    total[0] += len(data)

        thread = threading.Thread(target=sink, name="wan-bench-sink", daemon=True)
        thread.start()
        settings = WanSettings(bandwidth_mibps=CAP_BYTES_PER_SECOND / MIB)
        with (
            WanEmulator(("127.0.0.1", server.getsockname()[1]), settings) as emulator,
            socket.create_connection(("127.0.0.1", emulator.port), timeout=10) as client,
        ):
            client.sendall(payload)
            client.shutdown(socket.SHUT_WR)
            thread.join(IO_TIMEOUT_SECONDS)
    if thread.is_alive() or total[0] != len(payload):
        raise RuntimeError(f"upload: {total[0]} of {len(payload)} bytes arrived")
    return total[0] / (times[-1] - times[0])


def run_wan_bench(rounds: int = 5) -> dict[str, Any]:
    """Measure every figure ``rounds`` times, interleaved; ratios to the settings."""
    data = os.urandom(FILE_BYTES)
    ratios: dict[str, list[float]] = {figure: [] for figure in FIGURES}
    with tempfile.TemporaryDirectory(prefix="wan-bench-") as folder:
        Path(folder, "big.bin").write_bytes(data)
        with NginxServer() as nginx:
            url = f"{nginx.publish(folder, 'wan')}/big.bin"
            delayed = WanSettings(rtt_ms=RTT_SECONDS * 1000)
            capped = WanSettings(
                rtt_ms=RTT_SECONDS * 1000, bandwidth_mibps=CAP_BYTES_PER_SECOND / MIB
            )
            address = (nginx.host, nginx.port)
            with WanEmulator(address, delayed) as slow, WanEmulator(address, capped) as narrow:
                for _ in range(rounds):
                    kept, fresh = _round_trips(slow.rebase_url(url), data)
                    upstream, downstream = _halves(slow.rebase_url(url), nginx)
                    download = _download_rate(narrow.rebase_url(url), data)
                    upload = _upload_rate()
                    for figure, ratio in zip(
                        FIGURES,
                        (
                            kept / RTT_SECONDS,
                            fresh / (2 * RTT_SECONDS),
                            upstream / (RTT_SECONDS / 2),
                            downstream / (RTT_SECONDS / 2),
                            download / CAP_BYTES_PER_SECOND,
                            upload / CAP_BYTES_PER_SECOND,
                        ),
                        strict=True,
                    ):
                        ratios[figure].append(ratio)
    summary = {
        figure: {
            "median": statistics.median(values),
            "low": min(values),
            "high": max(values),
            "within_band": abs(statistics.median(values) - 1) <= BAND,
        }
        for figure, values in ratios.items()
    }
    return {"rounds": rounds, "band": BAND, "figures": summary, "ratios": ratios}


def _table(result: dict[str, Any]) -> str:
    lines = [
        f"WAN emulator, measured / setting (median of {result['rounds']} interleaved rounds)",
        f"{'figure':32} {'median':>7} {'low':>7} {'high':>7}  within ±{result['band']:.0%}",
    ]
    for figure, row in result["figures"].items():
        verdict = "yes" if row["within_band"] else "NO"
        lines.append(
            f"{figure:32} {row['median']:7.3f} {row['low']:7.3f} {row['high']:7.3f}  {verdict}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.wan", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    add_json_option(parser)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    result = run_wan_bench(args.rounds)
    return put_out(result, args.json, _table(result))


if __name__ == "__main__":
    sys.exit(main())

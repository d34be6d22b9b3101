"""HTTP clients behind the reader's Transport seam, on episode-sized ranges at a real RTT.

Run: ``python -m benchmarks.http_clients [--rounds N] [--json PATH]``.

One :class:`HttpRangeReader` per client, identical but for ``transport=``: our HTTP/1.1 wire
(the default), urllib3 and httpx (``benchmarks/transports.py``). Each reads batches of ranges
of 0.1, 1 and 10 MiB, 16 at a time over 16 connections (one request per range: no splitting,
no coalescing), from nginx through the WAN emulator (RTT 50 ms, 40 MiB/s per connection),
both in a child process so the CPU time measured here (this process, every thread) is the
client's and the reader's own. Every body is checked before it counts.

Rounds interleave the clients, rotating their order, after one warm-up batch each (connections
open); figures are medians over rounds: requests/s and CPU seconds per GiB, and each as a
ratio to our wire's in the same rounds (per-round ratios, then their median).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import add_json_option, put_out
from benchmarks.storage import _Servers
from benchmarks.transports import HttpxTransport, Urllib3Transport
from episodestream.storage import HttpRangeReader, Limits, ReadRequest
from episodestream.storage.http._wire import WireTransport

__all__ = ["main", "run_http_clients_bench"]

MIB = 1024 * 1024
FILE_NAME = "episodes.bin"
FILE_BYTES = 64 * MIB
CONNECTIONS = 16
WAN_RTT_MS = 50.0
WAN_MIBPS = 40.0
# range size -> ranges per timed batch (about a second of link time each)
SIZES: dict[float, int] = {0.1: 320, 1.0: 160, 10.0: 48}
QUICK_SIZES: dict[float, int] = {0.1: 160, 1.0: 64, 10.0: 32}
TRANSPORTS = {
    "episodestream wire": WireTransport,
    "urllib3": Urllib3Transport,
    "httpx": HttpxTransport,
}
BASELINE = "episodestream wire"


def _reader(base_url: str, transport: Any) -> HttpRangeReader:
    limits = Limits(
        max_connections_per_host=CONNECTIONS,
        max_concurrency=CONNECTIONS,
        split_threshold_bytes=0,  # one request per range, for every client alike
        coalesce_gap_bytes=-1,
    )
    return HttpRangeReader(base_url, limits=limits, transport=transport)


def _ranges(size_mib: float, count: int, rng: random.Random) -> list[ReadRequest]:
    length = int(size_mib * MIB)
    return [
        ReadRequest(FILE_NAME, rng.randrange(0, FILE_BYTES - length), length) for _ in range(count)
    ]


def _measure(reader: HttpRangeReader, requests: list[ReadRequest], data: bytes) -> dict[str, float]:
    wall0, cpu0 = time.perf_counter(), time.process_time()
    bodies = reader.read_many(requests)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    total = 0
    for request, body in zip(requests, bodies, strict=True):
        head = data[request.offset : request.offset + 64]
        tail = data[request.end - 64 : request.end]
        if len(body) != request.length or body[:64] != head or body[-64:] != tail:
            raise AssertionError(f"wrong bytes for {request}")
        total += request.length
    return {
        "requests_per_s": len(requests) / wall,
        "mib_per_s": total / MIB / wall,
        "cpu_s_per_gib": cpu / (total / 1024**3),
    }


def run_http_clients_bench(
    *, rounds: int = 5, quick: bool = False, only: list[float] | None = None
) -> dict[str, Any]:
    rng = random.Random(0)
    data = rng.randbytes(FILE_BYTES)
    sizes = QUICK_SIZES if quick else SIZES
    if only:
        sizes = {size: count for size, count in sizes.items() if size in only}
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / FILE_NAME).write_bytes(data)
        servers = _Servers(Path(folder), [(WAN_RTT_MS, WAN_MIBPS)])
        readers = {}
        try:
            base = servers.urls[1]
            readers = {name: _reader(base, factory) for name, factory in TRANSPORTS.items()}
            for reader in readers.values():  # warm-up: every connection open
                reader.read_many(_ranges(1.0, CONNECTIONS, rng))
            raw: dict[tuple[str, float], list[dict[str, float]]] = {}
            names = list(TRANSPORTS)
            for number in range(rounds):
                order = names[number % len(names) :] + names[: number % len(names)]
                for size, count in sizes.items():
                    requests = _ranges(size, count, rng)  # the same ranges for every client
                    for name in order:
                        raw.setdefault((name, size), []).append(
                            _measure(readers[name], requests, data)
                        )
        finally:
            for reader in readers.values():
                reader.close()
            servers.close()
    return _report(raw, sizes, rounds)


def _report(
    raw: dict[tuple[str, float], list[dict[str, float]]], sizes: dict[float, int], rounds: int
) -> dict[str, Any]:
    report: dict[str, Any] = {
        "settings": {
            "connections": CONNECTIONS,
            "rtt_ms": WAN_RTT_MS,
            "mib_per_s_per_connection": WAN_MIBPS,
            "ranges_per_batch": {str(k): v for k, v in sizes.items()},
            "rounds": rounds,
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
            "load_average": os.getloadavg(),
        },
        "results": {},
    }
    for size in sizes:
        base_runs = raw[(BASELINE, size)]
        for name in TRANSPORTS:
            runs = raw[(name, size)]
            figures = {
                key: statistics.median(run[key] for run in runs)
                for key in ("requests_per_s", "mib_per_s", "cpu_s_per_gib")
            }
            figures["requests_per_s_vs_wire"] = statistics.median(
                run["requests_per_s"] / base["requests_per_s"]
                for run, base in zip(runs, base_runs, strict=True)
            )
            figures["cpu_per_gib_vs_wire"] = statistics.median(
                run["cpu_s_per_gib"] / base["cpu_s_per_gib"]
                for run, base in zip(runs, base_runs, strict=True)
            )
            report["results"][f"{name} @ {size:g} MiB"] = figures
    return report


def format_report(report: dict[str, Any]) -> str:
    settings = report["settings"]
    lines = [
        f"{settings['connections']} connections, RTT {settings['rtt_ms']:g} ms, "
        f"{settings['mib_per_s_per_connection']:g} MiB/s per connection; medians of "
        f"{settings['rounds']} interleaved rounds; load average "
        + ", ".join(f"{x:.1f}" for x in settings["load_average"]),
        "",
        "| range | client | requests/s | MiB/s | CPU s/GiB | requests/s vs wire | "
        "CPU/GiB vs wire |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, figures in report["results"].items():
        name, size = key.split(" @ ")
        lines.append(
            f"| {size} | {name} | {figures['requests_per_s']:.1f} | {figures['mib_per_s']:.0f} | "
            f"{figures['cpu_s_per_gib']:.2f} | {figures['requests_per_s_vs_wire']:.2f}x | "
            f"{figures['cpu_per_gib_vs_wire']:.2f}x |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (medians)")
    parser.add_argument("--quick", action="store_true", help="smaller batches")
    parser.add_argument(
        "--sizes", type=float, nargs="+", help=f"only these range sizes in MiB (of {list(SIZES)})"
    )
    add_json_option(parser)
    args = parser.parse_args(argv)
    report = run_http_clients_bench(rounds=args.rounds, quick=args.quick, only=args.sizes)
    return put_out(report, args.json, format_report(report))


if __name__ == "__main__":
    raise SystemExit(main())

"""Storage benchmark: HTTP range clients compared through the WAN emulator, as ratios.

Run: ``python -m benchmarks.storage [--quick] [--json PATH]``.

nginx and the WAN emulators run in a child process, so the CPU time measured here (the whole
benchmark process, all threads) is the clients' own. Every range read is checked for length and
content before it counts. Rounds interleave all clients (``--repeat``, default 2) and each
figure is the best of its rounds, so load from other work on a shared machine hits every
client alike and the least disturbed run counts. Figures:

- ``clients``: for each client, aggregate MiB/s for 1, 8 and 32 concurrent 8 MiB ranges through
  an emulated link (RTT 50 ms, 40 MiB/s per connection), as a fraction of the emulated ceiling
  (N x 40 MiB/s, or the emulator's own limit when that is lower), CPU seconds per GiB, and
  requests/s for 4 KiB ranges at RTT 0 (straight to nginx);
- ``headline``: 64 x 8 MiB ranges at 16 connections with :class:`HttpRangeReader` against
  the ceiling, its small-range requests/s against fsspec's HTTP filesystem, CPU s/GiB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks._common import ServerProcess, add_json_option, put_out
from episodestream.storage import HttpRangeReader, Limits, ReadRequest

__all__ = ["CLIENTS", "main", "run_storage_bench"]

MIB = 1024 * 1024
FILE_NAME = "bench.bin"
FILE_BYTES = 96 * MIB
LARGE_RANGE = 8 * MIB
SMALL_RANGE = 4 * 1024
WAN_RTT_MS = 50.0
WAN_MIBPS = 40.0

Ranges = list[tuple[int, int]]
# A client: (base URL, ranges, concurrency) -> bodies in order.
Client = Callable[[str, Ranges, int], list[bytes]]


# ------------------------------------------------------------------------------ clients


def _episodestream(url: str, ranges: Ranges, concurrency: int) -> list[bytes]:
    limits = Limits(
        max_connections_per_host=concurrency,
        max_concurrency=concurrency,
        split_threshold_bytes=0,  # one request per range: compare clients like for like
        coalesce_gap_bytes=-1,
    )
    reader = _cached(
        ("es", url, concurrency), lambda: HttpRangeReader(url.rsplit("/", 1)[0], limits=limits)
    )
    name = url.rsplit("/", 1)[1]
    return reader.read_many([ReadRequest(name, o, n) for o, n in ranges])


def _urllib3(url: str, ranges: Ranges, concurrency: int) -> list[bytes]:
    import urllib3

    pool = _cached(("u3", url, concurrency), lambda: urllib3.PoolManager(maxsize=concurrency))
    executor = _cached(("pool", concurrency), lambda: ThreadPoolExecutor(concurrency))

    def get(item: tuple[int, int]) -> bytes:
        offset, length = item
        response = pool.request(
            "GET", url, headers={"Range": f"bytes={offset}-{offset + length - 1}"}
        )
        assert response.status == 206, response.status
        return response.data

    return list(executor.map(get, ranges))


def _httpx(url: str, ranges: Ranges, concurrency: int) -> list[bytes]:
    import httpx

    client = _cached(
        ("hx", url, concurrency),
        lambda: httpx.Client(
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            timeout=60,
        ),
    )
    executor = _cached(("pool", concurrency), lambda: ThreadPoolExecutor(concurrency))

    def get(item: tuple[int, int]) -> bytes:
        offset, length = item
        response = client.get(url, headers={"Range": f"bytes={offset}-{offset + length - 1}"})
        assert response.status_code == 206, response.status_code
        return response.content

    return list(executor.map(get, ranges))


def _aiohttp(url: str, ranges: Ranges, concurrency: int) -> list[bytes]:
    import aiohttp

    async def run() -> list[bytes]:
        connector = aiohttp.TCPConnector(limit=concurrency)
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

            async def get(offset: int, length: int) -> bytes:
                headers = {"Range": f"bytes={offset}-{offset + length - 1}"}
                async with session.get(url, headers=headers) as response:
                    assert response.status == 206, response.status
                    return await response.read()

            return list(await asyncio.gather(*(get(o, n) for o, n in ranges)))

    loop = _cached(("loop",), _LoopThread)
    return loop.run(run())


def _fsspec(url: str, ranges: Ranges, concurrency: int) -> list[bytes]:
    import fsspec

    fs = _cached(("fs", concurrency), lambda: fsspec.filesystem("http", skip_instance_cache=True))
    return fs.cat_ranges(
        [url] * len(ranges),
        [o for o, _ in ranges],
        [o + n for o, n in ranges],
        batch_size=concurrency,
    )


CLIENTS: dict[str, Client] = {
    "episodestream HttpRangeReader": _episodestream,
    "urllib3 PoolManager + threads": _urllib3,
    "httpx Client + threads": _httpx,
    "aiohttp (asyncio)": _aiohttp,
    "fsspec HTTPFileSystem (aiohttp)": _fsspec,
}

# Clients and pools live across the timed rounds (warm connections), closed at the end.
_CACHE: dict[tuple[Any, ...], Any] = {}


def _cached(key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def _close_cached() -> None:
    for value in _CACHE.values():
        for method in ("close", "shutdown", "clear"):
            if hasattr(value, method):
                with contextlib.suppress(Exception):
                    getattr(value, method)()
                break
    _CACHE.clear()


class _LoopThread:
    """One asyncio loop in a thread for the aiohttp client, shut down at the end."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=300)

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


# ------------------------------------------------------------------------------ servers


def _serve(root: str, settings: list[tuple[float, float | None]], conn: Any) -> None:
    """Child process: nginx + one WAN emulator per setting; send URLs, wait for "stop"."""
    from episodestream_tools.serving import NginxServer, WanEmulator, WanSettings

    with NginxServer(root) as nginx:
        emulators = [
            WanEmulator((nginx.host, nginx.port), WanSettings(rtt_ms=r, bandwidth_mibps=b)).start()
            for r, b in settings
        ]
        try:
            conn.send([nginx.url, *[e.url for e in emulators]])
            conn.recv()
        finally:
            for emulator in emulators:
                emulator.close()


class _Servers(ServerProcess):
    def __init__(self, root: Path, settings: list[tuple[float, float | None]]) -> None:
        super().__init__(_serve, (str(root), settings), "benchmark servers")
        self.urls: list[str] = self.hello


# ------------------------------------------------------------------------------ measuring


def _measure(
    client: Client, url: str, ranges: Ranges, concurrency: int, expected: bytes
) -> dict[str, float]:
    """Time one batch (after a warm-up batch that opens connections) and check every byte."""
    client(url, ranges[:concurrency], concurrency)  # warm-up: connections opened
    wall0, cpu0 = time.perf_counter(), time.process_time()
    bodies = client(url, ranges, concurrency)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    total = 0
    for (offset, length), body in zip(ranges, bodies, strict=True):
        if len(body) != length or body[:64] != expected[offset : offset + 64]:
            raise AssertionError(f"wrong bytes for range {offset}+{length}")
        total += length
    return {
        "seconds": wall,
        "mib_per_s": total / MIB / wall,
        "requests_per_s": len(ranges) / wall,
        "cpu_s_per_gib": cpu / (total / 1024**3),
        "cpu_us_per_request": cpu / len(ranges) * 1e6,
    }


def _large_ranges(count: int, rng: random.Random) -> Ranges:
    return [(rng.randrange(0, FILE_BYTES - LARGE_RANGE), LARGE_RANGE) for _ in range(count)]


def run_storage_bench(
    *, quick: bool = False, repeat: int = 2, workdir: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """Run the benchmark; returns a JSON-able dict of figures (see module docstring)."""
    rng = random.Random(0)
    data = rng.randbytes(FILE_BYTES)
    with tempfile.TemporaryDirectory(dir=workdir) as folder:
        root = Path(folder)
        (root / FILE_NAME).write_bytes(data)
        servers = _Servers(root, [(WAN_RTT_MS, WAN_MIBPS), (WAN_RTT_MS, None)])
        try:
            direct, capped, uncapped = (f"{u}/{FILE_NAME}" for u in servers.urls)
            return _run(data, direct, capped, uncapped, quick, rng, repeat)
        finally:
            _close_cached()
            servers.close()


def _best(results: list[dict[str, float]]) -> dict[str, float]:
    """Best of repeated runs on a shared machine: the least disturbed one (highest rate), with
    the lowest CPU cost seen; ``runs`` keeps every rate for the record."""
    best = dict(max(results, key=lambda r: r["mib_per_s"]))
    best["cpu_s_per_gib"] = min(r["cpu_s_per_gib"] for r in results)
    best["cpu_us_per_request"] = min(r["cpu_us_per_request"] for r in results)
    best["runs_mib_per_s"] = [round(r["mib_per_s"], 1) for r in results]  # type: ignore[assignment]
    best["runs_requests_per_s"] = [round(r["requests_per_s"], 1) for r in results]  # type: ignore[assignment]
    return best


def _run(
    data: bytes,
    direct: str,
    capped: str,
    uncapped: str,
    quick: bool,
    rng: random.Random,
    repeat: int,
) -> dict[str, Any]:
    levels = [1, 8] if quick else [1, 8, 32]
    small_count = 500 if quick else 1000
    report: dict[str, Any] = {
        "settings": {
            "rtt_ms": WAN_RTT_MS,
            "mib_per_s_per_connection": WAN_MIBPS,
            "large_range_bytes": LARGE_RANGE,
            "small_range_bytes": SMALL_RANGE,
            "repeat": repeat,
            "cpu_count": os.cpu_count(),
            "python": sys.version.split()[0],
        },
        "clients": {},
    }
    small = [(rng.randrange(0, FILE_BYTES - SMALL_RANGE), SMALL_RANGE) for _ in range(small_count)]
    count = 32 if quick else 64
    raw: dict[tuple[str, str], list[dict[str, float]]] = {}
    # Rounds interleave every client and the emulator-limit probe, so load from other work
    # on the machine hits all of them alike; each figure is the best of its rounds.
    for _ in range(repeat):
        raw.setdefault(("limit", ""), []).append(
            _measure(_episodestream, uncapped, _large_ranges(32, rng), 32, data)
        )
        for name, client in CLIENTS.items():
            for level in levels:
                ranges = _large_ranges(max(level, 4) if level == 1 else level, rng)
                raw.setdefault((name, f"large_x{level}"), []).append(
                    _measure(client, capped, ranges, level, data)
                )
            raw.setdefault((name, "small_rtt0_x8"), []).append(
                _measure(client, direct, small, 8, data)
            )
        raw.setdefault(("headline", ""), []).append(
            _measure(_episodestream, capped, _large_ranges(count, rng), 16, data)
        )
    # The emulator's limit: the most it was seen to carry, uncapped probe or any capped run.
    limit = max(
        [_best(raw[("limit", "")])["mib_per_s"]]
        + [r["mib_per_s"] for key, runs in raw.items() if key[1].startswith("large") for r in runs]
    )
    report["emulator_limit_mib_per_s"] = limit
    for name in CLIENTS:
        figures: dict[str, Any] = {}
        for level in levels:
            result = _best(raw[(name, f"large_x{level}")])
            result["fraction_of_ceiling"] = result["mib_per_s"] / min(level * WAN_MIBPS, limit)
            figures[f"large_x{level}"] = result
        figures["small_rtt0_x8"] = _best(raw[(name, "small_rtt0_x8")])
        report["clients"][name] = figures
    headline = _best(raw[("headline", "")])
    ceiling = min(16 * WAN_MIBPS, limit)
    # One request per range leaves each connection idle for one RTT per range: the most any
    # non-pipelining client can reach on this link.
    per_connection = LARGE_RANGE / MIB / (LARGE_RANGE / MIB / WAN_MIBPS + WAN_RTT_MS / 1000)
    rtt_bound = min(16 * per_connection, limit)
    ours_small = report["clients"]["episodestream HttpRangeReader"]["small_rtt0_x8"]
    fsspec_small = report["clients"]["fsspec HTTPFileSystem (aiohttp)"]["small_rtt0_x8"]
    report["headline"] = {
        "ranges": count,
        "connections": 16,
        "mib_per_s": headline["mib_per_s"],
        "runs_mib_per_s": headline["runs_mib_per_s"],
        "ceiling_mib_per_s": ceiling,
        "fraction_of_ceiling": headline["mib_per_s"] / ceiling,
        "rtt_bound_mib_per_s": rtt_bound,
        "fraction_of_rtt_bound": headline["mib_per_s"] / rtt_bound,
        "cpu_s_per_gib": headline["cpu_s_per_gib"],
        "small_requests_per_s": ours_small["requests_per_s"],
        "small_vs_fsspec": ours_small["requests_per_s"] / fsspec_small["requests_per_s"],
    }
    report["data_sha256_prefix"] = hashlib.sha256(data[:MIB]).hexdigest()[:12]
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as Markdown tables."""
    lines = [
        f"emulator limit (rtt {WAN_RTT_MS:g} ms, no cap, 32 streams): "
        f"{report['emulator_limit_mib_per_s']:.0f} MiB/s",
        "",
    ]
    clients = report["clients"]
    levels = [k for k in next(iter(clients.values())) if k.startswith("large_x")]
    header = "| client | " + " | ".join(
        f"{k.removeprefix('large_x')} x 8 MiB: MiB/s (of ceiling)" for k in levels
    )
    lines.append(header + " | CPU s/GiB (x8) | 4 KiB req/s, RTT 0, x8 | CPU µs per 4 KiB req |")
    lines.append("|" + "---|" * (len(levels) + 4))
    for name, figures in clients.items():
        cells = [
            f"{figures[k]['mib_per_s']:.0f} ({figures[k]['fraction_of_ceiling']:.0%})"
            for k in levels
        ]
        cpu = figures["large_x8"]["cpu_s_per_gib"]
        small = figures["small_rtt0_x8"]["requests_per_s"]
        per_request = figures["small_rtt0_x8"]["cpu_us_per_request"]
        lines.append(
            f"| {name} | " + " | ".join(cells) + f" | {cpu:.2f} | {small:.0f} | {per_request:.0f} |"
        )
    head = report["headline"]
    lines += [
        "",
        f"headline: {head['ranges']} x 8 MiB at {head['connections']} connections: "
        f"{head['mib_per_s']:.0f} MiB/s (runs {head['runs_mib_per_s']}) = "
        f"{head['fraction_of_ceiling']:.0%} of the "
        f"{head['ceiling_mib_per_s']:.0f} MiB/s ceiling "
        f"({head['fraction_of_rtt_bound']:.0%} of {head['rtt_bound_mib_per_s']:.0f} MiB/s, the "
        "bound with one RTT idle per request); "
        f"{head['cpu_s_per_gib']:.2f} CPU s/GiB; "
        f"4 KiB ranges {head['small_requests_per_s']:.0f} req/s = "
        f"{head['small_vs_fsspec']:.2f}x fsspec HTTP",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer levels and requests")
    parser.add_argument("--repeat", type=int, default=2, help="rounds; best of them is kept")
    add_json_option(parser)
    args = parser.parse_args(argv)
    report = run_storage_bench(quick=args.quick, repeat=args.repeat)
    return put_out(report, args.json, format_report(report))


if __name__ == "__main__":
    raise SystemExit(main())

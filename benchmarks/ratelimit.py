"""Cost of sharing rate-limit windows across processes: the check before each request.

Run: ``python -m benchmarks.ratelimit [--rounds N]``.

Before each request a reader asks its host's gate whether it may send. With sharing on, a
process whose own gate is open also ``stat``s the host's window file (and reads it only when it
changed). Figures, each the median over interleaved rounds:

- ``check``: one ``HostGates.remaining(url)`` call, sharing off vs on (no window file; an
  expired window file present, the state after any quota window), in microseconds and as a
  ratio to sharing off;
- ``requests``: ranges read one after another by one :class:`HttpRangeReader` from nginx on
  loopback, in short batches alternating sharing off and on (load on a shared machine drifts
  slower than a batch), requests/s ratio on/off: 4 KiB (the cheapest request there is, the
  worst case for the check) and 1 MiB (an episode-camera clip is 0.1-10 MiB).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from episodestream.storage import HttpRangeReader
from episodestream.storage.http._hostgate import HOST_GATES, HostGates
from episodestream_tools.serving import NginxServer

__all__ = ["main"]

URL = "https://hub.example/datasets/org/name/resolve/main/videos/file-000.mp4"
CHECKS_PER_ROUND = 20_000
RANGE_SIZES = {"4 KiB": (4096, 30), "1 MiB": (1024 * 1024, 10)}  # bytes, requests per batch
BATCHES_PER_ROUND = 10


def _check_seconds(gates: HostGates) -> float:
    started = time.perf_counter()
    for _ in range(CHECKS_PER_ROUND):
        gates.remaining(URL)
    return (time.perf_counter() - started) / CHECKS_PER_ROUND


def _requests_per_second(reader: HttpRangeReader, file_bytes: int, size: int, count: int) -> float:
    started = time.perf_counter()
    for i in range(count):
        offset = (i * 7919 * 4096) % (file_bytes - size)
        if len(reader.read("bench.bin", offset, size)) != size:
            raise RuntimeError("short read")
    return count / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ratelimit", description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    logging.getLogger("episodestream").setLevel(logging.ERROR)  # the set-up's own window
    checks: dict[str, list[float]] = {"off": [], "on, no file": [], "on, expired file": []}
    rates = {(label, name): [] for label in RANGE_SIZES for name in ("off", "on")}
    previous = HOST_GATES.shared_dir
    with tempfile.TemporaryDirectory(prefix="ratelimit-bench-") as folder:
        empty, expired = Path(folder, "empty"), Path(folder, "expired")
        empty.mkdir()
        writer = HostGates(expired)
        writer.hold(URL, 0.0, "an expired window")  # the file stays: the state after a window
        gates = {"off": HostGates(None), "on, no file": HostGates(empty)}
        gates["on, expired file"] = HostGates(expired)
        data = os.urandom(8 * 1024 * 1024)
        Path(folder, "bench.bin").write_bytes(data)
        with NginxServer() as nginx, HttpRangeReader(nginx.publish(folder, "rl")) as reader:
            reader.read("bench.bin", 0, 4096)  # the connection is opened outside the clock
            for _ in range(args.rounds):
                for name, gate in gates.items():
                    checks[name].append(_check_seconds(gate))
                for label, (size, count) in RANGE_SIZES.items():
                    for batch in range(BATCHES_PER_ROUND):
                        order = [("off", None), ("on", expired)]
                        if batch % 2:  # neither track always runs first
                            order.reverse()
                        for name, directory in order:
                            HOST_GATES.share_through(directory)
                            rate = _requests_per_second(reader, len(data), size, count)
                            rates[label, name].append(rate)
    HOST_GATES.share_through(previous)
    base = statistics.median(checks["off"])
    print(f"HostGates.remaining(url), median of {args.rounds} interleaved rounds")
    for name, values in checks.items():
        value = statistics.median(values)
        print(f"  sharing {name:18} {value * 1e6:7.2f} µs   x{value / base:5.1f}")
    print("ranges from nginx on loopback, one at a time")
    for label in RANGE_SIZES:
        on, off = statistics.median(rates[label, "on"]), statistics.median(rates[label, "off"])
        ratio = on / off
        print(f"  {label:6} sharing off {off:7.0f} req/s, on {on:7.0f} req/s: on/off {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

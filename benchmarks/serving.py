"""Measure the loopback serving stack: emulator accuracy against its settings, and nginx.

Run ``python -m benchmarks.serving`` (about half a minute; not part of the wheel). Every
figure is a ratio measured in this run — measured / setting for the emulator, emulated /
direct for overhead — because absolute speeds on shared machines are noisy.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from episodestream_tools.serving import NginxServer, WanEmulator, WanSettings

MIB = 1024 * 1024

__all__ = ["main"]

_FILE_BYTES = 64 * MIB
_NAME = "blob.bin"


@dataclass(frozen=True, slots=True)
class _Transfer:
    bytes: int
    first_byte_s: float  # from request sent (after connect)
    body_s: float  # from first body byte to last


def _transfer(port: int, start: int, length: int, *, read_size: int = MIB) -> _Transfer:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.connect()
    began = time.perf_counter()
    conn.request("GET", f"/{_NAME}", headers={"Range": f"bytes={start}-{start + length - 1}"})
    response = conn.getresponse()
    if response.status != 206:
        raise RuntimeError(f"expected 206, got {response.status}")
    total = len(response.read(1))
    first = time.perf_counter()
    buffer = bytearray(read_size)
    while n := response.readinto(buffer):
        total += n
    done = time.perf_counter()
    conn.close()
    if total != length:
        raise RuntimeError(f"expected {length} bytes, got {total}")
    return _Transfer(total, first - began, done - first)


def _keepalive_rtt_s(port: int, repeats: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    times = []
    for i in range(repeats + 1):
        began = time.perf_counter()
        conn.request("GET", f"/{_NAME}", headers={"Range": f"bytes={i}-{i + 99}"})
        conn.getresponse().read()
        times.append(time.perf_counter() - began)
    conn.close()
    return statistics.median(times[1:])  # the first one also opened the connection


def _parallel_mibps(port: int, connections: int, length: int) -> tuple[float, float]:
    """(aggregate MiB/s from start to the last byte, mean per-connection body MiB/s)."""
    results: list[_Transfer] = []
    threads = [
        threading.Thread(target=lambda: results.append(_transfer(port, 0, length)))
        for _ in range(connections)
    ]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    elapsed = time.perf_counter() - began
    if len(results) != connections:
        raise RuntimeError(f"{connections - len(results)} of {connections} transfers failed")
    aggregate = sum(r.bytes for r in results) / elapsed / MIB
    return aggregate, statistics.fmean(_mibps(r) for r in results)


def _mibps(transfer: _Transfer) -> float:
    return (transfer.bytes - 1) / transfer.body_s / MIB


def measure(folder: Path) -> list[str]:
    """Run every measurement against a private nginx serving ``folder``; markdown lines."""
    lines: list[str] = []
    with NginxServer(folder) as nginx:
        up = (nginx.host, nginx.port)
        # alternate the two paths and keep each one's best, so load from other processes
        # on a shared machine does not land on one side of the ratio only
        direct = through = direct8 = through8 = 0.0
        with WanEmulator(up, WanSettings()) as emulator:
            for _ in range(5):
                direct = max(direct, _mibps(_transfer(nginx.port, 0, 48 * MIB)))
                through = max(through, _mibps(_transfer(emulator.port, 0, 48 * MIB)))
            for _ in range(3):
                direct8 = max(direct8, _parallel_mibps(nginx.port, 8, 32 * MIB)[0])
                through8 = max(through8, _parallel_mibps(emulator.port, 8, 32 * MIB)[0])
        lines += [
            "Loopback throughput, no delay, no cap (MiB/s, best of 5 single and 3 parallel "
            "runs, alternating; ratio = through emulator / direct):",
            "",
            "| path | 1 connection | 8 connections |",
            "|---|---:|---:|",
            f"| nginx direct | {direct:.0f} | {direct8:.0f} |",
            f"| through emulator (rtt 0, no cap) | {through:.0f} ({through / direct:.2f}) "
            f"| {through8:.0f} ({through8 / direct8:.2f}) |",
            "",
            "Round trip (median of 10 small ranges on a kept-alive connection; fresh = first "
            "byte after connect, expected 2 × RTT with the handshake charge):",
            "",
            "| RTT setting | kept-alive measured | ratio | fresh measured | ratio to 2 × RTT |",
            "|---:|---:|---:|---:|---:|",
        ]
        for rtt_ms in (10, 50, 100):
            with WanEmulator(up, WanSettings(rtt_ms=rtt_ms)) as emulator:
                kept = _keepalive_rtt_s(emulator.port, 10)
                fresh = statistics.median(
                    _transfer(emulator.port, 0, 100).first_byte_s for _ in range(5)
                )
            lines.append(
                f"| {rtt_ms} ms | {kept * 1000:.1f} ms | {kept * 1000 / rtt_ms:.3f} "
                f"| {fresh * 1000:.1f} ms | {fresh * 1000 / (2 * rtt_ms):.3f} |"
            )
        lines += [
            "",
            "Single-connection throughput under a cap (about 2 s of data; measured from the "
            "first body byte):",
            "",
            "| RTT | cap | measured | ratio |",
            "|---:|---:|---:|---:|",
        ]
        for rtt_ms, cap in ((100, 8), (50, 40), (50, 100), (10, 200), (0, 400)):
            length = min(_FILE_BYTES, max(8 * MIB, int(cap * MIB * 2)))
            with WanEmulator(up, WanSettings(rtt_ms=rtt_ms, bandwidth_mibps=cap)) as emulator:
                rate = _mibps(_transfer(emulator.port, 0, length))
            lines.append(f"| {rtt_ms} ms | {cap} MiB/s | {rate:.1f} MiB/s | {rate / cap:.3f} |")
        lines += [
            "",
            "Eight parallel connections, each capped (per connection: mean body rate / cap; "
            "aggregate: all bytes from first request to last byte / (8 × cap), so it includes "
            "the handshake and first round trip):",
            "",
            "| RTT | cap per connection | per connection | ratio | aggregate | ratio |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        for rtt_ms, cap in ((50, 8), (50, 40)):
            with WanEmulator(up, WanSettings(rtt_ms=rtt_ms, bandwidth_mibps=cap)) as emulator:
                total, each = _parallel_mibps(emulator.port, 8, int(cap * MIB * 1.5))
            lines.append(
                f"| {rtt_ms} ms | {cap} MiB/s | {each:.1f} MiB/s | {each / cap:.3f} "
                f"| {total:.1f} MiB/s | {total / (8 * cap):.3f} |"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.serving",
        description="Measure the WAN emulator against its settings and loopback nginx.",
    )
    parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="episodestream-measure-") as folder:
        with (Path(folder) / _NAME).open("wb") as file:
            for _ in range(_FILE_BYTES // MIB):
                file.write(os.urandom(MIB))
        for line in measure(Path(folder)):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

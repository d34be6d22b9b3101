"""``episodestream serve DIR``: nginx on loopback behind an emulated WAN link, until stopped."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from episodestream.cli.arguments import non_negative_float, port
from episodestream_tools.bench._demo import DEMO_BANDWIDTH_MIBPS, DEMO_RTT_MS
from episodestream_tools.commands._options import add_link_options
from episodestream_tools.serving import WanSettings, serve_dataset

__all__ = ["register"]

_POLL_S = 0.5


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a folder over HTTP on 127.0.0.1 behind an emulated WAN link",
        description=(
            "Serve DIR with a private nginx on 127.0.0.1 (byte ranges, ETags, access log) "
            "behind a WAN emulator adding round-trip time and a per-connection bandwidth cap. "
            "Runs until Ctrl-C or SIGTERM, then stops both."
        ),
    )
    parser.add_argument("dir", type=Path, help="folder to serve at /")
    parser.add_argument(
        "--port", type=port, default=None, help="port of the emulated link (default: free port)"
    )
    parser.add_argument(
        "--nginx-port", type=port, default=None, help="nginx's own port (default: free port)"
    )
    add_link_options(
        parser, rtt_ms=DEMO_RTT_MS, bandwidth_mibps=DEMO_BANDWIDTH_MIBPS, zero_is_no_cap=True
    )
    parser.add_argument(
        "--connect-rtts",
        type=non_negative_float,
        default=1.0,
        help="round trips charged when a connection opens (default 1: a TCP handshake)",
    )
    parser.add_argument(
        "--pid-file", type=Path, default=None, help="write this process's pid here once serving"
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="keep nginx's config and logs in this folder"
    )
    parser.add_argument("--workers", type=int, default=1, help="nginx worker processes")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = WanSettings(
        rtt_ms=args.rtt_ms,
        bandwidth_mibps=args.bandwidth_mibps or None,
        connect_rtts=args.connect_rtts,
    )
    stop = threading.Event()

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    pid_written = False
    try:
        with serve_dataset(
            args.dir,
            settings=settings,
            port=args.port,
            nginx_port=args.nginx_port,
            workdir=args.workdir,
            workers=args.workers,
        ) as served:
            if args.pid_file is not None:
                args.pid_file.write_text(f"{os.getpid()}\n")
                pid_written = True
            print(f"serving {served.root}", flush=True)
            print(f"  url:        {served.url}   ({settings.describe()})", flush=True)
            print(f"  nginx:      {served.nginx_url}   (direct, pid {served.nginx.pid})")
            print(f"  access log: {served.nginx.access_log_path}")
            print(f"  stop with Ctrl-C or: kill {os.getpid()}", flush=True)
            try:
                while not stop.wait(_POLL_S):
                    if not served.nginx.running:
                        print("episodestream serve: nginx exited unexpectedly", file=sys.stderr)
                        return 1
            except KeyboardInterrupt:
                pass
            print("stopping", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if pid_written:
            with contextlib.suppress(OSError):
                args.pid_file.unlink()

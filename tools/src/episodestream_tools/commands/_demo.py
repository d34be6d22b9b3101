"""``episodestream demo``: the demo dataset through an emulated WAN, checked and benchmarked."""

from __future__ import annotations

import argparse
import sys

from episodestream.cli.arguments import int_at_least
from episodestream.datasets import MAX_POOL_EPISODES
from episodestream_tools.bench._demo import (
    DEMO_BANDWIDTH_MIBPS,
    DEMO_RTT_MS,
    DemoConfig,
    format_demo,
    run_demo,
)
from episodestream_tools.commands._options import (
    add_decoder_options,
    add_link_options,
    add_sample_options,
)

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="stream the demo dataset through an emulated WAN and benchmark it",
        description=(
            "Generate the demo dataset once (3 cameras 320x240 AV1 at 30 fps, 36 episodes; "
            "cached), serve it with nginx behind a WAN emulator (RTT 50 ms, 40 MiB/s per "
            "connection), print a dataset summary and a range-read check through the link, "
            "then run `bench` with every track (STREAM, LOCAL, NAIVE, DOWNLOAD) and print the "
            "report and where its JSON and plot are."
        ),
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        action="store_true",
        help="a small dataset and few samples (seconds; what the test suite runs)",
    )
    size.add_argument(
        "--full", action="store_true", help="every sample of the demo dataset (make bench)"
    )
    parser.add_argument(
        "--dataset", default=None, help="benchmark this local LeRobot v3 dataset instead"
    )
    parser.add_argument(
        "--output-dir",
        default=None,
        help="where the JSON, plot, access log and index go (default <cache>/demo)",
    )
    parser.add_argument(
        "--cache-dir", default=None, help="cache root (default $EPISODESTREAM_CACHE)"
    )
    add_link_options(
        parser, rtt_ms=DEMO_RTT_MS, bandwidth_mibps=DEMO_BANDWIDTH_MIBPS, zero_is_no_cap=False
    )
    # bench settings; unset, the mode picks them
    add_sample_options(parser, samples_default=None)
    parser.add_argument("--pool-size", type=int_at_least(1, MAX_POOL_EPISODES), default=None)
    add_decoder_options(parser, decoder_default=None, threads_default=None)
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG plot")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars or lines")
    parser.set_defaults(handler=run)


_OVERRIDES = (
    "samples",
    "keepup_samples",
    "naive_samples",
    "target_samples_s",
    "pool_size",
    "decoder",
    "decode_threads",
)


def run(args: argparse.Namespace) -> int:
    mode = "quick" if args.quick else "full" if args.full else "default"
    overrides = {
        name: getattr(args, name) for name in _OVERRIDES if getattr(args, name) is not None
    }
    try:
        config = DemoConfig(
            mode=mode,
            dataset=args.dataset,
            output_dir=args.output_dir,
            cache_dir=args.cache_dir,
            rtt_ms=args.rtt_ms,
            bandwidth_mibps=args.bandwidth_mibps,
            bench=overrides,
            plot=not args.no_plot,
            progress=not args.no_progress,
        )
    except ValueError as error:
        print(f"episodestream demo: {error}", file=sys.stderr)
        return 2
    result = run_demo(config)
    print(format_demo(result, rtt_ms=args.rtt_ms, bandwidth_mibps=args.bandwidth_mibps))
    return 0

"""``episodestream bench-summary FILE...``: aggregate the per-rank JSON of a distributed bench."""

from __future__ import annotations

import argparse
import json

from episodestream_tools.bench import format_rank_summary, summarize_ranks

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bench-summary",
        help="aggregate the per-rank JSON reports of a distributed bench run",
        description=(
            "Read the --json reports every rank of `episodestream bench` wrote and print the "
            "aggregate (ranks, total GiB, aggregate MiB/s = total bytes / slowest rank's fetch "
            "time, summed rank MiB/s and samples/s, whether all ranks kept up) and a per-rank "
            "table."
        ),
    )
    parser.add_argument("reports", nargs="+", help="bench JSON reports, one per rank")
    parser.add_argument("--json", dest="json_path", default=None, help="write the aggregate here")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    summary = summarize_ranks(args.reports)
    print(format_rank_summary(summary))
    if args.json_path:
        with open(args.json_path, "w") as handle:
            json.dump(summary.to_dict(), handle, indent=1)
            handle.write("\n")
        print(f"JSON summary: {args.json_path}")
    return 0

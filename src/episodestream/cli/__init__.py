"""The ``episodestream`` command line: a thin shell that parses arguments and calls the library.

Each command lives in its own module exposing ``register(subparsers)``; the module's handler
receives the parsed ``argparse.Namespace`` and returns a process exit status.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from episodestream.errors import EpisodeStreamError

__all__ = ["main"]

# command modules, in the order `--help` lists them
_COMMAND_MODULES: tuple[str, ...] = (
    "_make_dataset",
    "_serve",
    "_index",
    "_inspect",
    "_check",
    "_demo",
    "_bench",
    "_bench_summary",
    "_plan",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="episodestream",
        description="Stream LeRobot v3 video datasets into PyTorch training.",
    )
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in _COMMAND_MODULES:
        importlib.import_module(f"episodestream.cli.{module_name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2) if args.verbose else logging.INFO
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.handler(args) or 0)
    except EpisodeStreamError as error:
        print(f"episodestream {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"episodestream {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

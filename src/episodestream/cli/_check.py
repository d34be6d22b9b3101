"""``episodestream check ROOT``: a pre-flight report of how each episode reads."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from episodestream.check import MAX_CHECK_WORKERS, DatasetCheck, check_dataset, format_check
from episodestream.cli._index import add_data_root_argument
from episodestream.cli._options import add_cache_dir_option, add_episode_subset_options
from episodestream.cli._types import int_at_least, positive_float
from episodestream.errors import ConfigError
from episodestream.manifest import DEFAULT_BUILD_WORKERS
from episodestream.mp4 import DEFAULT_TOLERANCE_S

__all__ = ["register"]

# exit statuses (2, a usage or dataset-level error, is the CLI's own for every command)
EXIT_READS = 0
EXIT_SOME_DO_NOT_READ = 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "check",
        help="pre-flight: which episodes read as LeRobot reads them, which would raise and why",
        description=(
            "Check episodes before a long training run, without decoding any video: each "
            "row's time (from_timestamp + timestamp, and the rows --delta-timestamps queries) "
            "against the frames its video file presents, within LeRobot's tolerance; missing "
            "or unreadable data and video files; rows whose columns disagree with the "
            "episodes table; harmless oddities (codec labels, to_timestamp conventions, frame "
            "counts). Exit status: 0 when every episode checked reads as LeRobot reads it, "
            "1 when some would raise or differ, 2 on a usage or dataset-level error."
        ),
    )
    parser.add_argument("root", help="dataset root: a local path, http(s)://, hf:// or s3:// URL")
    add_episode_subset_options(parser, verb="check")
    parser.add_argument(
        "--delta-timestamps",
        type=_delta_timestamps,
        default=None,
        metavar="JSON",
        help="LeRobot's delta_timestamps, to check the frames they query too, e.g. "
        "'{\"observation.images.top\": [-0.1, 0.0]}'",
    )
    parser.add_argument(
        "--tolerance-s",
        type=positive_float,
        default=DEFAULT_TOLERANCE_S,
        help=f"LeRobot's frame-matching tolerance, seconds (default {DEFAULT_TOLERANCE_S:g})",
    )
    parser.add_argument(
        "--json",
        dest="json_path",
        default=None,
        metavar="PATH",
        help="also write the whole report as JSON to PATH ('-': to stdout, the human report "
        "then goes to stderr)",
    )
    parser.add_argument("--sidecar", type=Path, default=None, help="use this sidecar index")
    add_cache_dir_option(parser)
    parser.add_argument(
        "--workers",
        type=int_at_least(1, MAX_CHECK_WORKERS),
        default=DEFAULT_BUILD_WORKERS,
        help=f"files indexed and episodes checked concurrently (default {DEFAULT_BUILD_WORKERS})",
    )
    add_data_root_argument(parser)
    parser.set_defaults(handler=run)


def _delta_timestamps(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, a 5,000-digit int, depth
        raise argparse.ArgumentTypeError(f"not JSON of delta timestamps: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            'a JSON object of lists of seconds, e.g. {"action": [0.0, 0.1]}'
        )
    return value


def run(args: argparse.Namespace) -> int:
    if args.json_path == "":
        raise ConfigError("--json needs a path, or '-' for stdout")
    if args.json_path not in (None, "-"):
        _check_writable(Path(args.json_path))  # before the check, not after its requests
    check = check_dataset(
        args.root,
        episodes=args.episodes,
        num_episodes=args.num_episodes,
        delta_timestamps=args.delta_timestamps,
        tolerance_s=args.tolerance_s,
        data_root=args.data_root,
        sidecar=args.sidecar,
        cache_dir=args.cache_dir,
        workers=args.workers,
    )
    report = format_check(check) + "\n" + _verdict(check)
    if args.json_path == "-":
        print(report, file=sys.stderr)
        print(json.dumps(check.to_json(), indent=2))
    else:
        print(report)
        if args.json_path is not None:
            try:
                Path(args.json_path).write_text(json.dumps(check.to_json(), indent=2) + "\n")
            except OSError as error:
                raise ConfigError(f"--json {args.json_path}: cannot write: {error}") from error
    return EXIT_READS if check.ok else EXIT_SOME_DO_NOT_READ


def _check_writable(path: Path) -> None:
    """ConfigError unless ``path`` can be written: a file (or nothing yet) in a writable
    folder."""
    folder = path.parent
    if path.is_dir():
        raise ConfigError(f"--json {path}: is a folder")
    if not folder.is_dir():
        raise ConfigError(f"--json {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"--json {path}: not writable")


def _verdict(check: DatasetCheck) -> str:
    if check.ok:
        return f"exit {EXIT_READS}: every episode checked reads as LeRobot reads it"
    return f"exit {EXIT_SOME_DO_NOT_READ}: some episodes would raise or differ"

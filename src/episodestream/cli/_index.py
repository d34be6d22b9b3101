"""``episodestream index ROOT``: build the sidecar index of a dataset (reads each moov once)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from episodestream.lerobot import DatasetMeta, open_dataset_files
from episodestream.manifest import (
    DEFAULT_BUILD_WORKERS,
    PUBLISHED_SIDECAR_PATH,
    build_manifest,
    sidecar_cache_path,
    write_sidecar,
)
from episodestream.storage import Location, RangeReader

__all__ = ["open_dataset", "register"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def open_dataset(root: str, data_root: str | None = None) -> tuple[RangeReader, DatasetMeta]:
    """A reader for the dataset's files and its metadata: both from ``root`` (path or URL),
    or the metadata from ``root`` and data and videos from ``data_root``."""
    return open_dataset_files(Location.parse(root), data_root=data_root)


def add_data_root_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-root",
        default=None,
        help="where data/ and videos/ live when not beside meta/ (e.g. metadata from "
        "hf://datasets/org/name@v1.0, videos from hf://buckets/org/name)",
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "index",
        help="build a dataset's sidecar index (episode spans and MP4 sample tables)",
        description=(
            "Read every video file's moov once and write the sidecar index. By default it goes "
            "to the local cache (where training finds it); publish it by copying it to "
            f"ROOT/{PUBLISHED_SIDECAR_PATH}."
        ),
    )
    parser.add_argument("root", help="dataset root: a local path, http(s)://, hf:// or s3:// URL")
    parser.add_argument(
        "--output", "-o", type=Path, default=None, help="write the sidecar here instead"
    )
    parser.add_argument(
        "--workers",
        type=_positive_int,
        default=DEFAULT_BUILD_WORKERS,
        help=f"files indexed concurrently (default {DEFAULT_BUILD_WORKERS})",
    )
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="cache folder (default $EPISODESTREAM_CACHE)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_data_root_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    reader, meta = open_dataset(args.root, args.data_root)
    with reader:
        started = time.monotonic()
        manifest = build_manifest(reader, meta, workers=args.workers, progress=not args.no_progress)
        output = args.output or sidecar_cache_path(meta, args.cache_dir)
        write_sidecar(manifest, output)
        seconds = time.monotonic() - started
    stats = manifest.build_stats
    requests = f", {stats.requests} requests, {stats.bytes_read} bytes read" if stats else ""
    print(
        f"indexed {manifest.num_files} video files, {manifest.num_episodes} episodes x "
        f"{len(manifest.cameras)} cameras, {manifest.num_samples} samples in {seconds:.2f} s"
        f"{requests}",
        file=sys.stderr,
    )
    print(output)
    return 0

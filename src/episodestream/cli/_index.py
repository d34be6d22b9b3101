"""``episodestream index ROOT``: build the sidecar index of a dataset (reads each moov once)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from episodestream.cli._options import add_cache_dir_option, add_episode_subset_options
from episodestream.cli._types import int_at_least
from episodestream.errors import ConfigError
from episodestream.helpers import Bound
from episodestream.lerobot import DatasetMeta, open_dataset_files
from episodestream.manifest import (
    DEFAULT_BUILD_WORKERS,
    DEFAULT_PUBLISH_MESSAGE,
    PUBLISHED_SIDECAR_PATH,
    EpisodeManifest,
    EpisodeSubset,
    build_manifest,
    episode_subset,
    publish_sidecar,
    sidecar_cache_path,
    write_sidecar,
)
from episodestream.storage import Location, RangeReader, check_publishable

__all__ = ["open_dataset", "register"]

#: files one ``index`` reads at once (threads)
MAX_INDEX_WORKERS = Bound("MAX_INDEX_WORKERS", 256, "files indexed at once, one thread each")


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
            "to the local cache (where training finds it); --publish also writes it to "
            f"ROOT/{PUBLISHED_SIDECAR_PATH}, where every other user's first run finds it "
            "(a commit on a Hub repo's branch, or a pull request with --publish-pr; a bucket, "
            "S3 or a local root). With --data-root it goes under ROOT, beside meta/. "
            "--episodes/--num-episodes index only a subset: that sidecar records it, is cached "
            "beside the whole dataset's (neither replaces the other), and serves datasets "
            "opened on those episodes or fewer, never the whole dataset."
        ),
    )
    parser.add_argument("root", help="dataset root: a local path, http(s)://, hf:// or s3:// URL")
    parser.add_argument(
        "--output", "-o", type=Path, default=None, help="write the sidecar here instead"
    )
    parser.add_argument(
        "--workers",
        type=int_at_least(1, MAX_INDEX_WORKERS),
        default=DEFAULT_BUILD_WORKERS,
        help=f"files indexed concurrently (default {DEFAULT_BUILD_WORKERS})",
    )
    add_cache_dir_option(parser)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_data_root_argument(parser)
    add_episode_subset_options(parser, verb="index")
    publishing = parser.add_argument_group("publishing")
    publishing.add_argument(
        "--publish",
        action="store_true",
        help=f"after checking it, publish the sidecar to ROOT/{PUBLISHED_SIDECAR_PATH} "
        "(Hub token from HF_TOKEN or `hf auth login`; S3 credentials as boto finds them); "
        "the local copy stays",
    )
    publishing.add_argument(
        "--publish-pr",
        action="store_true",
        help="Hub repos: open a pull request with the sidecar instead of committing to the "
        "branch (when you may not write to it); implies --publish",
    )
    publishing.add_argument(
        "--publish-message",
        default=DEFAULT_PUBLISH_MESSAGE,
        help="Hub repos: the commit (or pull request) title",
    )
    parser.set_defaults(handler=run)


def _subset(args: argparse.Namespace, meta: DatasetMeta) -> EpisodeSubset | None:
    """The episodes ``--episodes`` / ``--num-episodes`` select (None: all of them)."""
    if args.num_episodes is not None:
        return episode_subset(meta, meta.episodes.episode_index[: args.num_episodes])
    return episode_subset(meta, args.episodes)


def run(args: argparse.Namespace) -> int:
    publish = args.publish or args.publish_pr
    if publish and (args.episodes is not None or args.num_episodes is not None):
        raise ConfigError(
            "--publish with --episodes/--num-episodes: a published sidecar is the dataset's "
            "whole index (every user's first run takes it); index every episode to publish"
        )
    if publish:  # refused now rather than after the build
        check_publishable(args.root, create_pr=args.publish_pr)
    reader, meta = open_dataset(args.root, args.data_root)
    with reader:
        subset = _subset(args, meta)
        started = time.monotonic()
        manifest = build_manifest(
            reader, meta, workers=args.workers, progress=not args.no_progress, episodes=subset
        )
        output = args.output or sidecar_cache_path(meta, args.cache_dir, episodes=subset)
        write_sidecar(manifest, output)
        seconds = time.monotonic() - started
        _report_build(manifest, seconds)
        if publish:
            if args.no_progress:
                _quiet_hub_progress()
            published = publish_sidecar(
                output,
                reader,
                meta,
                args.root,
                create_pr=args.publish_pr,
                commit_message=args.publish_message,
            )
            if not published.changed:
                print(f"{published.destination} already holds this sidecar", file=sys.stderr)
            else:
                made = published.pull_request or published.commit
                print(
                    f"published {published.destination}" + (f" ({made})" if made else ""),
                    file=sys.stderr,
                )
    print(output)
    return 0


def _quiet_hub_progress() -> None:
    """No upload bars from huggingface_hub / Xet either (this process is the CLI's own)."""
    with contextlib.suppress(ImportError):  # the `hub` extra is not installed: nothing to quiet
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()


def _report_build(manifest: EpisodeManifest, seconds: float) -> None:
    stats = manifest.build_stats
    requests = f", {stats.requests} requests, {stats.bytes_read} bytes read" if stats else ""
    subset = manifest.identity.episodes
    of_total = f" of {manifest.identity.total_episodes}" if subset is not None else ""
    print(
        f"indexed {manifest.num_files} video files, {manifest.num_episodes}{of_total} episodes "
        f"x {len(manifest.cameras)} cameras, {manifest.num_samples} samples in {seconds:.2f} s"
        f"{requests}",
        file=sys.stderr,
    )

"""``episodestream inspect ROOT``: what a dataset holds and whether its sidecar is usable."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from episodestream.cli._index import add_data_root_argument, open_dataset
from episodestream.lerobot import open_metadata_reader
from episodestream.manifest import load_sidecar, sidecar_status, source_info
from episodestream.storage import Location

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="summarize a dataset: episodes, frames, cameras, codecs, files, bytes, sidecar",
        description="Summarize a LeRobot v3 dataset and the state of its sidecar index.",
    )
    parser.add_argument("root", help="dataset root: a local path, http(s)://, hf:// or s3:// URL")
    parser.add_argument("--sidecar", type=Path, default=None, help="also check this sidecar")
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="cache folder (default $EPISODESTREAM_CACHE)"
    )
    add_data_root_argument(parser)
    parser.set_defaults(handler=run)


def _size(num_bytes: int) -> str:
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.1f} {unit}" if unit != "B" else f"{num_bytes} B"
        value /= 1024
    return f"{num_bytes} B"


def run(args: argparse.Namespace) -> int:
    reader, meta = open_dataset(args.root, args.data_root)
    with reader, contextlib.ExitStack() as stack:
        published = None
        if args.data_root is not None:
            published = stack.enter_context(open_metadata_reader(Location.parse(args.root), meta))
        statuses = sidecar_status(
            reader,
            meta,
            sidecar=args.sidecar,
            cache_dir=args.cache_dir,
            published_reader=published,
        )
        valid = next((s for s in statuses if s.state == "valid" and s.where != "published"), None)
        codecs: dict[str, tuple[str, ...]] = {}
        if valid is not None:
            manifest = load_sidecar(valid.location)
            sizes = {s.path: s.size for s in manifest.sources()}
            codecs = manifest.codecs()
        else:
            sizes = {
                path: source_info(reader, path).size
                for key in meta.video_keys
                for path in meta.video_files(key)
            }
        data_files = meta.data_files()
        lines = [
            f"dataset      {meta.root}",
            f"version      {meta.codebase_version}  robot {meta.robot_type or '-'}",
            f"episodes     {meta.total_episodes}",
            f"frames       {meta.total_frames}  at {meta.fps:g} fps",
            f"tasks        {meta.total_tasks}",
            f"data files   {len(data_files)}",
            f"cameras      {len(meta.video_keys)}",
        ]
        for key in meta.video_keys:
            feature = meta.feature(key)
            files = meta.video_files(key)
            total = sum(sizes[path] for path in files)
            entries = ",".join(codecs.get(key, ())) or "?"
            lines.append(
                f"  {key}: {feature.width}x{feature.height} {feature.codec or '?'} "
                f"(sample entry {entries}), {len(files)} files, {_size(total)}"
            )
        lines.append(f"video bytes  {_size(sum(sizes.values()))} in {len(sizes)} files")
        for status in statuses:
            reason = f": {status.reason}" if status.reason else ""
            lines.append(f"sidecar      {status.where} {status.state} ({status.location}){reason}")
    print("\n".join(lines))
    return 0

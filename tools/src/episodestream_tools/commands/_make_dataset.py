"""``episodestream make-dataset OUT``: write a synthetic LeRobot v3.0 dataset."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from episodestream_tools.synthetic import DEMO_SPEC, PRESETS, SyntheticSpec, write_synthetic_dataset
from episodestream_tools.synthetic._synthetic_video import CONTENTS

__all__ = ["register"]


def _size(text: str) -> tuple[int, int]:
    width, sep, height = text.lower().partition("x")
    try:
        if not sep:
            raise ValueError
        return int(width), int(height)
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must look like 128x96, got {text!r}") from None


def _length_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition(":")
    try:
        return (int(low), int(high)) if sep else (int(low), int(low))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"length must be MIN:MAX or N frames, got {text!r}"
        ) from None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    defaults = SyntheticSpec()
    parser = subparsers.add_parser(
        "make-dataset",
        help="write a synthetic LeRobot v3.0 dataset (real MP4s, frame identities drawn in)",
        description=(
            "Write a synthetic LeRobot v3.0 dataset to OUT: multi-camera MP4s with several "
            "episodes per file, data/episodes/tasks Parquet, info.json and stats. Every frame "
            "shows its (episode, frame) identity as black/white cells. Deterministic for a seed. "
            "Unset options take the defaults shown (or the demo dataset's with --demo)."
        ),
    )
    parser.add_argument("out", type=Path, help="folder to create (must not exist or be empty)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--demo", action="store_true", help="start from the demo dataset's settings")
    start.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="start from a LeRobot-sized dataset: aloha (4 x 640x480, 50 fps), so100 "
        "(2 x 640x480, 30 fps), so100-h264 (same, H.264 GOP 30 with B-frames), droid "
        "(3 x 320x180, 15 fps); textured moving content",
    )
    parser.add_argument(
        "--cameras",
        nargs="+",
        metavar="KEY",
        help=f"video keys (default: {' '.join(defaults.cameras)})",
    )
    parser.add_argument(
        "--size",
        type=_size,
        metavar="WxH",
        help=f"frame size (default: {defaults.width}x{defaults.height})",
    )
    parser.add_argument("--fps", type=int, help=f"frames per second (default: {defaults.fps})")
    parser.add_argument(
        "--episodes", type=int, help=f"episode count (default: {defaults.episodes})"
    )
    parser.add_argument(
        "--length",
        type=_length_range,
        metavar="MIN:MAX",
        help="episode length range in frames "
        f"(default: {defaults.min_length}:{defaults.max_length})",
    )
    parser.add_argument(
        "--episodes-per-file",
        type=int,
        help="episodes per video file (default: several, at least two files per camera)",
    )
    parser.add_argument(
        "--episodes-per-data-file", type=int, help="episodes per data Parquet file (default: all)"
    )
    parser.add_argument(
        "--chunks-size", type=int, help=f"files per chunk folder (default: {defaults.chunks_size})"
    )
    parser.add_argument(
        "--codec",
        choices=("av1", "h264", "hevc"),
        help="av1 (libsvtav1, g=2, crf 30), h264 (libx264, B-frames, GOP 30, open GOP) or hevc "
        f"(default: {defaults.codec})",
    )
    parser.add_argument(
        "--moov",
        choices=("start", "end"),
        help=f"moov box before (faststart) or after the media data (default: {defaults.moov})",
    )
    parser.add_argument(
        "--state-size",
        type=int,
        help=f"observation.state length, 0 = none (default: {defaults.state_size})",
    )
    parser.add_argument(
        "--action-size", type=int, help=f"action length, 0 = none (default: {defaults.action_size})"
    )
    parser.add_argument(
        "--task",
        action="append",
        dest="tasks",
        metavar="TEXT",
        help="a task string; repeat for several (default: three pick/push/open tasks)",
    )
    parser.add_argument("--seed", type=int, help=f"random seed (default: {defaults.seed})")
    parser.add_argument(
        "--image-layout",
        choices=("hwc", "chw"),
        help=f"video feature shape order in info.json (default: {defaults.image_layout})",
    )
    parser.add_argument(
        "--layout",
        choices=("v3.0", "v2.1", "v2.0"),
        help="LeRobot v3.0 (0.4+), or LeRobot 0.3.x's v2.1 / v2.0: one Parquet and one MP4 per "
        f"episode (default: {defaults.layout})",
    )
    parser.add_argument(
        "--content",
        choices=CONTENTS,
        help="wave (smooth, cheap to decode) or texture (detailed, moving: realistic decode "
        f"cost) (default: {defaults.content})",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing dataset at OUT"
    )
    parser.set_defaults(handler=_run)


def _spec_from_args(args: argparse.Namespace) -> SyntheticSpec:
    base = DEMO_SPEC if args.demo else PRESETS[args.preset] if args.preset else SyntheticSpec()
    changes: dict[str, Any] = {}
    if args.cameras is not None:
        changes["cameras"] = tuple(args.cameras)
    if args.size is not None:
        changes["width"], changes["height"] = args.size
    if args.length is not None:
        changes["min_length"], changes["max_length"] = args.length
    if args.tasks is not None:
        changes["tasks"] = tuple(args.tasks)
    for name in (
        "fps",
        "episodes",
        "episodes_per_file",
        "episodes_per_data_file",
        "chunks_size",
        "codec",
        "moov",
        "state_size",
        "action_size",
        "seed",
        "image_layout",
        "content",
        "layout",
    ):
        value = getattr(args, name)
        if value is not None:
            changes[name] = value
    if "episodes" in changes and "episodes_per_file" not in changes:
        # let the spec pick a file size that suits the new episode count
        changes["episodes_per_file"] = None
    if "episodes" in changes and "episodes_per_data_file" not in changes:
        changes["episodes_per_data_file"] = None
    return dataclasses.replace(base, **changes)


def _run(args: argparse.Namespace) -> int:
    spec = _spec_from_args(args)
    started = time.perf_counter()
    root = write_synthetic_dataset(args.out, spec, overwrite=args.overwrite)
    elapsed = time.perf_counter() - started
    info = json.loads((root / "meta" / "info.json").read_text(encoding="utf-8"))
    size_bytes = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    videos = sum(1 for _ in (root / "videos").rglob("*.mp4"))
    print(
        f"{root}: {info['total_episodes']} episodes, {info['total_frames']} frames, "
        f"{len(spec.cameras)} cameras x {spec.width}x{spec.height} {spec.codec} @ {spec.fps} fps, "
        f"{videos} video files, {size_bytes / 2**20:.1f} MiB in {elapsed:.1f} s"
    )
    return 0

"""Window pool over episode pool, samples per CPU second, by window size and content (issue 29).

    .venv/bin/python -m benchmarks.window_sweep [--windows 4 8 16 32 64]
        [--contents texture flat lerobot] [--dtypes uint8 float32] [--rounds 3]
        [--work /tmp/es-window-sweep] [--lerobot-size 640x480] [--lerobot-root PATH] [--json PATH]

For each content and image dtype, whole epochs of ``EpisodePoolDataset(root, unit="window",
window_frames=W, ...)`` for every ``--windows`` W and of the episode pool
(``EpisodePoolDataset(root, ...)``), the library's defaults otherwise (``--decoded-budget``,
``--decode-threads`` override them for both units), through ``benchmarks.window_pool``'s
``epoch_rate``: samples per process CPU second (``time.process_time``, every thread). Each
round runs every unit once per (content, dtype), the units' order rotated a step per round;
the table gives, per W, the median over rounds of window(W) / episode pool in the same round.

Contents, all AV1 g=2 crf 30 (LeRobot's encoding) and LeRobot v3 datasets:

- ``texture``: ``benchmarks.window_pool``'s dataset (``episodestream``'s synthetic writer:
  2 cameras 640x480, 4 episodes of 150-210 frames, textured moving scene);
- ``flat``: the same layout, written by the synthetic writer, then every MP4 encoded again
  here with PyAV from flat frames: one colour per episode and camera, its brightness rising
  slowly (one luma level per 10 frames), timestamps and episode spans unchanged;
- ``lerobot``: written by LeRobot 0.4.4 itself (``LeRobotDataset.create``, ``add_frame``,
  ``save_episode``, ``finalize``; its own encoder settings) from moving frames (a detailed scene
  panning past the camera, an object crossing it, a little sensor noise): 3 cameras
  ``--lerobot-size`` (640x480), 4 episodes of 150-210 frames. It runs in the LeRobot
  environment (``--lerobot-python``, by default ``.venv-lerobot`` beside the running virtual
  environment); ``--lerobot-root`` names an existing LeRobot-written dataset instead.

Datasets are written once under ``--work`` and kept (folder names hold their settings).
``--size``, ``--episodes`` and ``--length`` shrink the texture and flat datasets (and the
LeRobot one's episodes) for a quick check.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import add_json_option, put_out
from benchmarks.window_pool import _spec as window_pool_spec
from benchmarks.window_pool import epoch_rate

__all__ = ["flatten_videos", "main", "run_sweep", "write_lerobot_dataset"]

WINDOWS = (4, 8, 16, 32, 64)
CONTENTS = ("texture", "flat", "lerobot")
LEROBOT_CAMERAS = (
    "observation.images.cam_high",
    "observation.images.cam_left_wrist",
    "observation.images.cam_right_wrist",
)
_REPO = Path(__file__).resolve().parents[1]
#: the luma levels flat frames rise by per frame
_FLAT_RAMP = 0.1


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected WxH, e.g. 640x480") from None
    if width <= 0 or height <= 0 or width % 2 or height % 4:
        raise argparse.ArgumentTypeError(f"{text!r}: even width, height a multiple of 4")
    return width, height


def _length(text: str) -> tuple[int, int]:
    try:
        low, high = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected MIN:MAX") from None
    if not 0 < low <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: need 0 < MIN <= MAX")
    return low, high


# ------------------------------------------------------------------------------- datasets


def _synthetic_spec(args: argparse.Namespace, content: str) -> Any:
    """window_pool's AV1 spec, resized and shortened where asked."""
    spec = window_pool_spec("av1", content)
    changes: dict[str, Any] = {}
    if args.size is not None:
        changes["width"], changes["height"] = args.size
    if args.episodes is not None:
        changes["episodes"] = args.episodes
    if args.length is not None:
        changes["min_length"], changes["max_length"] = args.length
    return dataclasses.replace(spec, **changes) if changes else spec


def texture_dataset(args: argparse.Namespace) -> Path:
    from episodestream_tools.synthetic import ensure_synthetic_dataset

    return ensure_synthetic_dataset(
        _synthetic_spec(args, "texture"), cache_dir=args.work / "synthetic"
    )


def flat_dataset(args: argparse.Namespace) -> Path:
    """A copy of the synthetic (wave) dataset with every video encoded again from flat frames."""
    from episodestream_tools.synthetic import ensure_synthetic_dataset

    spec = _synthetic_spec(args, "wave")
    root = args.work / f"flat-{spec.cache_key()}"
    if (root / "meta" / "info.json").is_file():
        return root
    source = ensure_synthetic_dataset(spec, cache_dir=args.work / "synthetic")
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial)
    flatten_videos(partial, seed=spec.seed)
    partial.rename(root)
    return root


def _episode_spans(root: Path) -> dict[tuple[str, int, int], list[tuple[int, float, float]]]:
    """(camera, chunk, file) -> [(episode, from_timestamp, to_timestamp)] from the dataset's
    ``meta/episodes`` Parquet files."""
    import pyarrow.parquet as pq

    spans: dict[tuple[str, int, int], list[tuple[int, float, float]]] = {}
    for path in sorted((root / "meta" / "episodes").rglob("*.parquet")):
        table = pq.read_table(path).to_pydict()
        cameras = [
            c[len("videos/") : -len("/chunk_index")]
            for c in table
            if c.endswith("/chunk_index") and c.startswith("videos/")
        ]
        for row, episode in enumerate(table["episode_index"]):
            for camera in cameras:
                key = (
                    camera,
                    int(table[f"videos/{camera}/chunk_index"][row]),
                    int(table[f"videos/{camera}/file_index"][row]),
                )
                spans.setdefault(key, []).append(
                    (
                        int(episode),
                        float(table[f"videos/{camera}/from_timestamp"][row]),
                        float(table[f"videos/{camera}/to_timestamp"][row]),
                    )
                )
    return spans


def flatten_videos(root: Path, *, seed: int = 0) -> None:
    """Encode every MP4 of the LeRobot v3 dataset at ``root`` again, in place, from flat frames:
    per episode and camera one colour, its luma rising ``_FLAT_RAMP`` levels a frame; the frame
    count, rate and size of each file kept (libsvtav1, g=2, crf 30, yuv420p, faststart)."""
    import json

    import av

    os.environ.setdefault("SVT_LOG", "1")
    info = json.loads((root / "meta" / "info.json").read_text())
    fps = int(info["fps"])
    pattern = info["video_path"]
    cameras = [k for k, v in info["features"].items() if v.get("dtype") == "video"]
    for (camera, chunk, file), episodes in sorted(_episode_spans(root).items()):
        path = root / pattern.format(video_key=camera, chunk_index=chunk, file_index=file)
        with av.open(str(path)) as source:
            stream = source.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            frames = sum(1 for packet in source.demux(stream) if packet.size)
        owner = np.full(frames, -1)
        first = np.zeros(frames, dtype=np.int64)
        for episode, start, end in episodes:
            begin, stop = round(start * fps), min(frames, round(end * fps))
            owner[begin:stop], first[begin:stop] = episode, begin
        target = path.with_name(f".{path.name}.flat")
        with av.open(str(target), "w", format="mp4", options={"movflags": "faststart"}) as out:
            video = out.add_stream(
                "libsvtav1", rate=fps, options={"g": "2", "crf": "30", "preset": "10"}
            )
            video.width, video.height, video.pix_fmt = width, height, "yuv420p"
            for index in range(frames):
                rng = np.random.default_rng([seed, int(owner[index]) + 1, cameras.index(camera)])
                y, u, v = rng.integers(60, 170), rng.integers(90, 167), rng.integers(90, 167)
                y = min(235, y + int((index - first[index]) * _FLAT_RAMP))
                planes = np.empty((height * 3 // 2, width), dtype=np.uint8)
                planes[:height], planes[height : height * 5 // 4], planes[height * 5 // 4 :] = (
                    y,
                    u,
                    v,
                )
                frame = av.VideoFrame.from_ndarray(planes, format="yuv420p")
                frame.pts, frame.time_base = index, Fraction(1, fps)
                for packet in video.encode(frame):
                    out.mux(packet)
            for packet in video.encode(None):
                out.mux(packet)
        os.replace(target, path)


def lerobot_dataset(args: argparse.Namespace) -> Path:
    """The LeRobot-written dataset: ``--lerobot-root``, else written once by LeRobot's writer
    in its own environment (``--lerobot-python``)."""
    if args.lerobot_root is not None:
        return args.lerobot_root
    width, height = args.lerobot_size
    low, high = args.length or (150, 210)
    episodes = args.episodes or 4
    root = args.work / f"lerobot-{width}x{height}-c3-e{episodes}-l{low}_{high}-s{args.seed}"
    if (root / "meta" / "info.json").is_file():
        return root
    if not args.lerobot_python.is_file():
        raise SystemExit(
            f"content lerobot: no LeRobot environment at {args.lerobot_python} (make "
            "setup-lerobot), or give --lerobot-root"
        )
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    import episodestream

    source = str(Path(episodestream.__file__).resolve().parents[1])
    env = dict(os.environ, HF_HUB_OFFLINE="1", SVT_LOG="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), source, env.get("PYTHONPATH")) if p)
    started = time.perf_counter()
    subprocess.run(
        [
            str(args.lerobot_python),
            "-m",
            "benchmarks.window_sweep",
            "--write-lerobot",
            str(partial),
            "--lerobot-size",
            f"{width}x{height}",
            "--episodes",
            str(episodes),
            "--length",
            f"{low}:{high}",
            "--seed",
            str(args.seed),
        ],
        check=True,
        cwd=_REPO,
        env=env,
    )
    partial.rename(root)
    print(f"LeRobot wrote {root.name} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return root


class _MovingScene:
    """One camera's frames: a detailed scene panning past the camera, a dark object crossing
    it and a little sensor noise (RGB uint8, HWC)."""

    def __init__(self, width: int, height: int, rng: np.random.Generator) -> None:
        from PIL import Image

        self.width, self.height, self.rng = width, height, rng
        scene = np.zeros((2 * height, 2 * width, 3), dtype=np.float32)
        for cells, weight in ((8, 0.6), (32, 0.3), (128, 0.1)):  # coarse to fine detail
            small = rng.integers(0, 256, (cells * height // width + 1, cells, 3), dtype=np.uint8)
            image = Image.fromarray(small).resize((2 * width, 2 * height), Image.BICUBIC)
            scene += weight * np.asarray(image, dtype=np.float32)
        self.scene = scene.clip(0, 255).astype(np.uint8)
        self.phase = rng.uniform(0, 2 * np.pi, size=3)

    def frame(self, k: int, length: int) -> np.ndarray:
        t = 2 * np.pi * k / max(length, 1)
        x = int((self.width - 1) * 0.5 * (1 + np.sin(t + self.phase[0])))
        y = int((self.height - 1) * 0.5 * (1 + np.sin(0.7 * t + self.phase[1])))
        image = self.scene[y : y + self.height, x : x + self.width].copy()
        w, h = max(2, self.width // 6), max(2, self.height // 4)
        ox = int((self.width - w) * 0.5 * (1 + np.cos(1.3 * t + self.phase[2])))
        oy = int((self.height - h) * 0.5 * (1 + np.sin(0.9 * t)))
        image[oy : oy + h, ox : ox + w] = (40, 40, 50)
        noise = self.rng.integers(-2, 3, size=image.shape, dtype=np.int16)
        return (image.astype(np.int16) + noise).clip(0, 255).astype(np.uint8)


def write_lerobot_dataset(
    out: Path, *, width: int, height: int, episodes: int, length: tuple[int, int], seed: int
) -> Path:
    """LeRobot's own writer (LeRobot's environment only): 3 cameras of moving frames, 30 fps,
    ``episodes`` episodes of ``length`` (min, max) frames, state and action float32[6]."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    image = {
        "dtype": "video",
        "shape": (height, width, 3),
        "names": ["height", "width", "channels"],
    }
    vector = {"dtype": "float32", "shape": (6,), "names": [f"j{i}" for i in range(6)]}
    features = {
        **{camera: image for camera in LEROBOT_CAMERAS},
        "observation.state": vector,
        "action": vector,
    }
    dataset = LeRobotDataset.create(
        "local/window_sweep", fps=30, features=features, root=out, use_videos=True
    )
    rng = np.random.default_rng(seed)
    lengths = rng.integers(length[0], length[1] + 1, size=episodes)
    for episode, frames in enumerate(lengths):
        scenes = [_MovingScene(width, height, rng) for _ in LEROBOT_CAMERAS]
        for k in range(int(frames)):
            state = np.sin(np.arange(6, dtype=np.float32) + k / 30).astype(np.float32)
            dataset.add_frame(
                {
                    **{
                        c: s.frame(k, int(frames))
                        for c, s in zip(LEROBOT_CAMERAS, scenes, strict=True)
                    },
                    "observation.state": state,
                    "action": state + np.float32(0.01),
                    "task": f"move the object {episode % 3}",
                }
            )
        dataset.save_episode()
    dataset.finalize()
    return out


# ------------------------------------------------------------------------------ the sweep


def _settings(args: argparse.Namespace, dtype: str) -> dict[str, Any]:
    settings: dict[str, Any] = {"image_dtype": dtype}
    if args.decoded_budget is not None:
        settings["decoded_budget"] = args.decoded_budget
    if args.decode_threads is not None:
        settings["decode_threads"] = args.decode_threads
    return settings


def run_sweep(args: argparse.Namespace) -> dict[str, Any]:
    makers = {"texture": texture_dataset, "flat": flat_dataset, "lerobot": lerobot_dataset}
    roots = {content: makers[content](args) for content in args.contents}
    cache = args.work / "index-cache"
    series = [(c, d) for c in args.contents for d in args.dtypes]
    units: list[tuple[str, int]] = [("episode", max(args.windows))] + [
        ("window", w) for w in args.windows
    ]
    runs: dict[tuple[str, str], dict[tuple[str, int], list[dict[str, Any]]]] = {
        s: {u: [] for u in units} for s in series
    }
    for content, dtype in series:  # decoders, index, page cache: before anything is timed
        epoch_rate(roots[content], cache, "window", 0, min(args.windows), _settings(args, dtype))
    started = time.perf_counter()
    for round_ in range(args.rounds):
        for content, dtype in series:
            shift = round_ % len(units)
            for unit, window in [*units[shift:], *units[:shift]]:
                got = epoch_rate(
                    roots[content], cache, unit, round_, window, _settings(args, dtype)
                )
                runs[content, dtype][unit, window].append(got)
            print(
                f"round {round_ + 1}/{args.rounds}: {content} {dtype} done "
                f"({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    rows = []
    for (content, dtype), by_unit in runs.items():
        episode = by_unit["episode", max(args.windows)]
        row: dict[str, Any] = {
            "content": content,
            "dtype": dtype,
            "root": str(roots[content]),
            "samples": episode[0]["samples"],
            "episode_per_cpu_s": statistics.median(r["per_cpu_s"] for r in episode),
            "episode_rounds": episode,
            "windows": {},
        }
        for window in args.windows:
            mine = by_unit["window", window]
            ratios = [a["per_cpu_s"] / b["per_cpu_s"] for a, b in zip(mine, episode, strict=True)]
            row["windows"][str(window)] = {
                "ratio": statistics.median(ratios),
                "ratio_rounds": ratios,
                "decoded_per_sample": mine[0]["decoded_per_sample"],
                "rounds": mine,
            }
        rows.append(row)
    return {
        "command": _command_line(args.argv),
        "rounds": args.rounds,
        "windows": list(args.windows),
        "settings": {
            "decoded_budget": args.decoded_budget,
            "decode_threads": args.decode_threads,
        },
        "rows": rows,
    }


def _command_line(argv: Sequence[str]) -> str:
    python = os.path.relpath(sys.executable)
    if python.startswith(".."):
        python = sys.executable
    return shlex.join([python, "-m", "benchmarks.window_sweep", *argv])


def _fmt(value: float | None, digits: int) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def render(result: dict[str, Any]) -> str:
    windows = result["windows"]
    settings = ", ".join(f"{k}={v}" for k, v in result["settings"].items() if v is not None)
    lines = [
        f"command: `{result['command']}`",
        "",
        "samples per CPU second, window pool (W) / episode pool: median of "
        f"{result['rounds']} interleaved rounds' ratios; library defaults"
        + (f" but {settings}" if settings else ""),
        "",
        "| content | dtype | samples/epoch | episode pool samples/CPU-s | "
        + " | ".join(f"W={w}" for w in windows)
        + " |",
        "|---|---|---:|---:|" + "---:|" * len(windows),
    ]
    for row in result["rows"]:
        ratios = [_fmt(row["windows"][str(w)]["ratio"], 2) for w in windows]
        lines.append(
            f"| {row['content']} | {row['dtype']} | {row['samples']} | "
            f"{_fmt(row['episode_per_cpu_s'], 1)} | " + " | ".join(ratios) + " |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", nargs="+", type=int, default=list(WINDOWS))
    parser.add_argument("--contents", nargs="+", choices=CONTENTS, default=list(CONTENTS))
    parser.add_argument(
        "--dtypes", nargs="+", choices=("uint8", "float32"), default=["uint8", "float32"]
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path("/tmp/es-window-sweep"))
    parser.add_argument("--decoded-budget", help="both units (default: the library's)")
    parser.add_argument("--decode-threads", type=int, help="both units (default: the library's)")
    parser.add_argument(
        "--size", type=_size, help="texture and flat frame size WxH (default: 640x480)"
    )
    parser.add_argument("--episodes", type=int, help="episodes of every content (default 4)")
    parser.add_argument(
        "--length", type=_length, help="episode length range MIN:MAX (default 150:210)"
    )
    parser.add_argument("--seed", type=int, default=29, help="the LeRobot dataset's frames")
    parser.add_argument("--lerobot-size", type=_size, default=(640, 480))
    parser.add_argument("--lerobot-root", type=Path, help="an existing LeRobot-written dataset")
    parser.add_argument(
        "--lerobot-python",
        type=Path,
        default=Path(sys.prefix).parent / ".venv-lerobot" / "bin" / "python",
        help="the LeRobot 0.4.4 environment's interpreter (default: %(default)s)",
    )
    parser.add_argument("--write-lerobot", type=Path, help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.rounds < 1 or min(args.windows) < 1:
        parser.error("--rounds and every --windows value must be at least 1")
    if args.episodes is not None and args.episodes < 1:
        parser.error("--episodes must be at least 1")
    args.work = args.work.resolve()
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.write_lerobot is not None:  # the child, in LeRobot's environment
        width, height = args.lerobot_size
        write_lerobot_dataset(
            args.write_lerobot,
            width=width,
            height=height,
            episodes=args.episodes or 4,
            length=args.length or (150, 210),
            seed=args.seed,
        )
        return 0
    args.work.mkdir(parents=True, exist_ok=True)
    result = run_sweep(args)
    return put_out(result, args.json, render(result))


if __name__ == "__main__":
    sys.exit(main())

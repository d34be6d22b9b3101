"""CPU per sample over the bare decoder loop (FLOOR) across frame sizes and camera counts
(issue 29): one ``episodestream bench`` per cell, the ratios put in one table.

    .venv/bin/python -m benchmarks.decode_floor_matrix [--sizes 96x96 224x224 ...]
        [--cameras 1 2 3 4] [--dtypes uint8 float32] [--codec av1] [--samples 600]
        [--rounds 3] [--bench-rounds 1] [--work /tmp/es-matrix] [--lerobot] [--json PATH]

Cells: every ``--sizes`` x ``--cameras`` x ``--dtypes``. For each size and camera count a
synthetic LeRobot v3 dataset is written once with ``episodestream make-dataset`` (textured,
moving content by default; ``--codec``, ``--fps``, ``--episodes``, ``--length``) under
``--work`` and kept there for later runs (its folder name holds every setting that shapes it).
Each round runs every cell once, the cells' order rotated a step per round (a shared
machine drifts: each cell meets early and late positions), as one
``episodestream bench ROOT --local-root ROOT --tracks floor,local,stream[,lerobot]
--image-dtype D --samples N --rounds K --json ...`` subprocess. The table gives, per cell,
FLOOR's CPU ms per sample (median over all rounds) and each track's CPU per sample over
FLOOR's: the median of the per-round ratios (the tracks ran side by side in each round), as
bench's own ``/F`` column. ``--bench-rounds K`` > 1 lets bench rotate the order of its tracks
inside each call too (with 1, bench runs STREAM first, after its own warm-up).

``--lerobot`` adds LeRobot 0.4.4's ``LeRobotDataset`` (bench's LEROBOT track): every bench call
then runs in the LeRobot environment (``--lerobot-python``, by default ``.venv-lerobot`` beside
the running virtual environment), with this checkout's ``episodestream`` first on its path, so
that all four tracks share a process and a round.

Only the ``episodestream`` command line is called (``make-dataset`` and ``bench``, their
``--json`` report); nothing here imports the bench's internals.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import add_json_option, put_out

__all__ = ["Cell", "main", "run_matrix"]

SIZES = ("96x96", "224x224", "320x240", "640x480", "1280x720")
CAMERA_KEYS = tuple(
    f"observation.images.{name}"
    for name in ("cam_high", "cam_left_wrist", "cam_right_wrist", "cam_low")
)
TRACKS = ("floor", "local", "stream")
#: the columns after FLOOR, in table order: (bench track, header)
RATIO_COLUMNS = (("stream", "STREAM/FLOOR"), ("local", "LOCAL/FLOOR"), ("lerobot", "LeRobot/FLOOR"))
_BENCH_TIMEOUT_S = 3 * 3600


@dataclass(frozen=True, slots=True)
class Cell:
    """One row of the table: frame size, camera count and image dtype."""

    size: str
    cameras: int
    dtype: str

    @property
    def label(self) -> str:
        return f"{self.cameras} x {self.size} {self.dtype}"


def _size(text: str) -> str:
    try:
        width, height = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected WxH, e.g. 224x224") from None
    if width <= 0 or height <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: width and height must be positive")
    return f"{width}x{height}"


def _cli(python: Path) -> list[str]:
    """The ``episodestream`` command of the environment of ``python``: its console script,
    else the CLI's module run by that interpreter."""
    script = python.parent / "episodestream"
    if script.is_file():
        return [str(script)]
    return [str(python), "-m", "episodestream.cli"]


def _checkout_env() -> dict[str, str]:
    """The environment of the subprocesses: this checkout's ``episodestream`` first on the path
    (the LeRobot environment may hold another copy of it)."""
    import episodestream

    source = str(Path(episodestream.__file__).resolve().parents[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH")) if p)
    return env


def dataset_root(args: argparse.Namespace, size: str, cameras: int) -> Path:
    """Where the cell's dataset lies under ``--work``: every setting that shapes it is named."""
    name = (
        f"{args.codec}-{args.content}-{size}-c{cameras}-fps{args.fps}-e{args.episodes}"
        f"-l{args.length.replace(':', '_')}-s{args.seed}"
    )
    return args.work / "datasets" / name


def ensure_dataset(args: argparse.Namespace, size: str, cameras: int, env: dict[str, str]) -> Path:
    """The cell's dataset, written with ``episodestream make-dataset`` unless already there
    (written to a side folder and renamed once complete, so an interrupted run leaves none
    half-made)."""
    root = dataset_root(args, size, cameras)
    if (root / "meta" / "info.json").is_file():
        return root
    partial = root.with_name(root.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.parent.mkdir(parents=True, exist_ok=True)
    command = [
        *_cli(Path(sys.executable)),
        "make-dataset",
        str(partial),
        "--cameras",
        *CAMERA_KEYS[:cameras],
        "--size",
        size,
        "--fps",
        str(args.fps),
        "--episodes",
        str(args.episodes),
        "--length",
        args.length,
        "--content",
        args.content,
        "--codec",
        args.codec,
        "--seed",
        str(args.seed),
    ]
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
    partial.rename(root)
    print(
        f"wrote {root.name} in {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
        flush=True,
    )
    return root


def run_bench(
    args: argparse.Namespace, cell: Cell, root: Path, tracks: Sequence[str], env: dict[str, str]
) -> dict[str, Any]:
    """One ``episodestream bench`` call on the cell; its JSON report."""
    python = args.lerobot_python if args.lerobot else Path(sys.executable)
    with tempfile.TemporaryDirectory(prefix="bench-", dir=args.work) as tmp:
        report = Path(tmp) / "bench.json"
        command = [
            *_cli(python),
            "bench",
            str(root),
            "--local-root",
            str(root),
            "--tracks",
            ",".join(tracks),
            "--image-dtype",
            cell.dtype,
            "--samples",
            str(args.samples),
            "--rounds",
            str(args.bench_rounds),
            "--keepup-samples",
            "0",
            "--decode-samples",
            "0",
            "--cache-dir",
            str(args.work / "index-cache"),
            "--work-dir",
            tmp,
            "--no-progress",
            "--json",
            str(report),
            *args.bench_arg,
        ]
        done = subprocess.run(
            command,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=_BENCH_TIMEOUT_S,
        )
        if done.returncode != 0:
            raise SystemExit(
                f"bench failed on {cell.label} (exit {done.returncode}): {shlex.join(command)}\n"
                + done.stderr[-4000:]
            )
        return json.loads(report.read_text())


def _round_cpu(report: dict[str, Any], track: str) -> list[float | None]:
    """``track``'s CPU ms per sample in each of the report's rounds (None: not measured)."""
    data = report["tracks"].get(track)
    if not data:
        return []
    rounds = data.get("rounds") or [{"cpu_ms_per_sample": data.get("cpu_ms_per_sample")}]
    return [r.get("cpu_ms_per_sample") for r in rounds]


def summarise(reports: list[dict[str, Any]], tracks: Sequence[str]) -> dict[str, Any]:
    """Per cell: FLOOR's CPU ms per sample (median over every round of every report) and each
    track's per-round ratio to FLOOR (same round, same process), their median and range."""
    floor: list[float] = []
    ratios: dict[str, list[float]] = {t: [] for t in tracks if t != "floor"}
    notes: list[str] = []
    for report in reports:
        floor_rounds = _round_cpu(report, "floor")
        floor.extend(f for f in floor_rounds if f)
        for track in ratios:
            mine = _round_cpu(report, track)
            if len(mine) != len(floor_rounds):
                continue  # the track did not run (LeRobot refused, say): no pairs
            ratios[track].extend(a / b for a, b in zip(mine, floor_rounds, strict=True) if a and b)
        notes.extend(n for n in report.get("notes", []) if n not in notes)
    return {
        "floor_cpu_ms_per_sample": statistics.median(floor) if floor else None,
        "floor_rounds": floor,
        "over_floor": {t: statistics.median(r) if r else None for t, r in ratios.items()},
        "over_floor_rounds": ratios,
        "notes": notes,
    }


def run_matrix(args: argparse.Namespace) -> dict[str, Any]:
    """Every cell in ``args.rounds`` rotated rounds; the per-cell summaries."""
    env = _checkout_env()
    cells = [Cell(s, c, d) for s in args.sizes for c in args.cameras for d in args.dtypes]
    tracks = [*TRACKS, *(["lerobot"] if args.lerobot else [])]
    roots = {(s, c): ensure_dataset(args, s, c, env) for s in args.sizes for c in args.cameras}
    reports: dict[Cell, list[dict[str, Any]]] = {cell: [] for cell in cells}
    started = time.perf_counter()
    for round_ in range(args.rounds):
        shift = round_ % len(cells)
        for cell in [*cells[shift:], *cells[:shift]]:
            reports[cell].append(run_bench(args, cell, roots[cell.size, cell.cameras], tracks, env))
            print(
                f"round {round_ + 1}/{args.rounds}: {cell.label} done "
                f"({time.perf_counter() - started:.0f} s)",
                file=sys.stderr,
                flush=True,
            )
    first = next(iter(reports.values()))[0]
    return {
        "command": command_line(args.argv),
        "tracks": tracks,
        "rounds": args.rounds,
        "bench_rounds": args.bench_rounds,
        "samples": args.samples,
        "versions": first.get("host", {}).get("versions"),
        "cells": [
            {"size": c.size, "cameras": c.cameras, "dtype": c.dtype, **summarise(r, tracks)}
            for c, r in reports.items()
        ],
    }


def command_line(argv: Sequence[str], module: str = "benchmarks.decode_floor_matrix") -> str:
    """How this run was started: the interpreter (relative to the working folder when inside
    it), the module and every argument."""
    python = os.path.relpath(sys.executable)
    if python.startswith(".."):
        python = sys.executable
    return shlex.join([python, "-m", module, *argv])


def _fmt(value: float | None, digits: int) -> str:
    return "—" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def render(result: dict[str, Any]) -> str:
    """The command, then one Markdown table: a row per cell."""
    columns = [(t, h) for t, h in RATIO_COLUMNS if t in result["tracks"]]
    header = ["size", "cameras", "dtype", "FLOOR CPU ms/sample", *(h for _, h in columns)]
    lines = [
        f"command: `{result['command']}`",
        "",
        f"CPU per sample over FLOOR's, median of {result['rounds']} x {result['bench_rounds']} "
        f"rounds' own ratios, {result['samples']} samples per track and round; versions "
        f"{result.get('versions')}",
        "",
        "| " + " | ".join(header) + " |",
        "|---|---:|---|" + "---:|" * (1 + len(columns)),
    ]
    for cell in result["cells"]:
        ratios = [_fmt(cell["over_floor"].get(t), 3) for t, _ in columns]
        lines.append(
            f"| {cell['size']} | {cell['cameras']} | {cell['dtype']} | "
            f"{_fmt(cell['floor_cpu_ms_per_sample'], 3)} | " + " | ".join(ratios) + " |"
        )
    notes = sorted({n for cell in result["cells"] for n in cell["notes"]})
    if notes:
        lines += ["", *(f"- {n}" for n in notes)]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", type=_size, default=list(SIZES))
    parser.add_argument(
        "--cameras",
        nargs="+",
        type=int,
        default=[1, 2, 3, 4],
        choices=range(1, len(CAMERA_KEYS) + 1),
    )
    parser.add_argument(
        "--dtypes", nargs="+", default=["uint8", "float32"], choices=("uint8", "float32")
    )
    parser.add_argument("--codec", default="av1", choices=("av1", "h264", "hevc"))
    parser.add_argument("--content", default="texture", choices=("texture", "wave"))
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--episodes", type=int, default=6)
    parser.add_argument("--length", default="120:150", help="episode length range MIN:MAX")
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument(
        "--samples", type=int, default=600, help="samples per track and round (capped by bench)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds over all cells")
    parser.add_argument(
        "--bench-rounds", type=int, default=1, help="bench's own --rounds in each call"
    )
    parser.add_argument("--work", type=Path, default=Path("/tmp/es-matrix"))
    parser.add_argument("--lerobot", action="store_true", help="add bench's LEROBOT track")
    parser.add_argument(
        "--lerobot-python",
        type=Path,
        default=Path(sys.prefix).parent / ".venv-lerobot" / "bin" / "python",
        help="the LeRobot 0.4.4 environment's interpreter (default: %(default)s)",
    )
    parser.add_argument(
        "--bench-arg",
        action="append",
        default=[],
        help="one more argument passed to every bench call (repeat; e.g. --bench-arg=--decoder "
        "--bench-arg=pyav)",
    )
    add_json_option(parser)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.rounds < 1 or args.bench_rounds < 1 or args.samples < 1:
        parser.error("--rounds, --bench-rounds and --samples must be at least 1")
    if args.lerobot and not args.lerobot_python.is_file():
        parser.error(f"--lerobot: no LeRobot environment at {args.lerobot_python}")
    args.work = args.work.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = run_matrix(args)
    return put_out(result, args.json, render(result))


if __name__ == "__main__":
    sys.exit(main())

"""Per-frame overhead: CPU per sample of map-style EpisodeStreamDataset over the decode floor.

Tracks, each drawing the same random sample sequence (global frame indices, seeded) from one
local LeRobot v3 dataset, every (track, round) in a fresh process so CPU time is its own:

- FLOOR: torchcodec's ``VideoDecoder`` on the whole files (one per file, cached), each
  sample's camera frames as uint8 through ``get_frames_played_at``, nothing else.
- MAP_U8 / MAP_F32: ``EpisodeStreamDataset(root, image_dtype=...)[i]``.
- BASE_U8 / BASE_F32: the same from another checkout's ``src`` (``--baseline``), e.g. the
  commit before a change: ``git worktree add --detach /tmp/base HEAD~1``.
- POOL_U8 / POOL_F32 / BASE_POOL_F32 (only when named in ``--tracks``): as many samples of
  ``EpisodePoolDataset(root)``'s own order, whose decode threads build them.
- LEROBOT: ``LeRobotDataset(repo_id, root=root)[i]`` where ``lerobot`` imports (run the
  benchmark with ``.venv-lerobot/bin/python`` so every track shares its torch and torchcodec).
- OPEN: CPU per decoder open on each episode-camera clip, with the clip's frame times read
  from its packets vs taken from the manifest (``frame_times_s``), interleaved in one process.

Every track first draws the whole sequence once (clips fetched, decoders opened), then the
clock (``time.process_time``, all threads) runs over a second pass; page faults come from
``getrusage``. Rounds rotate the track order; figures are medians over rounds, ratios are
medians' ratios. Usage::

    episodestream make-dataset --preset so100 --episodes 4 --length 150:200 /tmp/so100
    python -m benchmarks.per_frame /tmp/so100 --baseline /tmp/base/src
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main"]

_MODULE = "benchmarks.per_frame"
_TRACKS = (
    "FLOOR",
    "MAP_U8",
    "MAP_F32",
    "BASE_U8",
    "BASE_F32",
    "LEROBOT",
    "POOL_U8",
    "POOL_F32",
    "BASE_POOL_F32",
)
#: tracks run unless --tracks names them (the pool draws its own order, not the sequence)
_DEFAULT_TRACKS = _TRACKS[:6]


def _sequence(root: Path, samples: int, seed: int) -> np.ndarray:
    """Global frame indices drawn uniformly with replacement (LeRobot's map-style access)."""
    info = json.loads((root / "meta" / "info.json").read_text())
    return np.random.default_rng(seed).integers(0, int(info["total_frames"]), samples)


def _measure(draw: Any, indices: list[int]) -> dict[str, float]:
    for i in indices:  # warm: clips fetched, decoders opened, rows read
        draw(i)
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.process_time()
    for i in indices:
        draw(i)
    cpu_s = time.process_time() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    n = len(indices)
    return {
        "cpu_ms_per_sample": 1000.0 * cpu_s / n,
        "page_faults_per_sample": (after.ru_minflt - before.ru_minflt) / n,
    }


def _floor_draw(root: Path) -> Any:
    from torchcodec.decoders import VideoDecoder

    from episodestream.lerobot import load_dataset_meta
    from episodestream.storage import open_reader

    with open_reader(str(root)) as reader:
        meta = load_dataset_meta(reader, root=str(root))
    table = meta.episodes
    rows = table.rows(table.episode_index)
    starts = table.dataset_from_index[rows].astype(np.int64)
    lengths = table.length[rows].astype(np.int64)
    half_frame_s = 0.25 / meta.fps  # inside the frame's display interval, clear of rounding
    decoders: dict[str, Any] = {}
    plan: dict[int, list[tuple[str, float]]] = {}
    for row, episode in enumerate(table.episode_index.tolist()):
        for key in meta.video_keys:
            path = str(root / meta.episode_video_path(int(episode), key))
            from_s = float(table.video(key).from_timestamp[row])
            for frame in range(int(lengths[row])):
                t = from_s + frame / meta.fps + half_frame_s
                plan.setdefault(int(starts[row]) + frame, []).append((path, t))

    def draw(index: int) -> None:
        for path, t in plan[index]:
            decoder = decoders.get(path)
            if decoder is None:
                decoder = decoders[path] = VideoDecoder(
                    path, seek_mode="approximate", num_ffmpeg_threads=1, dimension_order="NCHW"
                )
            decoder.get_frames_played_at(seconds=[t])

    return draw


def _run_track(track: str, root: Path, indices: list[int]) -> dict[str, float]:
    if track == "FLOOR":
        return _measure(_floor_draw(root), indices)
    if track == "LEROBOT":
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        lerobot = LeRobotDataset(f"episodestream-bench/{root.name}", root=root)
        return _measure(lerobot.__getitem__, indices)
    from episodestream import EpisodePoolDataset, EpisodeStreamDataset

    dtype = "uint8" if track.endswith("U8") else "float32"
    if "POOL" in track:  # its own order, as many samples; decode threads convert the frames
        with EpisodePoolDataset(str(root), image_dtype=dtype, seed=0) as pool:
            samples = iter(pool)
            return _measure(lambda _: next(samples), indices)
    with EpisodeStreamDataset(str(root), image_dtype=dtype) as dataset:
        return _measure(dataset.__getitem__, indices)


def _run_opens(root: Path, rounds: int) -> dict[str, float]:
    """CPU per open of every episode-camera clip, frame times read vs given."""
    from episodestream import EpisodeStreamDataset
    from episodestream.cache import ManifestClipSource
    from episodestream.decode import open_decoder

    with EpisodeStreamDataset(str(root), image_dtype="uint8") as dataset:
        opened = dataset.dataset
        source = ManifestClipSource(opened.manifest, opened.reader, root=opened.root)
        clips = []  # (clip bytes, frame times from the manifest)
        for episode in opened.episode_ids.tolist():
            for job in source.clip_jobs(episode):
                payload = opened.reader.read(job.path, job.byte_start, job.payload_nbytes)
                clips.append((job.build(payload), job.frame_times_s))
        figures: dict[str, list[float]] = {"demuxed": [], "manifest": []}
        for r in range(rounds):
            order = ["demuxed", "manifest"] if r % 2 == 0 else ["manifest", "demuxed"]
            for how in order:
                started = time.process_time()
                for data, times in clips:
                    given = times if how == "manifest" else None
                    open_decoder(data, frame_times_s=given).close()
                figures[how].append(1000.0 * (time.process_time() - started) / len(clips))
    return {how: statistics.median(values) for how, values in figures.items()}


def _spawn(track: str, args: argparse.Namespace) -> dict[str, float]:
    env = dict(os.environ)
    if track.startswith("BASE"):
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [args.baseline, env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", _MODULE, str(args.root), "--worker", track]
    command += ["--samples", str(args.samples), "--seed", str(args.seed)]
    if args.torch_threads is not None:
        command += ["--torch-threads", str(args.torch_threads)]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=1800, check=False
    )
    if done.returncode != 0:
        raise TrackFailed(track, done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)\b:")


class TrackFailed(RuntimeError):
    """A track's process failed; ``reason`` is the last line of its stderr (the exception)."""

    def __init__(self, track: str, stderr: str) -> None:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        # the exception's own line: "package.module.SomeError: message" (a message may span
        # more lines; the last one alone can be a detail such as a path)
        raised = [line for line in lines if _EXCEPTION_LINE.match(line)]
        self.track = track
        self.reason = (raised or lines or ["no output"])[-1]
        super().__init__(f"{track} failed:\n{stderr[-3000:]}")


def _lerobot_importable() -> bool:
    try:
        import lerobot  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {_MODULE}", description=__doc__)
    parser.add_argument("root", type=Path, help="a local LeRobot v3 dataset")
    parser.add_argument("--samples", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline", help="another checkout's src/ folder (BASE_* tracks)")
    parser.add_argument("--tracks", nargs="+", choices=_TRACKS, help="default: all that apply")
    parser.add_argument("--worker", choices=_TRACKS, help=argparse.SUPPRESS)
    parser.add_argument(
        "--torch-threads",
        type=int,
        help="torch intra-op threads in every track (default: torch's; DataLoader workers use 1)",
    )
    args = parser.parse_args(argv)
    indices = _sequence(args.root, args.samples, args.seed).tolist()
    if args.worker:
        if args.torch_threads is not None:
            import torch

            torch.set_num_threads(args.torch_threads)
        print(json.dumps(_run_track(args.worker, args.root, indices)))
        return
    tracks = list(args.tracks or _DEFAULT_TRACKS)
    if args.baseline is None:
        tracks = [t for t in tracks if not t.startswith("BASE")]
    if not _lerobot_importable():
        tracks = [t for t in tracks if t != "LEROBOT"]
    results: dict[str, list[dict[str, float]]] = {t: [] for t in tracks}
    refused: dict[str, str] = {}  # LeRobot refuses some datasets (B-frame H.264): say so, go on
    for r in range(args.rounds):
        shift = r % len(tracks)
        for track in tracks[shift:] + tracks[:shift]:
            if track in refused:
                continue
            try:
                results[track].append(_spawn(track, args))
            except TrackFailed as failed:
                if track != "LEROBOT":
                    raise
                refused[track] = failed.reason
                print(f"round {r + 1} {track}: refused: {failed.reason}", file=sys.stderr)
                continue
            print(f"round {r + 1} {track}: {results[track][-1]}", file=sys.stderr)
    tracks = [t for t in tracks if t not in refused]
    results = {t: results[t] for t in tracks}
    cpu = {t: statistics.median(x["cpu_ms_per_sample"] for x in v) for t, v in results.items()}
    faults = {
        t: statistics.median(x["page_faults_per_sample"] for x in v) for t, v in results.items()
    }
    threads = args.torch_threads or "torch's default"
    print(
        f"\n{args.root.name}: {args.samples} samples, {args.rounds} rounds, medians, "
        f"torch threads: {threads}\n"
    )
    print("| track | CPU ms/sample | x FLOOR | x LEROBOT | page faults/sample |")
    print("|---|---:|---:|---:|---:|")
    for t in tracks:
        floor = f"{cpu[t] / cpu['FLOOR']:.2f}" if "FLOOR" in cpu else "-"
        lerobot = f"{cpu[t] / cpu['LEROBOT']:.2f}" if "LEROBOT" in cpu else "-"
        print(f"| {t} | {cpu[t]:.2f} | {floor} | {lerobot} | {faults[t]:.0f} |")
    for t, reason in refused.items():
        print(f"| {t} | refused: {reason[:160]} | - | - | - |")
    if args.torch_threads is not None:
        import torch

        torch.set_num_threads(args.torch_threads)
    opens = _run_opens(args.root, args.rounds)
    print(
        f"\ndecoder open, CPU ms per clip: frame times demuxed {opens['demuxed']:.2f}, "
        f"from the manifest {opens['manifest']:.2f} ({opens['manifest'] / opens['demuxed']:.2f}x)"
    )


if __name__ == "__main__":
    main()

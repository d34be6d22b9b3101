"""Decoder benchmark: open cost, random-access decode cost, threads and seek modes, bytes vs
path, torchcodec vs PyAV pixels, concurrency, memory per open decoder.

Run ``python -m benchmarks.decode`` (about a minute on 2 cores). Inputs: one
LeRobot-written file of tests/data/lerobot_sim5 (128x96 AV1 g=2, 94 frames) and a 640x360
AV1 clip (g=2, crf 30, 60 frames) encoded here with PyAV/libsvtav1. Figures are medians over
interleaved rounds and are printed as Markdown for docs/BENCHMARKS.md ("Decoding").
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from episodestream.decode import DecodeExecutor, demux_frame_times, open_decoder

__all__ = ["main"]

_REPO_ROOT = Path(__file__).resolve().parents[3]
_FIXTURE = (
    _REPO_ROOT / "tests/data/lerobot_sim5/videos/observation.images.cam_high/chunk-000/file-000.mp4"
)
_PAGE = os.sysconf("SC_PAGE_SIZE")
_MODULE = "benchmarks.decode"


@dataclass(frozen=True, slots=True)
class _Clip:
    label: str
    data: bytes
    path: Path


@dataclass(frozen=True, slots=True)
class _Config:
    label: str
    backend: str
    seek_mode: str = "approximate"
    threads: int = 1


def _encode_640x360(path: Path, frames: int = 60) -> bytes:
    """A 2 s 640x360 AV1 clip with LeRobot's settings (g=2, crf 30): smooth moving content with
    some texture, so frames cost what camera frames cost."""
    import av

    time_base = Fraction(1, 15360)
    height, width = 360, 640
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    texture = np.random.default_rng(0).integers(0, 24, size=(height, width), dtype=np.uint8)
    with av.open(str(path), "w", format="mp4", options={"movflags": "faststart"}) as container:
        stream = container.add_stream(
            "libsvtav1", rate=30, options={"g": "2", "crf": "30", "preset": "10"}
        )
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.time_base = time_base
        for i in range(frames):
            image = np.empty((height, width, 3), dtype=np.uint8)
            image[..., 0] = (128 + 100 * np.sin((xx + 6 * i) / 40)).astype(np.uint8)
            image[..., 1] = (128 + 100 * np.cos((yy - 4 * i) / 30)).astype(np.uint8)
            image[..., 2] = ((xx + yy + 8 * i) % 256).astype(np.uint8) // 2 + texture
            cx, cy = 100 + 7 * i, 180 + int(60 * np.sin(i / 8))
            image[cy - 30 : cy + 30, cx - 30 : cx + 30] = (240, 40, 40)
            frame = av.VideoFrame.from_ndarray(image, format="rgb24")
            frame.pts, frame.time_base = i * 512, time_base
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return path.read_bytes()


def _rounds(
    configs: list[Any], rounds: int, measure: Callable[[Any], float | tuple[float, ...]]
) -> dict[Any, Any]:
    """Median (seconds, or a tuple of medians) per config over ``rounds`` rounds, configs
    interleaved within each round so machine noise hits all of them alike."""
    samples: dict[Any, list[Any]] = {c: [] for c in configs}
    for _ in range(rounds):
        for config in configs:
            samples[config].append(measure(config))
    out: dict[Any, Any] = {}
    for config, values in samples.items():
        if isinstance(values[0], tuple):
            out[config] = tuple(statistics.median(v) for v in zip(*values, strict=True))
        else:
            out[config] = statistics.median(values)
    return out


def _open_seconds(clip: _Clip, kind: str, opens: int) -> float:
    times = demux_frame_times(clip.data) if kind == "torchcodec, frame times given" else None
    t0 = time.perf_counter()
    for _ in range(opens):
        if kind == "pyav":
            decoder = open_decoder(clip.data, backend="pyav")
        elif kind == "torchcodec, exact":
            decoder = open_decoder(clip.data, backend="torchcodec", seek_mode="exact")
        elif kind == "torchcodec, path":
            decoder = open_decoder(clip.path, backend="torchcodec")
        else:
            decoder = open_decoder(clip.data, backend="torchcodec", frame_times_s=times)
        decoder.close()
    return (time.perf_counter() - t0) / opens


def _frame_seconds(
    clip: _Clip, config: _Config, picks: np.ndarray, source: Any = None
) -> tuple[float, float]:
    """(wall, CPU) seconds per frame for single-frame calls at the random frames ``picks``; CPU
    time counts every thread of the process, FFmpeg's included."""
    decoder = open_decoder(
        clip.data if source is None else source,
        backend=config.backend,  # type: ignore[arg-type]
        seek_mode=config.seek_mode,  # type: ignore[arg-type]
        threads=config.threads,
    )
    with decoder:
        times = decoder.frame_times()
        decoder.frames_at([times[0]])
        t0, c0 = time.perf_counter(), time.process_time()
        for j in picks:
            decoder.frames_at([times[j]])
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall / len(picks), cpu / len(picks)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def _section_open(clips: list[_Clip], rounds: int) -> list[str]:
    kinds = [
        "torchcodec, frame times given",
        "torchcodec, approximate",
        "torchcodec, exact",
        "pyav",
    ]
    lines = [
        "Decoder open + close, ms (median); ratio to torchcodec approximate (the default):",
        "",
        "| clip | " + " | ".join(kinds) + " |",
        "|---|" + "---:|" * len(kinds),
    ]
    for clip in clips:
        result = _rounds(kinds, rounds, lambda k, c=clip: _open_seconds(c, k, 20))
        base = result["torchcodec, approximate"]
        cells = [f"{result[k] * 1e3:.2f} ({result[k] / base:.2f}x)" for k in kinds]
        lines.append(f"| {clip.label} | " + " | ".join(cells) + " |")
    return lines


def _section_frames(clips: list[_Clip], rounds: int, frames: int) -> list[str]:
    configs = [
        _Config("torchcodec approximate, 1 thread", "torchcodec"),
        _Config("torchcodec exact, 1 thread", "torchcodec", "exact"),
        _Config("torchcodec approximate, auto threads", "torchcodec", threads=0),
        _Config("torchcodec approximate, 2 threads", "torchcodec", threads=2),
        _Config("pyav, 1 thread", "pyav"),
        _Config("pyav, auto threads", "pyav", threads=0),
    ]
    lines = [
        "Random single-frame access from an open decoder: wall ms per frame, CPU ms per frame "
        "(all threads), medians; in brackets the ratio to the default (torchcodec "
        "approximate, 1 thread):",
        "",
        "| decoder | " + " | ".join(f"{c.label} wall | CPU" for c in clips) + " |",
        "|---|" + "---:|---:|" * len(clips),
    ]
    results = []
    for clip in clips:
        count = len(demux_frame_times(clip.data))
        picks = np.random.default_rng(1).integers(0, count, size=frames)
        results.append(
            _rounds(
                configs, rounds, lambda c, clip=clip, picks=picks: _frame_seconds(clip, c, picks)
            )
        )
    for config in configs:
        cells = []
        for result in results:
            base_wall, base_cpu = result[configs[0]]
            wall, cpu = result[config]
            cells.append(f"{wall * 1e3:.3f} ({wall / base_wall:.2f}x)")
            cells.append(f"{cpu * 1e3:.3f} ({cpu / base_cpu:.2f}x)")
        lines.append(f"| {config.label} | " + " | ".join(cells) + " |")
    return lines


def _section_bytes_vs_path(clips: list[_Clip], rounds: int, frames: int) -> list[str]:
    lines = [
        "Same decoder (torchcodec approximate, 1 thread) on the clip's bytes in memory vs on "
        f"the local file: medians over {2 * rounds} alternating rounds of {frames} random "
        "frames; ratio bytes / path:",
        "",
        "| clip | open wall | per frame wall (bytes, path) | per frame wall | per frame CPU |",
        "|---|---:|---:|---:|---:|",
    ]
    config = _Config("default", "torchcodec")
    for clip in clips:
        count = len(demux_frame_times(clip.data))
        picks = np.random.default_rng(2).integers(0, count, size=frames)
        opens = _rounds(
            ["torchcodec, approximate", "torchcodec, path"],
            rounds,
            lambda k, c=clip: _open_seconds(c, k, 20),
        )
        per_frame = _rounds(
            ["bytes", "path"],
            2 * rounds,
            lambda s, c=clip, p=picks: _frame_seconds(
                c, config, p, c.data if s == "bytes" else c.path
            ),
        )
        (bytes_wall, bytes_cpu), (path_wall, path_cpu) = per_frame["bytes"], per_frame["path"]
        lines.append(
            f"| {clip.label} | "
            f"{opens['torchcodec, approximate'] / opens['torchcodec, path']:.3f} | "
            f"{bytes_wall * 1e3:.3f} ms, {path_wall * 1e3:.3f} ms | "
            f"{bytes_wall / path_wall:.3f} | {bytes_cpu / path_cpu:.3f} |"
        )
    return lines


def _section_pixels(clips: list[_Clip]) -> list[str]:
    lines = [
        "torchcodec vs PyAV output (every frame of each clip):",
        "",
        "| clip | frames equal | max abs difference | mean abs difference |",
        "|---|---:|---:|---:|",
    ]
    for clip in clips:
        with (
            open_decoder(clip.data, backend="torchcodec") as tc,
            open_decoder(clip.data, backend="pyav") as pa,
        ):
            a = tc.frames_at(tc.frame_times()).numpy().astype(np.int16)
            b = pa.frames_at(pa.frame_times()).numpy().astype(np.int16)
        equal = sum(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
        diff = np.abs(a - b)
        lines.append(
            f"| {clip.label} | {equal} / {len(a)} | {int(diff.max())} | {float(diff.mean()):.4f} |"
        )
    return lines


def _section_concurrency(clip: _Clip, rounds: int) -> list[str]:
    """Wall time of the same decode work on a DecodeExecutor with 1 or 2 threads (torchcodec
    releases the GIL), and with 1 or automatic FFmpeg threads per decoder."""
    count = len(demux_frame_times(clip.data))
    rng = np.random.default_rng(3)
    tasks = [rng.integers(0, count, size=8) for _ in range(24)]
    configs = [(1, 1), (2, 1), (2, 0), (1, 0)]

    def measure(config: tuple[int, int]) -> float:
        executor_threads, ffmpeg_threads = config

        def task(picks: np.ndarray) -> None:
            with open_decoder(clip.data, threads=ffmpeg_threads) as decoder:
                times = decoder.frame_times()
                for j in picks:
                    decoder.frames_at([times[j]])

        with DecodeExecutor(executor_threads) as executor:
            t0 = time.perf_counter()
            executor.map(task, tasks)
            return time.perf_counter() - t0

    result = _rounds(configs, rounds, measure)
    base = result[(1, 1)]
    lines = [
        f"DecodeExecutor throughput on {clip.label}: 24 tasks, each opens a decoder from bytes "
        f"and decodes 8 random frames ({os.cpu_count()} cores, shared); wall ms (median), ratio "
        "to 1 executor thread x 1 FFmpeg thread:",
        "",
        "| executor threads | FFmpeg threads per decoder | wall ms | ratio |",
        "|---:|---|---:|---:|",
    ]
    for executor_threads, ffmpeg_threads in configs:
        wall = result[(executor_threads, ffmpeg_threads)]
        label = "auto" if ffmpeg_threads == 0 else str(ffmpeg_threads)
        lines.append(f"| {executor_threads} | {label} | {wall * 1e3:.0f} | {wall / base:.2f} |")
    return lines


def _memory_probe(path: Path, backend: str, decoders: int) -> dict[str, float]:
    """In a fresh process: RSS growth per open decoder (own copy of the bytes each, 20 random
    frames decoded) against its ``nbytes``."""
    data = path.read_bytes()
    warm = open_decoder(data, backend=backend)  # type: ignore[arg-type]
    warm.frames_at(warm.frame_times()[:1])
    warm.close()
    gc.collect()
    before = _rss_bytes()
    copies = [bytes(bytearray(data)) for _ in range(decoders)]
    opened = [open_decoder(c, backend=backend) for c in copies]  # type: ignore[arg-type]
    rng = np.random.default_rng(4)
    for decoder in opened:
        times = decoder.frame_times()
        for j in rng.integers(0, len(times), size=20):
            decoder.frames_at([times[j]])
    grown = (_rss_bytes() - before) / decoders
    nbytes = sum(d.nbytes for d in opened) / decoders
    return {"rss": grown, "nbytes": nbytes, "encoded": float(len(data))}


def _section_memory(clips: list[_Clip], decoders: int = 40) -> list[str]:
    lines = [
        f"Memory per open decoder ({decoders} decoders in a fresh process, each on its own copy "
        "of the clip, 20 random frames decoded): RSS growth vs the decoder's `nbytes` estimate:",
        "",
        "| clip | backend | encoded clip | RSS growth | nbytes | nbytes / RSS growth |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for clip in clips:
        for backend in ("torchcodec", "pyav"):
            out = subprocess.run(
                [sys.executable, "-m", _MODULE, "--memory-probe", str(clip.path), backend],
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            m = json.loads(out.stdout.strip().splitlines()[-1])
            lines.append(
                f"| {clip.label} | {backend} | {m['encoded'] / 2**20:.2f} MiB | "
                f"{m['rss'] / 2**20:.2f} MiB | {m['nbytes'] / 2**20:.2f} MiB | "
                f"{m['nbytes'] / m['rss']:.2f} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per figure")
    parser.add_argument("--frames", type=int, default=40, help="random frames per round")
    parser.add_argument("--fixture", type=Path, default=_FIXTURE, help="a LeRobot MP4")
    parser.add_argument(
        "--memory-probe", nargs=2, metavar=("CLIP", "BACKEND"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.memory_probe:
        print(json.dumps(_memory_probe(Path(args.memory_probe[0]), args.memory_probe[1], 40)))
        return 0
    if not args.fixture.is_file():
        print(f"fixture not found: {args.fixture}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="decode-bench-") as tmp:
        big_path = Path(tmp) / "av1_640x360_g2.mp4"
        clips = [
            _Clip("lerobot_sim5 128x96 (94 frames)", args.fixture.read_bytes(), args.fixture),
            _Clip("640x360 AV1 g=2 (60 frames)", _encode_640x360(big_path), big_path),
        ]
        sections: list[Callable[[], list[str]]] = [
            lambda: _section_open(clips, args.rounds),
            lambda: _section_frames(clips, args.rounds, args.frames),
            lambda: _section_bytes_vs_path(clips, args.rounds, args.frames),
            lambda: _section_pixels(clips),
            lambda: _section_concurrency(clips[1], args.rounds),
            lambda: _section_memory(clips),
        ]
        for section in sections:
            print("\n".join(section()), "", sep="\n", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

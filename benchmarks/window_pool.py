"""Window pool vs whole-episode pool (issue 15): decode work and randomness, as ratios.

    .venv/bin/python -m benchmarks.window_pool [--rounds 3] [--codecs av1 h264] [--content wave]

Part A — decode work, measured. A synthetic LeRobot v3 dataset (640x480, 2 cameras, the
presets' textured content, whose decoding costs what camera footage does; AV1 g=2 as LeRobot
writes it, 4 episodes of 150-210 frames, and H.264 g=30 with B-frames, 60-90 frames: random
access there costs 10x) is read for whole epochs by
``EpisodePoolDataset`` with ``unit="episode"`` (a seek per sample) and ``unit="window"``
(each frame decoded once, in order), one decode thread each, in interleaved rounds; samples
per CPU second (process CPU time, all threads) are compared round by round and the medians
printed. The window pool counts the frames it decoded per sample it drew.

Part B — randomness at equal total memory, computed from the pure orders (no decoding; a
dataset modelled on LeRobot's: 3 cameras 640x480, episodes of 300-600 frames, ``--kb-per-frame``
compressed bytes per frame and camera). Memory: the window pool holds
``byte_budget`` of compressed episodes plus ``decoded_budget`` of decoded windows, the total
split several ways; the episode pool gets the same total as compressed episodes; uniform draws
a random permutation of all frames. Reported per batch of 32 consecutive samples: unique
episodes (mean, 5th percentile) and the share of same-episode pairs closer than 1 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from episodestream import EpisodePoolDataset
from episodestream.sampling import (
    PoolParams,
    PoolSchedule,
    WindowParams,
    WindowSchedule,
    window_slots,
)
from episodestream_tools.synthetic import SyntheticSpec, ensure_synthetic_dataset

BATCH = 32
CAMERAS = ("observation.images.cam_high", "observation.images.cam_left_wrist")


# episode lengths: long enough that an epoch passes many windows through each decoded slot
# (as training epochs do), short enough for random access on H.264 GOP 30 to finish
_LENGTHS = {"av1": (150, 210), "h264": (60, 90)}


def _spec(codec: str, content: str = "texture") -> SyntheticSpec:
    shortest, longest = _LENGTHS.get(codec, (60, 90))
    return SyntheticSpec(
        cameras=CAMERAS,
        width=640,
        height=480,
        episodes=4,
        min_length=shortest,
        max_length=longest,
        episodes_per_file=2,
        codec=codec,  # type: ignore[arg-type]
        content=content,
        seed=15,
    )


#: part A's pool, both units: a small pool, one decode thread, uint8 (the decode, not the
#: float conversion both share)
PART_A_SETTINGS: dict[str, Any] = {
    "decoded_budget": "256MiB",
    "pool_size": 4,
    "byte_budget": "1GiB",
    "decode_threads": 1,
    "return_uint8": True,
}


def epoch_rate(
    root: Path,
    cache: Path,
    unit: str,
    epoch: int,
    window_frames: int,
    settings: dict[str, Any] | None = None,
) -> dict:
    """One whole epoch of ``EpisodePoolDataset(root, unit=unit, window_frames=...,
    **settings)`` (``settings``: part A's when None; ``{}`` is the library's defaults):
    samples, process CPU seconds (``time.process_time``: every thread), wall seconds,
    samples per CPU second, the kernel's share of the CPU and decoded frames per sample."""
    dataset = EpisodePoolDataset(
        root,
        unit=unit,  # type: ignore[arg-type]
        window_frames=window_frames,
        cache_dir=cache,
        **(PART_A_SETTINGS if settings is None else settings),
    )
    dataset.set_epoch(epoch)
    before, cpu, wall = os.times(), time.process_time(), time.perf_counter()
    samples = sum(1 for _ in dataset)
    after = os.times()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    user, system = after.user - before.user, after.system - before.system
    metrics = dataset.metrics()
    dataset.close()
    return {
        "samples": samples,
        "cpu_s": cpu,
        "wall_s": wall,
        "per_cpu_s": samples / cpu if cpu > 0 else float("inf"),
        "system_share": system / (user + system) if user + system else 0.0,
        "decoded_per_sample": metrics.get("decoded_frames_per_sample"),
    }


def _epoch(root: Path, cache: Path, unit: str, epoch: int, window_frames: int) -> dict:
    return epoch_rate(root, cache, unit, epoch, window_frames)


def part_a(
    codecs: list[str], rounds: int, cache: Path, window_frames: int, content: str
) -> dict[str, float]:
    print(
        f"\n== A. samples per CPU second, window pool (W={window_frames}) vs episode pool, "
        f"{content} content =="
    )
    bytes_per_frame = {}
    for codec in codecs:
        started = time.perf_counter()
        root = ensure_synthetic_dataset(_spec(codec, content), cache_dir=cache)
        probe = EpisodePoolDataset(root, cache_dir=cache, byte_budget="1GiB", pool_size=4)
        per_frame = probe.dataset.episode_nbytes / probe.dataset.episode_lengths / len(CAMERAS)
        bytes_per_frame[codec] = float(np.median(per_frame))
        frames, gop = probe.num_frames, {"av1": 2, "h264": 30}.get(codec, 0)
        probe.close()
        print(
            f"{codec}: {frames} frames x {len(CAMERAS)} cameras 640x480, GOP {gop}, "
            f"{bytes_per_frame[codec] / 1e3:.1f} kB/frame/camera "
            f"(dataset ready in {time.perf_counter() - started:.0f} s)"
        )
        _epoch(root, cache, "window", 0, window_frames)  # warm: decoders, index, page cache
        rows: dict[str, list[dict]] = {"episode": [], "window": []}
        ratios = []
        for round_ in range(rounds):
            order = ("episode", "window") if round_ % 2 == 0 else ("window", "episode")
            got = {unit: _epoch(root, cache, unit, round_, window_frames) for unit in order}
            for unit in order:
                rows[unit].append(got[unit])
            ratios.append(got["window"]["per_cpu_s"] / got["episode"]["per_cpu_s"])
        for unit in ("episode", "window"):
            rate = statistics.median(r["per_cpu_s"] for r in rows[unit])
            cpu_ms = statistics.median(1e3 * r["cpu_s"] / r["samples"] for r in rows[unit])
            decoded = rows[unit][0]["decoded_per_sample"]
            system = statistics.median(r["system_share"] for r in rows[unit])
            print(
                f"  {unit:7s}: {rate:7.1f} samples/CPU-s  ({cpu_ms:5.2f} ms CPU/sample, "
                f"{system:.0%} in the kernel)"
                + (f", decoded frames/sample {decoded:.3f}" if decoded is not None else "")
            )
        per_round = {unit: ", ".join(f"{r['per_cpu_s']:.0f}" for r in rows[unit]) for unit in rows}
        print(
            f"  ratio window/episode: median {statistics.median(ratios):.2f}x  "
            f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)}; samples/CPU-s episode "
            f"{per_round['episode']}, window {per_round['window']})"
        )
    return bytes_per_frame


def _batch_stats(episodes: np.ndarray, frames: np.ndarray, fps: int) -> tuple[float, float, float]:
    count = episodes.size // BATCH * BATCH
    e = episodes[:count].reshape(-1, BATCH)
    f = frames[:count].reshape(-1, BATCH)
    unique = np.array([np.unique(row).size for row in e])
    same = e[:, :, None] == e[:, None, :]
    close = same & (np.abs(f[:, :, None] - f[:, None, :]) < fps)
    pairs = BATCH * (BATCH - 1)
    near = (close.sum(axis=(1, 2)) - BATCH) / pairs  # diagonal excluded
    return float(unique.mean()), float(np.percentile(unique, 5)), float(near.mean())


def part_b(kb_per_frame: float, window_sizes: list[int], byte_splits_gib: list[float]) -> None:
    """Unique episodes per batch from the pure orders, at equal total memory."""
    rng = np.random.default_rng(0)
    episodes, fps, cameras, frame_bytes = 200, 30, 3, 640 * 480 * 3
    lengths = rng.integers(300, 601, size=episodes)
    ids = np.arange(episodes)
    episode_bytes = float(np.mean(lengths)) * cameras * kb_per_frame * 1e3
    total = 5 * 2**30
    print(
        f"\n== B. randomness at equal total memory ({total / 2**30:.0f} GiB, split between "
        f"byte_budget and decoded_budget), {episodes} episodes of 300-600 frames, 3 cameras "
        f"640x480, {episode_bytes / 1e6:.1f} MB per compressed episode =="
    )
    print(f"{'order':56s} {'unique eps/32':>13s} {'p5':>5s} {'same-ep pairs <1 s':>19s}")

    def report(name: str, draws: list[tuple[int, int]] | np.ndarray) -> float:
        array = np.asarray(draws)
        mean, p5, near = _batch_stats(array[:, 0], array[:, 1], fps)
        print(f"{name:56s} {mean:13.1f} {p5:5.0f} {near:19.3%}")
        return mean

    everything = np.array([(e, f) for e, n in zip(ids, lengths, strict=True) for f in range(n)])
    uniform = report("uniform random (all frames)", everything[rng.permutation(len(everything))])
    equal_memory_pool = max(1, int(total // episode_bytes) - 2)
    results = {}
    for pool_size in (16, equal_memory_pool):
        schedule = PoolSchedule(ids, lengths, params=PoolParams(pool_size=pool_size, seed=1))
        label = (
            "episode pool, pool_size=16 (default)"
            if pool_size == 16
            else (f"episode pool, pool_size={pool_size} (equal memory)")
        )
        results[pool_size] = report(label, list(schedule.iter_draws()))
    best = (0.0, "")
    for byte_gib in byte_splits_gib:
        byte_budget = byte_gib * 2**30
        decoded_budget = total - byte_budget
        # open episodes: as many as the byte budget holds (pinned + 2 in flight)
        most_open = max(1, int(byte_budget // episode_bytes) - 2)
        for window in window_sizes:
            window_bytes = window * cameras * frame_bytes
            resident, _ = window_slots(decoded_budget, window_bytes, decode_ahead=2)
            open_episodes = min(most_open, episodes)
            params = WindowParams(
                window_frames=window,
                open_episodes=open_episodes,
                resident_windows=resident,
                seed=1,
            )
            draws = list(WindowSchedule(ids, lengths, params=params).iter_draws())
            name = (
                f"window W={window}, {byte_gib:g}+{decoded_budget / 2**30:g} GiB "
                f"({resident} windows, {open_episodes} open eps)"
            )
            mean = report(name, draws)
            best = max(best, (mean, name))
    mean, name = best
    print(
        f"best window pool: {name}: {mean / results[16]:.2f}x the default episode pool, "
        f"{mean / results[equal_memory_pool]:.2f}x the equal-memory episode pool, "
        f"{mean / uniform:.2f}x uniform"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--codecs", nargs="+", default=["av1", "h264"])
    parser.add_argument("--window-frames", type=int, default=32)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument(
        "--kb-per-frame",
        type=float,
        default=20.0,
        help="compressed kB per frame per camera for part B (synthetic frames compress far "
        "better than camera footage; 20 kB is typical of 640x480 AV1 crf 30)",
    )
    parser.add_argument("--skip-decode", action="store_true", help="part B only")
    parser.add_argument(
        "--content",
        choices=("texture", "wave"),
        default="texture",
        help="what the cameras show: texture decodes as camera footage does; wave is smooth "
        "and about 3x cheaper to decode, so fixed per-frame costs weigh more",
    )
    args = parser.parse_args()
    cache = args.cache_dir or Path(tempfile.gettempdir()) / "episodestream-window-bench"
    if not args.skip_decode:
        part_a(args.codecs, args.rounds, cache, args.window_frames, args.content)
    part_b(args.kb_per_frame, [4, 8, 16, 32], [1, 2, 3, 4])


if __name__ == "__main__":
    main()

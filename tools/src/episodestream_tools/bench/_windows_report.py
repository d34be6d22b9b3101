"""The window-pool track of ``bench``: decode work and randomness, window pool vs episode pool.

- **Decode work, measured**: the same dataset is read by ``EpisodePoolDataset`` with
  ``unit="episode"`` (a seek per sample) and ``unit="window"`` (each frame decoded once, in
  order), in interleaved rounds; samples per CPU second (process CPU, all threads) are compared
  round by round and the median ratio reported, with the window pool's decoded frames per
  sample and each track's peak RSS (sampled while it runs) against byte budget + decoded
  budget + 400 MB.
- **Randomness, from the pure orders** of this dataset's episodes (lengths and compressed
  sizes from the index): per batch of ``batch_size`` consecutive samples, unique episodes and
  the within-batch temporal distance (for each sample, the nearest other sample of its episode
  in its batch), for the window pool, the episode pool with the same total memory
  (``byte_budget + decoded_budget`` of compressed episodes) and uniform random sampling.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from episodestream.datasets import EpisodePoolDataset
from episodestream.helpers import check_int
from episodestream.sampling import (
    PoolParams,
    PoolSchedule,
    WindowParams,
    WindowSchedule,
    window_slots,
)

__all__ = [
    "RSS_ALLOWANCE_BYTES",
    "RandomnessRow",
    "WindowBenchConfig",
    "WindowBenchReport",
    "format_window_report",
    "run_window_bench",
    "write_window_plot",
]

#: what the window pool may hold beyond its two budgets (interpreter, torch, decoders)
RSS_ALLOWANCE_BYTES = 400 * 10**6
# RSS is read every this many samples while a track runs
_RSS_EVERY = 8
# windows decoded ahead, as the dataset decides (datasets/_windows.py)
_DECODE_AHEAD = 2
_NEAR_S = 1.0


@dataclass(frozen=True, slots=True)
class WindowBenchConfig:
    """What the window-pool track runs.

    Args:
        root: dataset root (local path or URL).
        window_frames: frames per window.
        decoded_budget: decoded bytes of the window pool ("4GiB" or an int).
        byte_budget: compressed bytes each pool holds ("2GiB" or an int).
        pool_size: open episodes of both pools.
        rounds: interleaved rounds of the two measured tracks (medians reported).
        samples: samples read per track and round (``None``: a whole epoch).
        batch_size: batch size of the randomness figures.
        decode_threads: decode threads of both pools.
        seed: order seed.
        cache_dir: sidecar index cache folder.
    """

    root: str | os.PathLike[str]
    window_frames: int = 32
    decoded_budget: str | int = "4GiB"
    byte_budget: str | int = "2GiB"
    pool_size: int = 16
    rounds: int = 1
    samples: int | None = None
    batch_size: int = 32
    decode_threads: int = 1
    seed: int = 0
    cache_dir: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        for name in ("window_frames", "pool_size", "rounds", "batch_size"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("decode_threads", self.decode_threads, minimum=0)
        check_int("seed", self.seed, minimum=0)
        if self.samples is not None:
            check_int("samples", self.samples, minimum=1)


@dataclass(frozen=True, slots=True, eq=False)  # holds arrays: equal only to itself
class RandomnessRow:
    """Randomness of one order, per batch of ``batch_size`` consecutive samples.

    Attributes:
        name: the order.
        unique_episodes: unique episodes per batch (one entry per full batch).
        nearest_same_episode_s: for each sample with another sample of its episode in its
            batch, the time to the nearest one (seconds).
        samples: samples in the full batches.
    """

    name: str
    unique_episodes: np.ndarray
    nearest_same_episode_s: np.ndarray
    samples: int

    @property
    def mean_unique(self) -> float:
        return float(self.unique_episodes.mean()) if self.unique_episodes.size else 0.0

    @property
    def near_share(self) -> float:
        """Share of samples with a same-episode sample under 1 s away in their batch."""
        if not self.samples:
            return 0.0
        return float((self.nearest_same_episode_s < _NEAR_S).sum() / self.samples)


@dataclass(frozen=True, slots=True)
class WindowBenchReport:
    """Everything the track measured (built once, when it is done);
    :func:`format_window_report` prints it."""

    config: WindowBenchConfig
    frames: int
    episodes: int
    fps: int
    window_bytes: int
    decoded_budget_bytes: int
    byte_budget_bytes: int
    rounds: Mapping[str, Sequence[Mapping[str, float]]]
    decoded_frames_per_sample: float | None
    peak_rss_bytes: Mapping[str, int]
    rss_growth_bytes: Mapping[str, int]
    randomness: Sequence[RandomnessRow]
    equal_memory_pool_size: int

    def median(self, unit: str, key: str) -> float:
        return statistics.median(r[key] for r in self.rounds[unit])

    @property
    def ratios(self) -> list[float]:
        return [
            w["per_cpu_s"] / e["per_cpu_s"]
            for w, e in zip(self.rounds["window"], self.rounds["episode"], strict=True)
        ]

    @property
    def rss_limit_bytes(self) -> int:
        return self.byte_budget_bytes + self.decoded_budget_bytes + RSS_ALLOWANCE_BYTES


def _rss_bytes() -> int:
    """Resident set size of this process now (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _dataset(config: WindowBenchConfig, unit: str) -> EpisodePoolDataset:
    return EpisodePoolDataset(
        config.root,
        unit=unit,  # type: ignore[arg-type]
        window_frames=config.window_frames,
        decoded_budget=config.decoded_budget,
        byte_budget=config.byte_budget,
        pool_size=config.pool_size,
        decode_threads=config.decode_threads,
        seed=config.seed,
        return_uint8=True,  # the decode, not the float conversion both share
        cache_dir=config.cache_dir,
    )


def _measure(config: WindowBenchConfig, unit: str, epoch: int) -> dict[str, Any]:
    dataset = _dataset(config, unit)
    try:
        dataset.set_epoch(epoch)
        limit = config.samples
        count, start = 0, _rss_bytes()
        peak = start
        before = os.times()
        for _ in dataset:
            count += 1
            if count % _RSS_EVERY == 0:
                peak = max(peak, _rss_bytes())
            if limit is not None and count >= limit:
                break
        after = os.times()
        peak = max(peak, _rss_bytes())
        metrics = dataset.metrics()
    finally:
        dataset.close()
    cpu = (after.user - before.user) + (after.system - before.system)
    return {
        "samples": count,
        "cpu_s": cpu,
        "per_cpu_s": count / cpu if cpu > 0 else float("inf"),
        "system_share": (after.system - before.system) / cpu if cpu > 0 else 0.0,
        "peak_rss": peak,
        "rss_growth": max(peak - start, 0),
        "decoded_per_sample": metrics.get("decoded_frames_per_sample"),
    }


def randomness_row(
    name: str, episodes: np.ndarray, frames: np.ndarray, *, fps: int, batch_size: int
) -> RandomnessRow:
    """Unique episodes and nearest same-episode distance per batch of an order of draws."""
    count = episodes.size // batch_size * batch_size
    e = np.asarray(episodes[:count], dtype=np.int64).reshape(-1, batch_size)
    f = np.asarray(frames[:count], dtype=np.int64).reshape(-1, batch_size)
    ordered = np.sort(e, axis=1)
    unique = (np.diff(ordered, axis=1) != 0).sum(axis=1) + (batch_size > 0)
    same = e[:, :, None] == e[:, None, :]
    gap = np.abs(f[:, :, None] - f[:, None, :]).astype(np.float64)
    gap[~same] = np.inf
    index = np.arange(batch_size)
    gap[:, index, index] = np.inf  # a sample is not its own neighbour
    nearest = gap.min(axis=2).ravel()
    return RandomnessRow(
        name=name,
        unique_episodes=unique,
        nearest_same_episode_s=nearest[np.isfinite(nearest)] / fps,
        samples=count,
    )


def _draws(pairs: Iterable[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    array = np.asarray(list(pairs), dtype=np.int64).reshape(-1, 2)
    return array[:, 0], array[:, 1]


def _randomness(
    config: WindowBenchConfig,
    ids: np.ndarray,
    lengths: np.ndarray,
    nbytes: np.ndarray,
    *,
    fps: int,
    window_bytes: int,
    decoded_budget: int,
    byte_budget: int,
) -> tuple[list[RandomnessRow], int]:
    batch = config.batch_size
    rng = np.random.default_rng(config.seed)
    episodes = np.repeat(ids, lengths)
    frames = np.arange(episodes.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    order = rng.permutation(episodes.size)
    rows = [
        randomness_row("uniform random", episodes[order], frames[order], fps=fps, batch_size=batch)
    ]
    # the episode pool holding the window pool's whole memory as compressed episodes
    per_episode = max(int(np.median(nbytes)), 1)
    equal = max(1, min(int(ids.size), (byte_budget + decoded_budget) // per_episode))
    for pool_size, label in (
        (config.pool_size, f"episode pool, pool_size={config.pool_size}"),
        (equal, f"episode pool, pool_size={equal} (equal total memory)"),
    ):
        params = PoolParams(pool_size=pool_size, seed=config.seed)
        draws = _draws(PoolSchedule(ids, lengths, params=params).iter_draws())
        rows.append(randomness_row(label, *draws, fps=fps, batch_size=batch))
    resident, _ = window_slots(decoded_budget, window_bytes, decode_ahead=_DECODE_AHEAD)
    params = WindowParams(
        window_frames=config.window_frames,
        open_episodes=config.pool_size,
        resident_windows=resident,
        seed=config.seed,
    )
    draws = _draws(WindowSchedule(ids, lengths, params=params).iter_draws())
    label = f"window pool, W={config.window_frames} ({resident} resident windows)"
    rows.append(randomness_row(label, *draws, fps=fps, batch_size=batch))
    return rows, equal


def run_window_bench(config: WindowBenchConfig) -> WindowBenchReport:
    """Run the window-pool track (see the module docstring)."""
    probe = _dataset(config, "window")
    try:
        opened = probe.dataset
        ids = np.asarray(opened.episode_ids, dtype=np.int64)
        lengths = np.asarray(opened.episode_lengths, dtype=np.int64)
        nbytes = np.asarray(opened.episode_nbytes, dtype=np.int64)
        fps = int(probe.fps)
        window_bytes = int(probe.window_bytes)
        decoded_budget = int(probe.decoded_budget)
        byte_budget = int(probe.options.byte_budget)
    finally:
        probe.close()
    rounds: dict[str, list[dict[str, Any]]] = {"episode": [], "window": []}
    for round_ in range(config.rounds):
        # alternate which goes first: neither always meets a cold or a warm machine
        order = ("episode", "window") if round_ % 2 == 0 else ("window", "episode")
        for unit in order:
            rounds[unit].append(_measure(config, unit, round_))
    randomness, equal_memory_pool_size = _randomness(
        config,
        ids,
        lengths,
        nbytes,
        fps=fps,
        window_bytes=window_bytes,
        decoded_budget=decoded_budget,
        byte_budget=byte_budget,
    )
    return WindowBenchReport(
        config=config,
        frames=int(lengths.sum()),
        episodes=int(ids.size),
        fps=fps,
        window_bytes=window_bytes,
        decoded_budget_bytes=decoded_budget,
        byte_budget_bytes=byte_budget,
        rounds={unit: tuple(rows) for unit, rows in rounds.items()},
        decoded_frames_per_sample=rounds["window"][-1]["decoded_per_sample"],
        peak_rss_bytes={u: max(int(r["peak_rss"]) for r in rows) for u, rows in rounds.items()},
        rss_growth_bytes={u: max(int(r["rss_growth"]) for r in rows) for u, rows in rounds.items()},
        randomness=tuple(randomness),
        equal_memory_pool_size=equal_memory_pool_size,
    )


def format_window_report(report: WindowBenchReport) -> str:
    """The track's figures as Markdown tables."""
    config = report.config
    mib = 2**20
    lines = [
        f"## Window pool (W={config.window_frames}, decoded_budget "
        f"{report.decoded_budget_bytes / mib:.0f} MiB, byte_budget "
        f"{report.byte_budget_bytes / mib:.0f} MiB)",
        "",
        f"{report.episodes} episodes, {report.frames} frames; {config.rounds} interleaved "
        "round(s), medians.",
        "",
        "| track | samples per CPU-s | ms CPU/sample | kernel share | peak RSS (MiB) | "
        "RSS growth (MiB) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for unit in ("episode", "window"):
        per_sample = statistics.median(1e3 * r["cpu_s"] / r["samples"] for r in report.rounds[unit])
        lines.append(
            f"| {unit} pool | {report.median(unit, 'per_cpu_s'):.1f} | {per_sample:.2f} | "
            f"{report.median(unit, 'system_share'):.0%} | "
            f"{report.peak_rss_bytes[unit] / mib:.0f} | "
            f"{report.rss_growth_bytes[unit] / mib:.0f} |"
        )
    ratios = report.ratios
    decoded = report.decoded_frames_per_sample
    rss = report.peak_rss_bytes["window"]
    lines += [
        "",
        f"- samples per CPU-s, window / episode: **{statistics.median(ratios):.2f}x** "
        f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})",
        "- decoded frames per drawn sample (window pool): "
        + ("n/a" if decoded is None else f"{decoded:.3f}")
        + (
            " (a run cut short of an epoch counts the resident windows' undrawn frames)"
            if report.rounds["window"][-1]["samples"] < report.frames
            else ""
        ),
        f"- peak RSS of the window pool {rss / mib:.0f} MiB "
        f"{'<=' if rss <= report.rss_limit_bytes else '>'} byte budget + decoded budget + "
        f"400 MB = {report.rss_limit_bytes / mib:.0f} MiB (process RSS: includes the "
        "interpreter, torch and whatever the process held before; growth during the run "
        f"{report.rss_growth_bytes['window'] / mib:.0f} MiB)",
        "",
        f"Randomness per batch of {config.batch_size}, from the pure orders of these episodes "
        f"(equal total memory: {report.equal_memory_pool_size} compressed episodes):",
        "",
        "| order | unique episodes (mean, p5) | same-episode neighbour < 1 s | "
        "nearest same-episode distance, median (s) | vs uniform |",
        "|---|---:|---:|---:|---:|",
    ]
    uniform = report.randomness[0].mean_unique or 1.0
    for row in report.randomness:
        p5 = float(np.percentile(row.unique_episodes, 5)) if row.unique_episodes.size else 0.0
        near = row.nearest_same_episode_s
        median = f"{float(np.median(near)):.2f}" if near.size else "-"
        lines.append(
            f"| {row.name} | {row.mean_unique:.1f} ({p5:.0f}) | {row.near_share:.1%} | "
            f"{median} | {row.mean_unique / uniform:.2f}x |"
        )
    return "\n".join(lines)


def write_window_plot(report: WindowBenchReport, path: str | os.PathLike[str]) -> Path:
    """Histograms of unique episodes per batch for each order, as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    out = Path(path)
    batch = report.config.batch_size
    bins = np.arange(0.5, batch + 1.5)
    figure, axis = plt.subplots(figsize=(8, 4.5))
    try:
        for row in report.randomness:
            axis.hist(
                row.unique_episodes,
                bins=bins,
                histtype="step",
                linewidth=1.5,
                density=True,
                label=f"{row.name} (mean {row.mean_unique:.1f})",
            )
        axis.set_xlabel(f"unique episodes per batch of {batch}")
        axis.set_ylabel("share of batches")
        axis.set_title("Episodes per batch: window pool, episode pool, uniform")
        axis.legend(fontsize="small")
        figure.tight_layout()
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(out, dpi=100)
    finally:
        plt.close(figure)
    return out

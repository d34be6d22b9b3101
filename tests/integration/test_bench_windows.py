"""bench's window-pool track: window pool vs episode pool on the LeRobot-written fixture
(samples per CPU second, decoded frames per sample, peak RSS against the budgets), randomness
of the window pool, the episode pool at equal total memory and uniform sampling, the table,
the episodes-per-batch histogram PNG, and ``episodestream bench --unit window``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from episodestream.cli import main
from episodestream.errors import ConfigError
from episodestream_tools.bench._windows_report import (
    RSS_ALLOWANCE_BYTES,
    WindowBenchConfig,
    format_window_report,
    randomness_row,
    run_window_bench,
    write_window_plot,
)

TOTAL_FRAMES = 244  # lerobot_sim5: 5 episodes, 3 cameras 96x128
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_randomness_counts_unique_episodes_and_nearest_same_episode_distance() -> None:
    episodes = np.array([0, 0, 1, 2, 5, 5, 5, 5])
    frames = np.array([0, 15, 3, 4, 0, 60, 90, 300])
    row = randomness_row("hand-made", episodes, frames, fps=30, batch_size=4)
    assert row.unique_episodes.tolist() == [3, 1]
    # batch 1: frames 0 and 15 of episode 0 are 0.5 s apart; batch 2: all of episode 5
    assert sorted(row.nearest_same_episode_s.tolist()) == [0.5, 0.5, 1.0, 1.0, 2.0, 7.0]
    assert row.samples == 8
    assert row.near_share == pytest.approx(2 / 8)  # only the two 0.5 s neighbours
    assert row.mean_unique == 2.0
    # a trailing partial batch is left out
    assert randomness_row("x", episodes[:7], frames[:7], fps=30, batch_size=4).samples == 4


def test_window_track_measures_both_pools_and_compares_randomness(
    lerobot_fixture_root: Path, datasets_cache_dir: Path, tmp_path: Path
) -> None:
    config = WindowBenchConfig(
        root=lerobot_fixture_root,
        window_frames=16,
        decoded_budget="12MiB",
        byte_budget="64MiB",
        pool_size=3,
        rounds=2,
        batch_size=8,
        cache_dir=datasets_cache_dir,
    )
    report = run_window_bench(config)
    assert (report.frames, report.episodes) == (TOTAL_FRAMES, 5)
    for unit in ("episode", "window"):
        rounds = report.rounds[unit]
        assert [r["samples"] for r in rounds] == [TOTAL_FRAMES, TOTAL_FRAMES]
        assert all(r["cpu_s"] > 0 and 0 <= r["system_share"] <= 1 for r in rounds)
        # the process held torch and the test session before: bound what the run added
        assert report.peak_rss_bytes[unit] > 0
        assert 0 <= report.rss_growth_bytes[unit] <= report.rss_limit_bytes
    assert len(report.ratios) == 2 and all(0 < r < 100 for r in report.ratios)
    # a whole epoch without delta_timestamps decodes each frame once
    assert report.decoded_frames_per_sample == pytest.approx(1.0)
    assert report.rss_limit_bytes == 64 * 2**20 + 12 * 2**20 + RSS_ALLOWANCE_BYTES

    names = [row.name for row in report.randomness]
    assert names[0] == "uniform random" and names[-1].startswith("window pool, W=16")
    assert any("equal total memory" in name for name in names)
    for row in report.randomness:
        assert row.samples == TOTAL_FRAMES // 8 * 8
        assert row.unique_episodes.size == TOTAL_FRAMES // 8
        assert row.unique_episodes.min() >= 1 and row.unique_episodes.max() <= 5
        assert np.all(row.nearest_same_episode_s > 0)
    # the fixture's 5 episodes fit the equal-memory episode pool whole
    assert report.equal_memory_pool_size == 5
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.equal_memory_pool_size = 1  # type: ignore[misc]  # a value, built once

    text = format_window_report(report)
    assert "samples per CPU-s, window / episode" in text
    assert "decoded frames per drawn sample (window pool): 1.000" in text
    assert text.count("| window pool, W=16") == 1 and "| uniform random |" in text

    plot = write_window_plot(report, tmp_path / "plots" / "episodes.png")
    data = plot.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 5_000


def test_bad_window_track_settings_are_refused_by_name(lerobot_fixture_root: Path) -> None:
    with pytest.raises(ConfigError, match="window_frames"):
        WindowBenchConfig(root=lerobot_fixture_root, window_frames=0)
    with pytest.raises(ConfigError, match="samples"):
        WindowBenchConfig(root=lerobot_fixture_root, samples=0)


def test_bench_unit_window_prints_the_track_and_writes_the_plot(
    lerobot_fixture_root: Path,
    datasets_cache_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    plot = tmp_path / "hist.png"
    argv = [
        "bench",
        str(lerobot_fixture_root),
        "--unit",
        "window",
        "--window-frames",
        "16",
        "--decoded-budget",
        "12MiB",
        "--byte-budget",
        "64MiB",
        "--pool-size",
        "3",
        "--samples",
        "64",
        "--batch-size",
        "8",
        "--cache-dir",
        str(datasets_cache_dir),
        "--plot",
        str(plot),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "## Window pool (W=16" in out and "samples per CPU-s, window / episode" in out
    assert f"plot: {plot}" in out
    assert plot.read_bytes().startswith(PNG_SIGNATURE)
    # a budget that cannot hold two windows is refused with the budget's name
    assert main([*argv[:6], "--decoded-budget", "1KiB", *argv[8:]]) == 2
    assert "decoded_budget" in capsys.readouterr().err

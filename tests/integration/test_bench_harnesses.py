"""Issue 29's measurement harnesses at their smallest size: ``benchmarks.decode_floor_matrix``
(one cell, one round, through the ``episodestream`` CLI), ``benchmarks.window_sweep`` (three
contents, two window sizes, one round) and ``benchmarks.memory_passes`` (three passes): each
prints its command and one Markdown table whose ratios are positive finite numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import av
import numpy as np
import pytest
from benchmarks import decode_floor_matrix, memory_passes, window_sweep

from episodestream_tools.synthetic import ensure_synthetic_dataset


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """The one Markdown table of ``text``: its header cells and its data rows' cells."""
    rows = [line for line in text.splitlines() if line.startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in rows]
    assert len(cells) >= 3, text
    assert all(set(c) <= set("-:") for c in cells[1]), text  # the separator row
    assert all(len(row) == len(cells[0]) for row in cells), text
    return cells[0], cells[2:]


def _positive(cell: str) -> float:
    value = float(cell)
    assert math.isfinite(value) and value > 0, cell
    return value


def test_decode_floor_matrix_one_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "matrix.json"
    argv = [
        "--sizes",
        "96x96",
        "--cameras",
        "1",
        "--dtypes",
        "uint8",
        "--samples",
        "16",
        "--rounds",
        "1",
        "--episodes",
        "2",
        "--length",
        "12:16",
        "--work",
        str(tmp_path / "work"),
        "--json",
        str(out),
    ]
    assert decode_floor_matrix.main(argv) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("command: `") and "--sizes 96x96" in text
    header, rows = _table(text)
    assert header == [
        "size",
        "cameras",
        "dtype",
        "FLOOR CPU ms/sample",
        "STREAM/FLOOR",
        "LOCAL/FLOOR",
    ]
    assert len(rows) == 1 and rows[0][:3] == ["96x96", "1", "uint8"]
    for cell in rows[0][3:]:
        _positive(cell)
    report = json.loads(out.read_text())
    (cell,) = report["cells"]
    assert len(cell["floor_rounds"]) == 1
    assert set(cell["over_floor"]) == {"stream", "local"}
    # the dataset is kept: a second look finds it where the first run wrote it
    root = decode_floor_matrix.dataset_root(decode_floor_matrix.parse_args(argv), "96x96", 1)
    assert json.loads((root / "meta" / "info.json").read_text())["total_episodes"] == 2


def test_window_sweep_three_contents(
    tmp_path: Path, lerobot_fixture_root: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "--size",
        "64x48",
        "--episodes",
        "2",
        "--length",
        "12:16",
        "--windows",
        "4",
        "8",
        "--dtypes",
        "uint8",
        "--rounds",
        "1",
        "--decoded-budget",
        "16MiB",
        "--lerobot-root",
        str(lerobot_fixture_root),
        "--work",
        str(tmp_path / "work"),
    ]
    assert window_sweep.main(argv) == 0
    text = capsys.readouterr().out
    assert text.splitlines()[0].startswith("command: `") and "--windows 4 8" in text
    header, rows = _table(text)
    assert header[-2:] == ["W=4", "W=8"]
    assert [row[:2] for row in rows] == [
        ["texture", "uint8"],
        ["flat", "uint8"],
        ["lerobot", "uint8"],
    ]
    for row in rows:
        assert int(row[2]) > 0  # samples of an epoch
        for cell in row[3:]:
            _positive(cell)
    assert rows[2][2] == "244"  # lerobot_sim5's frames: every one, once


def test_flat_videos_keep_their_frames_and_are_flat(tmp_path: Path) -> None:
    args = window_sweep.parse_args(
        ["--size", "64x48", "--episodes", "2", "--length", "6:8", "--work", str(tmp_path)]
    )
    flat = window_sweep.flat_dataset(args)
    # the synthetic dataset it was made from (written by the first call, found by this one)
    source = ensure_synthetic_dataset(
        window_sweep._synthetic_spec(args, "wave"), cache_dir=args.work / "synthetic"
    )
    videos = sorted((flat / "videos").rglob("*.mp4"))
    assert videos
    for path in videos:
        original = source / path.relative_to(flat)
        with av.open(str(path)) as new, av.open(str(original)) as old:
            frames = [f.to_ndarray(format="rgb24") for f in new.decode(video=0)]
            assert len(frames) == sum(1 for _ in old.decode(video=0))
            assert new.streams.video[0].codec_context.name in {"libdav1d", "libaom-av1", "av1"}
        for frame in frames:
            # one colour per frame: every pixel within coding noise of the frame's mean
            assert np.abs(frame.astype(np.int16) - frame.mean(axis=(0, 1))).max() <= 6


def test_moving_scene_moves() -> None:
    scene = window_sweep._MovingScene(64, 48, np.random.default_rng(0))
    first, later = scene.frame(0, 30), scene.frame(5, 30)
    assert first.shape == (48, 64, 3) and first.dtype == np.uint8
    assert np.abs(first.astype(np.int16) - later).mean() > 5  # the view moved
    assert first.std() > 10  # detail, not a flat field


def test_slope_per_pass_fits_from_the_given_pass() -> None:
    rss = [500.0, 400.0] + [100.0 + 0.5 * n for n in range(3, 13)]  # a jump, then a line
    assert memory_passes.slope_per_pass(rss, 3) == pytest.approx(0.5)
    assert memory_passes.slope_per_pass(rss, 1) < 0
    with pytest.raises(ValueError):
        memory_passes.slope_per_pass(rss, 12)


def test_memory_passes_three_passes(
    tmp_path: Path,
    synthetic_cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # the demo dataset the passes read: cached beside the other test datasets
    monkeypatch.setenv("EPISODESTREAM_CACHE", str(synthetic_cache_dir / "default-cache"))
    out = tmp_path / "passes.json"
    argv = ["--passes", "3", "--slope-from", "2", "--episodes", "1", "--json", str(out)]
    assert memory_passes.main(argv) == 0
    text = capsys.readouterr().out
    header, rows = _table(text)
    assert header[0] == "passes" and "slope MiB/pass" in header
    assert len(rows) == 1 and rows[0][0] == "3"
    for cell in rows[0][1:-2]:  # RSS figures
        _positive(cell)
    report = json.loads(out.read_text())
    assert len(report["rss_mib"]) == 3 and report["samples_per_pass"] > 0
    assert math.isfinite(report["slope_mib_per_pass"])
    assert float(rows[0][-2]) == pytest.approx(report["slope_mib_per_pass"], abs=1e-4)

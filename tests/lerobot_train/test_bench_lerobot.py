"""``bench``'s LEROBOT track in LeRobot's environment: ``LeRobotDataset`` on the same local
files draws the same samples as the sequence, and its figures sit beside FLOOR's and STREAM's."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import lerobot
import pytest
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from episodestream_tools.bench import BenchConfig, format_report, run_bench

SAMPLES = 40


@pytest.mark.parametrize("image_dtype", ["float32", "uint8"])
def test_lerobot_track_draws_the_sequence(
    lerobot_fixture_root: Path, tmp_path: Path, image_dtype: str
) -> None:
    config = BenchConfig(
        root=str(lerobot_fixture_root),
        tracks=("floor", "lerobot"),
        samples=SAMPLES,
        keepup_samples=0,
        decode_samples=2,
        rounds=1,
        image_dtype=image_dtype,  # type: ignore[arg-type]
        cache_dir=str(tmp_path / "cache"),
        progress=False,
    )
    report = run_bench(config)
    track = report.tracks["lerobot"]
    assert track["samples"] == SAMPLES
    assert track["sequence_matches"] is True  # LeRobot's [index] is the sequence's sample
    assert track["lerobot_version"] == lerobot.__version__
    has_uint8 = "return_uint8" in inspect.signature(LeRobotDataset.__init__).parameters
    assert track["uint8_available"] is has_uint8
    assert track["image_dtype"] == ("uint8" if image_dtype == "uint8" and has_uint8 else "float32")
    assert track["cpu_ms_per_sample"] > 0 and track["samples_per_s"] > 0
    ratios = report.ratios
    assert ratios["lerobot_cpu_over_floor"] == pytest.approx(
        track["cpu_ms_per_sample"] / report.tracks["floor"]["cpu_ms_per_sample"]
    )
    assert ratios["stream_cpu_over_lerobot"] == pytest.approx(
        report.tracks["stream"]["cpu_ms_per_sample"] / track["cpu_ms_per_sample"]
    )
    text = format_report(report)
    assert "| LEROBOT |" in text and "STREAM CPU per sample / LEROBOT's" in text


def test_lerobot_refusing_a_sample_is_reported_not_fatal(
    synthetic_h264: Path, tmp_path: Path
) -> None:
    """H.264 with B-frames and open GOPs: LeRobot 0.4.4's torchcodec seek (approximate mode)
    lands on a neighbouring frame and LeRobot refuses the sample; the run goes on."""
    config = BenchConfig(
        root=str(synthetic_h264),
        tracks=("floor", "lerobot"),
        samples=200,
        keepup_samples=0,
        decode_samples=2,
        rounds=2,
        cache_dir=str(tmp_path / "cache"),
        progress=False,
    )
    report = run_bench(config)
    assert report.tracks["floor"]["decoded_frames"] == 2 * report.sequence["samples"]
    stopped = [note for note in report.notes if note.startswith("LEROBOT stopped")]
    if "lerobot" in report.tracks:  # this LeRobot decodes every sample of it
        assert report.tracks["lerobot"]["sequence_matches"] is True and not stopped
        assert len(report.tracks["lerobot"]["rounds"]) == 2
    else:
        assert len(stopped) == 1
        assert re.search(
            r"LeRobotDataset \S+ failed on sample \d+ \(index \d+: episode \d+, frame \d+\)",
            stopped[0],
        )
        assert "lerobot_cpu_over_floor" not in report.ratios

"""``episodestream demo --quick`` end to end: dataset generated (cached), served through the WAN
emulator, summarized, range-checked, benchmarked with every track; files where it says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from episodestream.cli import main
from episodestream_tools.bench._demo import QUICK_DEMO_SPEC, DemoConfig
from episodestream_tools.synthetic import DEMO_SPEC


def test_quick_demo_runs_end_to_end(
    synthetic_cache_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    status = main(
        [
            "demo",
            "--quick",
            "--cache-dir",
            str(synthetic_cache_dir),
            "--output-dir",
            str(out),
            "--no-progress",
        ]
    )
    assert status == 0
    text = capsys.readouterr().out
    # dataset summary: what the quick spec wrote, read back through the link
    assert "## Dataset" in text and "## Range reads through the emulator" in text
    assert f"| {QUICK_DEMO_SPEC.episodes} |" in text
    assert "320x240 av1" in text
    assert re.search(r"\| 12 \| 12 of 12 \|", text), "every random range read back exact"
    # the full bench report follows, then where the files are
    for heading in ("### Tracks", "### Ratios", "### Keep-up", "### Memory"):
        assert heading in text
    json_path = out / "bench.json"
    plot_path = out / "bench.png"
    assert f"JSON report: {json_path}" in text
    assert f"plot: {plot_path}" in text
    report = json.loads(json_path.read_text())
    # every default track this interpreter runs (LEROBOT needs lerobot and a local copy)
    assert set(report["tracks"]) == {"stream", "local", "floor", "naive", "download"}
    floor = report["tracks"]["floor"]
    assert floor["decoded_frames"] == floor["samples"] * len(QUICK_DEMO_SPEC.cameras)
    assert report["dataset"]["episodes"] == QUICK_DEMO_SPEC.episodes
    assert report["dataset"]["cameras"] == list(QUICK_DEMO_SPEC.cameras)
    assert report["tracks"]["stream"]["sequence_matches"] is True
    assert report["ratios"]["range_requests_per_episode_camera"] == 1.0
    assert report["http"]["stream_server"]["failed_requests"] == 0
    assert plot_path.read_bytes()[:4] == b"\x89PNG"
    # nginx's log stays with the results: every request the demo made went through it
    log = (out / "nginx" / "access.log").read_text().splitlines()
    assert len(log) >= report["http"]["stream_server"]["requests"] > 0


def test_demo_modes() -> None:
    assert DemoConfig().spec == DEMO_SPEC
    assert DemoConfig(mode="full").spec == DEMO_SPEC
    assert DemoConfig(mode="quick").spec == QUICK_DEMO_SPEC
    assert QUICK_DEMO_SPEC.cameras == DEMO_SPEC.cameras and QUICK_DEMO_SPEC.codec == "av1"
    with pytest.raises(ValueError, match="mode"):
        DemoConfig(mode="huge")


def test_demo_refuses_a_folder_that_is_not_a_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["demo", "--dataset", str(tmp_path), "--output-dir", str(tmp_path / "o")])
    assert status == 2
    assert "not a LeRobot v3 dataset" in capsys.readouterr().err

"""Whole episodes of real LeRobot-written files and of the synthetic datasets, clip by clip.

Episode spans come from meta/episodes (videos/<key>/from_timestamp, to_timestamp): the
episode's frames are presented at from + k / fps for k < length, so the span planned is
[from, to - 1/fps].
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from episodestream.mp4 import locate_moov, parse_moov, plan_span, write_clip
from episodestream_tools.synthetic import read_frame_identity
from tests.plugins.media import DECODERS, assert_clip_matches_source


def episodes(root: Path) -> list[dict]:
    rows = []
    for path in sorted((root / "meta" / "episodes").rglob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    return rows


def video_keys(root: Path) -> list[str]:
    info = json.loads((root / "meta" / "info.json").read_text())
    return [k for k, f in info["features"].items() if f["dtype"] == "video"]


def video_path(root: Path, key: str, row: dict) -> Path:
    info = json.loads((root / "meta" / "info.json").read_text())
    rel = info["video_path"].format(
        video_key=key,
        chunk_index=row[f"videos/{key}/chunk_index"],
        file_index=row[f"videos/{key}/file_index"],
    )
    return root / rel


def lerobot_sim5_identity(rgb: np.ndarray) -> int:
    """The global frame index LeRobot's fixture drew as 16 8x8 blocks along the top edge."""
    value = 0
    for bit in range(16):
        value = (value << 1) | int(rgb[2:6, bit * 8 + 2 : bit * 8 + 6].mean() > 128)
    return value


@pytest.mark.parametrize("decoder", ["torchcodec", "pyav"])
def test_lerobot_written_episodes(decoder, lerobot_fixture_root, full_decode):
    root = lerobot_fixture_root
    for row in episodes(root):
        assert row["videos/observation.images.cam_high/from_timestamp"] >= 0
    checked = _check(root, decoder, full_decode, "lerobot")
    assert checked == 5 * 3


@pytest.mark.parametrize(
    "dataset", ["synthetic_av1", "synthetic_h264", "synthetic_hevc", "synthetic_moov_end"]
)
@pytest.mark.parametrize("decoder", ["torchcodec", "pyav"])
def test_synthetic_dataset_episodes(dataset, decoder, request, full_decode):
    root = request.getfixturevalue(dataset)
    checked = _check(root, decoder, full_decode, "synthetic")
    assert checked == 6 * 2


def _check(root: Path, decoder: str, full_decode, kind: str) -> int:
    """Clip every (episode, camera), compare with the full decode and the drawn identity."""
    fps = json.loads((root / "meta" / "info.json").read_text())["fps"]
    checked = 0
    for key in video_keys(root):
        for row in episodes(root):
            path = video_path(root, key, row)
            data = path.read_bytes()
            loc = locate_moov(lambda o, n, d=data: d[o : o + n], len(data))
            index = parse_moov(loc.moov)
            t0 = row[f"videos/{key}/from_timestamp"]
            t1 = row[f"videos/{key}/to_timestamp"] - 1 / fps
            plan = plan_span(index, t0, t1)
            assert plan.frame_count == row["length"]
            clip_bytes = write_clip(index, plan, data[plan.byte_start : plan.byte_end])
            clip = DECODERS[decoder](clip_bytes)
            source = full_decode(path, decoder)
            assert_clip_matches_source(index, plan, t0, t1, source, clip)
            times = clip.pts_s + plan.time_offset_s
            frames = clip.frames[(times >= t0 - 1e-4) & (times <= t1 + 1e-4)]
            if kind == "lerobot":
                want = list(range(row["dataset_from_index"], row["dataset_to_index"]))
                assert [lerobot_sim5_identity(f) for f in frames] == want
            else:
                want = [(row["episode_index"], k) for k in range(row["length"])]
                assert [read_frame_identity(f) for f in frames] == want
            checked += 1
    return checked

"""``benchmarks.window_sweep``'s LeRobot content, written in LeRobot's environment by LeRobot's
own writer from moving frames: LeRobot reads it back, the window pool draws every frame once,
and its videos are AV1 g=2 as LeRobot encodes them."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
from benchmarks.window_sweep import LEROBOT_CAMERAS, write_lerobot_dataset
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from episodestream import EpisodePoolDataset


def test_lerobot_writer_makes_a_moving_av1_dataset(tmp_path: Path) -> None:
    root = write_lerobot_dataset(
        tmp_path / "written", width=64, height=48, episodes=2, length=(10, 12), seed=3
    )
    info = json.loads((root / "meta" / "info.json").read_text())
    frames = info["total_frames"]
    assert info["total_episodes"] == 2 and 20 <= frames <= 24
    for camera in LEROBOT_CAMERAS:
        assert info["features"][camera]["info"]["video.codec"] == "av1"
        assert info["features"][camera]["shape"] == [48, 64, 3]
    theirs = LeRobotDataset("local/window_sweep", root=root, video_backend="torchcodec")
    assert len(theirs) == frames
    first, later = (theirs[i][LEROBOT_CAMERAS[0]].numpy() for i in (0, 5))
    assert np.abs(first - later).mean() > 0.02  # float32 in [0, 1]: the scene moved
    video = sorted((root / "videos" / LEROBOT_CAMERAS[0]).rglob("*.mp4"))[0]
    with av.open(str(video)) as container:
        keys = [p.is_keyframe for p in container.demux(video=0) if p.size]
    assert keys[:4] == [True, False, True, False]  # g=2
    ours = EpisodePoolDataset(
        root, unit="window", window_frames=4, decoded_budget="8MiB", cache_dir=tmp_path / "cache"
    )
    with ours:
        drawn = sorted(int(sample["index"]) for sample in ours)
    assert drawn == list(range(frames))

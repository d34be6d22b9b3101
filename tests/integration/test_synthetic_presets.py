"""LeRobot-sized synthetic presets (make-dataset --preset) and textured content."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from torchcodec.decoders import VideoDecoder

from episodestream.cli import main
from episodestream.errors import DatasetFormatError
from episodestream_tools.synthetic import (
    PRESETS,
    WRITER_FORMAT_VERSION,
    SyntheticSpec,
    read_frame_identity,
)


def test_presets_have_the_shapes_of_published_robot_datasets() -> None:
    shapes = {
        name: (len(spec.cameras), spec.width, spec.height, spec.fps, spec.codec)
        for name, spec in PRESETS.items()
    }
    assert shapes == {
        "aloha": (4, 640, 480, 50, "av1"),
        "so100": (2, 640, 480, 30, "av1"),
        "so100-h264": (2, 640, 480, 30, "h264"),
        "droid": (3, 320, 180, 15, "av1"),
    }
    for spec in PRESETS.values():
        assert spec.content == "texture"
        assert spec.min_length >= 10 * spec.fps  # episodes of 10 s and more
        assert spec.episodes_per_file > 1  # many episodes per MP4, as LeRobot writes them


def test_wave_specs_keep_their_cache_key() -> None:
    """Adding the content and layout fields did not invalidate datasets written before them."""
    wave = SyntheticSpec(width=64, height=48, episodes=2)
    texture = SyntheticSpec(width=64, height=48, episodes=2, content="texture")
    assert wave.cache_key() != texture.cache_key()
    fields = dataclasses.asdict(wave)
    del fields["content"]
    del fields["layout"]
    before = json.dumps({"writer_format_version": WRITER_FORMAT_VERSION, **fields}, sort_keys=True)
    assert wave.cache_key() == hashlib.sha256(before.encode()).hexdigest()[:16]


def test_unknown_content_is_refused() -> None:
    with pytest.raises(DatasetFormatError, match="content must be one of"):
        SyntheticSpec(content="noise")


@pytest.mark.parametrize("preset", ["so100-h264", "droid"])
def test_preset_from_the_cli_writes_textured_moving_frames(preset: str, tmp_path: Path) -> None:
    out = tmp_path / preset
    assert (
        main(["make-dataset", str(out), "--preset", preset, "--episodes", "2", "--length", "6:6"])
        == 0
    )
    info = json.loads((out / "meta/info.json").read_text())
    spec = PRESETS[preset]
    assert info["fps"] == spec.fps and info["robot_type"] == spec.robot_type
    camera = spec.cameras[0]
    assert info["features"][camera]["shape"] == [spec.height, spec.width, 3]
    decoder = VideoDecoder(str(out / f"videos/{camera}/chunk-000/file-000.mp4"))
    frames = decoder.get_frames_in_range(0, 6).data.numpy()
    # every frame still carries its identity on top of the texture
    assert [read_frame_identity(f) for f in frames] == [(0, k) for k in range(6)]
    # detailed: far from flat colour; moving: consecutive frames differ over most pixels
    grey = frames[:, 1].astype(np.int16)
    body = grey[:, grey.shape[1] // 4 :, :]  # below the identity cells
    assert body.std() > 15
    moved = np.abs(np.diff(body, axis=0)) > 4
    assert moved.mean(axis=(1, 2)).min() > 0.2

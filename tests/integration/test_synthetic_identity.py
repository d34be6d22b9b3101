"""read_frame_identity: exact on clean images, every input form, and a clear error (never a
wrong answer) for images that do not carry an intact pattern."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchcodec.decoders import VideoDecoder

from episodestream.errors import DatasetFormatError, EpisodeStreamError
from episodestream_tools.synthetic import (
    MAX_CAMERAS,
    MAX_EPISODES,
    MAX_FRAMES_PER_EPISODE,
    read_frame_camera,
    read_frame_identity,
)
from episodestream_tools.synthetic._identity import identity_cells, identity_layout

SIZES = [(64, 48), (128, 96), (320, 240), (640, 360)]


def _painted(width: int, height: int, episode: int, frame: int, camera: int, seed: int = 0):
    """An HWC uint8 image: random colour background with the identity cells drawn in."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    covered, white = identity_cells(identity_layout(width, height), episode, frame, camera)
    image[covered] = 0
    image[white] = 255
    return image


@settings(max_examples=60, deadline=None)
@given(
    size=st.sampled_from(SIZES),
    episode=st.integers(0, MAX_EPISODES - 1),
    frame=st.integers(0, MAX_FRAMES_PER_EPISODE - 1),
    camera=st.integers(0, MAX_CAMERAS - 1),
)
def test_identity_round_trips_on_clean_images(size, episode, frame, camera) -> None:
    image = _painted(*size, episode, frame, camera)
    assert read_frame_identity(image) == (episode, frame)
    assert read_frame_camera(image) == camera


def test_accepts_hwc_chw_numpy_torch_and_float() -> None:
    hwc = _painted(128, 96, 1234, 567, 2)
    chw = np.ascontiguousarray(hwc.transpose(2, 0, 1))
    forms = [
        hwc,
        chw,
        torch.from_numpy(hwc),
        torch.from_numpy(chw),
        torch.from_numpy(chw).float() / 255,  # what LeRobot hands out
        hwc.mean(axis=2).astype(np.uint8),  # grey HW
    ]
    for image in forms:
        assert read_frame_identity(image) == (1234, 567)


def test_unreadable_images_raise_a_clear_error() -> None:
    grey = np.full((48, 64, 3), 128, dtype=np.uint8)
    with pytest.raises(DatasetFormatError, match="unreadable"):
        read_frame_identity(grey)
    noise = np.random.default_rng(1).integers(0, 256, (96, 128, 3), dtype=np.uint8)
    with pytest.raises(DatasetFormatError):
        read_frame_identity(noise)


def test_a_flipped_cell_fails_the_checksum_instead_of_misreading() -> None:
    layout = identity_layout(64, 48)
    image = _painted(64, 48, 5, 9, 1)
    for bit in range(40):
        damaged = image.copy()
        y, x = layout.cell_origin(bit)
        block = damaged[y : y + layout.cell, x : x + layout.cell]
        block[...] = 255 - block
        with pytest.raises(DatasetFormatError, match="checksum"):
            read_frame_identity(damaged)


def test_bad_shapes_and_sizes_are_value_errors() -> None:
    with pytest.raises(ValueError, match="shape"):
        read_frame_identity(np.zeros((2, 48, 64, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="HWC nor CHW"):
        read_frame_identity(np.zeros((48, 64, 5), dtype=np.uint8))
    with pytest.raises(ValueError, match="cannot hold"):
        read_frame_identity(np.zeros((32, 32, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="dtype"):
        read_frame_identity(np.zeros((48, 64, 3), dtype=np.int32))


def test_out_of_range_identity_is_refused() -> None:
    layout = identity_layout(64, 48)
    with pytest.raises(ValueError):
        identity_cells(layout, MAX_EPISODES, 0)
    with pytest.raises(ValueError):
        identity_cells(layout, 0, MAX_FRAMES_PER_EPISODE)
    assert issubclass(DatasetFormatError, EpisodeStreamError)


def test_lerobot_frames_are_not_mistaken_for_synthetic(lerobot_fixture_root) -> None:
    """lerobot_sim5 draws a different pattern; reading it must fail, not invent an identity."""
    path = lerobot_fixture_root / "videos/observation.images.cam_high/chunk-000/file-000.mp4"
    decoder = VideoDecoder(str(path))
    failures = 0
    for index in range(0, len(decoder), 7):
        try:
            read_frame_identity(decoder[index])
        except DatasetFormatError:
            failures += 1
    assert failures == len(range(0, len(decoder), 7))

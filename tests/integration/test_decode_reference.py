"""Decoders against what LeRobot itself returned for lerobot_sim5 (bit for bit)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from episodestream.decode import (
    PyAVDecoder,
    TorchcodecDecoder,
    demux_frame_times,
    open_decoder,
    to_float,
)
from episodestream.errors import DecodeError

CAMERAS = (
    "observation.images.cam_high",
    "observation.images.cam_left_wrist",
    "observation.images.cam_right_wrist",
)


def _episodes(root: Path) -> dict[str, list]:
    (path,) = sorted((root / "meta" / "episodes").glob("*/*.parquet"))
    return pq.read_table(path).to_pydict()


def _video_path(root: Path, episodes: dict[str, list], camera: str, episode: int) -> Path:
    chunk = episodes[f"videos/{camera}/chunk_index"][episode]
    file = episodes[f"videos/{camera}/file_index"][episode]
    return root / "videos" / camera / f"chunk-{chunk:03d}" / f"file-{file:03d}.mp4"


class _Requests:
    """For each camera: (file bytes, file path, absolute timestamp, reference image) per sample."""

    def __init__(self, root: Path, reference_dir: Path) -> None:
        self.samples = np.load(reference_dir / "samples.npz", allow_pickle=False)
        episodes = _episodes(root)
        self.by_camera: dict[str, list[tuple[Path, float, np.ndarray]]] = {}
        self.bytes: dict[Path, bytes] = {}
        for camera in CAMERAS:
            rows = []
            for i, episode in enumerate(self.samples["episode_index"].tolist()):
                path = _video_path(root, episodes, camera, episode)
                self.bytes.setdefault(path, path.read_bytes())
                start = episodes[f"videos/{camera}/from_timestamp"][episode]
                timestamp = start + float(self.samples["timestamp"][i])
                rows.append((path, timestamp, self.samples[camera][i]))
            self.by_camera[camera] = rows


@pytest.fixture(scope="module")
def requests(lerobot_fixture_root: Path, lerobot_reference_dir: Path) -> _Requests:
    return _Requests(lerobot_fixture_root, lerobot_reference_dir)


def _decode_all(requests: _Requests, **open_kwargs) -> list[tuple[np.ndarray, np.ndarray]]:
    """(decoded, reference) for every sample and camera; one decoder per file, bytes as clip."""
    pairs = []
    for camera in CAMERAS:
        decoders = {}
        try:
            for path, timestamp, reference in requests.by_camera[camera]:
                if path not in decoders:
                    decoders[path] = open_decoder(
                        requests.bytes[path], name=str(path), **open_kwargs
                    )
                frames = decoders[path].frames_at([timestamp])
                assert frames.dtype == torch.uint8 and frames.shape == (1, *reference.shape)
                pairs.append((frames[0].numpy(), reference))
        finally:
            for decoder in decoders.values():
                decoder.close()
    return pairs


@pytest.mark.parametrize("seek_mode", ["exact", "approximate"])
def test_torchcodec_equals_lerobot_bit_for_bit(requests: _Requests, seek_mode: str) -> None:
    pairs = _decode_all(requests, backend="torchcodec", seek_mode=seek_mode)
    assert len(pairs) == 3 * len(requests.samples["request_index"]) == 72
    for decoded, reference in pairs:
        np.testing.assert_array_equal(decoded, reference)


def test_pyav_equals_lerobot_bit_for_bit_on_this_fixture(requests: _Requests) -> None:
    # Measured: PyAV's rgb24 conversion gives the same bytes as torchcodec on these 128x96
    # AV1 frames (72 of 72 equal, max abs difference 0); see docs/BENCHMARKS.md.
    pairs = _decode_all(requests, backend="pyav")
    equal = sum(np.array_equal(d, r) for d, r in pairs)
    max_abs = max(int(np.abs(d.astype(np.int16) - r).max()) for d, r in pairs)
    assert (equal, max_abs) == (72, 0)


def test_float_conversion_equals_reference_over_255_exactly(requests: _Requests) -> None:
    path, timestamp, reference = requests.by_camera[CAMERAS[0]][0]
    with open_decoder(requests.bytes[path], backend="torchcodec") as decoder:
        frames = to_float(decoder.frames_at([timestamp]))
    expected = torch.from_numpy(reference).to(torch.float32) / 255
    assert frames.dtype == torch.float32
    assert torch.equal(frames[0], expected)
    assert float(frames.min()) >= 0.0 and float(frames.max()) <= 1.0
    # and the same numbers numpy gets from LeRobot's formula
    np.testing.assert_array_equal(frames[0].numpy(), reference.astype(np.float32) / np.float32(255))
    with pytest.raises(TypeError):
        to_float(frames)


@pytest.mark.parametrize("backend", ["torchcodec", "pyav"])
def test_any_order_and_repeats_equal_a_sequential_decode(requests: _Requests, backend: str) -> None:
    path = next(iter(requests.bytes))
    data = requests.bytes[path]
    with open_decoder(data, backend=backend) as decoder:
        times = decoder.frame_times()
        sequential = decoder.frames_at(times)
        order = np.random.default_rng(7).permutation(len(times))
        shuffled = decoder.frames_at(times[order])
        assert torch.equal(shuffled, sequential[torch.from_numpy(order)])
        repeated = decoder.frames_at([times[5], times[2], times[5], times[5]])
        assert torch.equal(repeated, sequential[[5, 2, 5, 5]])
        one_by_one = torch.stack([decoder.frames_at([times[j]])[0] for j in order[:12]])
        assert torch.equal(one_by_one, sequential[torch.from_numpy(order[:12])])
        assert decoder.frames_at([]).shape == (0, 3, decoder.height, decoder.width)


def test_frame_times_are_the_clip_presentation_times(
    requests: _Requests, lerobot_fixture_root: Path
) -> None:
    episodes = _episodes(lerobot_fixture_root)
    camera = CAMERAS[1]
    path = _video_path(lerobot_fixture_root, episodes, camera, 1)  # episodes 0 and 1 share it
    times = demux_frame_times(path.read_bytes())
    lengths = episodes["length"]
    assert len(times) == lengths[0] + lengths[1]
    np.testing.assert_allclose(np.diff(times), 1 / 30, atol=1e-4)
    assert times[0] == 0.0
    assert abs(times[lengths[0]] - episodes[f"videos/{camera}/from_timestamp"][1]) < 1e-4
    assert not times.flags.writeable
    for backend in ("torchcodec", "pyav"):
        with open_decoder(path.read_bytes(), backend=backend) as decoder:
            np.testing.assert_array_equal(decoder.frame_times(), times)


@pytest.mark.parametrize("backend", ["torchcodec", "pyav"])
def test_bytes_tensor_memoryview_and_path_give_the_same_frames(
    requests: _Requests, backend: str
) -> None:
    path, timestamp, reference = requests.by_camera[CAMERAS[2]][3]
    data = requests.bytes[path]
    sources = [
        data,
        bytearray(data),
        memoryview(data),
        torch.frombuffer(bytearray(data), dtype=torch.uint8),
        path,
        str(path),
    ]
    for source in sources:
        with open_decoder(source, backend=backend) as decoder:
            np.testing.assert_array_equal(decoder.frames_at([timestamp])[0].numpy(), reference)


def test_given_frame_times_skip_the_header_read_and_are_checked(requests: _Requests) -> None:
    path, timestamp, reference = requests.by_camera[CAMERAS[0]][4]
    data = requests.bytes[path]
    times = demux_frame_times(data)
    with TorchcodecDecoder(data, frame_times_s=times) as decoder:
        np.testing.assert_array_equal(decoder.frames_at([timestamp])[0].numpy(), reference)
    # PyAV reads the packets anyway and refuses times that are not the clip's
    with pytest.raises(DecodeError, match="do not match"):
        PyAVDecoder(data, frame_times_s=times + 0.01)
    # torchcodec trusts given times for speed, but never returns a frame with another time
    shifted = TorchcodecDecoder(data, frame_times_s=times + 0.01, seek_mode="exact")
    with shifted, pytest.raises(DecodeError, match="instead of"):
        shifted.frames_at([times[3] + 0.01])

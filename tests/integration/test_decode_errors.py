"""Tolerance, bad clips, bad arguments and misuse: typed errors that name the clip, no hangs."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from episodestream.decode import (
    DEFAULT_TOLERANCE_S,
    Decoder,
    PyAVDecoder,
    TorchcodecDecoder,
    available_backends,
    nearest_frame_indices,
    open_decoder,
    resolve_backend,
)
from episodestream.errors import DecodeError, EpisodeStreamError, FrameNotFoundError

BACKENDS = ["torchcodec", "pyav"]


@pytest.fixture(scope="module")
def clip(lerobot_fixture_root: Path) -> bytes:
    """A whole LeRobot MP4 (94 frames, 30 fps, AV1 128x96) used as one clip."""
    path = lerobot_fixture_root / "videos/observation.images.cam_high/chunk-000/file-000.mp4"
    return path.read_bytes()


def test_nearest_frame_indices_follows_lerobot_tolerance_rule() -> None:
    times = np.array([0.0, 0.1, 0.2, 0.3])
    np.testing.assert_array_equal(
        nearest_frame_indices(times, [0.2, 0.00005, 0.29995, 0.1]), [2, 0, 3, 1]
    )
    # strictly below tolerance: exactly tolerance away is a miss, as in LeRobot
    with pytest.raises(FrameNotFoundError):
        nearest_frame_indices(times, [0.1 + 2 * DEFAULT_TOLERANCE_S])
    assert nearest_frame_indices(times, [0.14], tolerance_s=0.05).tolist() == [1]
    assert nearest_frame_indices(times, []).dtype == np.int64
    with pytest.raises(ValueError):
        nearest_frame_indices(times, [[0.1]])
    with pytest.raises(ValueError):
        nearest_frame_indices(times, [0.1], tolerance_s=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_timestamp_outside_tolerance_lists_nearest_frames(clip: bytes, backend: str) -> None:
    with open_decoder(clip, backend=backend, name="ep7/cam_high") as decoder:
        times = decoder.frame_times()
        off = times[10] + 0.01  # between frames 10 and 11
        with pytest.raises(FrameNotFoundError) as info:
            decoder.frames_at([times[3], off])
        message = str(info.value)
        assert "ep7/cam_high" in message
        assert f"{off:.6f}" in message
        assert f"{times[10]:.6f}" in message and f"{times[11]:.6f}" in message
        assert "94 frames" in message
        with pytest.raises(FrameNotFoundError, match="nearest frames"):
            decoder.frames_at([times[-1] + 1.0])
        with pytest.raises(FrameNotFoundError):
            decoder.frames_at([-1.0])
        with pytest.raises(FrameNotFoundError):
            decoder.frames_at([float("nan")])
        # a wider tolerance accepts the same timestamp, and the decoder still works after misses
        frames = decoder.frames_at([off], tolerance_s=0.02)
        assert torch.equal(frames, decoder.frames_at([times[10]]))
        assert isinstance(decoder, Decoder)


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_and_garbage_clips_raise_decode_error_naming_the_clip(
    clip: bytes, backend: str
) -> None:
    rng = np.random.default_rng(0)
    bad = {
        "empty": b"",
        "random": rng.bytes(4096),
        "header only": clip[:100],
        "text": b"this is not a video at all\n" * 50,
    }
    for label, data in bad.items():
        with pytest.raises(DecodeError, match=f"clip {label}"):
            open_decoder(data, backend=backend, name=f"clip {label}")
    with pytest.raises(DecodeError, match="empty"):
        open_decoder(bytearray(), backend=backend)
    with pytest.raises(DecodeError, match="no such clip file"):
        open_decoder("/nonexistent/file.mp4", backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_corrupt_payload_raises_decode_error_when_decoding(clip: bytes, backend: str) -> None:
    # faststart: moov first, so flipping bytes after it corrupts frame payloads only
    corrupt = bytearray(clip)
    for offset in range(len(clip) // 3, len(clip), 997):
        corrupt[offset] ^= 0xFF
    with open_decoder(bytes(corrupt), backend=backend, name="flipped") as decoder:
        times = decoder.frame_times()
        with pytest.raises(DecodeError, match="flipped"):
            decoder.frames_at(times)


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncated_clip_decodes_what_it_holds(clip: bytes, backend: str) -> None:
    with open_decoder(clip, backend=backend) as whole:
        reference = whole.frames_at(whole.frame_times()[:8])
    with open_decoder(clip[: len(clip) // 2], backend=backend, name="half") as decoder:
        times = decoder.frame_times()
        assert 8 < len(times) < 94
        assert torch.equal(decoder.frames_at(times[:8]), reference)
        with pytest.raises(FrameNotFoundError):
            decoder.frames_at([3.0])  # beyond the last packet present


@pytest.mark.parametrize("backend", BACKENDS)
def test_closed_decoder_refuses_work(clip: bytes, backend: str) -> None:
    decoder = open_decoder(clip, backend=backend)
    assert decoder.nbytes >= len(clip)
    decoder.close()
    decoder.close()  # idempotent
    assert decoder.nbytes == 0
    with pytest.raises(DecodeError, match="closed"):
        decoder.frames_at([0.0])


def test_bad_arguments(clip: bytes) -> None:
    with pytest.raises(ValueError, match="backend"):
        open_decoder(clip, backend="ffmpeg")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seek_mode"):
        open_decoder(clip, backend="torchcodec", seek_mode="fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="threads"):
        open_decoder(clip, threads=-1)
    with pytest.raises(ValueError, match="threads"):
        open_decoder(clip, backend="pyav", threads=-1)
    with pytest.raises(TypeError, match="uint8"):
        open_decoder(torch.zeros(10, dtype=torch.float32))
    with pytest.raises(TypeError, match="bytes"):
        open_decoder(12345)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="device"):
        open_decoder(clip, device="mps")


def test_cuda_is_used_when_available_else_a_clear_error(clip: bytes) -> None:
    with pytest.raises(ValueError, match="decodes on the CPU only"):
        open_decoder(clip, backend="pyav", device="cuda")
    if torch.cuda.is_available():  # a CUDA build of torch on a GPU machine
        with open_decoder(clip, device="cuda") as decoder:
            frames = decoder.frames_at(decoder.frame_times()[:3])
        assert frames.device.type == "cuda" and frames.shape == (3, 3, 96, 128)
        return
    # the CPU build of torch used here: CUDA asked for is refused with the reason
    with pytest.raises(DecodeError, match="CUDA is not available"):
        open_decoder(clip, device="cuda")
    with pytest.raises(DecodeError, match="CUDA is not available"):
        TorchcodecDecoder(clip, device="cuda:0")


def test_backend_resolution() -> None:
    assert available_backends() == ("torchcodec", "pyav")
    assert resolve_backend("auto") == "torchcodec"
    assert resolve_backend("pyav") == "pyav"


@pytest.mark.parametrize("backend", BACKENDS)
def test_decoder_used_by_two_threads_at_once_is_refused(clip: bytes, backend: str) -> None:
    """Two threads hammer one decoder: some call must be refused, none may return wrong
    frames."""
    with open_decoder(clip, backend=backend) as decoder:
        times = decoder.frame_times()
        expected = decoder.frames_at(times)
        refused: list[DecodeError] = []
        wrong: list[int] = []
        stop = threading.Event()

        def hammer(seed: int) -> None:
            rng = np.random.default_rng(seed)
            while not stop.is_set():
                pick = rng.choice(len(times), size=8)
                try:
                    frames = decoder.frames_at(times[pick])
                except DecodeError as exc:
                    refused.append(exc)
                    stop.set()
                    return
                if not torch.equal(frames, expected[torch.from_numpy(pick)]):
                    wrong.append(seed)

        threads = [threading.Thread(target=hammer, args=(seed,)) for seed in (1, 2)]
        for thread in threads:
            thread.start()
        stop.wait(timeout=60)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        assert not any(t.is_alive() for t in threads)
        assert wrong == []
        assert refused and "two threads" in str(refused[0])
        # the decoder is still usable afterwards
        assert torch.equal(decoder.frames_at(times[:4]), expected[:4])


def test_errors_are_episodestream_errors(clip: bytes) -> None:
    with pytest.raises(EpisodeStreamError):
        PyAVDecoder(b"\x00" * 64)
    with pytest.raises(EpisodeStreamError):
        TorchcodecDecoder(b"\x00" * 64)

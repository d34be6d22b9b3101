"""The per-frame fast paths give what the general paths give: float conversion (all 256 values,
any layout), one-timestamp lookups, and decoders opened from the manifest's frame times."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from episodestream.cache import ManifestClipSource
from episodestream.decode import demux_frame_times, nearest_frame_indices, open_decoder, to_float
from episodestream.errors import FrameNotFoundError
from episodestream.lerobot import load_dataset_meta
from episodestream.manifest import open_manifest
from episodestream.storage import LocalRangeReader
from tests.support.forking import reply_from_fork

VARIANTS = ["synthetic_av1", "synthetic_h264", "synthetic_hevc", "synthetic_moov_end"]


def _every_value(shape: tuple[int, ...]) -> torch.Tensor:
    count = int(np.prod(shape))
    return (torch.arange(count) % 256).to(torch.uint8).reshape(shape)


@pytest.mark.parametrize(
    "layout",
    ["nchw", "nhwc_permuted", "strided_slice", "one_frame", "empty"],
)
def test_to_float_equals_torch_division_for_every_value_and_layout(layout: str) -> None:
    if layout == "nchw":
        frames = _every_value((2, 3, 40, 64))
    elif layout == "nhwc_permuted":  # what torchcodec returns for NCHW
        frames = _every_value((2, 40, 64, 3)).permute(0, 3, 1, 2)
    elif layout == "strided_slice":
        frames = _every_value((2, 3, 40, 129))[..., ::2]
    elif layout == "one_frame":
        frames = _every_value((1, 3, 16, 16))
    else:
        frames = torch.empty((0, 3, 8, 8), dtype=torch.uint8)
    expected = frames.to(torch.float32) / 255  # LeRobot's formula
    got = to_float(frames)
    assert got.dtype == torch.float32
    assert got.shape == expected.shape
    assert torch.equal(got, expected)
    if layout != "strided_slice":  # dense inputs keep their layout, as torch's formula does
        assert got.stride() == expected.stride()
    if layout != "empty":
        assert frames.unique().numel() == 256  # every uint8 value was converted
    # a fresh tensor, never a view of the input
    assert frames.numel() == 0 or got.data_ptr() != frames.data_ptr()


@pytest.mark.parametrize("permuted", [True, False], ids=["nhwc_permuted", "nchw"])
def test_to_float_in_recycled_buffers_equals_torch_division_for_every_value(
    permuted: bool,
) -> None:
    # frame-sized (over the recycling threshold), so the result lands in a pooled buffer: the
    # second conversion reuses the first one's buffer, dirty, in the same layout
    from episodestream.decode._buffers import MIN_RECYCLED_BYTES, float_frame_buffers

    if permuted:  # what torchcodec returns for NCHW
        frames = _every_value((1, 480, 640, 3)).permute(0, 3, 1, 2)
    else:
        frames = _every_value((1, 3, 480, 640))
    assert 4 * frames.numel() >= MIN_RECYCLED_BYTES
    expected = frames.to(torch.float32) / 255  # LeRobot's formula
    first = to_float(frames)
    assert torch.equal(first, expected) and first.stride() == expected.stride()
    address = first.data_ptr()
    first.fill_(-1.0)  # leave the buffer dirty
    del first
    assert float_frame_buffers().idle_bytes >= 4 * frames.numel()
    second = to_float(frames)
    assert second.data_ptr() == address  # the recycled buffer, not a fresh allocation
    assert torch.equal(second, expected) and second.stride() == expected.stride()


def test_one_timestamp_lookup_agrees_with_the_vectorized_rule() -> None:
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.uniform(0.02, 0.05, size=40))
    midpoints = (times[:-1] + times[1:]) / 2  # ties: the earlier frame wins
    queries = np.concatenate(
        [
            times,
            times + 4e-5,
            times - 9.9e-5,
            midpoints,
            rng.uniform(times[0] - 0.1, times[-1] + 0.1, size=200),
            [np.nan, -1.0, times[-1] + 1.0, np.inf],
        ]
    )
    for tolerance in (1e-4, 0.02, 1.0):
        matched = 0
        for t in queries:
            batch = np.array([t, times[0]])  # two timestamps take the vectorized path
            try:
                expected = nearest_frame_indices(times, batch, tolerance)[0]
            except FrameNotFoundError as error:
                with pytest.raises(FrameNotFoundError) as raised:
                    nearest_frame_indices(times, [t], tolerance)
                assert str(raised.value) == str(error)
                continue
            got = nearest_frame_indices(times, [t], tolerance)
            assert got.dtype == np.int64 and got.shape == (1,)
            assert int(got[0]) == int(expected)
            matched += 1
        assert matched >= len(times)  # the test exercised matches, not only refusals
    tie = nearest_frame_indices(times, midpoints[:1], 1.0)
    assert int(tie[0]) == 0


@pytest.mark.parametrize("variant", VARIANTS)
def test_manifest_frame_times_equal_the_clips_own(variant, request, tmp_path) -> None:
    root: Path = request.getfixturevalue(variant)
    reader = LocalRangeReader(root)
    meta = load_dataset_meta(reader)
    manifest = open_manifest(reader, meta, cache_dir=tmp_path, progress=False)
    source = ManifestClipSource(manifest, reader)
    checked = 0
    for episode in meta.episodes.episode_index.tolist()[:3]:
        for job in source.clip_jobs(episode):
            clip = job.build(reader.read(job.path, job.byte_start, job.payload_nbytes))
            assert job.frame_times_s is not None
            assert not job.frame_times_s.flags.writeable
            # bit for bit what reading the clip's packets gives
            np.testing.assert_array_equal(job.frame_times_s, demux_frame_times(clip))
            for backend in ("torchcodec", "pyav"):
                with (
                    open_decoder(clip, backend=backend) as demuxed,
                    open_decoder(clip, backend=backend, frame_times_s=job.frame_times_s) as given,
                ):
                    times = demuxed.frame_times()
                    picks = times[[0, len(times) // 2, len(times) - 1, 1]]
                    assert torch.equal(given.frames_at(picks), demuxed.frames_at(picks))
            checked += 1
    assert checked >= 3 * len(meta.video_keys)


def test_cached_clips_carry_the_manifest_frame_times(synthetic_h264, tmp_path) -> None:
    from episodestream.cache import EpisodeByteCache

    reader = LocalRangeReader(synthetic_h264)
    meta = load_dataset_meta(reader)
    manifest = open_manifest(reader, meta, cache_dir=tmp_path, progress=False)
    source = ManifestClipSource(manifest, reader)
    with EpisodeByteCache(source, reader, byte_budget=64 * 2**20) as cache:
        resident = cache.wait_ready(1, timeout=60)
        for clip in resident.clips.values():
            assert clip.frame_times_s is not None
            np.testing.assert_array_equal(clip.frame_times_s, demux_frame_times(clip.data))


def _frame_nhwc(value: int = 7) -> torch.Tensor:
    """A 640x480 frame as torchcodec lays it out: N x C x H x W over N x H x W x C memory."""
    return torch.full((1, 480, 640, 3), value, dtype=torch.uint8).permute(0, 3, 1, 2)


def test_float_buffers_are_reused_only_once_freed() -> None:
    from episodestream.decode._buffers import FloatFrameBuffers

    buffers = FloatFrameBuffers()
    first = buffers.empty_like(_frame_nhwc())
    assert first.dtype == torch.float32 and first.stride() == (921600, 1, 1920, 3)
    address = first.data_ptr()
    view = first[0]  # a view keeps the buffer in use
    del first
    second = buffers.empty_like(_frame_nhwc())
    assert second.data_ptr() != address and buffers.idle_bytes == 0
    del view
    assert buffers.idle_bytes == 921600 * 4
    third = buffers.empty_like(_frame_nhwc())
    assert third.data_ptr() == address and buffers.idle_bytes == 0
    # small frames and other layouts come from torch's allocator, never from the idle list
    small = buffers.empty_like(torch.zeros((1, 3, 8, 8), dtype=torch.uint8))
    odd = buffers.empty_like(torch.zeros((3, 480, 1280), dtype=torch.uint8)[..., ::2])
    assert small.shape == (1, 3, 8, 8) and odd.shape == (3, 480, 640)
    del second, third, small, odd
    assert buffers.idle_bytes == 2 * 921600 * 4


def test_float_buffers_keep_no_more_idle_bytes_than_their_bound() -> None:
    from episodestream.decode._buffers import FloatFrameBuffers

    buffers = FloatFrameBuffers(max_idle_bytes=921600 * 4)
    held = [buffers.empty_like(_frame_nhwc()) for _ in range(3)]
    del held
    assert buffers.idle_bytes == 921600 * 4  # one kept, two returned to the allocator
    buffers.clear()
    assert buffers.idle_bytes == 0


def test_idle_buffers_of_a_size_no_longer_asked_for_make_room_for_the_current_one() -> None:
    from episodestream.decode._buffers import FloatFrameBuffers

    small = torch.zeros((1, 240, 320, 3), dtype=torch.uint8).permute(0, 3, 1, 2)
    buffers = FloatFrameBuffers(max_idle_bytes=921600 * 4)
    old = [buffers.empty_like(small) for _ in range(4)]  # 4 x 230400 floats fill the bound
    del old
    assert buffers.idle_bytes == 4 * 230400 * 4
    frame = buffers.empty_like(_frame_nhwc())  # the stream moved to 640x480
    address = frame.data_ptr()
    del frame
    assert buffers.idle_bytes == 921600 * 4  # the stale small ones gave way
    again = buffers.empty_like(_frame_nhwc())
    assert again.data_ptr() == address  # and the large one is recycled


def test_to_float_results_never_share_memory_while_alive() -> None:
    kept = [to_float(_frame_nhwc(v)) for v in (0, 51, 255)]
    for _ in range(3):  # churn: freed results are recycled into new ones
        to_float(_frame_nhwc(102))
    assert [k.unique().tolist() for k in kept] == [[0.0], [float(np.float32(51) / 255)], [1.0]]
    assert len({k.data_ptr() for k in kept}) == 3
    again = to_float(_frame_nhwc(51))
    assert torch.equal(again, kept[1]) and again.data_ptr() not in {k.data_ptr() for k in kept}


def test_a_forked_child_starts_with_no_idle_buffers() -> None:
    from episodestream.decode._buffers import float_frame_buffers

    frame = _frame_nhwc(51)
    to_float(frame)  # freed at once: one idle buffer in this process
    assert float_frame_buffers().idle_bytes > 0

    def child() -> str:  # numpy only (torch's thread pool does not survive a fork)
        idle = float_frame_buffers().idle_bytes
        values = np.unique(to_float(frame).numpy()).tolist()
        return f"{idle} {values[0]!r} {len(values)}"

    idle, value, distinct = reply_from_fork(child).split()
    assert int(idle) == 0
    assert float(value) == float(np.float32(51) / np.float32(255)) and distinct == "1"
    assert float_frame_buffers().idle_bytes > 0

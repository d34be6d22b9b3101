"""write_clip / clip_header / clip_size: the clip's own tables, read back with parse_moov."""

from __future__ import annotations

import struct
from dataclasses import replace

import numpy as np
import pytest

from episodestream import FrameNotFoundError, Mp4FormatError
from episodestream.mp4 import (
    SpanPlan,
    TrackIndex,
    clip_header,
    clip_samples,
    clip_size,
    locate_moov,
    parse_moov,
    plan_span,
    walk_boxes,
    write_clip,
)
from tests.plugins.media import MediaCase
from tests.support.synthetic_moov import synthetic_moov


def source(case: MediaCase) -> tuple[bytes, TrackIndex]:
    data = case.read()
    loc = locate_moov(lambda o, n: data[o : o + n], len(data))
    return data, parse_moov(loc.moov, track_id=case.track_id)


def boxes(clip: bytes) -> dict[str, tuple[int, int]]:
    return {b.path: (b.start, b.end) for b in walk_boxes(clip)}


@pytest.mark.parametrize("name", ["av1", "h264", "hevc", "h264_negative_cts", "multi_track"])
def test_clip_tables_reproduce_the_source_samples(name, mp4_cases):
    data, index = source(mp4_cases[name])
    rng = np.random.default_rng(1)
    pts_s = np.sort(index.pts_seconds())
    for _ in range(10):
        a, b = sorted(rng.integers(0, pts_s.shape[0], 2))
        plan = plan_span(index, pts_s[a], pts_s[b])
        clip = write_clip(index, plan, data[plan.byte_start : plan.byte_end])
        layout = boxes(clip)
        assert list(layout)[:3] == ["ftyp", "moov", "moov/mvhd"]
        moov_start, moov_end = layout["moov"]
        mdat_start, mdat_end = layout["mdat"]
        assert mdat_end == len(clip) == clip_size(index, plan)
        got = parse_moov(clip[moov_start:moov_end])
        kept = clip_samples(index, plan.sample_start, plan.sample_end)
        offset_ticks = int(index.pts[plan.sample_start])
        assert plan.time_offset_s == offset_ticks / index.timescale
        np.testing.assert_array_equal(got.pts, index.pts[kept] - offset_ticks)
        assert int(got.pts.min()) == 0 and got.presentation_start == 0
        np.testing.assert_array_equal(got.sizes, index.sizes[kept])
        np.testing.assert_array_equal(got.keyframes, index.keyframes[kept])
        assert got.keyframes[0]
        assert (got.stsd, got.codec, got.timescale) == (index.stsd, index.codec, index.timescale)
        assert (got.width, got.height) == (index.width, index.height)
        # every sample's bytes in the clip are its bytes in the source
        for s, o in zip(kept[:50], got.offsets[:50], strict=False):
            size = int(index.sizes[s])
            src = int(index.offsets[s])
            assert clip[o : o + size] == data[src : src + size]
        assert np.all(got.offsets >= mdat_start + 8)
        assert np.all(got.offsets + got.sizes <= mdat_end)


def test_negative_composition_offsets_are_written_as_ctts_version_1(mp4_cases):
    data, index = source(mp4_cases["h264_negative_cts"])
    plan = plan_span(index, 0.5, 2.5)
    clip = write_clip(index, plan, data[plan.byte_start : plan.byte_end])
    start, _ = boxes(clip)["moov/trak[0]/mdia/minf/stbl/ctts"]
    assert clip[start + 8] == 1
    elst, _ = boxes(clip)["moov/trak[0]/edts/elst"]
    count, duration, media_time = struct.unpack_from(">IIi", clip, elst + 12)
    assert count == 1 and media_time == 0 and duration > 0


def test_payload_and_plan_must_match_the_index(mp4_cases):
    data, index = source(mp4_cases["h264"])
    plan = plan_span(index, 1.0, 1.2)
    payload = data[plan.byte_start : plan.byte_end]
    with pytest.raises(Mp4FormatError, match="payload holds"):
        write_clip(index, plan, payload[:-1])
    shifted = replace(plan, byte_start=plan.byte_start + 1)
    with pytest.raises(Mp4FormatError, match="do not match"):
        clip_header(index, shifted)
    with pytest.raises(Mp4FormatError, match="not inside"):
        clip_header(index, replace(plan, sample_end=index.num_samples + 5))


def test_spans_without_frames_raise(mp4_cases):
    _, index = source(mp4_cases["h264"])  # 100 frames at 30 fps from 0 s: played until 10/3 s
    with pytest.raises(FrameNotFoundError, match=r"no frame.*after the end of the last frame"):
        plan_span(index, 100.0, 101.0)
    with pytest.raises(FrameNotFoundError, match="after the end of the last frame"):
        plan_span(index, 10 / 3, 10 / 3)
    with pytest.raises(FrameNotFoundError, match=r"no frame.*before the first frame"):
        plan_span(index, -1.0, -0.5)
    with pytest.raises(FrameNotFoundError, match="ends before it starts"):
        plan_span(index, 2.0, 1.0)
    with pytest.raises(FrameNotFoundError, match="ends before it starts"):
        plan_span(index, float("nan"), 1.0)
    between = plan_span(index, 1.01, 1.02)  # between two frames: the one played there
    assert between.frame_count == 1 and between.first_pts_s == between.last_pts_s == 1.0


def test_huge_payload_gets_co64_and_a_64_bit_mdat_without_building_it():
    """A 5 GiB span: the header alone proves offsets past 4 GiB are written as co64."""
    _, small = synthetic_moov(60, gop=30, bframes=2)
    sizes = np.full(60, 90 << 20, dtype=np.int64)  # 90 MiB samples, 5.3 GiB in all
    offsets = 1000 + np.concatenate(([0], np.cumsum(sizes)[:-1]))
    index = replace(small, sizes=sizes, offsets=offsets)
    plan = plan_span(index, 0.0, 1.9)
    assert plan.byte_length > 1 << 32
    header = clip_header(index, plan)
    assert len(header) + plan.byte_length == clip_size(index, plan)
    # the last 16 bytes are the 64-bit mdat header, whose payload is not there
    layout = {b.path: b for b in walk_boxes(header[:-16])}
    assert "moov/trak[0]/mdia/minf/stbl/co64" in layout
    moov = layout["moov"]
    mdat_header = header[moov.end :]
    assert mdat_header[:8] == struct.pack(">I4s", 1, b"mdat")
    assert struct.unpack(">Q", mdat_header[8:16])[0] == 16 + plan.byte_length
    got = parse_moov(header[moov.start : moov.end])
    kept = clip_samples(index, plan.sample_start, plan.sample_end)
    np.testing.assert_array_equal(got.offsets, len(header) + index.offsets[kept] - plan.byte_start)
    assert int(got.offsets.max()) > 1 << 32


def test_clip_plan_fields(mp4_cases):
    _, index = source(mp4_cases["av1"])
    plan = plan_span(index, 1.0, 2.0)
    assert isinstance(plan, SpanPlan)
    assert plan.frame_count == 31
    assert plan.byte_length == plan.byte_end - plan.byte_start > 0
    assert index.keyframes[plan.sample_start]
    assert plan.first_pts_s == 1.0 and plan.last_pts_s == 2.0

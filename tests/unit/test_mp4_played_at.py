"""The played-at rule: a span holds every frame shown at some instant of it.

Two oracles: the rule written out directly over sorted presentation times
(``tests.plugins.media.played_in``) on synthetic tracks, and torchcodec's
``VideoDecoder.get_frames_played_at`` on the real encoded files.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest
import torch

from episodestream import FrameNotFoundError
from episodestream.mp4 import clip_file, clip_samples, plan_span
from tests.plugins.media import MediaCase, played_in
from tests.support.synthetic_moov import synthetic_moov

# Every case torchcodec decodes whole (h264_mid_gop_edit is the one it cannot, see
# test_mp4_clip_exact); h264_empty_edit starts at 1/3 s, multi_track indexes track 3.
_TORCHCODEC_CASES = [
    "av1",
    "h264",
    "hevc",
    "h264_empty_edit",
    "h264_negative_cts",
    "co64",
    "multi_track",
]


def _shown(index) -> tuple[np.ndarray, float]:
    """Presented times in presentation order (seconds) and the end of the last frame."""
    pts = index.pts
    if index.presentation_start is not None:
        pts = pts[pts >= index.presentation_start]
    pts = np.sort(pts)
    last = int(np.flatnonzero(index.pts == pts[-1])[0])
    durations = index.sample_durations()
    return pts / np.float64(index.timescale), float((pts[-1] + durations[last]) / index.timescale)


def _synthetic_tracks():
    """B-frame, no-reorder and odd-timescale tracks, one with a mid-GOP edit start."""
    _, reordered = synthetic_moov(120, gop=12, bframes=3)
    _, plain = synthetic_moov(50, gop=5, bframes=0, timescale=90)
    _, edited = synthetic_moov(90, gop=30, bframes=2)
    edited = replace(edited, presentation_start=int(np.sort(edited.pts)[7]))
    return {"reordered": reordered, "plain": plain, "edited": edited}


@pytest.mark.parametrize("name", ["reordered", "plain", "edited"])
def test_plans_hold_exactly_the_frames_played_in_the_span(name):
    index = _synthetic_tracks()[name]
    pts_s, end_s = _shown(index)
    first, frame = pts_s[0], pts_s[1] - pts_s[0]
    rng = np.random.default_rng(7)
    spans = [(t, t) for t in rng.uniform(first, end_s, 40)]  # points, mostly between frames
    for _ in range(40):  # spans that may start before the first frame, never end before it
        a, b = rng.uniform(first - 3 * frame, end_s), rng.uniform(first, end_s)
        spans.append((min(a, b), max(a, b)))
    spans += [(p, p) for p in pts_s[:5]] + [(p - 5e-5, p - 5e-5) for p in pts_s[5:9]]
    spans += [(p + 0.6 * frame, q) for p, q in zip(pts_s[:20], pts_s[3:23], strict=False)]
    spans += [(end_s - 1e-3, end_s - 1e-3), (first - 1.0, first)]
    for t0, t1 in spans:
        want = played_in(pts_s, t0, t1, last_end_s=end_s)
        assert want.shape[0] >= 1, (t0, t1)
        plan = plan_span(index, float(t0), float(t1))
        assert plan.frame_count == want.shape[0], (t0, t1)
        assert plan.first_pts_s == pytest.approx(pts_s[want[0]], abs=1e-9)
        assert plan.last_pts_s == pytest.approx(pts_s[want[-1]], abs=1e-9)
        kept = clip_samples(index, plan.sample_start, plan.sample_end)
        held = set(np.round(index.pts_seconds()[kept] * index.timescale).astype(int).tolist())
        assert set(np.round(pts_s[want] * index.timescale).astype(int).tolist()) <= held


@pytest.mark.parametrize("name", ["reordered", "plain", "edited"])
def test_a_point_between_two_frames_holds_only_the_earlier_one(name):
    index = _synthetic_tracks()[name]
    pts_s, end_s = _shown(index)
    for k in range(pts_s.shape[0] - 1):
        for fraction in (0.01, 0.5, 0.99):
            t = pts_s[k] + fraction * (pts_s[k + 1] - pts_s[k])
            plan = plan_span(index, t, t)
            assert (plan.frame_count, plan.first_pts_s) == (1, pts_s[k]), (k, fraction)
        # a frame's own time, or one rounding left just short of it, selects that frame
        for t in (pts_s[k + 1], pts_s[k + 1] - 5e-5):
            assert plan_span(index, t, t).first_pts_s == pts_s[k + 1]
    assert plan_span(index, end_s - 1e-3, end_s - 1e-3).first_pts_s == pts_s[-1]


@pytest.mark.parametrize("name", ["reordered", "plain", "edited"])
def test_times_outside_the_frames_raise_naming_the_edge(name):
    index = _synthetic_tracks()[name]
    pts_s, end_s = _shown(index)
    with pytest.raises(
        FrameNotFoundError, match=re.escape(f"before the first frame, presented at {pts_s[0]} s")
    ):
        plan_span(index, pts_s[0] - 0.01, pts_s[0] - 0.01)
    with pytest.raises(FrameNotFoundError, match=re.escape(f"end of the last frame, {end_s} s")):
        plan_span(index, end_s, end_s)
    with pytest.raises(FrameNotFoundError, match="end of the last frame"):
        plan_span(index, end_s + 5.0, end_s + 6.0)
    if name == "edited":  # frames before the edit list's start are decoded, never played
        hidden = index.pts[index.pts < index.presentation_start] / index.timescale
        assert hidden.shape[0] == 7
        for t in hidden:
            with pytest.raises(FrameNotFoundError, match="before the first frame"):
                plan_span(index, float(t), float(t))


def _decode_at(source, times: list[float], stream_index: int | None = None):
    from torchcodec.decoders import VideoDecoder

    decoder = VideoDecoder(source, stream_index=stream_index, dimension_order="NHWC")
    return decoder.get_frames_played_at(times)


def _torchcodec_bounds(case: MediaCase) -> tuple[float, float]:
    from torchcodec.decoders import VideoDecoder

    meta = VideoDecoder(str(case.path), stream_index=case.stream_index).metadata
    return float(meta.begin_stream_seconds), float(meta.end_stream_seconds)


@pytest.mark.parametrize("name", _TORCHCODEC_CASES)
def test_clip_file_at_a_time_returns_the_frame_torchcodec_plays_there(name, mp4_cases):
    case = mp4_cases[name]
    begin_s, end_s = _torchcodec_bounds(case)
    frame_s = 1 / 30
    rng = np.random.default_rng(sum(map(ord, name)))
    times = [begin_s, begin_s + 0.5 * frame_s, end_s - 1e-3]
    times += [float(t) for t in begin_s + rng.uniform(0, end_s - begin_s - 1e-3, 6)]
    times += [begin_s + k * frame_s + 0.9 * frame_s for k in (29, 30, 59)]  # about sync samples
    want = _decode_at(str(case.path), times, case.stream_index)
    for i, t in enumerate(times):
        clip = clip_file(case.path, t, t, track_id=case.track_id)
        plan = clip.plan
        assert plan.frame_count == 1, t
        want_pts = float(want.pts_seconds[i])
        assert abs(plan.first_pts_s - want_pts) < 1e-6, (t, plan.first_pts_s, want_pts)
        # the clip presents that frame, with torchcodec's pixels, at its time - offset
        decoded = _decode_at(clip.data, [want_pts - clip.time_offset_s + 1e-6])
        assert abs(float(decoded.pts_seconds[0]) + clip.time_offset_s - want_pts) < 1e-6, t
        assert torch.equal(decoded.data[0], want.data[i]), f"pixels differ at {t} s"


@pytest.mark.parametrize("name", ["av1", "h264_empty_edit"])
def test_clip_file_outside_the_stream_raises_where_torchcodec_does(name, mp4_cases):
    case = mp4_cases[name]
    begin_s, end_s = _torchcodec_bounds(case)
    for t, edge in ((end_s, "end of the last frame"), (begin_s - 0.01, "before the first frame")):
        with pytest.raises(RuntimeError):  # torchcodec refuses the same times
            _decode_at(str(case.path), [t], case.stream_index)
        with pytest.raises(FrameNotFoundError, match=edge):
            clip_file(case.path, t, t, track_id=case.track_id)

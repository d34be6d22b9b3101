"""Span planning: which samples and bytes present a time span exactly (pure numpy).

A span ``[t0, t1]`` holds every frame played at some instant of it (the played-at rule
of :func:`plan_span`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from episodestream.errors import FrameNotFoundError, Mp4FormatError
from episodestream.mp4._index import TrackIndex, last_sample_duration

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "MAX_REORDER_DEPTH",
    "SpanPlan",
    "clip_samples",
    "plan_span",
    "reorder_depth",
]

#: Slack on both ends of a span, the frame-matching tolerance LeRobot uses.
DEFAULT_TOLERANCE_S = 1e-4
#: Largest B-frame reorder delay looked for (the H.264/HEVC decoded-picture-buffer limit).
MAX_REORDER_DEPTH = 16
# Samples around a span in which its reorder depth is measured.
_DEPTH_CONTEXT = 256
_AVC_CODECS = frozenset({"avc1", "avc3"})
_MAX_FLUSH_STEPS = 8 * MAX_REORDER_DEPTH


@dataclass(frozen=True, slots=True)
class SpanPlan:
    """What to fetch from a source file to present the span ``[t0, t1]`` (closed interval).

    The span holds every frame played at some instant of it (see :func:`plan_span`).
    ``sample_start`` is a sync sample from which every frame of the span decodes
    correctly; ``sample_end`` (exclusive) is the first decode-order sample after every
    frame of the span. The clip holds the samples of that range except the leading
    pictures of ``sample_start`` (samples after it in decode order presented before it:
    open-GOP frames that reference the previous GOP and cannot decode from here).
    ``[byte_start, byte_end)`` covers the clip's samples. A clip presents every frame it
    holds, at clip time = source time - ``time_offset_s``.
    """

    sample_start: int
    sample_end: int
    byte_start: int
    byte_end: int
    time_offset_s: float  # source presentation time = clip presentation time + offset
    first_pts_s: float  # presentation time of the span's first frame (may precede t0)
    last_pts_s: float  # that of its last frame
    frame_count: int  # frames played in [t0, t1]

    @property
    def byte_length(self) -> int:
        return self.byte_end - self.byte_start


def plan_span(
    index: TrackIndex, t0_s: float, t1_s: float, *, tolerance_s: float = DEFAULT_TOLERANCE_S
) -> SpanPlan:
    """Plan the samples and bytes that present every frame played in ``[t0_s, t1_s]``.

    The played-at rule (torchcodec's ``get_frames_played_at``): a frame FFmpeg presents
    (its pts is at or after the edit list's start) at source time ``p``
    (``index.pts_seconds()``) is played during ``[p, e)``, where ``e`` is the next presented
    frame's time, or for the last frame ``p`` plus its sample duration. The span holds
    every frame played at some instant of it, so ``[t, t]`` holds the one frame played at
    ``t``, also between two frames' times. Both ends count ``tolerance_s`` (LeRobot's
    matching tolerance) later: a time up to ``tolerance_s`` before a frame's own time,
    as rounding leaves one, selects that frame and not the one before it.

    Raises:
        FrameNotFoundError: no frame is played in the span: it ends before the first
            frame, starts at or after the end of the last one, or ends before it starts.
        Mp4FormatError: a frame of the span has no sync sample from which it decodes.
    """
    members = _played_samples(index, t0_s, t1_s, tolerance_s)
    pts = index.pts
    ts = np.float64(index.timescale)
    first_decode = int(members[0])
    member_pts = pts[members]
    first_pts = int(member_pts.min())
    last_pts = int(member_pts.max())

    # Sync samples at or before the span's first decoded frame that present no later than
    # the span's first frame: frames presented before a sync sample but decoded after it
    # (open GOP) reference the previous GOP, so such a span must start earlier.
    starts = _sync_samples_before(index, first_decode, first_pts)
    if starts.shape[0] == 0:
        raise Mp4FormatError(
            f"track {index.track_id}: the frame at {first_pts / index.timescale} s "
            f"(sample {first_decode}) follows no sync sample it can be decoded from"
        )
    start = int(starts[-1])
    end = int(members[-1]) + 1
    kept = clip_samples(index, start, end)
    if index.codec in _AVC_CODECS and start > 0:
        start, end, kept = _flush_safe(index, first_pts, start, end, kept)

    byte_start = int(index.offsets[kept].min())
    byte_end = int((index.offsets[kept] + index.sizes[kept]).max())
    return SpanPlan(
        sample_start=start,
        sample_end=end,
        byte_start=byte_start,
        byte_end=byte_end,
        time_offset_s=float(pts[start] / ts),
        first_pts_s=float(first_pts / ts),
        last_pts_s=float(last_pts / ts),
        frame_count=int(members.shape[0]),
    )


def _played_samples(index: TrackIndex, t0_s: float, t1_s: float, tolerance_s: float) -> np.ndarray:
    """Decode-order indices (ascending) of the samples played in ``[t0_s, t1_s]``.

    With ``lo = t0_s + tolerance_s`` and ``hi = t1_s + tolerance_s``: the presented frames
    whose time lies in ``(lo, hi]``, and the one played at ``lo`` (the latest presented at
    or before ``lo``, unless it is the last frame and ends by ``lo``). Times are compared
    as ``pts / timescale`` in float64, as ``pts_seconds()`` gives them.
    """
    if not t0_s <= t1_s + tolerance_s:  # also NaN
        raise FrameNotFoundError(
            f"no frame of track {index.track_id} is played in [{t0_s}, {t1_s}] s: "
            "the span ends before it starts"
        )
    pts = index.pts
    ts = np.float64(index.timescale)
    start_tick = index.presentation_start
    lo_s, hi_s = t0_s + tolerance_s, t1_s + tolerance_s
    # An integer pre-filter with a tick of slack, then the exact float test on the few
    # candidates: the same answer as comparing pts_seconds() everywhere, at a fraction of it.
    lo_tick = _tick_bound(np.floor(lo_s * ts) - 1 if np.isfinite(lo_s) else -np.inf)
    hi_tick = _tick_bound(np.ceil(hi_s * ts) + 1 if np.isfinite(hi_s) else np.inf)
    near = np.flatnonzero((pts >= lo_tick) & (pts <= hi_tick))
    if start_tick is not None:
        near = near[pts[near] >= start_tick]
    near_s = pts[near] / ts
    after = near[(near_s > lo_s) & (near_s <= hi_s)]
    cover = near[near_s <= lo_s]
    if cover.shape[0] == 0:
        # the frame played at lo started before the pre-filter's window (a long frame,
        # or lo past the last frame): every presented time below lo_tick is below lo_s
        below = pts < lo_tick
        if start_tick is not None:
            below &= pts >= start_tick
        cover = np.flatnonzero(below)
    if cover.shape[0]:
        cover_pts = int(pts[cover].max())
        cover = cover[pts[cover] == cover_pts]
        # the latest frame at or before lo is played at lo unless it is the last frame
        # and its duration ends by lo (any later frame is presented after lo)
        is_last = after.shape[0] == 0 and cover_pts >= int(pts.max())
        if is_last and (cover_pts + _sample_duration(index, int(cover[0]))) / ts <= lo_s:
            cover = cover[:0]
    members = np.union1d(cover, after)
    if members.shape[0] == 0:
        raise FrameNotFoundError(_nothing_played(index, t0_s, t1_s, tolerance_s))
    return members


def _sample_duration(index: TrackIndex, sample: int) -> int:
    """One sample's decode-time step in ticks (the last one's from the media duration)."""
    if sample + 1 < index.num_samples:
        return int(index.dts[sample + 1] - index.dts[sample])
    return last_sample_duration(index)


def _nothing_played(index: TrackIndex, t0_s: float, t1_s: float, tolerance_s: float) -> str:
    """Why no frame is played in a span that does not end before it starts."""
    head = f"no frame of track {index.track_id} is played in [{t0_s}, {t1_s}] s"
    pts = index.pts
    if index.presentation_start is not None:
        pts = pts[pts >= index.presentation_start]
    if pts.shape[0] == 0:
        return f"{head}: the track presents no frames"
    ts = index.timescale
    last = int(np.argmax(pts))
    first_s = int(pts.min()) / ts
    if t1_s + tolerance_s < first_s:
        return f"{head}: it ends before the first frame, presented at {first_s} s"
    sample = int(np.flatnonzero(index.pts == pts[last])[0])
    end_s = (int(pts[last]) + _sample_duration(index, sample)) / ts
    return f"{head}: it starts at or after the end of the last frame, {end_s} s"


def _tick_bound(value: float) -> int:
    """A float tick bound clamped into int64 comparisons' safe range."""
    return int(min(max(value, -(2.0**62)), 2.0**62))


def _sync_samples_before(index: TrackIndex, last: int, max_pts: int) -> np.ndarray:
    """Some sync samples in [0, last] presenting no later than ``max_pts``, in order, the
    latest such one included (empty if there is none). Searched backwards in growing
    windows: the answer is almost always within a GOP or two."""
    window = 1024
    while True:
        lo = max(0, last + 1 - window)
        found = lo + np.flatnonzero(index.keyframes[lo : last + 1])
        found = found[index.pts[found] <= max_pts]
        if found.shape[0] or lo == 0:
            return found
        window *= 4


def reorder_depth(pts: np.ndarray) -> int:
    """Most frames decoded before a frame yet presented after it (the B-frame delay).

    Looks back at most :data:`MAX_REORDER_DEPTH` samples (the H.264/HEVC DPB limit).
    """
    n = pts.shape[0]
    depth = np.zeros(n, dtype=np.int64)
    for back in range(1, min(MAX_REORDER_DEPTH, n - 1) + 1):
        depth[back:] += pts[:-back] > pts[back:]
    return int(depth.max()) if n else 0


def _flush_safe(
    index: TrackIndex, first_pts: int, start: int, end: int, kept: np.ndarray
) -> tuple[int, int, np.ndarray]:
    """Grow an H.264 sample range until FFmpeg outputs every frame of it.

    FFmpeg's H.264 decoder (at least up to 5.1, the one torchcodec links here) marks the
    frames decoded after a non-IDR sync sample but before that sample leaves the reorder
    buffer as "not recovered", and at end of stream drops those still buffered. The moov
    does not say which sync samples are IDR, so for every range that does not start at
    the file's first sample we make sure the ``depth`` frames left buffered at the end
    (the ones presented last) are not among the first ``depth`` decoded after the start:
    we extend the range in decode order, or at the file's end start one sync sample
    earlier.
    """
    lo = max(0, start - _DEPTH_CONTEXT)
    hi = min(index.num_samples, end + _DEPTH_CONTEXT)
    depth = reorder_depth(index.pts[lo:hi])
    if depth == 0:
        return start, end, kept
    # Real streams settle within a few reorder depths; the bound keeps malformed timing
    # (frames presenting ever earlier) from turning this into a walk over the whole file.
    for _ in range(_MAX_FLUSH_STEPS):
        window = index.pts[kept]
        if window.shape[0] == 1:
            return start, end, kept  # only the sync sample itself, which is recovered
        last_shown = np.argsort(window, kind="stable")[-depth:]
        if not np.any((last_shown >= 1) & (last_shown <= depth)):
            return start, end, kept
        if end < index.num_samples:
            end += 1
        else:
            earlier = _sync_samples_before(index, start - 1, first_pts)
            if earlier.shape[0] == 0:
                return start, end, kept  # nothing left to add; decoders differ here
            start = int(earlier[-1])
        kept = clip_samples(index, start, end)
        if start == 0:
            return start, end, kept  # a file's first sample starts decoding as a full decode
    return start, end, kept  # gave up: such timing is not an encoder's


def clip_samples(index: TrackIndex, sample_start: int, sample_end: int) -> np.ndarray:
    """Decode-order indices of the samples a clip of ``[sample_start, sample_end)`` holds.

    All of them but the leading pictures of ``sample_start`` (presented before it): those
    reference frames before the clip, and decoders either drop them or show garbage.
    """
    if not 0 <= sample_start < sample_end <= index.num_samples:
        raise Mp4FormatError(
            f"sample range [{sample_start}, {sample_end}) is not inside the track's "
            f"{index.num_samples} samples"
        )
    window = index.pts[sample_start:sample_end]
    return sample_start + np.flatnonzero(window >= window[0])

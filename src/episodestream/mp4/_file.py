"""``clip_file``: cut a clip out of a local MP4, reading only the bytes it needs.

The one module of the mp4 layer that touches files; it is a convenience for callers and
tests and uses nothing but ``open``/``seek``/``read`` over the pure functions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from episodestream.mp4._clip import write_clip
from episodestream.mp4._index import TrackIndex, parse_moov
from episodestream.mp4._locate import locate_moov
from episodestream.mp4._plan import DEFAULT_TOLERANCE_S, SpanPlan, plan_span

__all__ = ["Clip", "clip_file"]


@dataclass(frozen=True, slots=True)
class Clip:
    """A standalone MP4 of one span; source time = clip time + ``time_offset_s``."""

    data: bytes
    time_offset_s: float
    plan: SpanPlan
    index: TrackIndex | None = None  # the source track's index the plan was made on


def clip_file(
    path: str | os.PathLike[str],
    start_s: float,
    end_s: float,
    *,
    track_id: int | None = None,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> Clip:
    """Clip the frames played in ``[start_s, end_s]`` (closed) out of a local MP4.

    A frame is played from its presentation time until the next frame's (see
    :func:`plan_span`), so ``clip_file(path, t, t)`` holds the one frame shown at ``t``,
    as torchcodec's ``get_frames_played_at([t])`` returns it, also between two frames.
    Reads the ``moov`` (one or two small reads, see ``locate_moov``) and then the span's
    bytes in one read.

    Raises:
        FrameNotFoundError: no frame is played in the span (it lies before the first
            frame or at or after the end of the last one).
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size

        def read_range(offset: int, length: int) -> bytes:
            f.seek(offset)
            return f.read(length)

        location = locate_moov(read_range, size)
        index = parse_moov(location.moov, track_id=track_id, file_offset=location.offset)
        plan = plan_span(index, start_s, end_s, tolerance_s=tolerance_s)
        payload = read_range(plan.byte_start, plan.byte_length)
    return Clip(write_clip(index, plan, payload), plan.time_offset_s, plan, index)

"""mp4 layer: pure ISO-BMFF parsing, span planning and clip writing (see docs/ARCHITECTURE.md).

Bytes in, frozen records out; no I/O except the ``clip_file`` convenience.
"""

from episodestream.mp4._boxes import (
    MAX_BOX_DEPTH,
    Box,
    FieldReader,
    iter_boxes,
    walk_boxes,
)
from episodestream.mp4._clip import clip_frame_times, clip_header, clip_size, write_clip
from episodestream.mp4._file import Clip, clip_file
from episodestream.mp4._framing import check_sample_framing, sample_framing
from episodestream.mp4._index import (
    MAX_DURATION,
    MAX_TIMESCALE,
    MAX_UNTABLED_SAMPLES,
    TrackIndex,
    parse_moov,
)
from episodestream.mp4._locate import (
    MoovLocation,
    locate_moov,
)
from episodestream.mp4._plan import (
    DEFAULT_TOLERANCE_S,
    SpanPlan,
    clip_samples,
    plan_span,
)

__all__ = [
    "DEFAULT_TOLERANCE_S",
    "MAX_BOX_DEPTH",
    "MAX_DURATION",
    "MAX_TIMESCALE",
    "MAX_UNTABLED_SAMPLES",
    "Box",
    "Clip",
    "FieldReader",
    "MoovLocation",
    "SpanPlan",
    "TrackIndex",
    "check_sample_framing",
    "clip_file",
    "clip_frame_times",
    "clip_header",
    "clip_samples",
    "clip_size",
    "iter_boxes",
    "locate_moov",
    "parse_moov",
    "plan_span",
    "sample_framing",
    "walk_boxes",
    "write_clip",
]

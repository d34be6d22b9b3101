"""mp4 layer: pure ISO-BMFF parsing, span planning and clip writing (see DESIGN.md).

Bytes in, frozen records out; no I/O except the ``clip_file`` convenience.
"""

from episodestream.mp4._boxes import (
    CONTAINER_BOXES,
    MAX_BOX_DEPTH,
    Box,
    FieldReader,
    find_child,
    iter_boxes,
    walk_boxes,
)
from episodestream.mp4._clip import clip_header, clip_size, write_clip
from episodestream.mp4._file import Clip, clip_file
from episodestream.mp4._index import MAX_UNTABLED_SAMPLES, TrackIndex, parse_moov
from episodestream.mp4._locate import (
    DEFAULT_FIRST_PROBE_BYTES,
    DEFAULT_TAIL_PROBE_BYTES,
    MAX_TOP_LEVEL_BOXES,
    MoovLocation,
    locate_moov,
)
from episodestream.mp4._plan import (
    DEFAULT_TOLERANCE_S,
    MAX_REORDER_DEPTH,
    SpanPlan,
    clip_samples,
    plan_span,
    reorder_depth,
)
from episodestream.mp4._synthetic import synthetic_moov

__all__ = [
    "CONTAINER_BOXES",
    "DEFAULT_FIRST_PROBE_BYTES",
    "DEFAULT_TAIL_PROBE_BYTES",
    "DEFAULT_TOLERANCE_S",
    "MAX_BOX_DEPTH",
    "MAX_REORDER_DEPTH",
    "MAX_TOP_LEVEL_BOXES",
    "MAX_UNTABLED_SAMPLES",
    "Box",
    "Clip",
    "FieldReader",
    "MoovLocation",
    "SpanPlan",
    "TrackIndex",
    "clip_file",
    "clip_header",
    "clip_samples",
    "clip_size",
    "find_child",
    "iter_boxes",
    "locate_moov",
    "parse_moov",
    "plan_span",
    "reorder_depth",
    "synthetic_moov",
    "walk_boxes",
    "write_clip",
]

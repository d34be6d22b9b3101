"""Do the bytes of a span hold the samples its index describes? (pure, before decoding)

A sample of H.264 / HEVC in MP4 is a run of NAL units, each behind a big-endian length of
1, 2 or 4 bytes (the ``avcC`` / ``hvcC`` record says which); an AV1 sample is a run of OBUs,
each with a header and (all but possibly the last) a LEB128 size. In both the lengths must
add up to the sample's size exactly. Bytes taken from the wrong place (an index whose
sample offsets lie, or a file laid out otherwise than its index says) almost never do, so
walking the lengths tells a wrong index from a right one without decoding anything. Other
codecs (MPEG-4 Part 2, VP9) carry no such framing and are not checked.
"""

from __future__ import annotations

from episodestream.errors import Mp4FormatError
from episodestream.mp4._boxes import Box, iter_boxes
from episodestream.mp4._index import TrackIndex
from episodestream.mp4._plan import SpanPlan, clip_samples

__all__ = ["check_sample_framing", "sample_framing"]

_NAL_CONFIG = {"avc1": "avcC", "avc3": "avcC", "hvc1": "hvcC", "hev1": "hvcC"}
# where each configuration record keeps lengthSizeMinusOne (low two bits of that byte)
_LENGTH_SIZE_BYTE = {"avcC": 4, "hvcC": 21}
_VISUAL_ENTRY_BYTES = 86  # sample entry header + VisualSampleEntry fields, before its boxes
_MAX_LEB128_BYTES = 8
# AV1 OBU types (sequence header .. tile list, padding); the others are reserved
_OBU_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 8, 15})
_FRAME_OBUS = frozenset({3, 6})  # frame header, frame


def sample_framing(index: TrackIndex) -> int | str | None:
    """How ``index``'s samples are framed: the NAL length size (1, 2 or 4), ``"obu"`` for
    AV1, or None when the codec has no framing to check (or its record cannot be read)."""
    if index.codec == "av01":
        return "obu"
    config = _NAL_CONFIG.get(index.codec)
    if config is None:
        return None
    try:
        record = _config_box(index.stsd, config)
    except Mp4FormatError:
        return None
    if record is None:
        return None
    at = record.payload_start + _LENGTH_SIZE_BYTE[config]
    if at >= record.end:
        return None
    size = (index.stsd[at] & 0x3) + 1
    return size if size in (1, 2, 4) else None


def _config_box(stsd: bytes, name: str) -> Box | None:
    """The first sample entry's child box ``name`` (``avcC`` / ``hvcC``), if any."""
    boxes = list(iter_boxes(stsd, 0, len(stsd)))
    if len(boxes) != 1:
        return None
    box = boxes[0]
    entries = list(iter_boxes(stsd, box.payload_start + 8, box.end, indexed=frozenset()))
    if not entries or entries[0].size < _VISUAL_ENTRY_BYTES:
        return None
    entry = entries[0]
    for child in iter_boxes(stsd, entry.start + _VISUAL_ENTRY_BYTES, entry.end):
        if child.type == name:
            return child
    return None


def check_sample_framing(
    index: TrackIndex, plan: SpanPlan, payload: bytes | memoryview, *, where: str = ""
) -> None:
    """Check that ``payload`` (the source bytes ``[plan.byte_start, plan.byte_end)``) holds,
        at each of the clip's samples, a run of NAL units or OBUs filling it exactly (and, for AV1,
    of OBU types the codec defines, holding a frame or frame header).

        Costs one pass over each sample's unit headers (a few per sample). Does nothing for
        codecs without such framing (see :func:`sample_framing`).

        Raises:
            Mp4FormatError: the first sample whose bytes are not framed as its codec frames
                them (names ``where``, the sample and its byte range).
    """
    framing = sample_framing(index)
    if framing is None:
        return
    data = memoryview(payload).cast("B") if not isinstance(payload, bytes) else payload
    kept = clip_samples(index, plan.sample_start, plan.sample_end)
    starts = index.offsets[kept] - plan.byte_start
    sizes = index.sizes[kept]
    if starts.size and (int(starts.min()) < 0 or int((starts + sizes).max()) > len(data)):
        raise Mp4FormatError(f"{where}samples lie outside the {len(data)} payload bytes")
    walk = _obu_run_end if framing == "obu" else _nal_run_end
    for sample, start, size in zip(kept.tolist(), starts.tolist(), sizes.tolist(), strict=True):
        if size == 0:
            continue
        problem = walk(data, start, start + size, framing)
        if problem is not None:
            absolute = plan.byte_start + start
            raise Mp4FormatError(
                f"{where}sample {sample} at bytes [{absolute}, {absolute + size}) is not a "
                f"{'run of AV1 OBUs' if framing == 'obu' else 'run of NAL units'}: {problem}"
            )


def _nal_run_end(data: bytes | memoryview, pos: int, end: int, length_size: object) -> str | None:
    n = int(length_size)  # type: ignore[call-overload]
    while pos < end:
        if end - pos < n:
            if any(data[pos:end]):  # a writer's zero padding after the last unit is harmless
                return f"{end - pos} trailing bytes are not a {n}-byte length"
            return None
        length = int.from_bytes(data[pos : pos + n], "big")
        pos += n
        if length > end - pos:
            return f"a NAL unit of {length} bytes runs past the sample's end"
        if length and data[pos] & 0x80:
            return "a NAL unit header has its forbidden bit set"
        pos += length
    return None


def _obu_run_end(data: bytes | memoryview, pos: int, end: int, _framing: object) -> str | None:
    frames = 0
    while pos < end:
        header = data[pos]
        if header & 0x81:
            return "an OBU header has its forbidden or reserved bit set"
        obu_type = (header >> 3) & 0x0F
        if obu_type not in _OBU_TYPES:
            return f"OBU type {obu_type} is reserved"
        frames += obu_type in _FRAME_OBUS
        if not header & 0x02:  # no size field: this OBU runs to the end of the sample
            break
        pos += 2 if header & 0x04 else 1  # the extension byte
        value = 0
        for i in range(_MAX_LEB128_BYTES):
            if pos >= end:
                return "an OBU size runs past the sample's end"
            byte = data[pos]
            pos += 1
            value |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                break
        else:
            return "an OBU size is longer than 8 bytes"
        if value > end - pos:
            return f"an OBU of {value} bytes runs past the sample's end"
        pos += value
    # a temporal unit shows or decodes at least one frame
    return None if frames else "no frame or frame header OBU"

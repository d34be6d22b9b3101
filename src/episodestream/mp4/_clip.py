"""Standalone clips: ``ftyp`` + rebuilt ``moov`` + ``mdat`` around a span's source bytes.

The ``mdat`` payload is the source byte range ``[plan.byte_start, plan.byte_end)`` verbatim
(bytes of other tracks or skipped samples inside it are simply never referenced), so chunk
offsets are the source offsets rebased onto the new ``mdat``: one sample per chunk, which
lets interleaved or out-of-order source chunks through unchanged.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from episodestream.errors import Mp4FormatError, UnsupportedMp4Error
from episodestream.mp4._index import TrackIndex, last_sample_duration
from episodestream.mp4._plan import SpanPlan, clip_samples

__all__ = ["clip_frame_times", "clip_header", "clip_size", "write_clip"]

_U32_MAX = 0xFFFFFFFF
_MATRIX = struct.pack(">9I", 0x10000, 0, 0, 0, 0x10000, 0, 0, 0, 0x40000000)
_HANDLER_NAME = b"VideoHandler\0"
_LANGUAGE_UND = 0x55C4  # ISO-639-2 'und' packed as three 5-bit letters

# A box tree: (fourcc, parts) where a part is bytes, a big-endian numpy array or a subtree.
# Sizes come from the same tree that is serialized, so clip_size and write_clip agree.


class _Node:
    """A box: fourcc and parts; its size is computed once, from parts built before it."""

    __slots__ = ("fourcc", "parts", "size")

    def __init__(self, fourcc: bytes, parts: tuple) -> None:
        self.fourcc = fourcc
        self.parts = parts  # bytes, big-endian numpy arrays or _Nodes
        self.size = 8 + sum(_part_size(p) for p in parts)

    def write(self, out: list[bytes]) -> None:
        out.append(struct.pack(">I4s", self.size, self.fourcc))
        for p in self.parts:
            if isinstance(p, _Node):
                p.write(out)
            elif isinstance(p, np.ndarray):
                out.append(p.tobytes())
            else:
                out.append(p)


def _part_size(p: object) -> int:
    if isinstance(p, _Node):
        return p.size
    if isinstance(p, np.ndarray):
        return int(p.nbytes)
    return len(p)  # type: ignore[arg-type]


def _full(fourcc: bytes, version: int, flags: int, *parts: object) -> _Node:
    return _Node(fourcc, (struct.pack(">I", (version << 24) | flags), *parts))


def _runs(values: np.ndarray) -> np.ndarray:
    """Run-length (count, value) pairs of ``values`` as an int64 [k, 2] array."""
    n = values.shape[0]
    if n == 0:
        return np.zeros((0, 2), dtype=np.int64)
    starts = np.flatnonzero(np.diff(values)) + 1
    starts = np.concatenate(([0], starts))
    counts = np.diff(np.append(starts, n))
    return np.stack([counts, values[starts]], axis=1).astype(np.int64)


def _table_box(fourcc: bytes, version: int, rows: np.ndarray, dtype: str) -> _Node:
    return _full(fourcc, version, 0, struct.pack(">I", rows.shape[0]), rows.astype(dtype))


@dataclass(frozen=True, slots=True)
class _Tables:
    """Per-sample tables of a track to serialize; times in one timescale."""

    timescale: int
    width: int
    height: int
    codec: str
    stsd: bytes
    durations: np.ndarray  # stts deltas, int64
    cts: np.ndarray  # composition offsets, int64
    sizes: np.ndarray  # int64
    keyframes: np.ndarray  # bool
    media_time: int  # edit list media start
    edit_duration: int  # presentation length after the edit
    empty_edit: int = 0  # leading empty edit (in the same timescale)


def _moov(
    t: _Tables,
    chunk_offsets: np.ndarray,
    *,
    co64: bool,
    samples_per_chunk: np.ndarray | None = None,
) -> _Node:
    """The moov tree; one sample per chunk unless ``samples_per_chunk`` says otherwise."""
    media_duration = int(t.durations.sum())
    movie_duration = t.empty_edit + t.edit_duration
    long_times = max(media_duration, movie_duration) > _U32_MAX
    v = 1 if long_times else 0

    times = bytes(16 if v else 8)  # creation and modification times, left at 0

    def dur(d: int) -> bytes:
        return struct.pack(">Q" if v else ">I", d)

    mvhd = _full(
        b"mvhd",
        v,
        0,
        times,
        struct.pack(">I", t.timescale),
        dur(movie_duration),
        struct.pack(">IH", 0x10000, 0x100),
        bytes(10),
        _MATRIX,
        bytes(24),
        struct.pack(">I", 2),
    )
    tkhd = _full(
        b"tkhd",
        v,
        3,
        times,
        struct.pack(">II", 1, 0),
        dur(movie_duration),
        bytes(8),
        struct.pack(">hhhH", 0, 0, 0, 0),
        _MATRIX,
        struct.pack(">II", (t.width & 0xFFFF) << 16, (t.height & 0xFFFF) << 16),
    )
    elst_v = 1 if long_times or t.media_time > 0x7FFFFFFF else 0
    entries = []
    if t.empty_edit:
        entries.append((t.empty_edit, -1))
    entries.append((t.edit_duration, t.media_time))
    rows = b"".join(
        struct.pack(">Qq" if elst_v else ">Ii", d, m) + struct.pack(">hh", 1, 0) for d, m in entries
    )
    edts = _Node(b"edts", (_full(b"elst", elst_v, 0, struct.pack(">I", len(entries)), rows),))
    mdhd = _full(
        b"mdhd",
        v,
        0,
        times,
        struct.pack(">I", t.timescale),
        dur(media_duration),
        struct.pack(">HH", _LANGUAGE_UND, 0),
    )
    hdlr = _full(b"hdlr", 0, 0, bytes(4), b"vide", bytes(12), _HANDLER_NAME)
    vmhd = _full(b"vmhd", 0, 1, bytes(8))
    dinf = _Node(b"dinf", (_full(b"dref", 0, 0, struct.pack(">I", 1), _full(b"url ", 0, 1)),))

    n = t.sizes.shape[0]
    stbl_parts: list[object] = [t.stsd, _table_box(b"stts", 0, _runs(t.durations), ">u4")]
    if np.any(t.cts):
        ctts_v = 1 if int(t.cts.min()) < 0 else 0
        stbl_parts.append(_table_box(b"ctts", ctts_v, _runs(t.cts), ">i4" if ctts_v else ">u4"))
    if not bool(t.keyframes.all()):
        numbers = (np.flatnonzero(t.keyframes) + 1).astype(">u4")
        stbl_parts.append(_full(b"stss", 0, 0, struct.pack(">I", numbers.shape[0]), numbers))
    stbl_parts.append(_full(b"stsz", 0, 0, struct.pack(">II", 0, n), t.sizes.astype(">u4")))
    if samples_per_chunk is None:
        stsc_rows = np.array([[1, 1, 1]], dtype=np.int64) if n else np.zeros((0, 3), np.int64)
    else:
        runs = _runs(samples_per_chunk)
        first_chunk = np.concatenate(([0], np.cumsum(runs[:, 0])[:-1])) + 1
        stsc_rows = np.stack([first_chunk, runs[:, 1], np.ones_like(first_chunk)], axis=1)
    stbl_parts.append(_table_box(b"stsc", 0, stsc_rows, ">u4"))
    stbl_parts.append(
        _full(
            b"co64" if co64 else b"stco",
            0,
            0,
            struct.pack(">I", chunk_offsets.shape[0]),
            _as_dtype(chunk_offsets, ">u8" if co64 else ">u4"),
        )
    )
    stbl = _Node(b"stbl", tuple(stbl_parts))
    minf = _Node(b"minf", (vmhd, dinf, stbl))
    mdia = _Node(b"mdia", (mdhd, hdlr, minf))
    trak = _Node(b"trak", (tkhd, edts, mdia))
    return _Node(b"moov", (mvhd, trak))


def _as_dtype(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` itself when already of ``dtype`` (so a caller may fill it in later)."""
    return values if values.dtype == np.dtype(dtype) else values.astype(dtype)


def _ftyp(codec: str) -> _Node:
    brands = [b"isom", b"iso2", b"mp41"]
    if codec == "av01":
        brands.append(b"av01")
    return _Node(b"ftyp", (b"isom", struct.pack(">I", 0x200), *brands))


def _mdat_header(payload_length: int) -> bytes:
    if payload_length + 8 <= _U32_MAX:
        return struct.pack(">I4s", payload_length + 8, b"mdat")
    return struct.pack(">I4sQ", 1, b"mdat", payload_length + 16)


def _layout(
    tables: _Tables, relative_offsets: np.ndarray, payload_length: int
) -> tuple[_Node, _Node, bytes]:
    """(ftyp, moov, mdat header) with chunk offsets rebased past the header."""
    ftyp = _ftyp(tables.codec)
    mdat_header = _mdat_header(payload_length)
    n = relative_offsets.shape[0]
    highest = int(relative_offsets.max()) if n else 0
    # The moov's size does not depend on the offset values, only on their width: build it
    # once around an empty table, then fill the table in place.
    offsets = np.empty(n, dtype=">u4")
    moov = _moov(tables, offsets, co64=False)
    base = ftyp.size + moov.size + len(mdat_header)
    if base + highest > _U32_MAX:
        offsets = np.empty(n, dtype=">u8")  # 8-byte offsets: moov grows, offsets only rise
        moov = _moov(tables, offsets, co64=True)
        base = ftyp.size + moov.size + len(mdat_header)
    offsets[:] = relative_offsets + base
    return ftyp, moov, mdat_header


def _clip_tables(index: TrackIndex, plan: SpanPlan) -> tuple[_Tables, np.ndarray]:
    """The clip's tables and its samples' offsets relative to the payload start."""
    kept = clip_samples(index, plan.sample_start, plan.sample_end)
    offsets = index.offsets[kept]
    ends = offsets + index.sizes[kept]
    if int(offsets.min()) != plan.byte_start or int(ends.max()) != plan.byte_end:
        raise Mp4FormatError(
            f"plan bytes [{plan.byte_start}, {plan.byte_end}) do not match track "
            f"{index.track_id}'s samples [{plan.sample_start}, {plan.sample_end}) "
            f"(expected [{int(offsets.min())}, {int(ends.max())})); was it planned on "
            "another index?"
        )
    dts = index.dts[kept]
    durations = np.empty(kept.shape[0], dtype=np.int64)
    durations[:-1] = np.diff(dts)
    last = int(kept[-1])
    if last + 1 < index.num_samples:
        durations[-1] = int(index.dts[last + 1]) - int(index.dts[last])
    else:
        durations[-1] = last_sample_duration(index)
    cts = index.cts_offset[kept].astype(np.int64)
    # The first kept sample presents first (clip_samples drops earlier-presented leading
    # pictures), so its composition time is the clip's earliest: start the edit there and
    # no sample is cut by the edit list, whatever the decoder does with cut samples.
    media_time = int(cts[0])
    if media_time < 0:
        cts = cts - media_time
        media_time = 0
    if int(durations.min()) < 0 or int(durations.max()) > _U32_MAX:
        raise UnsupportedMp4Error(
            f"track {index.track_id}: a decode-time step of the clip does not fit stts"
        )
    if int(cts.min()) < -(1 << 31) or int(cts.max()) >= 1 << 31:
        # FFmpeg reads ctts as signed 32-bit in both versions
        raise UnsupportedMp4Error(
            f"track {index.track_id}: composition offsets of the clip do not fit ctts"
        )
    clip_pts = index.pts[kept] - int(index.pts[plan.sample_start])
    top = int(np.argmax(clip_pts))
    edit_duration = int(clip_pts[top]) + max(int(durations[top]), 1)
    tables = _Tables(
        timescale=index.timescale,
        width=index.width,
        height=index.height,
        codec=index.codec,
        stsd=index.stsd,
        durations=durations,
        cts=cts,
        sizes=index.sizes[kept],
        keyframes=index.keyframes[kept],
        media_time=media_time,
        edit_duration=edit_duration,
    )
    return tables, offsets - plan.byte_start


def clip_header(index: TrackIndex, plan: SpanPlan) -> bytes:
    """``ftyp`` + ``moov`` + ``mdat`` header of the clip; the payload follows it verbatim."""
    tables, relative = _clip_tables(index, plan)
    ftyp, moov, mdat_header = _layout(tables, relative, plan.byte_length)
    out: list[bytes] = []
    ftyp.write(out)
    moov.write(out)
    out.append(mdat_header)
    return b"".join(out)


def clip_size(index: TrackIndex, plan: SpanPlan) -> int:
    """Exact byte size of ``write_clip(index, plan, payload)``, without the payload."""
    tables, relative = _clip_tables(index, plan)
    ftyp, moov, mdat_header = _layout(tables, relative, plan.byte_length)
    return ftyp.size + moov.size + len(mdat_header) + plan.byte_length


def clip_frame_times(index: TrackIndex, plan: SpanPlan) -> np.ndarray:
    """Presentation times (float64 seconds, ascending) of every frame the clip of ``plan``
    shows, as FFmpeg reports them for it (tick count times ``1 / timescale``).

    The clip keeps each sample's presentation offset from its first sample, which presents
    first, so a decoder needs no pass over the clip's packets to learn them.
    """
    kept = clip_samples(index, plan.sample_start, plan.sample_end)
    ticks = np.sort(index.pts[kept] - index.pts[plan.sample_start])
    return ticks * (1.0 / index.timescale)


def write_clip(index: TrackIndex, plan: SpanPlan, payload: bytes | memoryview) -> bytes:
    """A standalone MP4 presenting the plan's frames at source time - ``plan.time_offset_s``.

    Args:
        index: the source track's index the plan was made on.
        plan: from :func:`plan_span`.
        payload: the source file's bytes ``[plan.byte_start, plan.byte_end)``.

    Raises:
        Mp4FormatError: the payload length or the plan does not match the index.
    """
    if len(payload) != plan.byte_length:
        raise Mp4FormatError(
            f"payload holds {len(payload)} bytes but the plan covers source bytes "
            f"[{plan.byte_start}, {plan.byte_end}) = {plan.byte_length} bytes"
        )
    return b"".join((clip_header(index, plan), payload))

"""The sample index of one video track, parsed from a ``moov`` box with numpy (no I/O).

Every per-sample table is expanded with vectorized numpy (repeat / cumsum), and every
count is checked against the bytes that back it, or against the sample count the other
tables agree on, before anything of that length is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from episodestream.errors import Mp4FormatError, UnsupportedMp4Error
from episodestream.mp4._boxes import Box, FieldReader, find_child, iter_boxes

__all__ = ["MAX_DURATION", "MAX_TIMESCALE", "MAX_UNTABLED_SAMPLES", "TrackIndex", "parse_moov"]

#: Most samples accepted when ``stsz`` gives one size for all (no per-sample table backs
#: the count); tabled sizes are bounded by the bytes of the table itself.
MAX_UNTABLED_SAMPLES = 1 << 20
#: Largest media timescale accepted (FFmpeg reads mdhd's as a signed 32-bit int).
MAX_TIMESCALE = (1 << 31) - 1
#: Largest media duration in ticks (an int64 wherever it is stored).
MAX_DURATION = (1 << 63) - 1
_U32_MAX = (1 << 32) - 1
_U64_MAX = (1 << 64) - 1
_MAX_EDIT_TICKS = 1 << 62

# Sample entry fourccs of video codecs whose tracks we index.
_VISUAL_ENTRY_MIN_BYTES = 86  # 8-byte header + 78 bytes of VisualSampleEntry fields


@dataclass(frozen=True, slots=True, eq=False)
class TrackIndex:
    """One video track's sample table; every array is in decode order.

    Times are integer ticks of ``timescale``. ``pts`` is what FFmpeg (and so torchcodec and
    PyAV) reports for each sample: ``dts + cts_offset - media_start + empty_edit``, where the
    edit list's media start and leading empty edit (rescaled to the media timescale and
    rounded as FFmpeg rounds) come from ``edts/elst``. Samples with
    ``pts < presentation_start`` are decoded but never shown by FFmpeg: they precede the
    edit list's media start (None: no edit list, every sample is presented).
    """

    track_id: int
    timescale: int  # media timescale (ticks per second)
    duration: int  # media duration in ticks (mdhd; 0 when it says unknown)
    width: int
    height: int
    codec: str  # sample entry fourcc: 'av01', 'avc1', 'hvc1', 'hev1', ...
    stsd: bytes  # the source 'stsd' box, verbatim (header included)
    dts: np.ndarray  # int64 decode times (stts)
    cts_offset: np.ndarray  # int64 composition offsets (ctts v0/v1), zeros if absent
    pts: np.ndarray  # int64 presentation times, edit list applied
    sizes: np.ndarray  # int64 sample sizes in bytes
    offsets: np.ndarray  # int64 absolute file offsets
    keyframes: np.ndarray  # bool sync-sample flags (stss; all True if absent)
    presentation_start: int | None = None  # smallest pts FFmpeg presents (edit list start)

    # equal by contents, the arrays element by element (a dataclass's own __eq__ would ask
    # numpy for one truth value of a whole array and raise); the hash skips the arrays
    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if isinstance(mine, np.ndarray):
                if mine.dtype != theirs.dtype or not np.array_equal(mine, theirs):
                    return False
            elif mine != theirs:
                return False
        return True

    def __hash__(self) -> int:
        return hash(
            (self.track_id, self.timescale, self.duration, self.codec, self.stsd, self.num_samples)
        )

    @property
    def num_samples(self) -> int:
        return int(self.dts.shape[0])

    def pts_seconds(self) -> np.ndarray:
        """Presentation times in seconds (float64), computed as FFmpeg does: pts / timescale."""
        return self.pts / np.float64(self.timescale)

    def sample_durations(self) -> np.ndarray:
        """Decode-time step of each sample (int64); the last one from the media duration."""
        n = self.num_samples
        out = np.empty(n, dtype=np.int64)
        if n == 0:
            return out
        out[:-1] = np.diff(self.dts)
        out[-1] = last_sample_duration(self)
        return out


def last_sample_duration(index: TrackIndex) -> int:
    """The last sample's duration: what the media duration leaves after its decode time,
    else the step before it, else 1 tick (stts itself does not survive in the index)."""
    n = index.num_samples
    last = index.duration - int(index.dts[-1])
    if last <= 0 and n > 1:
        last = int(index.dts[-1]) - int(index.dts[-2])
    return last if last > 0 else 1


def parse_moov(
    moov: bytes | bytearray | memoryview,
    *,
    track_id: int | None = None,
    file_offset: int = 0,
) -> TrackIndex:
    """Index a video track of a ``moov`` box.

    Args:
        moov: the complete ``moov`` box, header included (as ``locate_moov`` returns it).
        track_id: the ``tkhd`` track id to index; by default the first track whose
            handler is ``vide``.
        file_offset: where ``moov`` starts in its file; only used to name offsets in errors.

    Raises:
        Mp4FormatError: malformed boxes or tables (the message names box path and offset).
        UnsupportedMp4Error: fragmented MP4 (``mvex``), no such video track, several sample
            descriptions in use, or an edit list other than [empty edit] + one rate-1 edit.
    """
    data = memoryview(moov).cast("B") if not isinstance(moov, bytes) else moov
    top = list(iter_boxes(data, base_offset=file_offset))
    if len(top) != 1 or top[0].type != "moov":
        found = ", ".join(b.type for b in top) or "nothing"
        raise Mp4FormatError(
            f"moov: expected exactly one 'moov' box, found {found} [at offset {file_offset}]"
        )
    moov_box = top[0]
    children = list(
        iter_boxes(
            data,
            moov_box.payload_start,
            moov_box.end,
            parent_path="moov",
            depth=1,
            base_offset=file_offset,
        )
    )
    if any(b.type == "mvex" for b in children):
        raise UnsupportedMp4Error(
            "fragmented MP4 (moov/mvex announces moof fragments) is not supported; "
            "remux it with faststart and no fragmentation"
        )
    mvhd = next((b for b in children if b.type == "mvhd"), None)
    if mvhd is None:
        raise moov_box.error("required child box 'mvhd' is missing")
    movie_timescale = _parse_mvhd(data, mvhd)

    video: list[tuple[int, Box]] = []
    handlers: dict[int, str] = {}
    for trak in (b for b in children if b.type == "trak"):
        tkhd = find_child(data, trak, "tkhd", depth=2)
        tid = _parse_tkhd_id(data, tkhd)
        mdia = find_child(data, trak, "mdia", depth=2)
        hdlr = find_child(data, mdia, "hdlr", depth=3)
        r = FieldReader(data, hdlr)
        r.full_header()
        r.skip(4, "pre_defined")
        handler = r.bytes(4, "handler_type").decode("latin-1")
        handlers[tid] = handler
        if handler == "vide":
            video.append((tid, trak))
    if track_id is None:
        if not video:
            raise UnsupportedMp4Error(
                f"no video track (handler 'vide') in moov; tracks: {handlers or 'none'}"
            )
        tid, trak = video[0]
    else:
        chosen = [(t, b) for t, b in video if t == track_id]
        if not chosen:
            raise UnsupportedMp4Error(
                f"track {track_id} is not a video track of this moov; video tracks: "
                f"{[t for t, _ in video]}, all tracks (id: handler): {handlers}"
            )
        tid, trak = chosen[0]
    return _parse_trak(data, trak, tid, movie_timescale)


def _parse_mvhd(data: bytes | memoryview, box: Box) -> int:
    r = FieldReader(data, box)
    version, _ = r.full_header()
    r.skip(16 if version == 1 else 8, "creation/modification time")
    return r.u32("timescale")


def _parse_tkhd_id(data: bytes | memoryview, box: Box) -> int:
    r = FieldReader(data, box)
    version, _ = r.full_header()
    r.skip(16 if version == 1 else 8, "creation/modification time")
    return r.u32("track_ID")


def _parse_trak(data: bytes | memoryview, trak: Box, tid: int, movie_timescale: int) -> TrackIndex:
    mdia = find_child(data, trak, "mdia", depth=2)
    mdhd = find_child(data, mdia, "mdhd", depth=3)
    r = FieldReader(data, mdhd)
    version, _ = r.full_header()
    r.skip(16 if version == 1 else 8, "creation/modification time")
    timescale = r.u32("timescale")
    duration = r.u64("duration") if version == 1 else r.u32("duration")
    if timescale == 0:
        raise mdhd.error("media timescale is 0")
    if timescale > MAX_TIMESCALE:
        # FFmpeg reads it as a signed 32-bit int and falls back to 1: its times would not
        # be these
        raise UnsupportedMp4Error(
            f"{mdhd.path}: media timescale {timescale} is above {MAX_TIMESCALE}"
        )
    if duration == (_U64_MAX if version == 1 else _U32_MAX):
        duration = 0  # all ones: unknown (ISO 14496-12 8.4.2.3), as FFmpeg reads it
    elif duration > MAX_DURATION:
        raise mdhd.error(f"media duration {duration} does not fit 63 bits")

    minf = find_child(data, mdia, "minf", depth=3)
    stbl = find_child(data, minf, "stbl", depth=4)
    tables = {
        b.type: b
        for b in iter_boxes(
            data,
            stbl.payload_start,
            stbl.end,
            parent_path=stbl.path,
            depth=5,
            base_offset=stbl.base_offset,
        )
    }
    for required in ("stsd", "stts", "stsc"):
        if required not in tables:
            raise stbl.error(f"required child box '{required}' is missing")

    codec, width, height = _parse_stsd(data, tables["stsd"])
    stsd_box = tables["stsd"]
    stsd = bytes(data[stsd_box.start : stsd_box.end])

    sizes, sizes_tabled = _parse_sizes(data, tables, stbl)
    n = int(sizes.shape[0]) if sizes_tabled else int(sizes[1])
    if not sizes_tabled and n > MAX_UNTABLED_SAMPLES:
        raise UnsupportedMp4Error(
            f"{tables['stsz'].path}: {n} samples of one size exceed the supported "
            f"{MAX_UNTABLED_SAMPLES}"
        )

    stts = _runs(data, tables["stts"], signed=False)
    _check_total(stts, n, tables["stts"])
    ctts_box = tables.get("ctts")
    ctts = _runs(data, ctts_box, signed=True) if ctts_box is not None else None
    if ctts is not None:
        _check_total(ctts, n, ctts_box)
    chunk_box = tables.get("stco") or tables.get("co64")
    if chunk_box is None:
        raise stbl.error("required child box 'stco' or 'co64' is missing")
    chunk_offsets = _parse_chunk_offsets(data, chunk_box)
    samples_per_chunk = _expand_stsc(data, tables["stsc"], chunk_offsets.shape[0], n)

    # Counts agree: expanding to n samples is now backed by real table bytes.
    if not sizes_tabled:
        sizes = np.full(n, sizes[0], dtype=np.int64)
    deltas = np.repeat(stts[:, 1], stts[:, 0])
    dts = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(deltas[:-1], out=dts[1:])
    cts = np.repeat(ctts[:, 1], ctts[:, 0]) if ctts is not None else np.zeros(n, np.int64)

    offsets = _sample_offsets(chunk_offsets, samples_per_chunk, sizes)

    keyframes = np.ones(n, dtype=bool)
    if "stss" in tables:
        keyframes = _parse_stss(data, tables["stss"], n)

    edit = _parse_edits(data, trak, timescale, movie_timescale)
    if edit is None:
        pts = dts + cts
        presentation_start = None  # no edit list: FFmpeg presents every sample
    else:
        media_start, empty_edit = edit
        pts = dts + cts - media_start + empty_edit
        presentation_start = empty_edit

    for arr in (dts, cts, pts, sizes, offsets, keyframes):
        arr.flags.writeable = False
    return TrackIndex(
        track_id=tid,
        timescale=timescale,
        duration=int(duration),
        width=width,
        height=height,
        codec=codec,
        stsd=stsd,
        dts=dts,
        cts_offset=cts,
        pts=pts,
        sizes=sizes,
        offsets=offsets,
        keyframes=keyframes,
        presentation_start=presentation_start,
    )


def _parse_stsd(data: bytes | memoryview, box: Box) -> tuple[str, int, int]:
    r = FieldReader(data, box)
    r.full_header()
    count = r.u32("entry_count")
    if count < 1:
        raise box.error("no sample description")
    entries = list(
        iter_boxes(
            data,
            r.pos,
            box.end,
            parent_path=box.path,
            depth=6,
            base_offset=box.base_offset,
            indexed=frozenset(),
        )
    )
    if len(entries) < 1:
        raise box.error("no sample description entry")
    entry = entries[0]
    if entry.size < _VISUAL_ENTRY_MIN_BYTES:
        raise entry.error(
            f"visual sample entry of {entry.size} bytes is shorter than {_VISUAL_ENTRY_MIN_BYTES}"
        )
    width = int.from_bytes(data[entry.start + 32 : entry.start + 34], "big")
    height = int.from_bytes(data[entry.start + 34 : entry.start + 36], "big")
    return entry.type, width, height


def _parse_sizes(
    data: bytes | memoryview, tables: dict[str, Box], stbl: Box
) -> tuple[np.ndarray, bool]:
    """Sample sizes as int64; or (uniform size, count) with tabled=False."""
    if "stsz" in tables:
        box = tables["stsz"]
        r = FieldReader(data, box)
        r.full_header()
        uniform = r.u32("sample_size")
        count = r.u32("sample_count")
        if uniform:
            return np.array([uniform, count], dtype=np.int64), False
        return r.table(count, ">u4", 1, "entry_size").astype(np.int64), True
    if "stz2" in tables:
        box = tables["stz2"]
        r = FieldReader(data, box)
        r.full_header()
        r.skip(3, "reserved")
        field_size = r.u8("field_size")
        count = r.u32("sample_count")
        if field_size == 4:
            packed = r.table((count + 1) // 2, "u1", 1, "entry_size")
            nibbles = np.empty(packed.shape[0] * 2, dtype=np.int64)
            nibbles[0::2] = packed >> 4
            nibbles[1::2] = packed & 0x0F
            return nibbles[:count], True
        dtype = {8: "u1", 16: ">u2"}.get(field_size)
        if dtype is None:
            raise box.error(f"field_size {field_size} is not 4, 8 or 16")
        return r.table(count, dtype, 1, "entry_size").astype(np.int64), True
    raise stbl.error("required child box 'stsz' or 'stz2' is missing")


def _runs(data: bytes | memoryview, box: Box, *, signed: bool) -> np.ndarray:
    """(count, value) runs of stts/ctts as int64 [k, 2]; ctts values read as signed.

    ctts version 0 is unsigned in the standard, but FFmpeg reads both versions as signed
    32-bit, and we must report the times FFmpeg reports.
    """
    r = FieldReader(data, box)
    r.full_header()
    count = r.u32("entry_count")
    raw = r.table(count, ">u4", 2, "entries")
    out = raw.astype(np.int64)
    if signed:
        out[:, 1] = raw[:, 1].view(">i4")
    return out


def _check_total(runs: np.ndarray, n: int, box: Box) -> None:
    total = int(runs[:, 0].sum()) if runs.shape[0] else 0
    if total != n:
        raise box.error(f"entries cover {total} samples but the track has {n}")


def _parse_chunk_offsets(data: bytes | memoryview, box: Box) -> np.ndarray:
    r = FieldReader(data, box)
    r.full_header()
    count = r.u32("entry_count")
    dtype = ">u8" if box.type == "co64" else ">u4"
    offsets = r.table(count, dtype, 1, "chunk_offset")
    if box.type == "co64" and count and int(offsets.max()) >= 1 << 62:
        raise box.error("chunk offset of 2**62 or more")
    return offsets.astype(np.int64)


def _expand_stsc(data: bytes | memoryview, box: Box, num_chunks: int, n: int) -> np.ndarray:
    """Samples in each chunk (int64 [num_chunks]); checks they add up to ``n``."""
    r = FieldReader(data, box)
    r.full_header()
    count = r.u32("entry_count")
    entries = r.table(count, ">u4", 3, "entries").astype(np.int64)
    if count == 0:
        if n == 0 and num_chunks == 0:
            return np.zeros(0, dtype=np.int64)
        raise box.error(f"no entries, yet the track has {n} samples in {num_chunks} chunks")
    first = entries[:, 0]
    if first[0] != 1 or np.any(np.diff(first) <= 0) or first[-1] > num_chunks:
        raise box.error(
            f"first_chunk values must start at 1, increase and stay within the {num_chunks} chunks"
        )
    sdi = entries[:, 2]
    if np.any(sdi != 1):
        bad = int(sdi[sdi != 1][0])
        raise UnsupportedMp4Error(
            f"{box.path}: sample description index {bad} is used; only tracks whose "
            f"samples all use the first sample description are supported"
        )
    chunks_in_run = np.diff(np.append(first, num_chunks + 1))
    per_chunk = entries[:, 1]
    # Bound each run before multiplying so forged values cannot overflow int64: with
    # per_chunk <= n and sum(chunks_in_run) == num_chunks the dot product stays small.
    if int(per_chunk.max()) > n:
        raise box.error(f"samples_per_chunk {int(per_chunk.max())} exceeds the track's {n}")
    total = int(np.dot(chunks_in_run, per_chunk))
    if total != n:
        raise box.error(f"chunks hold {total} samples but the track has {n}")
    return np.repeat(per_chunk, chunks_in_run)


def _sample_offsets(
    chunk_offsets: np.ndarray, samples_per_chunk: np.ndarray, sizes: np.ndarray
) -> np.ndarray:
    """Absolute offset of every sample: its chunk's offset plus the sizes before it."""
    n = sizes.shape[0]
    chunk_of_sample = np.repeat(np.arange(chunk_offsets.shape[0]), samples_per_chunk)
    before = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=before[1:])
    first_sample = np.zeros(samples_per_chunk.shape[0], dtype=np.int64)
    if samples_per_chunk.shape[0] > 1:
        np.cumsum(samples_per_chunk[:-1], out=first_sample[1:])
    within = before[:n] - before[first_sample[chunk_of_sample]]
    return chunk_offsets[chunk_of_sample] + within


def _parse_stss(data: bytes | memoryview, box: Box, n: int) -> np.ndarray:
    r = FieldReader(data, box)
    r.full_header()
    count = r.u32("entry_count")
    numbers = r.table(count, ">u4", 1, "sample_number").astype(np.int64)
    if count and (int(numbers.min()) < 1 or int(numbers.max()) > n):
        raise box.error(f"sync sample numbers must lie in [1, {n}]")
    flags = np.zeros(n, dtype=bool)
    flags[numbers - 1] = True
    return flags


def _parse_edits(
    data: bytes | memoryview, trak: Box, timescale: int, movie_timescale: int
) -> tuple[int, int] | None:
    """(media start, empty edit) in media ticks from ``edts/elst``; None without one."""
    edts = find_child(data, trak, "edts", depth=2, required=False)
    if edts is None:
        return None
    elst = find_child(data, edts, "elst", depth=3, required=False)
    if elst is None:
        return None
    r = FieldReader(data, elst)
    version, _ = r.full_header()
    count = r.u32("entry_count")
    row = 20 if version == 1 else 12
    if count * row > r.remaining:
        raise elst.error(
            f"{count} entries need {count * row} bytes but only {r.remaining} remain", at=r.pos
        )
    if count > 2:
        raise UnsupportedMp4Error(
            f"{elst.path}: edit list of {count} entries is not supported; only an "
            "optional empty edit followed by one media edit"
        )
    entries = []
    for _ in range(count):
        if version == 1:
            seg, media = r.u64("segment_duration"), r.s64("media_time")
        else:
            seg, media = r.u32("segment_duration"), r.s32("media_time")
        rate_int = int.from_bytes(r.bytes(2, "media_rate_integer"), "big", signed=True)
        rate_frac = r.u16("media_rate_fraction")
        entries.append((seg, media, rate_int, rate_frac))
    if not entries:
        return None
    empty = 0
    if entries[0][1] == -1:
        empty = entries[0][0]
        entries = entries[1:]
    if len(entries) != 1 or entries[0][1] == -1:
        raise UnsupportedMp4Error(
            f"{elst.path}: edit list {_describe(entries)} is not supported; only an "
            "optional empty edit followed by one media edit"
        )
    _, media, rate_int, rate_frac = entries[0]
    if media < 0:
        raise elst.error(f"media_time {media} is negative")
    if (rate_int, rate_frac) != (1, 0):
        raise UnsupportedMp4Error(
            f"{elst.path}: edit at rate {rate_int}+{rate_frac}/65536 is not supported; only rate 1"
        )
    if empty:
        if movie_timescale == 0:
            raise elst.error("empty edit with a movie timescale of 0")
        # FFmpeg rescales with av_rescale: round half away from zero.
        empty = (empty * timescale + movie_timescale // 2) // movie_timescale
    # presentation times are int64 ticks: offsets this large are no encoder's, and would
    # wrap them
    for name, value in (("media_time", media), ("empty edit", empty)):
        if value > _MAX_EDIT_TICKS:
            raise elst.error(f"{name} of {value} ticks is beyond 2**62")
    return media, empty


def _describe(entries: list[tuple[int, int, int, int]]) -> str:
    return "[" + ", ".join(f"(duration {d}, media_time {m})" for d, m, _, _ in entries) + "]"

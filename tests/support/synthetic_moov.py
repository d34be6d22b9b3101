"""Synthetic ``moov`` boxes of any length, for benchmarks and tests (no video needed).

Test support, not product: it builds boxes with the mp4 layer's private writers.

The tables look like an encoder's: closed GOPs, B-frames reordered after their anchor,
``ctts`` offsets with an edit list that starts presentation at 0, I-frames larger than the
rest, and chunks of a chosen number of samples.
"""

from __future__ import annotations

import struct

import numpy as np

from episodestream.errors import ConfigError
from episodestream.mp4._clip import _full, _moov, _Tables
from episodestream.mp4._index import TrackIndex

__all__ = ["synthetic_moov"]

_U32_MAX = 0xFFFFFFFF


def _gop_decode_order(size: int, bframes: int) -> np.ndarray:
    """Display indices of one GOP in decode order: I, then each anchor before its B-frames."""
    order = [0]
    i = 1
    while i < size:
        group = list(range(i, min(i + bframes + 1, size)))
        order += [group[-1], *group[:-1]]
        i += bframes + 1
    return np.array(order, dtype=np.int64)


def _avc1_stsd(width: int, height: int) -> bytes:
    """An ``stsd`` with one ``avc1`` entry and a parameter-set-free ``avcC`` (index only)."""
    avcc = struct.pack(">I4sBBBBBB", 14, b"avcC", 1, 100, 0, 31, 0xFF, 0xE0) + b"\0"
    entry_body = (
        bytes(6)
        + struct.pack(">H", 1)
        + bytes(16)
        + struct.pack(">HHIIIH", width, height, 0x480000, 0x480000, 0, 1)
        + bytes(32)
        + struct.pack(">Hh", 0x18, -1)
        + avcc
    )
    entry = struct.pack(">I4s", 8 + len(entry_body), b"avc1") + entry_body
    node = _full(b"stsd", 0, 0, struct.pack(">I", 1), entry)
    out: list[bytes] = []
    node.write(out)
    return b"".join(out)


def synthetic_moov(
    num_samples: int,
    *,
    fps: int = 30,
    timescale: int = 15360,
    gop: int = 30,
    bframes: int = 2,
    samples_per_chunk: int = 1,
    width: int = 640,
    height: int = 360,
    first_offset: int = 48,
    seed: int = 0,
) -> tuple[bytes, TrackIndex]:
    """A ``moov`` of one H.264-like video track and the index ``parse_moov`` must return.

    Args:
        num_samples: frames in the track (108,000 is one hour at 30 fps).
        fps, timescale: frame rate and media timescale (``timescale`` divisible by ``fps``).
        gop: frames per closed GOP (a sync sample starts each).
        bframes: B-frames between anchors (0: no reordering, no ``ctts``).
        samples_per_chunk: samples per ``stsc`` chunk (the last chunk may hold fewer).
        first_offset: file offset of the first sample.
        seed: for the sample sizes.
    """
    if num_samples < 1 or timescale % fps:
        raise ConfigError(
            f"need num_samples >= 1 and a timescale divisible by fps, got num_samples="
            f"{num_samples}, timescale={timescale}, fps={fps}"
        )
    delta = timescale // fps
    full, rest = divmod(num_samples, gop)
    order = np.tile(_gop_decode_order(gop, bframes), full) + np.repeat(
        np.arange(full, dtype=np.int64) * gop, gop
    )
    if rest:
        order = np.concatenate((order, _gop_decode_order(rest, bframes) + full * gop))
    decode_index = np.arange(num_samples, dtype=np.int64)
    delay = int(max(0, (decode_index - order).max()))
    dts = decode_index * delta
    cts = (order + delay) * delta - dts
    pts = order * delta
    keyframes = order % gop == 0
    rng = np.random.default_rng(seed)
    sizes = np.where(
        keyframes, rng.integers(15_000, 25_000, num_samples), rng.integers(500, 4_000, num_samples)
    ).astype(np.int64)
    offsets = first_offset + np.concatenate(([0], np.cumsum(sizes)[:-1]))
    chunk_first = np.arange(0, num_samples, samples_per_chunk)
    per_chunk = np.diff(np.append(chunk_first, num_samples))
    chunk_offsets = offsets[chunk_first]
    stsd = _avc1_stsd(width, height)
    tables = _Tables(
        timescale=timescale,
        width=width,
        height=height,
        codec="avc1",
        stsd=stsd,
        durations=np.full(num_samples, delta, dtype=np.int64),
        cts=cts,
        sizes=sizes,
        keyframes=keyframes,
        media_time=delay * delta,
        edit_duration=num_samples * delta,
    )
    co64 = int(chunk_offsets.max()) > _U32_MAX
    node = _moov(tables, chunk_offsets, co64=co64, samples_per_chunk=per_chunk)
    out: list[bytes] = []
    node.write(out)
    expected = TrackIndex(
        track_id=1,
        timescale=timescale,
        duration=num_samples * delta,
        width=width,
        height=height,
        codec="avc1",
        stsd=stsd,
        dts=dts,
        cts_offset=cts,
        pts=pts,
        sizes=sizes,
        offsets=offsets,
        keyframes=keyframes,
        presentation_start=0,
    )
    return b"".join(out), expected

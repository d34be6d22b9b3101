"""Hostile input: mutated box sizes, counts and tables give only our two MP4 errors.

Every mutated input must either parse, or raise Mp4FormatError / UnsupportedMp4Error; a
parsed one must then plan and write clip headers raising nothing but library errors. Peak
traced memory stays a small multiple of the input: counts are checked against the bytes
that back them before anything is allocated. (Speed on hostile input is reported by the
benchmark, not asserted here.)
"""

from __future__ import annotations

import struct
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from episodestream import EpisodeStreamError, Mp4FormatError, UnsupportedMp4Error
from episodestream.mp4 import (
    clip_header,
    locate_moov,
    parse_moov,
    plan_span,
    walk_boxes,
)
from tests.support.synthetic_moov import synthetic_moov

BASES = ["h264", "hevc", "av1", "co64", "multi_track", "h264_empty_edit", "h264_negative_cts"]
TABLES = {"stts", "ctts", "stss", "stsz", "stz2", "stsc", "stco", "co64", "elst", "stsd"}
INTERESTING = [0, 1, 2, 3, 7, 8, 15, 16, 255, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFE, 0xFFFF_FFFF]
MEMORY_SLACK_BYTES = 32 << 20
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def base_moovs(mp4_cases) -> list[bytes]:
    out = []
    for name in BASES:
        data = mp4_cases[name].read()
        out.append(locate_moov(lambda o, n, d=data: d[o : o + n], len(data)).moov)
    out.append(synthetic_moov(300, samples_per_chunk=7, bframes=3)[0])
    return out


def exercise(moov: bytes) -> None:
    """Parse, plan and write headers; only library errors may escape."""
    tracemalloc.start()
    try:
        try:
            index = parse_moov(moov)
        except (Mp4FormatError, UnsupportedMp4Error):
            return
        pts_s = np.sort(index.pts_seconds())
        if pts_s.shape[0] == 0:
            return
        for a, b in ((0, 0), (0, -1), (len(pts_s) // 2, -1), (-1, -1)):
            try:
                plan = plan_span(index, float(pts_s[a]), float(pts_s[b]))
                clip_header(index, plan)
            except EpisodeStreamError:
                pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < MEMORY_SLACK_BYTES + 40 * len(moov), f"peak {peak} bytes"


def _fields(moov: bytes) -> list[tuple[int, int]]:
    """(offset, size) of every box size field and every table count field."""
    out = []
    for b in walk_boxes(moov):
        out.append((b.start, 4))
        if b.type in TABLES:
            out.append((b.payload_start + 4, 4))  # entry_count / sample_size
            out.append((b.payload_start + 8, 4))  # stsz sample_count, first entry
            out.append((b.payload_start + 12, 4))
        if b.type in {"mdhd", "mvhd", "tkhd", "hdlr"}:
            out.append((b.payload_start + 12, 4))
    return out


def _put(moov: bytes, offset: int, value: int, width: int = 4) -> bytes:
    if offset + width > len(moov):
        return moov
    return moov[:offset] + value.to_bytes(width, "big") + moov[offset + width :]


@SETTINGS
@given(data=st.data())
def test_mutated_sizes_and_counts(base_moovs, data):
    moov = data.draw(st.sampled_from(base_moovs))
    fields = _fields(moov)
    for _ in range(data.draw(st.integers(1, 3))):
        offset, width = data.draw(st.sampled_from(fields))
        original = int.from_bytes(moov[offset : offset + width], "big")
        value = data.draw(
            st.one_of(
                st.sampled_from(INTERESTING),
                st.integers(0, 0xFFFF_FFFF),
                st.integers(-64, 64).map(lambda d, o=original: (o + d) % (1 << 32)),
            )
        )
        moov = _put(moov, offset, value, width)
    exercise(moov)


@SETTINGS
@given(data=st.data())
def test_random_overwrites_and_truncation(base_moovs, data):
    moov = bytearray(data.draw(st.sampled_from(base_moovs)))
    for _ in range(data.draw(st.integers(1, 6))):
        offset = data.draw(st.integers(0, len(moov) - 1))
        kind = data.draw(st.sampled_from(["byte", "word", "interesting"]))
        if kind == "byte":
            moov[offset] = data.draw(st.integers(0, 255))
        else:
            value = (
                data.draw(st.sampled_from(INTERESTING))
                if kind == "interesting"
                else data.draw(st.integers(0, 0xFFFF_FFFF))
            )
            moov[offset : offset + 4] = value.to_bytes(4, "big")[: len(moov) - offset]
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(moov))))
    exercise(bytes(moov if cut is None else moov[:cut]))


@SETTINGS
@given(data=st.data())
def test_sample_tables_with_random_contents(base_moovs, data):
    """Whole tables rewritten with arbitrary entries (counts kept consistent with bytes)."""
    moov = data.draw(st.sampled_from(base_moovs))
    tables = [b for b in walk_boxes(moov) if b.type in TABLES - {"stsd"}]
    box = data.draw(st.sampled_from(tables))
    entries = (box.end - box.payload_start - 8) // 4
    words = data.draw(
        st.lists(
            st.one_of(st.sampled_from(INTERESTING), st.integers(0, 0xFFFF_FFFF)),
            min_size=entries,
            max_size=entries,
        )
    )
    body = struct.pack(f">{entries}I", *words)
    start = box.payload_start + 8
    exercise(moov[:start] + body + moov[start + len(body) :])


@SETTINGS
@given(data=st.data())
def test_locate_moov_on_mutated_files(mp4_cases, data):
    file = mp4_cases[data.draw(st.sampled_from(["h264", "av1"]))].read()
    buf = bytearray(file)
    tops = [b.start for b in walk_boxes(file, containers=frozenset())]
    for _ in range(data.draw(st.integers(1, 3))):
        offset = data.draw(st.sampled_from(tops))
        value = data.draw(st.one_of(st.sampled_from(INTERESTING), st.integers(0, 1 << 32)))
        buf[offset : offset + 4] = (value & 0xFFFF_FFFF).to_bytes(4, "big")
    data_bytes = bytes(buf)
    cut = data.draw(st.one_of(st.none(), st.integers(0, len(data_bytes))))
    if cut is not None:
        data_bytes = data_bytes[:cut]
    calls = []

    def read(offset: int, length: int) -> bytes:
        calls.append(length)
        return data_bytes[offset : offset + length]

    try:
        loc = locate_moov(read, len(data_bytes), first_probe=512)
    except (Mp4FormatError, UnsupportedMp4Error):
        return
    assert sum(calls) <= len(data_bytes) and len(calls) <= 4
    exercise(loc.moov)

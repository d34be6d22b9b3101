"""The mp4 layer's caps and its framing check (issue 26): a moov over its cap refused from its
header, mdhd durations and timescales past what is stored or read alike, and the bytes of a
span checked against the samples its index places there."""

from __future__ import annotations

import struct

import pytest

from episodestream import Mp4FormatError, UnsupportedMp4Error
from episodestream.mp4 import (
    check_sample_framing,
    locate_moov,
    parse_moov,
    plan_span,
    sample_framing,
    walk_boxes,
)
from tests.plugins.media import CASE_NAMES, rewrite_boxes


def _moov(data: bytes) -> bytes:
    moov = next(b for b in walk_boxes(data) if b.type == "moov")
    return data[moov.start : moov.end]


def test_a_moov_over_the_cap_is_refused_from_its_header(mp4_cases):
    data = mp4_cases["h264"].read()  # moov after mdat: found by a later probe
    moov = _moov(data)
    reads: list[tuple[int, int]] = []

    def read(offset: int, length: int) -> bytes:
        reads.append((offset, length))
        return data[offset : offset + length]

    with pytest.raises(UnsupportedMp4Error, match=f"moov box of {len(moov)} bytes.*max_moov_bytes"):
        locate_moov(read, len(data), first_probe=64, tail_probe=64, max_moov_bytes=len(moov) - 1)
    assert sum(length for _, length in reads) <= 128  # the header only, never the box
    found = locate_moov(read, len(data), max_moov_bytes=len(moov))
    assert found.moov == moov


def _mdhd(moov: bytes, *, version: int, duration: int, timescale: int | None = None) -> bytes:
    def edit(path: str, box: bytes) -> bytes | None:
        if not path.endswith("/mdhd"):
            return None
        old_scale = struct.unpack_from(">I", box, 20 if box[8] == 0 else 28)[0]
        scale = old_scale if timescale is None else timescale
        language = box[-4:]
        if version == 1:
            body = bytes([1, 0, 0, 0]) + bytes(16) + struct.pack(">IQ", scale, duration)
        else:
            body = bytes(4) + bytes(8) + struct.pack(">II", scale, duration)
        body += language
        return struct.pack(">I4s", 8 + len(body), b"mdhd") + body

    return rewrite_boxes(moov, edit)


@pytest.mark.parametrize(("version", "duration"), [(1, 2**64 - 1), (0, 2**32 - 1)])
def test_an_all_ones_duration_is_unknown(mp4_cases, version, duration):
    """ISO 14496-12 8.4.2.3 (and FFmpeg): all ones means the duration is not known. The
    last sample then lasts as long as the one before it."""
    moov = _moov(mp4_cases["av1"].read())
    known = parse_moov(moov)
    track = parse_moov(_mdhd(moov, version=version, duration=duration))
    assert track.duration == 0
    assert track.sample_durations()[-1] == int(known.dts[-1] - known.dts[-2])


def test_a_duration_past_63_bits_is_malformed(mp4_cases):
    moov = _moov(mp4_cases["av1"].read())
    with pytest.raises(Mp4FormatError, match=r"duration .* does not fit 63 bits"):
        parse_moov(_mdhd(moov, version=1, duration=2**63))


def test_a_timescale_ffmpeg_reads_as_negative_is_refused(mp4_cases):
    moov = _moov(mp4_cases["av1"].read())
    with pytest.raises(UnsupportedMp4Error, match="timescale 2147483648 is above"):
        parse_moov(_mdhd(moov, version=0, duration=1000, timescale=2**31))


@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_real_span_is_framed_and_a_shifted_one_is_not(mp4_cases, name):
    """Every test file's whole span passes the framing check; the same span read a few
    bytes off (an index whose offsets lie) fails it wherever the codec frames samples."""
    case = mp4_cases[name]
    data = case.read()
    track = parse_moov(_moov(data), track_id=case.track_id)
    plan = plan_span(track, -1.0, 1e9)
    payload = data[plan.byte_start : plan.byte_end]
    check_sample_framing(track, plan, payload)
    if sample_framing(track) is None:
        return
    for shift in (1, 2, 3, 4, 5, 7, 16):
        moved = data[plan.byte_start + shift : plan.byte_end + shift].ljust(len(payload), b"\0")
        with pytest.raises(Mp4FormatError, match="is not a run of"):
            check_sample_framing(track, plan, moved, where="x: ")


def test_framing_names_the_codecs_it_checks(mp4_cases):
    assert sample_framing(parse_moov(_moov(mp4_cases["av1"].read()))) == "obu"
    assert sample_framing(parse_moov(_moov(mp4_cases["h264"].read()))) == 4
    assert sample_framing(parse_moov(_moov(mp4_cases["hevc"].read()))) == 4

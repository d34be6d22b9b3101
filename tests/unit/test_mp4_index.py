"""parse_moov: the per-sample tables match what FFmpeg demuxes, for every table variant."""

from __future__ import annotations

import struct

import av
import numpy as np
import pytest

from episodestream import Mp4FormatError, UnsupportedMp4Error
from episodestream.mp4 import (
    TrackIndex,
    locate_moov,
    parse_moov,
)
from tests.plugins.media import CASE_NAMES, MediaCase, encode_mp4, rewrite_boxes, stsz_as_stz2
from tests.support.synthetic_moov import synthetic_moov


def read_moov(case: MediaCase) -> tuple[bytes, int]:
    data = case.read()
    loc = locate_moov(lambda o, n: data[o : o + n], len(data))
    return loc.moov, loc.offset


def demuxed(case: MediaCase) -> dict[str, np.ndarray]:
    """What FFmpeg's demuxer says about each packet of the indexed track."""
    with av.open(str(case.path)) as container:
        if case.stream_index is None:
            stream = container.streams.video[0]
        else:
            stream = container.streams[case.stream_index]
        rows = [
            (p.pts, p.dts, p.size, p.pos, p.is_keyframe)
            for p in container.demux(stream)
            if p.size > 0
        ]
    cols = np.array(rows, dtype=np.int64).T
    return dict(zip(["pts", "dts", "size", "pos", "key"], cols, strict=True))


def assert_same_index(a: TrackIndex, b: TrackIndex) -> None:
    for name in ("track_id", "timescale", "duration", "width", "height", "codec", "stsd"):
        assert getattr(a, name) == getattr(b, name), name
    for name in ("dts", "cts_offset", "pts", "sizes", "offsets", "keyframes"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.presentation_start == b.presentation_start


@pytest.mark.parametrize("name", CASE_NAMES)
def test_index_matches_ffmpeg_demuxer(name, mp4_cases):
    case = mp4_cases[name]
    moov, offset = read_moov(case)
    index = parse_moov(moov, track_id=case.track_id, file_offset=offset)
    packets = demuxed(case)
    assert index.num_samples == packets["pts"].shape[0]
    assert index.codec == case.codec
    assert (index.width, index.height) == (96, 64)
    np.testing.assert_array_equal(index.pts, packets["pts"])
    np.testing.assert_array_equal(index.sizes, packets["size"])
    np.testing.assert_array_equal(index.offsets, packets["pos"])
    np.testing.assert_array_equal(index.keyframes, packets["key"].astype(bool))
    # FFmpeg shifts dts by the edit list start; the steps are the stts deltas
    np.testing.assert_array_equal(np.diff(index.dts), np.diff(packets["dts"]))
    np.testing.assert_array_equal(
        index.pts - index.dts - index.cts_offset, index.pts[0] - index.dts[0] - index.cts_offset[0]
    )
    assert index.stsd[4:8] == b"stsd" and len(index.stsd) == struct.unpack(">I", index.stsd[:4])[0]
    for arr in (index.dts, index.pts, index.sizes, index.offsets, index.keyframes):
        assert not arr.flags.writeable


def test_edit_lists_shift_presentation_as_ffmpeg_does(mp4_cases):
    plain = parse_moov(read_moov(mp4_cases["h264"])[0])
    # 10 frames of empty edit in a 1/1000 movie timescale: 333 ms -> 5114.88 -> 5115 ticks
    empty = parse_moov(read_moov(mp4_cases["h264_empty_edit"])[0])
    assert empty.presentation_start == 5115 and int(empty.pts.min()) == 5115
    assert plain.presentation_start == 0 and int(plain.pts.min()) == 0
    # media start mid-GOP: the first 8 frames get negative times and are never shown
    mid = parse_moov(read_moov(mp4_cases["h264_mid_gop_edit"])[0])
    assert mid.presentation_start == 0
    assert int((mid.pts < 0).sum()) == 8
    # signed ctts (version 1)
    neg = parse_moov(read_moov(mp4_cases["h264_negative_cts"])[0])
    assert int(neg.cts_offset.min()) < 0 and int(neg.pts.min()) == 0


def test_co64_offsets_equal_the_stco_file_shifted_by_the_moov_growth(mp4_cases):
    stco = parse_moov(read_moov(mp4_cases["h264_faststart"])[0])
    co64_moov, _ = read_moov(mp4_cases["co64"])
    co64 = parse_moov(co64_moov)
    assert b"co64" in co64_moov and b"stco" not in co64_moov
    growth = len(co64_moov) - len(read_moov(mp4_cases["h264_faststart"])[0])
    assert growth > 0
    np.testing.assert_array_equal(co64.offsets, stco.offsets + growth)


def test_track_selection(mp4_cases):
    moov, _ = read_moov(mp4_cases["multi_track"])
    first = parse_moov(moov)
    assert (first.track_id, first.codec) == (2, "avc1")
    assert parse_moov(moov, track_id=3).codec == "av01"
    with pytest.raises(UnsupportedMp4Error, match=r"track 1 is not a video track.*'soun'"):
        parse_moov(moov, track_id=1)
    with pytest.raises(UnsupportedMp4Error, match="track 9 is not a video track"):
        parse_moov(moov, track_id=9)

    def drop_video(path: str, box: bytes) -> bytes | None:
        if path.endswith("/hdlr") and box[16:20] == b"vide":
            return box[:16] + b"soun" + box[20:]
        return None

    with pytest.raises(UnsupportedMp4Error, match="no video track"):
        parse_moov(rewrite_boxes(moov, drop_video))


@pytest.mark.parametrize("field_size", [4, 8, 16])
def test_stz2_tables_parse_like_stsz(field_size, mp4_cases):
    moov, _ = read_moov(mp4_cases["h264"])

    def small_sizes(path: str, box: bytes) -> bytes | None:
        if not path.endswith("/stsz"):
            return None
        n = struct.unpack_from(">I", box, 16)[0]
        sizes = (np.arange(n) * 7 + 3) % (1 << min(field_size, 8))
        return box[:20] + sizes.astype(">u4").tobytes()

    with_stsz = rewrite_boxes(moov, small_sizes)
    with_stz2 = stsz_as_stz2(with_stsz, field_size)
    assert b"stz2" in with_stz2 and b"stsz" not in with_stz2
    expected = parse_moov(with_stsz)
    assert_same_index(parse_moov(with_stz2), expected)
    assert expected.sizes.max() > 0


def test_uniform_sample_size(mp4_cases):
    moov, _ = read_moov(mp4_cases["h264"])

    def uniform(path: str, box: bytes) -> bytes | None:
        if not path.endswith("/stsz"):
            return None
        n = struct.unpack_from(">I", box, 16)[0]
        body = box[8:12] + struct.pack(">II", 100, n)
        return struct.pack(">I4s", 8 + len(body), b"stsz") + body

    index = parse_moov(rewrite_boxes(moov, uniform))
    assert np.all(index.sizes == 100)
    # one chunk holds every sample: offsets step by the size
    np.testing.assert_array_equal(np.diff(index.offsets), 100)


@pytest.mark.parametrize(
    ("num_samples", "kwargs"),
    [
        (1, {}),
        (31, {"bframes": 0}),
        (1000, {"samples_per_chunk": 7, "bframes": 3}),
        (5000, {"gop": 250, "samples_per_chunk": 1000}),
        (1_000_000, {"samples_per_chunk": 1}),
    ],
)
def test_synthetic_moovs_round_trip(num_samples, kwargs):
    moov, expected = synthetic_moov(num_samples, **kwargs)
    assert_same_index(parse_moov(moov), expected)


def test_synthetic_moov_with_offsets_past_4_gib_uses_co64():
    moov, expected = synthetic_moov(100, first_offset=(1 << 32) - 50_000)
    assert b"co64" in moov
    assert int(expected.offsets.max()) > 1 << 32
    assert_same_index(parse_moov(moov), expected)


def _replace_box(moov: bytes, name: str, body: bytes) -> bytes:
    def edit(path: str, box: bytes) -> bytes | None:
        if path.endswith("/" + name):
            return struct.pack(">I4s", 8 + len(body), name.encode()) + body
        return None

    return rewrite_boxes(moov, edit)


def _elst(*entries: tuple[int, int, int]) -> bytes:
    rows = b"".join(struct.pack(">IihH", d, m, r, 0) for d, m, r in entries)
    return struct.pack(">II", 0, len(entries)) + rows


@pytest.mark.parametrize(
    ("entries", "error", "message"),
    [
        ([(100, 0, 1), (100, 512, 1)], UnsupportedMp4Error, "edit list"),
        ([(100, -1, 1), (100, -1, 1)], UnsupportedMp4Error, "edit list"),
        ([(100, 0, 2)], UnsupportedMp4Error, "rate 2"),
        ([(100, -5, 1)], Mp4FormatError, "media_time -5"),
        ([(1, 0, 1)] * 3, UnsupportedMp4Error, "3 entries"),
    ],
)
def test_unsupported_and_invalid_edit_lists(entries, error, message, mp4_cases):
    moov, _ = read_moov(mp4_cases["h264"])
    with pytest.raises(error, match=message):
        parse_moov(_replace_box(moov, "elst", _elst(*entries)))


def test_an_empty_edit_list_means_no_edit(mp4_cases):
    moov, _ = read_moov(mp4_cases["h264"])
    index = parse_moov(_replace_box(moov, "elst", _elst()))
    assert index.presentation_start is None
    np.testing.assert_array_equal(index.pts, index.dts + index.cts_offset)


def test_fragmented_moov_is_unsupported(tmp_path):
    path = encode_mp4(
        tmp_path / "frag.mp4",
        "libx264",
        frames=10,
        mux_options={"movflags": "frag_keyframe+empty_moov"},
    )
    data = path.read_bytes()
    loc = locate_moov(lambda o, n: data[o : o + n], len(data))
    with pytest.raises(UnsupportedMp4Error, match="fragmented"):
        parse_moov(loc.moov)


def test_several_sample_descriptions_in_use_are_unsupported(mp4_cases):
    moov, _ = read_moov(mp4_cases["h264"])

    def second_description(path: str, box: bytes) -> bytes | None:
        if path.endswith("/stsc"):
            return box[:-4] + struct.pack(">I", 2)
        return None

    with pytest.raises(UnsupportedMp4Error, match="sample description index 2"):
        parse_moov(rewrite_boxes(moov, second_description))


@pytest.mark.parametrize(
    ("box_name", "mutate", "message"),
    [
        ("stts", lambda b: b[:16] + struct.pack(">I", 99) + b[20:], "cover 99 samples"),
        ("ctts", lambda b: b[:16] + struct.pack(">I", 1) + b[20:], "samples but the track has"),
        ("stss", lambda b: b[:16] + struct.pack(">I", 0) + b[20:], r"in \[1, 100\]"),
        ("stsc", lambda b: b[:16] + struct.pack(">I", 2) + b[20:], "first_chunk"),
        ("stsc", lambda b: b[:20] + struct.pack(">I", 1000) + b[24:], "exceeds"),
        ("stsz", lambda b: b[:16] + struct.pack(">I", 10**6) + b[20:], "entries need"),
        ("mdhd", lambda b: b[:20] + bytes(4) + b[24:], "timescale is 0"),
    ],
)
def test_inconsistent_tables_name_the_box(box_name, mutate, message, mp4_cases):
    moov, offset = read_moov(mp4_cases["h264"])

    def edit(path: str, box: bytes) -> bytes | None:
        return mutate(box) if path.endswith("/" + box_name) else None

    with pytest.raises(Mp4FormatError, match=message) as err:
        parse_moov(rewrite_boxes(moov, edit), file_offset=offset)
    assert "moov/trak[0]/mdia/" in str(err.value) and "offset" in str(err.value)


def test_only_a_moov_box_is_accepted(mp4_cases):
    moov, _ = read_moov(mp4_cases["h264"])
    with pytest.raises(Mp4FormatError, match="expected exactly one 'moov'"):
        parse_moov(struct.pack(">I4s", 8, b"free") + moov)
    with pytest.raises(Mp4FormatError):
        parse_moov(moov[:-1])

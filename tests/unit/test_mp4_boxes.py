"""The strict box reader: header forms, bounds, depth, and errors that name path and offset."""

from __future__ import annotations

import struct

import pytest

from episodestream import Mp4FormatError
from episodestream.mp4 import MAX_BOX_DEPTH, FieldReader, iter_boxes, walk_boxes


def box(kind: bytes, payload: bytes = b"") -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def test_32_bit_64_bit_to_end_and_uuid_headers():
    large = struct.pack(">I4sQ", 1, b"free", 16 + 3) + b"abc"
    uuid = struct.pack(">I4s", 8 + 16 + 2, b"uuid") + bytes(16) + b"xy"
    to_end = struct.pack(">I4s", 0, b"mdat") + b"payload"
    data = box(b"ftyp", b"isom") + large + uuid + to_end
    boxes = list(iter_boxes(data))
    assert [b.type for b in boxes] == ["ftyp", "free", "uuid", "mdat"]
    assert [b.header_size for b in boxes] == [8, 16, 24, 8]
    assert boxes[1].size == 19 and data[boxes[1].payload_start : boxes[1].end] == b"abc"
    assert data[boxes[2].payload_start : boxes[2].end] == b"xy"
    assert boxes[3].end == len(data) and data[boxes[3].payload_start :] == b"payload"


def test_offsets_in_messages_are_file_offsets():
    data = box(b"free") + struct.pack(">I4s", 50, b"moov") + bytes(4)
    with pytest.raises(Mp4FormatError, match=r"moov: box size 50 runs past .* offset 1008"):
        list(iter_boxes(data, base_offset=1000))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (struct.pack(">I4s", 4, b"free"), "smaller than its header"),
        (struct.pack(">I4s", 1, b"free") + bytes(4), "64-bit size field truncated"),
        (struct.pack(">I4sQ", 1, b"free", 12), "smaller than its header"),
        (struct.pack(">I4s", 9, b"free"), "runs past the end"),
        (struct.pack(">I4s", 20, b"uuid") + bytes(12), "smaller than its header"),
        (box(b"free") + b"\x01\x02\x03", "trailing bytes do not form a box header"),
    ],
)
def test_malformed_headers_raise(data, message):
    with pytest.raises(Mp4FormatError, match=message):
        list(iter_boxes(data))


def test_zero_padding_after_the_last_box_is_accepted():
    assert [b.type for b in iter_boxes(box(b"free") + bytes(4))] == ["free"]


def test_paths_number_tracks_and_nest():
    trak = box(b"trak", box(b"tkhd", bytes(4)))
    data = box(b"moov", box(b"mvhd") + trak + trak)
    paths = [b.path for b in walk_boxes(data)]
    assert paths == [
        "moov",
        "moov/mvhd",
        "moov/trak[0]",
        "moov/trak[0]/tkhd",
        "moov/trak[1]",
        "moov/trak[1]/tkhd",
    ]


def test_nesting_deeper_than_the_limit_raises():
    data = box(b"free")
    for _ in range(MAX_BOX_DEPTH + 2):
        data = box(b"moov", data)
    with pytest.raises(Mp4FormatError, match="nested deeper"):
        list(walk_boxes(data))
    shallow = box(b"free")
    for _ in range(MAX_BOX_DEPTH - 1):
        shallow = box(b"moov", shallow)
    assert len(list(walk_boxes(shallow))) == MAX_BOX_DEPTH


def test_field_reader_checks_every_read_against_the_box():
    data = box(b"stsz", struct.pack(">BBBBII", 0, 0, 0, 0, 0, 1_000_000) + bytes(8))
    (stsz,) = iter_boxes(data)
    r = FieldReader(data, stsz)
    assert r.full_header() == (0, 0)
    assert (r.u32(), r.u32()) == (0, 1_000_000)
    with pytest.raises(Mp4FormatError, match=r"stsz .*1000000 entries need 4000000 bytes"):
        r.table(1_000_000, ">u4", 1, "entry_size")
    assert r.table(2, ">u4", 1, "entry_size").tolist() == [0, 0]
    with pytest.raises(Mp4FormatError, match="needs 1 bytes but only 0 remain"):
        r.u8()

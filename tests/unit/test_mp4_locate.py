"""locate_moov: few, small reads for faststart and tail layouts; clear errors otherwise."""

from __future__ import annotations

import struct

import pytest

from episodestream import Mp4FormatError, UnsupportedMp4Error
from episodestream.mp4 import locate_moov, walk_boxes
from tests.plugins.media import encode_mp4


class Recorder:
    """A read_range over bytes that records every call."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.calls: list[tuple[int, int]] = []

    def __call__(self, offset: int, length: int) -> bytes:
        self.calls.append((offset, length))
        return self.data[offset : offset + length]


def box(kind: bytes, payload: bytes = b"") -> bytes:
    return struct.pack(">I4s", 8 + len(payload), kind) + payload


def top_level(data: bytes) -> dict[str, tuple[int, int]]:
    return {b.type: (b.start, b.end) for b in walk_boxes(data, containers=frozenset())}


@pytest.mark.parametrize("name", ["av1", "h264_faststart", "co64"])
def test_faststart_takes_one_probe(name, mp4_cases):
    data = mp4_cases[name].read()
    start, end = top_level(data)["moov"]
    reader = Recorder(data)
    loc = locate_moov(reader, len(data))
    assert loc.faststart and loc.offset == start and loc.moov == data[start:end]
    assert loc.probes == 1 == len(reader.calls)
    assert loc.bytes_read == min(len(data), 65536)


@pytest.mark.parametrize("name", ["h264", "hevc", "multi_track"])
def test_tail_moov_takes_two_probes(name, mp4_cases):
    data = mp4_cases[name].read()
    start, end = top_level(data)["moov"]
    reader = Recorder(data)
    loc = locate_moov(reader, len(data), first_probe=1024)
    assert not loc.faststart and loc.offset == start and loc.moov == data[start:end]
    assert loc.probes == 2
    assert reader.calls == [(0, 1024), (start, end - start)]  # the tail read ends at EOF
    assert loc.bytes_read == 1024 + end - start


def test_a_moov_larger_than_the_probe_is_completed_by_one_more_read(mp4_cases):
    data = mp4_cases["h264"].read()
    start, end = top_level(data)["moov"]
    reader = Recorder(data)
    loc = locate_moov(reader, len(data), first_probe=256, tail_probe=256)
    assert loc.moov == data[start:end]
    assert reader.calls == [(0, 256), (start, 256), (start + 256, end - start - 256)]
    assert loc.bytes_read == 256 + end - start


def test_tiny_first_probe_still_finds_faststart_moov(mp4_cases):
    data = mp4_cases["av1"].read()
    start, end = top_level(data)["moov"]
    loc = locate_moov(Recorder(data), len(data), first_probe=1)  # raised to 16
    assert loc.moov == data[start:end] and loc.probes >= 2


def test_64_bit_mdat_and_to_end_moov():
    moov = box(b"moov", box(b"free"))
    mdat = struct.pack(">I4sQ", 1, b"mdat", 16 + 1000) + bytes(1000)
    data = box(b"ftyp", b"isom") + mdat + struct.pack(">I4s", 0, b"moov") + moov[8:]
    loc = locate_moov(Recorder(data), len(data), first_probe=64)
    assert loc.offset == 12 + 1016 and not loc.faststart
    assert loc.moov == data[loc.offset :]


def test_fragmented_file_without_moov_first_is_unsupported():
    data = box(b"ftyp", b"isom") + box(b"moof", bytes(16)) + box(b"mdat", bytes(32))
    with pytest.raises(UnsupportedMp4Error, match="fragmented"):
        locate_moov(Recorder(data), len(data))


def test_fragmented_file_moov_is_found_for_parse_to_reject(tmp_path):
    path = encode_mp4(
        tmp_path / "frag.mp4", "libx264", frames=5, mux_options={"movflags": "frag_keyframe"}
    )
    data = path.read_bytes()
    loc = locate_moov(Recorder(data), len(data))
    assert b"mvex" in loc.moov


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (box(b"ftyp", b"isom") + box(b"mdat", bytes(100)), "no 'moov' box"),
        (box(b"ftyp", b"isom") + struct.pack(">I4s", 500, b"mdat") + bytes(10), "runs past"),
        (box(b"ftyp", b"isom") + struct.pack(">I4s", 3, b"mdat") + bytes(10), "smaller"),
        (bytes(4), "too small"),
    ],
)
def test_files_without_a_usable_moov_raise(data, message):
    with pytest.raises(Mp4FormatError, match=message):
        locate_moov(Recorder(data), len(data))


def test_short_reads_raise():
    data = box(b"ftyp", b"isom") + box(b"mdat", bytes(100)) + box(b"moov", bytes(8))

    def short(offset: int, length: int) -> bytes:
        return data[offset : offset + length][:-1]

    with pytest.raises(Mp4FormatError, match="short read"):
        locate_moov(short, len(data))


def test_many_tiny_boxes_are_walked_in_bounded_reads():
    data = box(b"ftyp", b"isom") + box(b"free") * 3000 + box(b"moov", bytes(8))
    reader = Recorder(data)
    loc = locate_moov(reader, len(data), first_probe=4096)
    assert loc.moov == box(b"moov", bytes(8))
    assert loc.probes == len(reader.calls) <= 8

"""Find the ``moov`` box of a file through a caller-supplied range reader (no I/O here)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from episodestream.errors import Mp4FormatError, UnsupportedMp4Error

__all__ = [
    "DEFAULT_FIRST_PROBE_BYTES",
    "DEFAULT_TAIL_PROBE_BYTES",
    "MAX_TOP_LEVEL_BOXES",
    "MoovLocation",
    "locate_moov",
]

#: Size of the first read at offset 0: holds ftyp + moov of most faststart files.
DEFAULT_FIRST_PROBE_BYTES = 65536
#: Largest later read: a moov after the mdat usually runs to the end of the file, so the
#: read at the next box header takes up to this much and catches the whole moov at once.
DEFAULT_TAIL_PROBE_BYTES = 4 << 20
#: Top-level boxes walked before giving up (a real file has a handful).
MAX_TOP_LEVEL_BOXES = 4096
_MIN_PROBE_BYTES = 16  # one 64-bit box header


@dataclass(frozen=True, slots=True)
class MoovLocation:
    """The ``moov`` box of a file and what it took to find it."""

    moov: bytes  # the whole box, header included
    offset: int  # file offset of the box
    probes: int  # read_range calls made
    bytes_read: int  # bytes those calls returned
    faststart: bool  # moov precedes the first mdat


def locate_moov(
    read_range: Callable[[int, int], bytes],
    file_size: int,
    *,
    first_probe: int = DEFAULT_FIRST_PROBE_BYTES,
    tail_probe: int = DEFAULT_TAIL_PROBE_BYTES,
    max_moov_bytes: int | None = None,
) -> MoovLocation:
    """Walk the top-level boxes with as few reads as possible and return the ``moov``.

    Reads ``first_probe`` bytes at offset 0; box headers found there tell where the next
    box starts, so a ``moov`` after a large ``mdat`` costs one read at its offset (up to
    ``tail_probe`` bytes, to the end of the file at most) and one more only for the rest of
    a ``moov`` larger than that.

    Args:
        read_range: ``read_range(offset, length)`` returns exactly those file bytes.
        file_size: size of the file in bytes.
        first_probe: bytes of the first read (at least 16).
        tail_probe: most bytes of each later read at a box header (at least first_probe).
        max_moov_bytes: the largest ``moov`` accepted; a bigger one is refused from its
            header, before its bytes are read (None: up to the file's size).

    Raises:
        Mp4FormatError: no ``moov``, a box header that runs past the file, or a short read.
        UnsupportedMp4Error: a fragmented file (``moof`` before any ``moov``), or a
            ``moov`` larger than ``max_moov_bytes`` (the cap is named).
    """
    if file_size < 8:
        raise Mp4FormatError(f"file of {file_size} bytes is too small to hold an MP4 box")
    probe = max(int(first_probe), _MIN_PROBE_BYTES)
    later_probe = max(int(tail_probe), probe)
    probes = 0
    bytes_read = 0
    buf = b""
    buf_start = 0  # file offset of buf[0]

    def read(offset: int, length: int) -> bytes:
        nonlocal probes, bytes_read
        length = min(length, file_size - offset)
        data = read_range(offset, length)
        probes += 1
        bytes_read += len(data)
        if len(data) != length:
            raise Mp4FormatError(
                f"short read: asked for bytes [{offset}, {offset + length}) of a "
                f"{file_size}-byte file, got {len(data)}"
            )
        return bytes(data)

    def ensure(offset: int, length: int, grow_to: int) -> bytes:
        """buf covering [offset, offset + length), reading ``grow_to`` bytes if needed."""
        nonlocal buf, buf_start
        if not (buf_start <= offset and offset + length <= buf_start + len(buf)):
            buf = read(offset, max(length, grow_to))
            buf_start = offset
        return buf

    pos = 0
    seen_mdat = False
    for _ in range(MAX_TOP_LEVEL_BOXES):
        if pos >= file_size:
            break
        if file_size - pos < 8:
            break  # trailing padding after the last box
        head = ensure(pos, min(16, file_size - pos), probe if probes == 0 else later_probe)
        rel = pos - buf_start
        size, raw_type = struct.unpack_from(">I4s", head, rel)
        box_type = raw_type.decode("latin-1")
        header = 8
        if size == 1:
            if file_size - pos < 16:
                raise Mp4FormatError(f"{box_type}: 64-bit size truncated [at offset {pos}]")
            size = struct.unpack_from(">Q", head, rel + 8)[0]
            header = 16
        elif size == 0:
            size = file_size - pos
        if size < header or pos + size > file_size:
            raise Mp4FormatError(
                f"{box_type}: box size {size} at offset {pos} "
                + (
                    "is smaller than its header"
                    if size < header
                    else f"runs past the end of the {file_size}-byte file"
                )
            )
        if box_type == "moov":
            if max_moov_bytes is not None and size > max_moov_bytes:
                raise UnsupportedMp4Error(
                    f"moov box of {size} bytes at offset {pos} is larger than the "
                    f"{max_moov_bytes}-byte cap (max_moov_bytes); not read"
                )
            # Keep what is already in hand; read only the rest of the box.
            have = buf[rel : rel + size] if buf_start <= pos else b""
            if len(have) < size:
                have = have + read(pos + len(have), size - len(have))
            return MoovLocation(have, pos, probes, bytes_read, faststart=not seen_mdat)
        if box_type == "moof":
            raise UnsupportedMp4Error(
                f"fragmented MP4: a 'moof' box at offset {pos} comes before any 'moov'"
            )
        if box_type == "mdat":
            seen_mdat = True
        pos += size
    raise Mp4FormatError(
        f"no 'moov' box among the top-level boxes of the {file_size}-byte file "
        f"(walked to offset {pos})"
    )

"""MP4 box mutators for the hostile suite: a header field set to a value a writer would not
write, the rest of the file left as it was (real files from the synthetic datasets).

- :func:`set_mdhd`: the video track's ``mdhd`` rewritten (version 0 or 1, any timescale and
  duration). The box may grow (version 1 is 12 bytes longer), so only a file whose ``moov``
  follows its ``mdat`` keeps its sample offsets: :func:`moov_is_last` says which.
- :func:`claim_moov_to_end`: a file whose ``moov`` header claims the file's whole rest,
  grown (sparse) to ``size`` bytes: the memory bomb of a moov read whole before parsing.
"""

from __future__ import annotations

import struct
from pathlib import Path

from episodestream.mp4 import walk_boxes
from tests.plugins.media import rewrite_boxes

__all__ = ["claim_moov_to_end", "moov_is_last", "set_mdhd"]


def moov_is_last(data: bytes) -> bool:
    top = [box for box in walk_boxes(data) if "/" not in box.path]
    return top[-1].type == "moov"


def set_mdhd(
    data: bytes, *, version: int, timescale: int | None = None, duration: int | None = None
) -> bytes:
    """``data`` with every ``mdhd`` rewritten as ``version`` (0 or 1), its timescale and
    duration replaced where given (kept otherwise)."""
    if not moov_is_last(data):
        raise ValueError("mdhd may change size: use a file whose moov follows its mdat")

    def edit(path: str, box: bytes) -> bytes | None:
        if not path.endswith("/mdhd"):
            return None
        old_version = box[8]
        times = 16 if old_version == 1 else 8
        at = 12 + times
        old_timescale = struct.unpack_from(">I", box, at)[0]
        if old_version == 1:
            old_duration = struct.unpack_from(">Q", box, at + 4)[0]
            rest = box[at + 12 :]
        else:
            old_duration = struct.unpack_from(">I", box, at + 4)[0]
            rest = box[at + 8 :]
        new_timescale = old_timescale if timescale is None else timescale
        new_duration = old_duration if duration is None else duration
        if version == 1:
            body = bytes([1, 0, 0, 0]) + bytes(16) + struct.pack(">IQ", new_timescale, new_duration)
        else:
            body = bytes(4) + bytes(8) + struct.pack(">II", new_timescale, new_duration)
        body += rest
        return struct.pack(">I4s", 8 + len(body), b"mdhd") + body

    return rewrite_boxes(data, edit)


def claim_moov_to_end(path: Path, size: int) -> None:
    """Rewrite ``path`` as its ``ftyp`` followed by a ``moov`` header claiming every byte to
    the end of a ``size``-byte file, the file extended (sparse: no disk used) to ``size``."""
    data = path.read_bytes()
    ftyp = next(box for box in walk_boxes(data) if box.type == "ftyp")
    head = data[ftyp.start : ftyp.end]
    claimed = size - len(head)
    with open(path, "wb") as handle:
        handle.write(head)
        handle.write(struct.pack(">I4sQ", 1, b"moov", claimed))
        handle.truncate(size)

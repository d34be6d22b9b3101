"""Strict ISO-BMFF box reader: headers, bounds, nesting depth; no I/O.

Every read is checked against the bytes actually present, so a hostile size or count
raises :class:`~episodestream.errors.Mp4FormatError` (naming the box path and the byte
offset) instead of allocating or looping.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from episodestream.errors import Mp4FormatError

__all__ = [
    "CONTAINER_BOXES",
    "MAX_BOX_DEPTH",
    "Box",
    "FieldReader",
    "find_child",
    "iter_boxes",
    "walk_boxes",
]

#: Deepest nesting :func:`iter_boxes` accepts (a real ``stbl`` table sits at depth 5).
MAX_BOX_DEPTH = 16
#: Box types made only of child boxes, which :func:`walk_boxes` descends into.
CONTAINER_BOXES = frozenset(
    {"moov", "trak", "mdia", "minf", "stbl", "edts", "dinf", "mvex", "moof", "traf"}
)

_HEADER = struct.Struct(">I4s")
_U64 = struct.Struct(">Q")


@dataclass(frozen=True, slots=True)
class Box:
    """One box header, located inside a buffer.

    Offsets index the buffer handed to :func:`iter_boxes`; ``base_offset`` maps them to the
    file for error messages.
    """

    type: str  # four-character code, latin-1 decoded
    path: str  # e.g. "moov/trak[0]/mdia/minf/stbl/stsz"
    start: int  # offset of the size field
    header_size: int  # 8, 16 (64-bit size) or +16 for 'uuid'
    end: int  # exclusive end of the box
    base_offset: int = 0  # file offset of buffer position 0

    @property
    def payload_start(self) -> int:
        return self.start + self.header_size

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def file_offset(self) -> int:
        return self.base_offset + self.start

    def error(self, message: str, *, at: int | None = None) -> Mp4FormatError:
        """An :class:`Mp4FormatError` naming this box (and a buffer position inside it)."""
        where = self.base_offset + (self.start if at is None else at)
        return Mp4FormatError(
            f"{self.path} (box at file offset {self.file_offset}): {message} [at offset {where}]"
        )


def iter_boxes(
    data: bytes | bytearray | memoryview,
    start: int = 0,
    end: int | None = None,
    *,
    parent_path: str = "",
    depth: int = 0,
    base_offset: int = 0,
    indexed: frozenset[str] = frozenset({"trak"}),
) -> Iterator[Box]:
    """Yield the boxes laid back to back in ``data[start:end]``.

    Handles 32-bit sizes, 64-bit sizes (size field 1) and to-the-end boxes (size 0).
    Box types listed in ``indexed`` get their sibling number in the path (``trak[1]``).
    Up to 7 trailing zero bytes are accepted as padding (some writers terminate
    containers with a 32-bit zero); anything else that does not form a box is an error.

    Raises:
        Mp4FormatError: truncated header, size smaller than its header or running past
            ``end``, or nesting deeper than :data:`MAX_BOX_DEPTH`.
    """
    if end is None:
        end = len(data)
    if not 0 <= start <= end <= len(data):
        raise Mp4FormatError(
            f"{parent_path or '<top>'}: range [{start}, {end}) lies outside the "
            f"{len(data)}-byte buffer [at offset {base_offset + start}]"
        )
    if depth > MAX_BOX_DEPTH:
        raise Mp4FormatError(
            f"{parent_path}: boxes nested deeper than {MAX_BOX_DEPTH} levels "
            f"[at offset {base_offset + start}]"
        )
    counts: dict[str, int] = {}
    pos = start
    while pos < end:
        remaining = end - pos
        if remaining < 8:
            if bytes(data[pos:end]).strip(b"\0"):
                raise Mp4FormatError(
                    f"{parent_path or '<top>'}: {remaining} trailing bytes do not form a "
                    f"box header [at offset {base_offset + pos}]"
                )
            return
        size, raw_type = _HEADER.unpack_from(data, pos)
        box_type = raw_type.decode("latin-1")
        header = 8
        if size == 1:
            if remaining < 16:
                raise Mp4FormatError(
                    f"{_join(parent_path, box_type)}: 64-bit size field truncated "
                    f"[at offset {base_offset + pos}]"
                )
            size = _U64.unpack_from(data, pos + 8)[0]
            header = 16
        elif size == 0:
            size = remaining
        if box_type == "uuid":
            header += 16
        if size < header or size > remaining:
            raise Mp4FormatError(
                f"{_join(parent_path, box_type)}: box size {size} "
                + (
                    "is smaller than its header"
                    if size < header
                    else f"runs past the end of its parent ({remaining} bytes left)"
                )
                + f" [at offset {base_offset + pos}]"
            )
        n = counts.get(box_type, 0)
        counts[box_type] = n + 1
        name = f"{box_type}[{n}]" if box_type in indexed else box_type
        yield Box(box_type, _join(parent_path, name), pos, header, pos + size, base_offset)
        pos += size


def walk_boxes(
    data: bytes | bytearray | memoryview,
    *,
    containers: frozenset[str] = CONTAINER_BOXES,
    base_offset: int = 0,
) -> Iterator[Box]:
    """Every box of ``data``, depth first, descending into ``containers``.

    Raises:
        Mp4FormatError: as :func:`iter_boxes`, including nesting deeper than
            :data:`MAX_BOX_DEPTH`.
    """
    # An explicit stack rather than recursion: depth is bounded by MAX_BOX_DEPTH anyway,
    # but a generator chain per level would be needlessly slow.
    stack = [iter_boxes(data, base_offset=base_offset)]
    while stack:
        box = next(stack[-1], None)
        if box is None:
            stack.pop()
            continue
        yield box
        if box.type in containers:
            stack.append(
                iter_boxes(
                    data,
                    box.payload_start,
                    box.end,
                    parent_path=box.path,
                    depth=len(stack),
                    base_offset=base_offset,
                )
            )


def find_child(
    data: bytes | memoryview, parent: Box, box_type: str, *, depth: int, required: bool = True
) -> Box | None:
    """The first child of ``parent`` with type ``box_type`` (None if absent and not required)."""
    for child in iter_boxes(
        data,
        parent.payload_start,
        parent.end,
        parent_path=parent.path,
        depth=depth,
        base_offset=parent.base_offset,
    ):
        if child.type == box_type:
            return child
    if required:
        raise parent.error(f"required child box '{box_type}' is missing")
    return None


def _join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


class FieldReader:
    """Bounds-checked big-endian reads over one box's payload."""

    __slots__ = ("_box", "_data", "_end", "pos")

    def __init__(self, data: bytes | memoryview, box: Box) -> None:
        self._data = data
        self._box = box
        self.pos = box.payload_start
        self._end = box.end

    @property
    def remaining(self) -> int:
        return self._end - self.pos

    def _need(self, n: int, what: str) -> int:
        if n > self._end - self.pos:
            raise self._box.error(
                f"{what} needs {n} bytes but only {self._end - self.pos} remain", at=self.pos
            )
        p = self.pos
        self.pos += n
        return p

    def skip(self, n: int, what: str = "field") -> None:
        self._need(n, what)

    def bytes(self, n: int, what: str = "field") -> bytes:
        p = self._need(n, what)
        return bytes(self._data[p : p + n])

    def u8(self, what: str = "field") -> int:
        p = self._need(1, what)
        return self._data[p]

    def u16(self, what: str = "field") -> int:
        p = self._need(2, what)
        return int.from_bytes(self._data[p : p + 2], "big")

    def u32(self, what: str = "field") -> int:
        p = self._need(4, what)
        return int.from_bytes(self._data[p : p + 4], "big")

    def s32(self, what: str = "field") -> int:
        p = self._need(4, what)
        return int.from_bytes(self._data[p : p + 4], "big", signed=True)

    def u64(self, what: str = "field") -> int:
        p = self._need(8, what)
        return int.from_bytes(self._data[p : p + 8], "big")

    def s64(self, what: str = "field") -> int:
        p = self._need(8, what)
        return int.from_bytes(self._data[p : p + 8], "big", signed=True)

    def full_header(self) -> tuple[int, int]:
        """(version, flags) of a full box."""
        version = self.u8("version")
        flags = int.from_bytes(self.bytes(3, "flags"), "big")
        return version, flags

    def table(self, count: int, dtype: str, columns: int, what: str) -> np.ndarray:
        """A ``count`` x ``columns`` big-endian table, checked against the bytes left first.

        The count is validated before anything is allocated, so a forged count cannot
        make us reserve more memory than the box holds.
        """
        itemsize = np.dtype(dtype).itemsize
        nbytes = count * columns * itemsize
        if nbytes > self._end - self.pos:
            raise self._box.error(
                f"{what}: {count} entries need {nbytes} bytes but only "
                f"{self._end - self.pos} remain",
                at=self.pos,
            )
        p = self._need(nbytes, what)
        arr = np.frombuffer(self._data, dtype=dtype, count=count * columns, offset=p)
        return arr.reshape(count, columns) if columns > 1 else arr

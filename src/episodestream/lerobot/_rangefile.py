"""A seekable, read-only file object over one file of a :class:`RangeReader`.

pyarrow reads Parquet footers and column chunks through it, so only the byte ranges that
pyarrow asks for are fetched. No read-ahead: each ``read`` is exactly one reader request.
"""

from __future__ import annotations

import io
import os

import pyarrow as pa

from episodestream.storage import RangeReader

__all__ = ["RangeFile", "open_arrow_file"]


class RangeFile(io.RawIOBase):
    """Read-only, seekable view of ``path`` (``size`` bytes) through ``reader``."""

    def __init__(self, reader: RangeReader, path: str, size: int) -> None:
        super().__init__()
        self._reader = reader
        self._path = path
        self._size = size
        self._position = 0

    @property
    def name(self) -> str:
        return self._path

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            position = offset
        elif whence == os.SEEK_CUR:
            position = self._position + offset
        elif whence == os.SEEK_END:
            position = self._size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if position < 0:
            raise ValueError(f"{self._path}: negative seek position {position}")
        self._position = position
        return position

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._position
        length = max(0, min(size, self._size - self._position))
        if length == 0:
            return b""
        data = self._reader.read(self._path, self._position, length)
        self._position += length
        return data

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


def open_arrow_file(reader: RangeReader, path: str, size: int) -> pa.PythonFile:
    """A pyarrow random-access file reading ``path`` through ``reader``."""
    return pa.PythonFile(RangeFile(reader, path, size), mode="r")

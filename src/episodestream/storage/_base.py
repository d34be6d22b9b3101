"""The range-reader seam: everything above `storage` reads bytes only through this Protocol."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from episodestream.errors import ConfigError, LocationError

__all__ = ["FileInfo", "ListableReader", "RangeReader", "ReadRequest", "normalize_relative_path"]


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """``length`` bytes of the file at ``path`` (relative to the reader's root) from ``offset``.

    The range is half-open: bytes ``[offset, offset + length)``.
    """

    path: str
    offset: int
    length: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.length < 0:
            raise ConfigError(
                f"invalid range for {self.path!r}: offset={self.offset} length={self.length}"
            )

    @property
    def end(self) -> int:
        """Exclusive end offset."""
        return self.offset + self.length


@dataclass(frozen=True, slots=True)
class FileInfo:
    """What a store says about one file: its size and version validators.

    ``etag`` is the entity tag exactly as the store sent it (quotes included; ``None`` where the
    store has none, e.g. local disk); ``last_modified`` is an HTTP-date string (local disk: the
    file's mtime, formatted the way nginx formats it, so a local copy and its nginx-served twin
    agree).
    """

    size: int
    etag: str | None = None
    last_modified: str | None = None

    def same_version(self, other: FileInfo) -> bool:
        """True when nothing shows the two to be different versions of the file.

        Sizes must match; ETags are compared when both have one, otherwise Last-Modified when
        both have one.
        """
        if self.size != other.size:
            return False
        if self.etag is not None and other.etag is not None:
            return self.etag == other.etag
        if self.last_modified is not None and other.last_modified is not None:
            return self.last_modified == other.last_modified
        return True


def normalize_relative_path(path: str) -> str:
    """``path`` as a clean POSIX path relative to a root, or :class:`LocationError`.

    Refused: absolute paths, ``..`` segments that climb out of the root, backslashes, NUL
    bytes and URL-looking strings. ``""`` and ``"."`` mean the root itself and return ``""``.
    """
    if not isinstance(path, str):
        raise LocationError(f"relative path must be a str, got {type(path).__name__}")
    if "\x00" in path or "\\" in path:
        raise LocationError(f"relative path {path!r} contains a NUL byte or a backslash")
    if path.startswith("/") or "://" in path:
        raise LocationError(f"path {path!r} is not relative to the dataset root")
    normalized = posixpath.normpath(path) if path else "."
    if normalized == ".":
        return ""
    if normalized == ".." or normalized.startswith("../"):
        raise LocationError(f"path {path!r} escapes the dataset root")
    return normalized


@runtime_checkable
class RangeReader(Protocol):
    """Reads exact byte ranges of the files under one root.

    ``read`` returns exactly ``length`` bytes or raises a :class:`~episodestream.StorageError`;
    ``read_many`` may run requests concurrently but returns results in request order.
    Readers are context managers and hold no sockets or threads once pickled.

    Every reader in this package also has (not part of the Protocol, so test doubles need not):
    ``file_info(path) -> FileInfo`` (size and validators, as pinned by the reader) and
    ``read_file(path, *, max_bytes=512 MiB) -> bytes`` (a whole file in one request).
    """

    def size(self, path: str) -> int: ...

    def read(self, path: str, offset: int, length: int) -> bytes: ...

    def read_many(self, requests: Sequence[ReadRequest]) -> list[bytes]: ...

    def metrics(self) -> dict[str, float | int]: ...

    def close(self) -> None: ...


@runtime_checkable
class ListableReader(RangeReader, Protocol):
    """A reader whose store can list folders (local disk, the Hub, S3); plain HTTP cannot."""

    def list_files(self, prefix: str) -> list[str]:
        """Relative paths of all files under folder ``prefix``, sorted; [] when it is absent."""
        ...

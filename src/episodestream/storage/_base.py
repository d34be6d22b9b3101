"""The range-reader seam: everything above `storage` reads bytes only through this Protocol."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["ListableReader", "RangeReader", "ReadRequest"]


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """``length`` bytes of the file at ``path`` (relative to the reader's root) from ``offset``."""

    path: str
    offset: int
    length: int

    def __post_init__(self) -> None:
        if self.offset < 0 or self.length < 0:
            raise ValueError(
                f"invalid range for {self.path!r}: offset={self.offset} length={self.length}"
            )

    @property
    def end(self) -> int:
        """Exclusive end offset."""
        return self.offset + self.length


@runtime_checkable
class RangeReader(Protocol):
    """Reads exact byte ranges of the files under one root.

    ``read`` returns exactly ``length`` bytes or raises a :class:`~episodestream.StorageError`;
    ``read_many`` may run requests concurrently but returns results in request order.
    Readers are context managers and hold no sockets or threads once pickled.
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

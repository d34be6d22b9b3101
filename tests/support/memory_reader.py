"""A dataset held in memory behind the reader seam: the four methods a backend must write
(root, size, read, stats), nothing else; records reads and whether anyone closed it."""

from __future__ import annotations

from pathlib import Path

from episodestream import NotFound, StorageError
from episodestream.storage import BaseRangeReader, ReaderStats


class MemoryReader(BaseRangeReader):
    def __init__(self, files: dict[str, bytes], *, root: str = "memory://test") -> None:
        super().__init__()
        self.files = files
        self.reads = 0
        self.closed = False
        self._root = root

    @classmethod
    def of_folder(cls, folder: Path, *, root: str = "memory://test") -> MemoryReader:
        """Every file under ``folder``, by its path relative to it."""
        files = {
            p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*")
            if p.is_file()
        }
        return cls(files, root=root)

    @property
    def root(self) -> str:
        return self._root

    def size(self, path: str) -> int:
        if path not in self.files:
            raise NotFound(f"{path}: no such file")
        return len(self.files[path])

    def read(self, path: str, offset: int, length: int) -> bytes:
        self.reads += 1
        data = self.files[path][offset : offset + length] if self.size(path) else b""
        if len(data) != length:
            raise StorageError(f"{path}: bytes {offset}-{offset + length - 1} past the end")
        return data

    def stats(self) -> ReaderStats:
        return ReaderStats(requests=self.reads, reads=self.reads)

    def close(self) -> None:
        self.closed = True

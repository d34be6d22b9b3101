"""Local-disk range reader: ``os.pread`` on cached descriptors, never whole-file reads."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

from episodestream.errors import InvalidResponse, LocationError, NotFound, StorageError
from episodestream.storage._base import ReadRequest

__all__ = ["LocalRangeReader"]


class LocalRangeReader:
    """Reads ranges of files under a local ``root`` folder."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root).resolve()
        self._lock = threading.Lock()
        self._bytes_read = 0
        self._requests = 0

    @property
    def root(self) -> Path:
        return self._root

    def _resolve(self, path: str) -> Path:
        full = (self._root / path).resolve()
        if full != self._root and self._root not in full.parents:
            raise LocationError(f"path {path!r} escapes the dataset root {str(self._root)!r}")
        return full

    def size(self, path: str) -> int:
        full = self._resolve(path)
        try:
            return full.stat().st_size
        except FileNotFoundError as error:
            raise NotFound(f"{full}: no such file") from error
        except OSError as error:
            raise StorageError(f"{full}: {error}") from error

    def read(self, path: str, offset: int, length: int) -> bytes:
        request = ReadRequest(path, offset, length)
        full = self._resolve(path)
        try:
            fd = os.open(full, os.O_RDONLY)
        except FileNotFoundError as error:
            raise NotFound(f"{full}: no such file") from error
        except OSError as error:
            raise StorageError(f"{full}: {error}") from error
        try:
            parts: list[bytes] = []
            position, remaining = offset, length
            while remaining > 0:
                chunk = os.pread(fd, remaining, position)
                if not chunk:
                    raise InvalidResponse(
                        f"{full}: bytes {request.offset}-{request.end - 1} requested but the "
                        f"file ends at {position}"
                    )
                parts.append(chunk)
                position += len(chunk)
                remaining -= len(chunk)
        finally:
            os.close(fd)
        with self._lock:
            self._bytes_read += length
            self._requests += 1
        return b"".join(parts)

    def read_many(self, requests: Sequence[ReadRequest]) -> list[bytes]:
        return [self.read(r.path, r.offset, r.length) for r in requests]

    def list_files(self, prefix: str) -> list[str]:
        folder = self._resolve(prefix)
        if not folder.is_dir():
            return []
        return sorted(
            str(p.relative_to(self._root)) for p in folder.rglob("*") if p.is_file()
        )

    def metrics(self) -> dict[str, float | int]:
        with self._lock:
            return {"requests": self._requests, "bytes": self._bytes_read}

    def close(self) -> None:
        pass

    def __enter__(self) -> LocalRangeReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

"""Local-disk range reader: ``os.pread`` of exactly the bytes asked, never whole-file reads."""

from __future__ import annotations

import email.utils
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from episodestream.errors import InvalidResponse, NotFound, StorageError
from episodestream.storage._base import FileInfo, ReadRequest, normalize_relative_path

__all__ = ["LocalRangeReader"]


class LocalRangeReader:
    """Reads ranges of files under a local ``root`` folder.

    Paths are checked lexically (no ``..`` out of the root, no absolute paths); symbolic links
    inside the root are followed, so a Hugging Face cache snapshot (links into ``blobs/``) works.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(os.path.abspath(os.fspath(root)))
        self._lock = threading.Lock()
        self._bytes_read = 0
        self._requests = 0

    @property
    def root(self) -> Path:
        return self._root

    def __repr__(self) -> str:
        return f"LocalRangeReader({str(self._root)!r})"

    def __getstate__(self) -> dict[str, object]:
        return {"_root": self._root}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["_root"])  # type: ignore[misc, arg-type]

    def _resolve(self, path: str) -> Path:
        clean = normalize_relative_path(path)
        return self._root / clean if clean else self._root

    def file_info(self, path: str) -> FileInfo:
        """Size, and the mtime as an HTTP-date (as nginx would send it as Last-Modified)."""
        full = self._resolve(path)
        try:
            stat = full.stat()
        except FileNotFoundError as error:
            raise NotFound(f"{full}: no such file") from error
        except OSError as error:
            raise StorageError(f"{full}: {error}") from error
        if not full.is_file():
            raise NotFound(f"{full}: not a regular file")
        modified = email.utils.formatdate(int(stat.st_mtime), usegmt=True)
        return FileInfo(stat.st_size, None, modified)

    def size(self, path: str) -> int:
        return self.file_info(path).size

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
        except OSError as error:
            raise StorageError(
                f"{full}: bytes {request.offset}-{request.end - 1}: {error}"
            ) from error
        finally:
            os.close(fd)
        with self._lock:
            self._bytes_read += length
            self._requests += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read_file(self, path: str, *, max_bytes: int = 512 * 1024 * 1024) -> bytes:
        """The whole file; one larger than ``max_bytes`` is an error before it is read."""
        size = self.size(path)
        if size > max_bytes:
            raise InvalidResponse(
                f"{self._resolve(path)}: file of {size} bytes is larger than read_file's "
                f"max_bytes={max_bytes}; read it by ranges"
            )
        return self.read(path, 0, size) if size else b""

    def read_many(self, requests: Sequence[ReadRequest]) -> list[bytes]:
        return [self.read(r.path, r.offset, r.length) for r in requests]

    def list_files(self, prefix: str) -> list[str]:
        folder = self._resolve(prefix)
        if not folder.is_dir():
            return []
        found = []
        for directory, _, names in os.walk(folder, followlinks=False):
            for name in names:
                full = Path(directory) / name
                if full.is_file():
                    found.append(full.relative_to(self._root).as_posix())
        return sorted(found)

    def metrics(self) -> dict[str, float | int]:
        with self._lock:
            return {"requests": self._requests, "bytes": self._bytes_read}

    def close(self) -> None:
        pass

    def __enter__(self) -> LocalRangeReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

"""Local-disk range reader: ``os.pread`` of exactly the bytes asked, never whole-file reads.

Each file's identity (inode, size, mtime in ns) is pinned at first contact and checked against
``fstat`` of every read, as the HTTP reader pins validators: a file rewritten or replaced while
a run uses it would otherwise mix bytes of two versions silently.
"""

from __future__ import annotations

import email.utils
import os
import stat as stat_module
import threading
from pathlib import Path

from episodestream.errors import InvalidResponse, NotFound, StaleSourceError, StorageError
from episodestream.storage._base import (
    BaseRangeReader,
    FileInfo,
    ReaderStats,
    ReadRequest,
    normalize_relative_path,
)
from episodestream.storage._urls import shorten

__all__ = ["LocalRangeReader"]


class LocalRangeReader(BaseRangeReader):
    """Reads ranges of files under a local ``root`` folder.

    Paths are checked lexically (no ``..`` out of the root, no absolute paths); symbolic links
    inside the root are followed, so a Hugging Face cache snapshot (links into ``blobs/``) works.
    A read of a file whose inode, size or mtime differs from what this reader first saw (or
    last reported through :meth:`file_info`) is refused with :class:`StaleSourceError`; the
    pins travel with a pickled reader.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        _pins: dict[str, tuple[int, int, int]] | None = None,
    ) -> None:
        super().__init__()
        self._root = Path(os.path.abspath(os.fspath(root)))
        self._lock = threading.Lock()
        self._bytes_read = 0
        self._requests = 0
        # relative path -> (st_ino, st_size, st_mtime_ns) as first seen
        self._pins: dict[str, tuple[int, int, int]] = dict(_pins or {})

    @property
    def root(self) -> str:
        return str(self._root)

    def _after_fork_in_child(self) -> None:
        # a parent thread may have held the lock at the fork: the child's copy would never open
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        """The root folder."""
        return self._root

    def __repr__(self) -> str:
        return f"LocalRangeReader({str(self._root)!r})"

    def __getstate__(self) -> dict[str, object]:
        with self._lock:
            return {"_root": self._root, "_pins": dict(self._pins)}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__init__(state["_root"], state.get("_pins"))  # type: ignore[misc, arg-type]

    def _resolve(self, path: str) -> Path:
        clean = normalize_relative_path(path)
        return self._root / clean if clean else self._root

    def _check_identity(
        self, path: str, full: Path, stat: os.stat_result, *, repin: bool = False
    ) -> None:
        """Pin the file's identity at first contact; afterwards reads must see the same one.

        ``repin`` (``file_info``): an explicit look at the file as it is now, pinned anew —
        callers such as the manifest compare that answer with what they recorded themselves.
        """
        key = normalize_relative_path(path)
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        with self._lock:
            if repin:
                self._pins[key] = seen
                return
            pinned = self._pins.setdefault(key, seen)
        if pinned != seen:
            changes = [
                f"{name} {old} -> {new}"
                for name, old, new in zip(("inode", "size", "mtime_ns"), pinned, seen, strict=True)
                if old != new
            ]
            raise StaleSourceError(
                f"{shorten(full)} changed while being read: " + ", ".join(changes)
            )

    def file_info(self, path: str) -> FileInfo:
        """Size, and the mtime as an HTTP-date (as nginx would send it as Last-Modified).

        The file as it is now (callers compare it with their records), pinned for later reads.
        """
        full = self._resolve(path)
        try:
            stat = full.stat()
        except FileNotFoundError as error:
            raise NotFound(f"{shorten(full)}: no such file") from error
        except OSError as error:
            raise StorageError(f"{shorten(full)}: {_reason(error)}") from error
        if not stat_module.S_ISREG(stat.st_mode):
            raise NotFound(f"{shorten(full)}: not a regular file")
        self._check_identity(path, full, stat, repin=True)
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
            raise NotFound(f"{shorten(full)}: no such file") from error
        except OSError as error:
            raise StorageError(f"{shorten(full)}: {_reason(error)}") from error
        try:
            self._check_identity(path, full, os.fstat(fd))
            parts: list[bytes] = []
            position, remaining = offset, length
            while remaining > 0:
                chunk = os.pread(fd, remaining, position)
                if not chunk:
                    raise InvalidResponse(
                        f"{shorten(full)}: bytes {request.offset}-{request.end - 1} requested "
                        f"but the file ends at {position}"
                    )
                parts.append(chunk)
                position += len(chunk)
                remaining -= len(chunk)
        except OSError as error:
            raise StorageError(
                f"{shorten(full)}: bytes {request.offset}-{request.end - 1}: {_reason(error)}"
            ) from error
        finally:
            os.close(fd)
        with self._lock:
            self._bytes_read += length
            self._requests += 1
        return parts[0] if len(parts) == 1 else b"".join(parts)

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

    def stats(self) -> ReaderStats:
        with self._lock:
            return ReaderStats(
                requests=self._requests,
                bytes=self._bytes_read,
                bytes_returned=self._bytes_read,
                reads=self._requests,
            )


def _reason(error: OSError) -> str:
    """What went wrong, without the file name the OS error repeats (the message has it)."""
    return error.strerror or type(error).__name__

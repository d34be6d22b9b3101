"""Range reader over any fsspec filesystem (``s3://``, ``gs://``, ``memory://``, …).

One store request per range — ``cat_file(path, start, end)`` — never a buffered file object, so
there is no read-ahead. ``storage_options`` pass through to the filesystem untyped (that is
fsspec's contract); everything this layer controls is typed.
"""

from __future__ import annotations

import email.utils
import os
import threading
import weakref
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from episodestream._checks import check_int
from episodestream.errors import (
    InvalidResponse,
    LocationError,
    NotFound,
    StorageError,
    StorageTimeout,
)
from episodestream.storage._base import FileInfo, ReadRequest, normalize_relative_path
from episodestream.storage._location import Location
from episodestream.storage._urls import redact_url

__all__ = ["FsspecRangeReader"]

_EXTRA_FOR = {"s3": "s3", "s3a": "s3", "gs": "gcs (gcsfs)", "gcs": "gcs (gcsfs)"}


class FsspecRangeReader:
    """Exact byte ranges of the files under an fsspec URL.

    Args:
        location: e.g. ``"s3://bucket/prefix"`` (str or :class:`Location`).
        storage_options: passed to the fsspec filesystem as is (credentials, endpoint_url, …).
        max_concurrency: threads running ``read_many`` for filesystems that are not async (async
            ones, such as s3fs, run the batch concurrently on fsspec's own event loop).
    """

    def __init__(
        self,
        location: str | Location,
        *,
        storage_options: dict[str, Any] | None = None,
        max_concurrency: int = 16,
    ) -> None:
        parsed = Location.parse(location)
        # http(s) is allowed too: fsspec's HTTP filesystem is the escape hatch for what the
        # native reader does not do (proxies from the environment, for one).
        if parsed.kind not in ("fsspec", "http"):
            raise LocationError(f"not an fsspec or http(s) location: {parsed.url!r}")
        max_concurrency = check_int("max_concurrency", max_concurrency, minimum=1)
        self._location = parsed
        self._storage_options = dict(storage_options or {})
        self._max_concurrency = max_concurrency
        self._init_runtime()

    def _init_runtime(self) -> None:
        _LIVE_READERS.add(self)
        self._lock = threading.Lock()
        self._fs: Any = None
        self._root = ""
        self._closed = False
        self._executor: ThreadPoolExecutor | None = None
        self._counters: dict[str, int] = {"requests": 0, "bytes": 0, "reads": 0, "failures": 0}

    def __getstate__(self) -> dict[str, Any]:
        return {
            "_location": self._location,
            "_storage_options": self._storage_options,
            "_max_concurrency": self._max_concurrency,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def _forget_parent_runtime(self) -> None:
        """In a forked child (a DataLoader worker): a fresh filesystem and thread pool.

        fsspec's async filesystems refuse to run in a forked child ("not fork-safe"), and the
        parent's thread pool has no threads here (work submitted to it would never run).
        """
        closed = self._closed
        self._init_runtime()
        self._closed = closed

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._location.url!r})"

    def __enter__(self) -> FsspecRangeReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def location(self) -> Location:
        return self._location

    def _filesystem(self) -> tuple[Any, str]:
        with self._lock:
            if self._closed:
                raise StorageError(f"{self!r} is closed")
            if self._fs is None:
                import fsspec

                protocol = self._location.protocol
                try:
                    # A private instance: closing this reader must not touch anyone else's.
                    self._fs = fsspec.filesystem(
                        protocol, skip_instance_cache=True, **self._storage_options
                    )
                except ImportError as error:
                    extra = _EXTRA_FOR.get(protocol)
                    hint = f" (pip install 'episodestream[{extra}]')" if extra else ""
                    raise StorageError(
                        f"no fsspec filesystem for {protocol}://{hint}: {error}"
                    ) from error
                except ValueError as error:
                    raise LocationError(f"unknown fsspec protocol {protocol!r}") from error
                self._root = self._fs._strip_protocol(self._location.url).rstrip("/")
            return self._fs, self._root

    def _full(self, path: str) -> tuple[Any, str, str]:
        fs, root = self._filesystem()
        clean = normalize_relative_path(path)
        return fs, (f"{root}/{clean}" if clean else root), clean

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + amount

    def _where(self, clean: str, offset: int | None = None, length: int | None = None) -> str:
        where = f"{redact_url(self._location.url)}/{clean}"
        if offset is not None and length is not None:
            where += f" bytes {offset}-{offset + length - 1}"
        return where

    def _translate(self, error: BaseException, where: str) -> StorageError:
        self._count("failures")
        if isinstance(error, StorageError):
            return error
        if isinstance(error, FileNotFoundError):
            return NotFound(f"{where}: no such file")
        if isinstance(error, TimeoutError):
            return StorageTimeout(f"{where}: timed out: {error}")
        if isinstance(error, PermissionError):
            return StorageError(f"{where}: access denied: {error}")
        return StorageError(f"{where}: {type(error).__name__}: {error}")

    def file_info(self, path: str) -> FileInfo:
        """Size and validators as the store reports them (S3: ETag and LastModified)."""
        fs, full, clean = self._full(path)
        try:
            info = fs.info(full)
        except Exception as error:
            raise self._translate(error, self._where(clean)) from error
        self._count("requests")
        if info.get("type") == "directory":
            raise NotFound(f"{self._where(clean)}: is a folder, not a file")
        etag = info.get("ETag") or info.get("etag")
        modified = info.get("LastModified") or info.get("last_modified") or info.get("mtime")
        if isinstance(modified, datetime):
            if modified.tzinfo is None:
                modified = modified.replace(tzinfo=UTC)
            modified = email.utils.format_datetime(modified.astimezone(UTC), usegmt=True)
        elif modified is not None:
            modified = str(modified)
        return FileInfo(int(info["size"]), etag, modified)

    def size(self, path: str) -> int:
        return self.file_info(path).size

    def read(self, path: str, offset: int, length: int) -> bytes:
        ReadRequest(path, offset, length)
        fs, full, clean = self._full(path)
        self._count("reads")
        if length == 0:
            return b""
        where = self._where(clean, offset, length)
        try:
            data = fs.cat_file(full, start=offset, end=offset + length)
        except Exception as error:
            raise self._translate(error, where) from error
        return self._checked(data, length, where)

    def read_file(self, path: str, *, max_bytes: int = 512 * 1024 * 1024) -> bytes:
        """The whole file in one store request; larger than ``max_bytes`` is an error."""
        fs, full, clean = self._full(path)
        self._count("reads")
        where = self._where(clean)
        try:
            # One byte more than allowed tells "too large" apart without a size request.
            data = fs.cat_file(full, start=0, end=max_bytes + 1)
        except Exception as error:
            raise self._translate(error, where) from error
        self._count("requests")
        self._count("bytes", len(data))
        if len(data) > max_bytes:
            raise InvalidResponse(
                f"{where}: file larger than read_file's max_bytes={max_bytes}; read it by ranges"
            )
        return bytes(data)

    def _checked(self, data: Any, length: int, where: str) -> bytes:
        self._count("requests")
        if not isinstance(data, bytes | bytearray):
            raise InvalidResponse(f"{where}: store returned {type(data).__name__}, not bytes")
        self._count("bytes", len(data))
        if len(data) != length:
            raise InvalidResponse(
                f"{where}: store returned {len(data)} of {length} bytes (file shorter than the "
                "range?)"
            )
        return bytes(data)

    def read_many(self, requests: Sequence[ReadRequest]) -> list[bytes]:
        """All ``requests``, one store request each, concurrently; results in order."""
        requests = list(requests)
        if not requests:
            return []
        fs, _ = self._filesystem()
        fulls = [self._full(r.path) for r in requests]
        self._count("reads", len(requests))
        wanted = [i for i, r in enumerate(requests) if r.length]
        results: list[bytes] = [b""] * len(requests)
        if getattr(fs, "async_impl", False) and len(wanted) > 1:
            try:
                answers = fs.cat_ranges(
                    [fulls[i][1] for i in wanted],
                    [requests[i].offset for i in wanted],
                    [requests[i].end for i in wanted],
                    on_error="return",
                    batch_size=self._max_concurrency,
                )
            except Exception as error:
                raise self._translate(error, self._where(fulls[wanted[0]][2])) from error
            for i, answer in zip(wanted, answers, strict=True):
                r = requests[i]
                where = self._where(fulls[i][2], r.offset, r.length)
                if isinstance(answer, BaseException):
                    raise self._translate(answer, where) from answer
                results[i] = self._checked(answer, r.length, where)
            return results
        if len(wanted) <= 1:
            for i in wanted:
                r = requests[i]
                results[i] = self.read(r.path, r.offset, r.length)
            return results
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._max_concurrency, thread_name_prefix="episodestream-fsspec"
                )
            executor = self._executor
        futures = [
            executor.submit(fs.cat_file, fulls[i][1], start=requests[i].offset, end=requests[i].end)
            for i in wanted
        ]
        first_error: tuple[BaseException, str] | None = None
        for i, future in zip(wanted, futures, strict=True):
            r = requests[i]
            where = self._where(fulls[i][2], r.offset, r.length)
            try:
                results[i] = self._checked(future.result(), r.length, where)
            except Exception as error:
                if first_error is None:
                    first_error = (error, where)
                    for other in futures:
                        other.cancel()
        if first_error is not None:
            error, where = first_error
            raise self._translate(error, where) from error
        return results

    def list_files(self, prefix: str) -> list[str]:
        """Relative paths of all files under folder ``prefix``, sorted; [] when absent."""
        fs, full, _ = self._full(prefix)
        _, root = self._filesystem()
        try:
            found = fs.find(full)
        except FileNotFoundError:
            return []
        except Exception as error:
            raise self._translate(error, self._where(prefix)) from error
        self._count("requests")
        out = []
        for item in found:
            item = item.rstrip("/")
            if item.startswith(root + "/"):
                out.append(item[len(root) + 1 :])
        return sorted(out)

    def metrics(self) -> dict[str, float | int]:
        with self._lock:
            return dict(self._counters)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
            self._fs = None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


# Readers alive in this process: a forked child makes each drop its parent's runtime.
_LIVE_READERS: weakref.WeakSet[FsspecRangeReader] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for reader in list(_LIVE_READERS):
        reader._forget_parent_runtime()


os.register_at_fork(after_in_child=_after_fork_in_child)

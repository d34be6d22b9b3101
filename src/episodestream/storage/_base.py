"""The range-reader seam: everything above `storage` reads bytes only through this Protocol."""

from __future__ import annotations

import abc
import logging
import os
import posixpath
import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Protocol, Self, runtime_checkable

from episodestream._closing import Closing
from episodestream._frozen import FrozenDict
from episodestream.errors import ConfigError, ConfigTypeError, InvalidResponse, LocationError
from episodestream.storage._deadline import Deadline
from episodestream.storage._urls import shorten

__all__ = [
    "DEFAULT_READ_FILE_MAX_BYTES",
    "BaseRangeReader",
    "FileInfo",
    "ListableReader",
    "RangeReader",
    "ReadRequest",
    "ReaderStats",
    "normalize_relative_path",
]

logger = logging.getLogger(__name__)

# read_file's default ceiling: metadata files are small; a video read whole is a mistake
DEFAULT_READ_FILE_MAX_BYTES = 512 * 1024 * 1024


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
        raise LocationError(f"relative path {shorten(path)!r} contains a NUL byte or a backslash")
    if path.startswith("/") or "://" in path:
        raise LocationError(f"path {shorten(path)!r} is not relative to the dataset root")
    normalized = posixpath.normpath(path) if path else "."
    if normalized == ".":
        return ""
    if normalized == ".." or normalized.startswith("../"):
        raise LocationError(f"path {shorten(path)!r} escapes the dataset root")
    return normalized


_MAPPINGS = ("statuses", "other")
_STATUS_KEY = re.compile(r"^status_(\d{3})$")


@dataclass(frozen=True, slots=True)
class ReaderStats:
    """What a reader did since it was created; the same fields for every backend.

    Counters a backend has no use for stay 0 (local disk never redirects). ``statuses`` counts
    HTTP answers by status code; ``other`` holds any counter a backend adds beyond these.
    Times are sums over requests, in seconds.
    """

    requests: int = 0  # requests sent to the store, retries included
    bytes: int = 0  # body bytes received from the store
    bytes_returned: int = 0  # bytes handed to callers
    reads: int = 0  # ranges callers asked for
    lookups: int = 0  # requests for a size or a listing, not for bytes (among ``requests``)
    retries: int = 0
    failures: int = 0  # failed attempts (each retried or final)
    resumes: int = 0  # short bodies continued from where they stopped
    redirects: int = 0
    reresolves: int = 0  # redirect targets refused and resolved again
    target_refusals: int = 0  # reused redirect targets refused (per-range signing learned)
    rate_limited: int = 0  # 429s that announced their quota window
    range_ignored: int = 0  # answers that ignored Range and were read past
    connections: int = 0
    coalesced_requests: int = 0
    split_parts: int = 0
    quota_wait_seconds: float = 0.0
    connect_seconds: float = 0.0
    headers_seconds: float = 0.0
    first_byte_seconds: float = 0.0
    body_seconds: float = 0.0
    statuses: Mapping[int, int] = field(default_factory=FrozenDict)
    other: Mapping[str, float] = field(default_factory=FrozenDict)

    def __post_init__(self) -> None:
        # read-only copies, so a value stays a value (and pickles and hashes) whoever made it
        for name in _MAPPINGS:
            value = getattr(self, name)
            if not isinstance(value, Mapping):
                raise ConfigTypeError(f"ReaderStats.{name} must be a dict, got {value!r}")
            object.__setattr__(self, name, FrozenDict.of(value))

    @classmethod
    def from_counters(cls, counters: Mapping[str, float]) -> ReaderStats:
        """Stats from flat counters (``status_<code>`` keys become ``statuses``)."""
        known = {f.name for f in fields(cls)} - set(_MAPPINGS)
        values: dict[str, float] = {}
        statuses: dict[int, int] = {}
        other: dict[str, float] = {}
        for name, amount in counters.items():
            status = _STATUS_KEY.match(name)
            if name in known:
                values[name] = amount
            elif status is not None:
                statuses[int(status.group(1))] = int(amount)
            else:
                other[name] = amount
        return cls(
            **values,  # type: ignore[arg-type]
            statuses=FrozenDict(statuses),
            other=FrozenDict(other),
        )

    def as_dict(self) -> dict[str, float | int]:
        """Flat counters: every field, then ``status_<code>`` and ``other``'s keys."""
        flat: dict[str, float | int] = {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name not in ("statuses", "other")
        }
        flat.update({f"status_{code}": count for code, count in sorted(self.statuses.items())})
        flat.update(self.other)
        return flat


@runtime_checkable
class RangeReader(Protocol):
    """Reads exact byte ranges of the files under one root: the seam every layer above
    `storage` reads through, and all it may use of a reader.

    ``read`` returns exactly ``length`` bytes or raises a :class:`~episodestream.StorageError`;
    ``read_many`` may run requests concurrently but returns results in request order;
    ``file_info`` gives size and validators as the reader pinned them; ``read_file`` reads a
    whole small file (one request where the store allows). ``root`` names the root (a URL or a
    path, for messages and identities); ``revision`` is the immutable revision the reader is
    pinned to (a Hub commit), or None. Readers are context managers and hold no sockets or
    threads once pickled. :class:`BaseRangeReader` implements the parts every backend shares.
    """

    @property
    def root(self) -> str: ...

    @property
    def revision(self) -> str | None: ...

    def size(self, path: str) -> int: ...

    def file_info(self, path: str) -> FileInfo: ...

    def read(self, path: str, offset: int, length: int) -> bytes: ...

    def read_many(self, requests: Sequence[ReadRequest]) -> list[bytes]: ...

    def read_file(self, path: str, *, max_bytes: int = DEFAULT_READ_FILE_MAX_BYTES) -> bytes: ...

    def stats(self) -> ReaderStats: ...

    def metrics(self) -> dict[str, float | int]: ...

    def close(self) -> None: ...

    def __enter__(self) -> Self: ...

    def __exit__(self, *exc_info: object) -> None: ...


class BaseRangeReader(Closing, abc.ABC):
    """The shared part of every reader (fsspec's ``AbstractFileSystem`` habit).

    A backend implements ``root``, ``size``, ``read`` and ``stats``; it overrides
    ``file_info``, ``read_many`` and ``read_file`` where its store does better than the
    defaults (validators, concurrency, one request for a whole file). Subclasses call
    ``super().__init__()``, or :meth:`_track_forks` where they set up their runtime (again when
    unpickled), so that a forked child (a DataLoader worker) calls their
    :meth:`_after_fork_in_child` exactly once. ``with reader:`` closes it (:class:`Closing`).
    Datasets take a reader of this class
    (``reader=``); layers above storage type against :class:`RangeReader`.

    ``_deadline``: the deadline of an operation in progress through this reader (opening a
    dataset: ``_within.reads_within``), checked by the backends' reads; never pickled.
    """

    _deadline: Deadline | None = None

    def __init__(self) -> None:
        self._track_forks()

    # ------------------------------------------------------------------ what a backend gives

    @property
    @abc.abstractmethod
    def root(self) -> str:
        """The root as text: a URL (credentials removed) or a local path."""

    @property
    def revision(self) -> str | None:
        """The immutable revision this reader reads (a Hub commit); None where there is none."""
        return None

    @abc.abstractmethod
    def size(self, path: str) -> int: ...

    @abc.abstractmethod
    def read(self, path: str, offset: int, length: int) -> bytes: ...

    @abc.abstractmethod
    def stats(self) -> ReaderStats: ...

    # ------------------------------------------------------------------ shared defaults

    def file_info(self, path: str) -> FileInfo:
        """Size only; stores with validators override this."""
        return FileInfo(self.size(path))

    def read_many(self, requests: Sequence[ReadRequest]) -> list[bytes]:
        """One read after another, in request order."""
        return [self.read(r.path, r.offset, r.length) for r in requests]

    def read_file(self, path: str, *, max_bytes: int = DEFAULT_READ_FILE_MAX_BYTES) -> bytes:
        """A whole file; one larger than ``max_bytes`` is an error before it is read."""
        size = self.size(path)
        if size > max_bytes:
            raise InvalidResponse(
                f"{self.root}/{path}: file of {size} bytes is larger than read_file's "
                f"max_bytes={max_bytes}; read it by ranges"
            )
        return self.read(path, 0, size) if size else b""

    def metrics(self) -> dict[str, float | int]:
        """:meth:`stats` as flat counters (the same keys for every backend)."""
        return self.stats().as_dict()

    def close(self) -> None:
        """Release sockets and join threads; idempotent. Nothing to do by default."""
        return None

    def _check_deadline(self) -> None:
        """Raise the deadline's StorageTimeout once the operation in progress is out of time."""
        deadline = self._deadline
        if deadline is not None:
            deadline.check()

    # ------------------------------------------------------------------ fork handling

    def _track_forks(self) -> None:
        _LIVE_READERS.add(self)

    def _after_fork_in_child(self) -> None:
        """Drop what the parent process owned (sockets, threads, locks); keep pinned state."""
        return None


# Readers alive in this process; one fork hook for every backend.
_LIVE_READERS: weakref.WeakSet[BaseRangeReader] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for reader in list(_LIVE_READERS):
        try:
            reader._after_fork_in_child()
        except Exception:  # one reader's failure must not leave the others on the parent's sockets
            logger.exception("%r could not drop its parent's state after fork", reader)


os.register_at_fork(after_in_child=_after_fork_in_child)


@runtime_checkable
class ListableReader(RangeReader, Protocol):
    """A reader whose store can list folders (local disk, the Hub, S3); plain HTTP cannot."""

    def list_files(self, prefix: str) -> list[str]:
        """Relative paths of all files under folder ``prefix``, sorted; [] when it is absent."""
        ...

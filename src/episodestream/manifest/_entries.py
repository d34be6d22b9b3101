"""The per-file index: one entry per source video file in the local sidecar cache.

A dataset opened on some episodes reads only the video files holding them; what it learns
about each file (its ``TrackIndex`` sample table, size, ETag and Last-Modified) is kept as
an entry of its own, so a later open of other episodes adds the files it lacks instead of
rebuilding, and opens of two subsets never overwrite each other. Spans are then planned
from the entries and the episodes table, which costs no I/O.

Layout, beside the dataset's whole sidecar (``sidecars/<name>-<root digest>/``)::

    files-<info.json digest, 16 hex>/
        <sha256 of the file's path, 32 hex>.arrow    one entry per source video file
        locks/<the same digest>.lock                 its build lock

An entry is an Arrow IPC file of one record batch with the ``file.*`` / ``sample.*``
columns of a one-file table (``_tables``), and schema metadata ``episodestream.file_entry``
holding JSON: format version, the dataset's root, revision and ``info.json`` digest, the
file's path and its sample count. What an entry depends on is only the file itself (checked
by size and validators) and the dataset it belongs to, so the episodes table is not part of
its key: spans are planned again from the current table on every open.

Concurrency: an entry is written to a temporary file in its folder and renamed over the
old one, so a reader sees a whole entry or none. A process that needs a missing entry
takes that file's lock, looks again, and only then reads the video file: concurrent opens
read each file once. (One lock per file: lock stripes shared by a build's 16 threads would
serialise them, 16 threads over 64 stripes colliding most of the time.) Entries are not
fsynced: a crash can leave one truncated, which the checks on load refuse (logged), and
the next open rebuilds it.

Bounds: one entry and one lock file per source file of the dataset (a rebuilt entry
replaces the old one); one entry folder per dataset root and revision (a folder for
another ``info.json`` of the same root is removed when a new one is made, as a whole
sidecar is replaced). An entry is read whole, and first checked by size: more bytes than
an entry of the samples its video's moov could hold (the build's moov cap) is refused
unread; a header over 64 KiB is refused before it is parsed, one claiming more samples than
that after it, and a table that cannot describe its file (``check_file_table``, every
sample) after that.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock
import pyarrow as pa
import pyarrow.ipc as ipc

from episodestream.errors import ManifestError
from episodestream.lerobot import DatasetMeta, parse_json
from episodestream.manifest._tables import (
    assemble_tracks,
    check_file_table,
    file_table_columns,
    file_table_track,
    load_file_table,
    one_row_batch,
)
from episodestream.mp4 import TrackIndex
from episodestream.storage import FileInfo

__all__ = [
    "FILE_ENTRY_VERSION",
    "EntryKey",
    "FileEntryStore",
    "IndexedFile",
    "file_entry_bytes",
    "load_file_entry",
]

logger = logging.getLogger(__name__)

FILE_ENTRY_VERSION = 1
_METADATA_KEY = b"episodestream.file_entry"
_FOLDER_PREFIX = "files-"
# folders of superseded info.json digests kept beside the current one (most recent first)
_SUPERSEDED_KEPT = 3
_MAX_HEADER_BYTES = 64 << 10
_ENTRY_BYTES_PER_SAMPLE = 64
_ENTRY_FIXED_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class EntryKey:
    """The dataset an entry belongs to: its root, revision and ``info.json`` digest."""

    root: str
    revision: str | None
    info_sha256: str

    @classmethod
    def of(cls, meta: DatasetMeta) -> EntryKey:
        return cls(root=meta.root, revision=meta.revision, info_sha256=meta.info_sha256)

    def to_json(self) -> dict[str, Any]:
        return {"root": self.root, "revision": self.revision, "info_sha256": self.info_sha256}


@dataclass(frozen=True, slots=True, eq=False)
class IndexedFile:
    """What indexing one source video file found: its size and validators as the store
    described them, and its sample table."""

    path: str
    camera: str
    info: FileInfo
    track: TrackIndex


def file_entry_bytes(entry: IndexedFile, key: EntryKey) -> bytes:
    """The bytes of ``entry``'s file (see the module docstring)."""
    files, samples = assemble_tracks([entry.path], [entry.camera], [(entry.info, entry.track)])
    header = {
        "version": FILE_ENTRY_VERSION,
        "dataset": key.to_json(),
        "path": entry.path,
        "num_samples": entry.track.num_samples,
    }
    batch = one_row_batch(
        file_table_columns(files, samples), {_METADATA_KEY: json.dumps(header).encode()}
    )
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _entry_header(schema: pa.Schema, where: str) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(_METADATA_KEY)
    if raw is None:
        raise ManifestError(f"{where}: not an episodestream file entry (no header)")
    if len(raw) > _MAX_HEADER_BYTES:
        raise ManifestError(f"{where}: entry header of {len(raw)} bytes (at most 64 KiB)")
    header = parse_json(raw, where=f"{where}: entry header", error=ManifestError)
    if not isinstance(header, dict) or header.get("version") != FILE_ENTRY_VERSION:
        version = header.get("version") if isinstance(header, dict) else None
        raise ManifestError(
            f"{where}: file entry format version {version!r}, this library reads version "
            f"{FILE_ENTRY_VERSION}"
        )
    return header


def load_file_entry(
    source: pa.Buffer | pa.NativeFile,
    *,
    key: EntryKey,
    path: str,
    where: str,
    max_samples: int | None = None,
) -> IndexedFile:
    """The entry of ``path`` from an entry file's bytes (or its mapping), after every check.

    Raises:
        ManifestError: unreadable, another format version, another dataset or file, more
            samples than ``max_samples`` (refused from the header, before the table is
            read), or a table that cannot describe the file (see ``check_file_table``);
            names ``where``.
    """
    try:
        reader = ipc.open_file(source)
        header = _entry_header(reader.schema, where)
        claimed = header.get("num_samples")
        if type(claimed) is not int or claimed < 0:
            raise ManifestError(f"{where}: entry header gives {claimed!r} samples")
        if max_samples is not None and claimed > max_samples:
            raise ManifestError(
                f"{where}: entry of {claimed} samples; at most {max_samples} for this file"
            )
        if reader.num_record_batches != 1:
            raise ManifestError(
                f"{where}: expected 1 record batch, found {reader.num_record_batches}"
            )
        batch = reader.get_batch(0)
        batch.validate()
    except ManifestError:
        raise
    except (pa.ArrowException, OSError) as error:
        raise ManifestError(f"{where}: not a readable file entry: {error}") from error
    if header.get("dataset") != key.to_json():
        raise ManifestError(f"{where}: the entry belongs to another dataset or revision")
    if header.get("path") != path:
        raise ManifestError(f"{where}: the entry is of {header.get('path')!r}, not {path!r}")
    files, samples = load_file_table(batch, where)
    check_file_table(files, samples, where, per_sample=True)
    if files["path"] != [path] or int(files["sample_bounds"][-1]) != header.get("num_samples"):
        raise ManifestError(f"{where}: the entry's table contradicts its header")
    size = int(files["size"][0])
    if int(files["sample_bounds"][-1]) > size:
        raise ManifestError(f"{where}: more samples than the {size}-byte file has bytes")
    etag, modified = files["etag"][0], files["last_modified"][0]
    return IndexedFile(
        path=path,
        camera=str(files["camera"][0]),
        info=FileInfo(size, etag, modified),
        track=file_table_track(files, samples, 0),
    )


def _entry_bytes_cap(samples: int) -> int:
    """Most bytes an entry of ``samples`` samples takes: its sample columns (six int64 and
    one byte a sample) plus the file's ``stsd``, header and Arrow framing."""
    return samples * _ENTRY_BYTES_PER_SAMPLE + _ENTRY_FIXED_BYTES


def _path_digest(path: str) -> str:
    return hashlib.sha256(path.encode()).hexdigest()[:32]


def _modified(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


class FileEntryStore:
    """The per-file entries of one dataset in the local cache (see the module docstring).

    Thread-safe and shared by processes: loads need no lock; :meth:`building` serialises
    the build of one file across threads and processes.
    """

    def __init__(self, folder: Path, key: EntryKey, *, lock_timeout_s: float) -> None:
        self.folder = folder
        self.key = key
        self._lock_timeout_s = lock_timeout_s
        self.unsaved = False  # an entry could not be written (logged once)

    @classmethod
    def beside(cls, sidecar: Path, meta: DatasetMeta, *, lock_timeout_s: float) -> FileEntryStore:
        """The store of ``meta``'s dataset in the cache folder of its whole ``sidecar``."""
        folder = sidecar.parent / f"{_FOLDER_PREFIX}{meta.info_sha256[:16]}"
        return cls(folder, EntryKey.of(meta), lock_timeout_s=lock_timeout_s)

    def entry_path(self, path: str) -> Path:
        """Where the entry of source file ``path`` lives."""
        return self.folder / f"{_path_digest(path)}.arrow"

    def has(self, path: str) -> bool:
        """Whether an entry for ``path`` exists (unchecked: :meth:`load` checks it)."""
        return self.entry_path(path).is_file()

    def count(self) -> int:
        """How many entries the store holds (unchecked)."""
        try:
            return sum(1 for _ in self.folder.glob("*.arrow"))
        except OSError:
            return 0

    def prepare(self) -> None:
        """Create the folder; when it is new, remove the folders of other ``info.json``
        digests beside it beyond the most recently used few (superseded by a metadata
        change; the newest are kept so that a process still reading the dataset as it was,
        a DataLoader worker unpickling its manifest, finds its entries).

        Raises:
            OSError: the cache cannot be written.
        """
        if self.folder.is_dir():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        others = [
            other
            for other in self.folder.parent.glob(f"{_FOLDER_PREFIX}*")
            if other != self.folder and other.is_dir()
        ]
        others.sort(key=_modified, reverse=True)
        for other in others[_SUPERSEDED_KEPT:]:
            logger.info("removing superseded per-file index %s", other)
            shutil.rmtree(other, ignore_errors=True)

    def load(self, path: str, *, max_samples: int | None = None) -> IndexedFile | None:
        """The checked entry of ``path``; None when there is none or it is refused (logged:
        the caller rebuilds it). An entry too big for ``max_samples`` samples is refused
        before it is read, one whose header claims more after reading only that.

        Read whole, not mapped: the entry's arrays must not change if the file is
        rewritten in place while they are in use."""
        location = self.entry_path(path)
        try:
            with open(location, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if max_samples is not None and size > _entry_bytes_cap(max_samples):
                    raise ManifestError(
                        f"{location} ({path}): entry of {size} bytes, more than an entry of "
                        f"{max_samples} samples (at most for this file) takes"
                    )
                data = handle.read()
        except FileNotFoundError:
            return None
        except OSError as error:
            logger.warning(
                "per-file index entry %s unreadable (%s); rebuilding it", location, error
            )
            return None
        except ManifestError as error:
            logger.warning("per-file index entry refused: %s; rebuilding it", error)
            return None
        try:
            return load_file_entry(
                pa.py_buffer(data),
                key=self.key,
                path=path,
                where=f"{location} ({path})",
                max_samples=max_samples,
            )
        except ManifestError as error:
            logger.warning("per-file index entry refused: %s; rebuilding it", error)
            return None

    def remove(self, path: str) -> None:
        """Drop the entry of ``path`` (it proved wrong): the next open indexes the file
        again. A missing entry or a cache that cannot be written is left as it is."""
        with contextlib.suppress(OSError):
            self.entry_path(path).unlink()

    def save(self, entry: IndexedFile) -> None:
        """Write ``entry`` whole (temporary file, rename). A cache that cannot be written
        is logged once and the entry kept in memory only."""
        target = self.entry_path(entry.path)
        data = file_entry_bytes(entry, self.key)
        try:
            fd, temporary = tempfile.mkstemp(
                prefix=f".{target.name}.", suffix=".tmp", dir=target.parent
            )
        except OSError as error:
            self._log_unsaved(error)
            return
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.chmod(temporary, 0o644)
            os.replace(temporary, target)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            self._log_unsaved(error)

    def _log_unsaved(self, error: OSError) -> None:
        if not self.unsaved:
            self.unsaved = True
            logger.warning("per-file index %s is not writable (%s)", self.folder, error)

    @contextlib.contextmanager
    def building(self, path: str) -> Iterator[None]:
        """Hold the build lock of ``path`` (one thread or process builds a file at a time).

        Raises:
            ManifestError: waited ``lock_timeout_s`` for another process's build.
        """
        locks = self.folder / "locks"
        lock_path = locks / f"{_path_digest(path)}.lock"
        lock: filelock.FileLock | None = filelock.FileLock(lock_path, timeout=self._lock_timeout_s)
        try:
            locks.mkdir(exist_ok=True)
            lock.acquire()
        except filelock.Timeout as error:  # (a TimeoutError, so an OSError: caught first)
            raise ManifestError(
                f"waited {self._lock_timeout_s:.0f} s for {lock_path}: another process is "
                f"still indexing {path} (delete the lock file if that process died)"
            ) from error
        except OSError as error:  # a cache we may read but not write: build unlocked
            self._log_unsaved(error)
            lock = None
        try:
            yield
        finally:
            if lock is not None:
                lock.release()

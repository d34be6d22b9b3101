"""The sidecar index: a manifest as one memory-mappable Arrow IPC file.

Layout (version 1): one record batch of one row; every column is a ``large_list`` whose
single element holds a whole table column, so tables of different lengths share a file
and each loads as a zero-copy numpy view of the mapped file:

- ``episode.index`` (E) and ``span.<field>`` (E x C, row-major) — the span arrays;
- ``file.<field>`` (F) — path, camera, size, validator and each scalar ``TrackIndex``
  field, plus ``file.sample_bounds`` (F + 1, CSR offsets into the sample columns);
- ``sample.<field>`` (S) — each per-sample ``TrackIndex`` array, all files concatenated
  (bool arrays stored as uint8).

Schema metadata ``episodestream.sidecar`` holds JSON: format version, dataset identity,
counts. Loading touches no sample pages, so it costs little time and memory at any size.

Version 2 adds ``identity.episodes``: the runs of episodes indexed when a sidecar holds only
a subset (``episodestream index --episodes/--num-episodes``). A sidecar of every episode has
no such field and is still written as version 1 (a version 1 sidecar indexes every
episode), so a library that reads only version 1 reads it, and refuses a subset one instead
of taking it for the whole dataset.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from episodestream.errors import ManifestError
from episodestream.lerobot import parse_json
from episodestream.manifest._manifest import (
    SPAN_FIELDS,
    DatasetIdentity,
    EpisodeManifest,
    SpanArrays,
)
from episodestream.manifest._tables import (
    Column,
    check_file_table,
    column_array,
    file_table_columns,
    load_file_table,
    numeric_column,
    one_row_batch,
)

__all__ = [
    "MAX_HEADER_BYTES",
    "SIDECAR_VERSION",
    "load_sidecar",
    "read_sidecar_header",
    "sidecar_bytes",
    "write_sidecar",
]

SIDECAR_VERSION = 2
#: Largest header read (identity, cameras and the runs of a subset's episodes: a subset
#: of scattered episodes of a huge dataset holds a pair per run).
MAX_HEADER_BYTES = 16 << 20
# the versions this library reads; version 1 is a sidecar of every episode
_READABLE_VERSIONS = (1, 2)
_METADATA_KEY = b"episodestream.sidecar"


def _columns(manifest: EpisodeManifest) -> list[Column]:
    columns: list[Column] = [
        ("episode.index", *numeric_column(np.asarray(manifest.episode_index, dtype=np.int64)))
    ]
    for name, dtype in SPAN_FIELDS.items():
        array = np.asarray(getattr(manifest.spans, name), dtype=dtype).reshape(-1)
        columns.append((f"span.{name}", *numeric_column(array)))
    columns.extend(file_table_columns(manifest._files, manifest._samples))
    return columns


def _header(manifest: EpisodeManifest) -> dict[str, Any]:
    return {
        "version": SIDECAR_VERSION if manifest.identity.episodes is not None else 1,
        "identity": manifest.identity.to_json(),
        "cameras": list(manifest.cameras),
        "num_episodes": manifest.num_episodes,
        "num_files": manifest.num_files,
        "num_samples": manifest.num_samples,
    }


def _batch(manifest: EpisodeManifest) -> pa.RecordBatch:
    header = json.dumps(_header(manifest)).encode()
    return one_row_batch(_columns(manifest), {_METADATA_KEY: header})


def write_sidecar(manifest: EpisodeManifest, path: str | os.PathLike[str]) -> Path:
    """Write ``manifest`` to ``path`` atomically (temporary file, fsync, rename).

    Readers of ``path`` see the old file or the new one, never half of one. Concurrent
    writers should hold a lock (``open_manifest`` does); the last rename wins.

    Raises:
        OSError: the folder cannot be written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    batch = _batch(manifest)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            sink = pa.PythonFile(handle, mode="w")
            with ipc.new_file(sink, batch.schema) as writer:
                writer.write_batch(batch)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return target


def sidecar_bytes(manifest: EpisodeManifest) -> bytes:
    """The sidecar file's bytes in memory (for publishing through a writer of one's own)."""
    batch = _batch(manifest)
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _parse_header(schema: pa.Schema, where: str) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(_METADATA_KEY)
    if raw is None:
        raise ManifestError(f"{where}: not an episodestream sidecar (no header)")
    if len(raw) > MAX_HEADER_BYTES:
        raise ManifestError(
            f"{where}: sidecar header of {len(raw)} bytes; at most {MAX_HEADER_BYTES}"
        )
    header = parse_json(raw, where=f"{where}: sidecar header", error=ManifestError)
    version = header.get("version") if isinstance(header, dict) else None
    if version not in _READABLE_VERSIONS:
        raise ManifestError(
            f"{where}: sidecar format version {version!r}, this library reads versions "
            f"{', '.join(map(str, _READABLE_VERSIONS))}; rebuild it with `episodestream index`"
        )
    if version == 1 and isinstance(header.get("identity"), dict):
        header["identity"].pop("episodes", None)  # version 1: every episode, whatever it says
    return header


def read_sidecar_header(source: pa.NativeFile | pa.Buffer, *, where: str) -> DatasetIdentity:
    """The identity recorded in a sidecar, reading only its footer and schema."""
    try:
        reader = ipc.open_file(source)
    except (pa.ArrowException, OSError) as error:
        raise ManifestError(f"{where}: not a readable sidecar: {error}") from error
    return DatasetIdentity.from_json(_parse_header(reader.schema, where)["identity"])


def load_sidecar(
    path: str | os.PathLike[str] | pa.Buffer,
    *,
    expect: DatasetIdentity | None = None,
    origin: str = "explicit",
) -> EpisodeManifest:
    """Memory-map a sidecar file (or read a buffer) as an :class:`EpisodeManifest`.

    Arrays are zero-copy, read-only views of the mapping: nothing per sample is read.

    Args:
        path: the sidecar file, or its bytes as a ``pyarrow.Buffer``.
        expect: the identity of the dataset it must describe (checked when given); with
            ``expect.episodes`` a sidecar of a subset holding those episodes also passes.
        origin: recorded on the manifest (``explicit``, ``cache``, ``published``, ``built``).

    Raises:
        ManifestError: unreadable, another format version, inconsistent, or (with
            ``expect``) describing another dataset — the message says why.
    """
    file_stat: tuple[int, int, int, int] | None = None
    if isinstance(path, pa.Buffer):
        where = "<sidecar buffer>"
        sidecar_path = None
        source: Any = path
    else:
        where = str(path)
        sidecar_path = Path(path)
        try:
            source = pa.memory_map(where, "r")
        except FileNotFoundError as error:
            raise ManifestError(f"{where}: no such sidecar") from error
        except (pa.ArrowException, OSError) as error:
            raise ManifestError(f"{where}: cannot map sidecar: {error}") from error
        file_stat = _stat_of(source)
    try:
        reader = ipc.open_file(source)
        header = _parse_header(reader.schema, where)
        if reader.num_record_batches != 1:
            raise ManifestError(
                f"{where}: expected 1 record batch, found {reader.num_record_batches}"
            )
        batch = reader.get_batch(0)
    except ManifestError:
        raise
    except (pa.ArrowException, OSError) as error:
        raise ManifestError(f"{where}: not a readable sidecar: {error}") from error
    identity = DatasetIdentity.from_json(header["identity"])
    if expect is not None:
        reason = identity.mismatch(expect)
        if reason is not None:
            raise ManifestError(f"{where}: sidecar does not match the dataset: {reason}")

    cameras = header.get("cameras", ())
    if not isinstance(cameras, list) or not all(isinstance(c, str) for c in cameras):
        raise ManifestError(f"{where}: sidecar header's cameras are not a list of keys")
    cameras = tuple(cameras)
    episodes = column_array(batch, "episode.index", where)
    if episodes.dtype != np.int64 or episodes.ndim != 1:
        raise ManifestError(f"{where}: column 'episode.index' is {episodes.dtype}, not int64")
    # counted before the runs are expanded: a header may claim 2**62 episodes
    if identity.episodes is not None and (
        identity.episodes.count != len(episodes)
        or not np.array_equal(episodes, identity.episodes.ids())
    ):
        raise ManifestError(
            f"{where}: the sidecar's episode column is not the subset its header records "
            f"({identity.episodes.describe()})"
        )
    if len(episodes) > 1 and not (np.diff(episodes) > 0).all():
        raise ManifestError(f"{where}: the sidecar's episode column is not ascending")
    shape = (len(episodes), len(cameras))
    spans: dict[str, np.ndarray] = {}
    for name, dtype in SPAN_FIELDS.items():
        flat = column_array(batch, f"span.{name}", where)
        if flat.dtype != dtype:
            raise ManifestError(
                f"{where}: column 'span.{name}' is {flat.dtype}, expected {np.dtype(dtype)}"
            )
        if flat.size != shape[0] * shape[1]:
            raise ManifestError(
                f"{where}: column 'span.{name}' has {flat.size} values, expected "
                f"{shape[0] * shape[1]}"
            )
        spans[name] = flat.reshape(shape)
    files, samples = load_file_table(batch, where)
    # per file only: a mapped sidecar's sample pages are read when a file is used
    check_file_table(files, samples, where, per_sample=False)
    manifest = EpisodeManifest(
        identity=identity,
        cameras=cameras,
        episode_index=episodes,
        spans=SpanArrays(**spans),
        files=files,
        samples=samples,
        origin=origin,
        sidecar_path=sidecar_path,
    )
    manifest.sidecar_stat = file_stat
    if sidecar_path is not None:
        manifest.reduce_by_reference = _sidecar_reference
    return manifest


def _stat_of(source: pa.NativeFile) -> tuple[int, int, int, int] | None:
    """(device, inode, size, mtime) of the file a sidecar was mapped from (the mapping's
    own descriptor: whatever was renamed over its path since)."""
    try:
        stat = os.fstat(source.fileno())
    except (OSError, pa.ArrowException):
        return None
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _sidecar_reference(manifest: EpisodeManifest) -> tuple[Any, ...]:
    """``EpisodeManifest.__reduce__`` of a manifest mapped from a sidecar file: the worker maps
    the same file again (see :func:`_reopen_sidecar`)."""
    checked = (manifest.sidecar_stat, manifest.span_end_s)
    return (
        _reopen_sidecar,
        (str(manifest.sidecar_path), manifest.identity, manifest.origin, checked),
    )


def _reopen_sidecar(
    path: str,
    identity: DatasetIdentity,
    origin: str,
    checked: tuple[tuple[int, int, int, int] | None, np.ndarray | None] | None = None,
) -> EpisodeManifest:
    """Unpickling: map the same sidecar again and insist it is still the file that was
    checked when the dataset was opened (or, for a manifest never checked, of the same
    dataset)."""
    manifest = load_sidecar(path, origin=origin)
    if manifest.identity != identity:
        raise ManifestError(f"{path}: the sidecar was replaced by one for another dataset")
    stat, ends = checked if checked is not None else (None, None)
    if stat is not None and manifest.sidecar_stat != stat:
        raise ManifestError(
            f"{path}: the sidecar was replaced since the dataset was opened (and checked); "
            "open it again"
        )
    if ends is not None:
        manifest.set_span_ends(ends)
    return manifest

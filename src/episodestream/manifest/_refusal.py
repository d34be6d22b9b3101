"""Refusing an index that proved wrong at a sample: drop what made it, so the next open
indexes again.

Below the manifest (``EpisodeManifest.refuse`` calls :func:`refuse_manifest`): it acts on the
files behind an index (a cached or published sidecar, per-file entries), read from the few
attributes :class:`RefusableIndex` names, never on the manifest's arrays.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from episodestream.manifest._entries import EntryKey, FileEntryStore

logger = logging.getLogger(__name__)

__all__ = ["RefusableIndex", "refuse_manifest", "was_refused"]


class IndexIdentity(Protocol):
    """What a refusal needs of the dataset an index describes (``DatasetIdentity``)."""

    @property
    def root(self) -> str: ...

    @property
    def revision(self) -> str | None: ...

    @property
    def info_sha256(self) -> str: ...


class RefusableIndex(Protocol):
    """What a refusal reads of a manifest (``EpisodeManifest``) and the flag it sets once."""

    file_paths: Sequence[str]
    origin: str
    sidecar_path: Path | None
    sidecar_stat: tuple[int, int, int, int] | None
    published_sha256: str | None
    entries_folder: Path | None
    _refused: bool

    @property
    def identity(self) -> IndexIdentity: ...


# a published sidecar refused at a sample is remembered by the SHA-256 of its bytes, in this
# file beside the dataset's cached sidecar (one digest a line, the latest few), and in this
# process for one held in memory only
_REFUSED_PUBLISHED_FILE = "published-refused"
_REFUSED_PUBLISHED_KEPT = 16
_refused_published: set[str] = set()
_refusal_lock = threading.Lock()


def was_refused(folder: Path | None, sha256: str) -> bool:
    if sha256 in _refused_published:
        return True
    if folder is None:
        return False
    try:
        text = (folder / _REFUSED_PUBLISHED_FILE).read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return sha256 in text.split()


def _remember_refused(folder: Path | None, sha256: str) -> None:
    with _refusal_lock:
        _refused_published.add(sha256)
        if folder is None:
            return
        marker = folder / _REFUSED_PUBLISHED_FILE
        try:
            known = marker.read_text(encoding="ascii", errors="replace").split()
        except OSError:
            known = []
        kept = [digest for digest in known if digest != sha256][-(_REFUSED_PUBLISHED_KEPT - 1) :]
        try:
            fd, temporary = tempfile.mkstemp(prefix=f".{marker.name}.", dir=folder)
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write("\n".join([*kept, sha256]) + "\n")
            os.replace(temporary, marker)
        except OSError as error:
            logger.warning("cannot record the refused published sidecar in %s: %s", marker, error)


def refuse_manifest(manifest: RefusableIndex, reason: str, *, file: str | int | None) -> None:
    """``EpisodeManifest.refuse``: the index proved wrong at a sample; make the next open
    index again (see there). Logs once per manifest and never raises."""
    with _refusal_lock:
        if manifest._refused:
            return
        manifest._refused = True
    try:
        _refuse(manifest, reason, file)
    except Exception:  # a refusal must not hide the error that caused it
        logger.warning("could not drop the refused index", exc_info=True)


def _refuse(manifest: RefusableIndex, reason: str, file: str | int | None) -> None:
    path = manifest.file_paths[file] if isinstance(file, int) else file
    origin = manifest.origin
    sidecar = manifest.sidecar_path
    identity = manifest.identity
    # a sidecar at an explicit path is the caller's; any other lives in the cache
    if sidecar is not None and origin != "explicit":
        if _same_file(sidecar, manifest.sidecar_stat):
            if origin == "published":
                _remember_refused(sidecar.parent, _file_sha256(sidecar))
            with contextlib.suppress(FileNotFoundError):
                sidecar.unlink()
            logger.warning(
                "the index %s proved wrong (%s); removed: the next open indexes the videos%s",
                sidecar,
                reason,
                " (the published sidecar is ignored from now on)" if origin == "published" else "",
            )
        else:
            logger.warning("the index %s proved wrong (%s); it was replaced since", sidecar, reason)
        folder: Path | None = sidecar.parent / f"files-{identity.info_sha256[:16]}"
    elif sidecar is None and origin == "published" and manifest.published_sha256 is not None:
        _remember_refused(None, manifest.published_sha256)
        logger.warning(
            "the published sidecar proved wrong (%s); ignored from now on in this process",
            reason,
        )
        folder = None
    elif sidecar is not None:
        logger.warning(
            "the sidecar %s proved wrong (%s); not removed (it was given explicitly): rebuild "
            "it with `episodestream index`",
            sidecar,
            reason,
        )
        folder = None
    else:
        folder = manifest.entries_folder
        if folder is None:
            logger.warning("the index proved wrong (%s)", reason)
    if folder is not None and path is not None:
        key = EntryKey(identity.root, identity.revision, identity.info_sha256)
        store = FileEntryStore(folder, key, lock_timeout_s=0.0)
        if store.has(path):
            store.remove(path)
            logger.warning(
                "per-file index entry of %s removed (%s): the next open reads its moov again",
                path,
                reason,
            )


def _same_file(path: Path, recorded: tuple[int, int, int, int] | None) -> bool:
    if recorded is None:
        return False
    try:
        stat = path.stat()
    except OSError:
        return False
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns) == recorded


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for piece in iter(lambda: handle.read(1 << 20), b""):
            digest.update(piece)
    return digest.hexdigest()

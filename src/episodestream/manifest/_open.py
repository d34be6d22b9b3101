"""Find, check, fetch or build the manifest of a dataset: :func:`open_manifest`."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import re
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import filelock
import numpy as np
import pyarrow as pa

from episodestream.errors import (
    InvalidResponse,
    ManifestError,
    NotFound,
    SidecarCoverageError,
    StorageError,
)
from episodestream.lerobot import DatasetMeta, open_arrow_file
from episodestream.manifest._build import (
    DEFAULT_BUILD_WORKERS,
    build_manifest,
    episode_video_files,
    index_episodes,
    source_info,
)
from episodestream.manifest._checks import check_spans
from episodestream.manifest._entries import FileEntryStore
from episodestream.manifest._manifest import (
    DatasetIdentity,
    EpisodeManifest,
    EpisodeSubset,
    episode_subset,
)
from episodestream.manifest._refusal import was_refused
from episodestream.manifest._sidecar import load_sidecar, read_sidecar_header, write_sidecar
from episodestream.storage import RangeReader

__all__ = [
    "CACHE_ENV",
    "DEFAULT_LOCK_TIMEOUT_S",
    "PUBLISHED_SIDECAR_PATH",
    "SidecarStatus",
    "default_cache_dir",
    "open_manifest",
    "sidecar_cache_path",
    "sidecar_status",
    "verify_sources",
]

logger = logging.getLogger(__name__)

CACHE_ENV = "EPISODESTREAM_CACHE"
PUBLISHED_SIDECAR_PATH = "meta/episodestream/index.arrow"
SIDECAR_FILENAME = "index.arrow"
# a sidecar of a subset of the episodes sits beside the dataset's whole one, named by the
# subset: index.episodes-<count>-<digest>.arrow (one never replaces the other)
_SUBSET_PREFIX = "index.episodes-"
_SUBSET_SUFFIX = ".arrow"
# N ranks wait for the one that builds; a build of a huge dataset over a WAN takes a while
DEFAULT_LOCK_TIMEOUT_S = 3600.0
_DOWNLOAD_PIECE_BYTES = 64 << 20
# a published sidecar up to this size is fetched whole at once (one request) and checked
# after; a bigger one has its header checked first (two small requests)
_HEADER_CHECK_MIN_BYTES = 8 << 20
_SLUG = re.compile(r"[^A-Za-z0-9._-]+")
# a subset of the episodes takes a published sidecar only when it comes in one request:
# a bigger one grows with the dataset, the files of the subset do not
_SUBSET_PUBLISHED = (
    "{size} bytes, over one request: not fetched for a subset of the episodes (their "
    "video files are indexed instead)"
)


def default_cache_dir() -> Path:
    """``$EPISODESTREAM_CACHE``, else ``~/.cache/episodestream``."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "episodestream"


def sidecar_cache_path(
    meta: DatasetMeta,
    cache_dir: str | os.PathLike[str] | None = None,
    *,
    episodes: Sequence[int] | np.ndarray | EpisodeSubset | None = None,
) -> Path:
    """Where the local cache keeps this dataset's sidecar: keyed by root and revision.

    With ``episodes`` (a subset), the sidecar of that subset: a file of its own beside the
    whole dataset's, named by the subset, so neither overwrites the other (a list of every
    episode is the whole dataset's).

    Raises:
        UnknownEpisodesError: ``episodes`` names episodes the dataset lacks.
    """
    base = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    key = hashlib.sha256(f"{meta.root}\0{meta.revision or ''}".encode()).hexdigest()[:20]
    name = _SLUG.sub("_", meta.root.rstrip("/").rsplit("/", 1)[-1])[-40:] or "dataset"
    folder = base / "sidecars" / f"{name}-{key}"
    subset = episode_subset(meta, episodes)
    if subset is None:
        return folder / SIDECAR_FILENAME
    return folder / f"{_SUBSET_PREFIX}{subset.count}-{subset.key()}{_SUBSET_SUFFIX}"


def _subset_sidecars(whole: Path, subset: EpisodeSubset | None) -> list[Path]:
    """The subset sidecars cached beside ``whole`` (the dataset's whole one): ``subset``'s
    own first, then the others by name (one of a larger subset serves too)."""
    try:
        found = sorted(whole.parent.glob(f"{_SUBSET_PREFIX}*{_SUBSET_SUFFIX}"))
    except OSError:
        return []
    if subset is not None:
        own = f"{_SUBSET_PREFIX}{subset.count}-{subset.key()}{_SUBSET_SUFFIX}"
        found.sort(key=lambda path: path.name != own)
    return found


def verify_sources(
    reader: RangeReader,
    manifest: EpisodeManifest,
    *,
    root: str | None = None,
    workers: int = DEFAULT_BUILD_WORKERS,
    episodes: EpisodeSubset | None = None,
) -> str | None:
    """Compare every source file's size and validators with the manifest's record (with
    ``episodes``, only the files holding those episodes).

    One look-up per file, ``workers`` at a time. Validators are compared only when ``root``
    is None or the manifest's own root (see ``EpisodeManifest.source_change``).
    Returns why they differ (a file found changed or missing), or None.
    """
    if episodes is None:
        files: Sequence[int] = range(manifest.num_files)
    else:
        rows = [manifest.row(episode) for episode in episodes.ids().tolist()]
        files = np.unique(manifest.spans.file_id[rows]).tolist()

    def check(index: int) -> str | None:
        path = manifest.file_paths[index]
        try:
            current = source_info(reader, path)
        except NotFound:
            return f"{path} is missing"
        return manifest.source_change(index, current, root=root)

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="es-verify") as pool:
        for reason in pool.map(check, files):
            if reason is not None:
                return reason
    return None


def _try_load(
    path: Path,
    expected: DatasetIdentity,
    origin: str,
    reader: RangeReader,
    verify: bool,
    workers: int,
    meta: DatasetMeta,
    *,
    needed: np.ndarray | None = None,
    scope: EpisodeSubset | None = None,
) -> tuple[EpisodeManifest | None, str]:
    """(manifest, "") when ``path`` holds a matching sidecar whose spans ``meta`` does not
    contradict (``check_spans``), else (None, why not); with ``verify``, the files of
    ``scope``'s episodes (None: all) are looked up.

    Raises:
        SidecarCoverageError: with ``needed`` (the episodes ``expected`` covers), a sidecar
            of this dataset built for a subset lacking some of them (an explicit sidecar is
            the user's: it is neither skipped nor rebuilt over).
    """
    if not path.is_file():
        return None, "absent"
    try:
        manifest = load_sidecar(path, origin=origin)
    except ManifestError as error:
        return None, str(error)
    identity = manifest.identity
    reason = identity.mismatch(expected)
    if reason is not None:
        subset = identity.episodes
        if (
            needed is not None
            and subset is not None
            and identity.dataset_mismatch(expected) is None
        ):
            raise SidecarCoverageError(str(path), subset.missing(needed), subset.describe())
        return None, f"{path}: sidecar does not match the dataset: {reason}"
    try:
        check_spans(manifest, meta, where=str(path))
    except ManifestError as error:
        return None, str(error)
    if verify:
        # a subset looks up its own files only
        reason = verify_sources(
            reader, manifest, root=expected.root, workers=workers, episodes=scope
        )
        if reason is not None:
            return None, f"{path}: stale sidecar: {reason}"
    return manifest, ""


def _published_header_mismatch(
    reader: RangeReader, size: int, expected: DatasetIdentity
) -> str | None:
    """For a big published sidecar, why its footer's identity is not this dataset's.

    Small ones (one request to fetch whole) are checked after download instead.
    """
    if size <= _HEADER_CHECK_MIN_BYTES:
        return None
    where = f"{PUBLISHED_SIDECAR_PATH} (published)"
    identity = read_sidecar_header(
        open_arrow_file(reader, PUBLISHED_SIDECAR_PATH, size), where=where
    )
    reason = identity.mismatch(expected)
    return None if reason is None else f"{where}: {reason}"


def _read_published(reader: RangeReader) -> tuple[bytes | None, int]:
    """``(bytes, size)`` of a published sidecar up to ``_HEADER_CHECK_MIN_BYTES``, fetched
    whole in one request (no size look-up first); ``(None, size)`` for a bigger one.

    Raises:
        NotFound: nothing is published.
    """
    try:
        data = reader.read_file(PUBLISHED_SIDECAR_PATH, max_bytes=_HEADER_CHECK_MIN_BYTES)
    except InvalidResponse:  # larger than max_bytes (refused before its body was read)
        return None, reader.size(PUBLISHED_SIDECAR_PATH)
    return data, len(data)


def _fetch_published(
    reader: RangeReader,
    destination: Path,
    expected: DatasetIdentity,
    meta: DatasetMeta,
    *,
    small_only: bool = False,
) -> tuple[bool, str]:
    """Copy the dataset's published sidecar to ``destination`` if it matches the dataset
    and its spans pass ``check_spans`` (with ``small_only``, only one fetched in one
    request: see ``_SUBSET_PUBLISHED``); one refused at a sample before (its digest in
    ``published-refused`` beside ``destination``) is ignored."""
    try:
        published_bytes, size = _read_published(reader)
    except NotFound:
        return False, "absent"
    if small_only and published_bytes is None:
        return False, _SUBSET_PUBLISHED.format(size=size)
    where = f"{PUBLISHED_SIDECAR_PATH} (published)"
    reason = _published_header_mismatch(reader, size, expected)
    if reason is not None:
        return False, reason
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(
        prefix=f".{destination.name}.", suffix=".download", dir=destination.parent
    )
    digest = hashlib.sha256()
    try:
        with os.fdopen(fd, "wb") as handle:
            if published_bytes is not None:
                handle.write(published_bytes)
                digest.update(published_bytes)
            else:
                for offset in range(0, size, _DOWNLOAD_PIECE_BYTES):
                    length = min(_DOWNLOAD_PIECE_BYTES, size - offset)
                    piece = reader.read(PUBLISHED_SIDECAR_PATH, offset, length)
                    handle.write(piece)
                    digest.update(piece)
            handle.flush()
            os.fsync(handle.fileno())
        sha256 = digest.hexdigest()
        if was_refused(destination.parent, sha256):
            reason = "refused at a sample before (it does not describe the videos); ignored"
        else:
            try:  # whole, readable, this dataset's and its spans checked before it is visible
                loaded = load_sidecar(temporary)
                reason = loaded.identity.mismatch(expected)
                if reason is None:
                    check_spans(loaded, meta, where=where)
                del loaded
            except ManifestError as error:
                reason = str(error).replace(temporary, where)
        if reason is not None:
            os.unlink(temporary)
            return False, f"{where}: {reason}"
        os.chmod(temporary, 0o644)
        os.replace(temporary, destination)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return True, ""


def open_manifest(
    reader: RangeReader,
    meta: DatasetMeta,
    *,
    sidecar: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    use_published: bool = True,
    build: bool = True,
    verify: bool = False,
    workers: int = DEFAULT_BUILD_WORKERS,
    progress: bool = True,
    lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
    published_reader: RangeReader | None = None,
    episodes: Sequence[int] | np.ndarray | EpisodeSubset | None = None,
) -> EpisodeManifest:
    """The manifest of ``meta``'s dataset, from the first usable source in this order:

    1. ``sidecar``, an explicit local path (built and written there when absent or stale
       and ``build`` is true);
    2. the local cache, ``sidecar_cache_path(meta, cache_dir)``; with ``episodes``, else a
       cached sidecar of a subset holding them (``episodestream index --episodes``);
    3. with ``episodes``, the per-file index in the cache (``_entries``) when it holds
       every video file of those episodes: spans are planned from it, nothing is read;
    4. a copy published under the dataset root (the metadata root with split roots),
       ``meta/episodestream/index.arrow`` (``episodestream index --publish`` writes it):
       up to 8 MiB fetched whole in one request, a bigger one checked by its header first
       (with ``episodes``, only one that comes in one request); checked, then copied into
       the cache;
    5. built from the videos: with ``episodes``, only the files holding them are read
       (those the per-file index lacks), added to the per-file index, and the manifest of
       the subset is kept in memory; for the whole dataset, the files the per-file index
       lacks are read and the whole sidecar is written into the cache.

    So an open of some episodes touches only their video files, and later opens of other
    episodes (or of the whole dataset) add the files they lack instead of rebuilding. The
    whole sidecar is built and published under a file lock beside it, each file of the
    per-file index under a lock of its own, so N processes on a host build (or download)
    each once; files are renamed into place whole, so readers never see half a file.
    A sidecar for another dataset (revision, info.json, episodes table,
    totals, cameras), or one of a subset lacking episodes asked for, is never used (an
    explicit one of a subset raises rather than being rebuilt over); with ``verify``
    every source file's size and ETag/Last-Modified is also compared (one look-up per
    file) — otherwise the cache
    layer checks each file when it fetches from it (``manifest.check_source``).

    Args:
        reader: the dataset's reader.
        meta: its metadata (``load_dataset_meta``).
        sidecar: explicit sidecar path.
        cache_dir: cache folder (default ``$EPISODESTREAM_CACHE`` or
            ``~/.cache/episodestream``).
        use_cache: look in / write to the cache folder.
        use_published: look for a published copy under the dataset root.
        build: build when nothing usable is found; if false, raise instead.
        verify: compare source files' sizes and validators with the sidecar's record.
        workers: concurrent file look-ups when building or verifying.
        progress: progress bar while building (only on a terminal).
        lock_timeout_s: longest wait for another process's build.
        published_reader: the reader of the root a published copy lives under, when not
            ``reader`` (split roots: the metadata root; ``index --publish`` writes there).
        episodes: the episodes the caller will read (None: all); a sidecar of a subset
            holding them will do, and only their files are indexed.

    Raises:
        SidecarCoverageError: ``sidecar`` is this dataset's but built for a subset that
            lacks some of ``episodes`` (names the file and the episodes).
        UnknownEpisodesError: ``episodes`` names episodes the dataset lacks.
        ManifestError: nothing usable and ``build`` is false (saying why each candidate
            was refused), a build failure, or a lock wait that timed out.
    """
    whole = DatasetIdentity.of(meta)
    subset = episode_subset(meta, episodes)
    expected = dataclasses.replace(whole, episodes=subset)
    needed = subset.ids() if subset is not None else np.asarray(meta.episodes.episode_index)
    refused: list[str] = []
    publisher = published_reader if published_reader is not None else reader
    if sidecar is not None:
        path = Path(sidecar)
        manifest, reason = _try_load(
            path,
            expected,
            "explicit",
            reader,
            verify,
            workers,
            meta,
            needed=needed,
            scope=subset,
        )
        if manifest is not None:
            return manifest
        if not build:
            raise ManifestError(f"{path}: unusable sidecar ({reason}) and building is disabled")
        logger.warning("%s: %s; rebuilding it", path, reason)
        return _build_into(
            reader,
            meta,
            path,
            "explicit",
            workers,
            progress,
            lock_timeout_s,
            verify,
            published=False,
        )

    cache_path = sidecar_cache_path(meta, cache_dir) if use_cache else None
    if cache_path is not None:
        manifest, reason = _try_load(
            cache_path, whole, "cache", reader, verify, workers, meta, scope=subset
        )
        if manifest is not None:
            return manifest
        if reason != "absent":
            logger.warning("cached sidecar refused: %s", reason)
        refused.append(f"cache: {reason}")
        # only a subset is looked for among subset sidecars: the whole dataset never takes one
        for candidate in _subset_sidecars(cache_path, subset) if subset is not None else ():
            manifest, why = _try_load(
                candidate, expected, "cache", reader, verify, workers, meta, scope=subset
            )
            if manifest is not None:
                return manifest
            logger.debug("cached subset sidecar not used: %s", why)
        store = FileEntryStore.beside(cache_path, meta, lock_timeout_s=lock_timeout_s)
        try:
            if subset is not None:
                return _open_subset(
                    reader,
                    meta,
                    subset,
                    cache_path,
                    store,
                    workers,
                    progress,
                    verify,
                    published=use_published,
                    build=build,
                    publisher=publisher,
                )
            return _build_into(
                reader,
                meta,
                cache_path,
                "cache",
                workers,
                progress,
                lock_timeout_s,
                verify,
                published=use_published,
                build=build,
                publisher=publisher,
                store=store,
            )
        except _NothingUsable as nothing:
            refused.extend(nothing.reasons)
            raise ManifestError(
                "no usable sidecar and building is disabled: " + "; ".join(refused)
            ) from None
        except OSError as error:
            if isinstance(error, StorageError):  # NotFound / StorageTimeout are OSErrors too
                raise
            logger.warning(
                "sidecar cache %s is not writable (%s); working in memory", cache_path.parent, error
            )

    if use_published:
        try:
            published_bytes, size = _read_published(publisher)
        except NotFound:
            refused.append("published: absent")
        else:
            reason = (
                _SUBSET_PUBLISHED.format(size=size)
                if subset is not None and published_bytes is None
                else _published_header_mismatch(publisher, size, expected)
            )
            try:
                if reason is not None:
                    raise ManifestError(reason)
                data = (
                    published_bytes
                    if published_bytes is not None
                    else publisher.read(PUBLISHED_SIDECAR_PATH, 0, size)
                )
                sha256 = hashlib.sha256(data).hexdigest()
                if was_refused(None, sha256):
                    raise ManifestError("refused at a sample before; ignored")
                manifest = load_sidecar(pa.py_buffer(data), expect=expected, origin="published")
                check_spans(manifest, meta, where=f"{PUBLISHED_SIDECAR_PATH} (published)")
                manifest.published_sha256 = sha256
            except ManifestError as error:
                refused.append(f"published: {error}")
            else:
                if (
                    not verify
                    or (
                        reason := verify_sources(
                            reader, manifest, root=meta.root, workers=workers, episodes=subset
                        )
                    )
                    is None
                ):
                    return manifest
                refused.append(f"published: stale: {reason}")
    if not build:
        raise ManifestError(
            "no usable sidecar and building is disabled: " + "; ".join(refused or ["none found"])
        )
    return build_manifest(reader, meta, workers=workers, progress=progress, episodes=subset)


def _open_subset(
    reader: RangeReader,
    meta: DatasetMeta,
    subset: EpisodeSubset,
    whole_path: Path,
    store: FileEntryStore,
    workers: int,
    progress: bool,
    verify: bool,
    *,
    published: bool,
    build: bool,
    publisher: RangeReader,
) -> EpisodeManifest:
    """The manifest of ``subset`` from the per-file index ``store``: files it lacks are
    taken from a small published sidecar (copied to ``whole_path``, where it serves every
    subset), else read and added to the store. Only the subset's files are touched."""
    paths = episode_video_files(meta, subset)
    missing = [path for path in paths if not store.has(path)]
    reasons: list[str] = []
    if missing and published:
        # an unwritable cache fails here, before the published copy is fetched for nothing
        whole_path.parent.mkdir(parents=True, exist_ok=True)
        whole = DatasetIdentity.of(meta)
        fetched, why = _fetch_published(publisher, whole_path, whole, meta, small_only=True)
        if fetched:
            expected = dataclasses.replace(whole, episodes=subset)
            manifest, why = _try_load(
                whole_path, expected, "published", reader, verify, workers, meta, scope=subset
            )
            if manifest is not None:
                logger.info("using the published sidecar, copied to %s", whole_path)
                return manifest
        reasons.append(f"published: {why}")
    if missing and not build:
        reasons.append(
            f"per-file index: {len(missing)} of the {len(paths)} video files of "
            f"{subset.describe()} not indexed (e.g. {missing[0]})"
        )
        raise _NothingUsable(reasons)
    if missing:
        store.prepare()
        logger.info(
            "indexing %d video files of %s (%d more in the per-file index %s)",
            len(missing),
            subset.describe(),
            len(paths) - len(missing),
            store.folder,
        )
    return index_episodes(
        reader,
        meta,
        episodes=subset,
        store=store,
        verify=verify,
        build=build,
        workers=workers,
        progress=progress,
    )


class _NothingUsable(Exception):
    def __init__(self, reasons: list[str]) -> None:
        super().__init__("; ".join(reasons))
        self.reasons = reasons


def _build_into(
    reader: RangeReader,
    meta: DatasetMeta,
    path: Path,
    origin: str,
    workers: int,
    progress: bool,
    lock_timeout_s: float,
    verify: bool,
    *,
    published: bool,
    build: bool = True,
    publisher: RangeReader | None = None,
    store: FileEntryStore | None = None,
) -> EpisodeManifest:
    """Under ``path``'s lock: re-check ``path``, try the published copy, else build there
    (with ``store``, the per-file index: files it holds are not read again)."""
    expected = DatasetIdentity.of(meta)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = filelock.FileLock(f"{path}.lock", timeout=lock_timeout_s)
    try:
        with lock:
            # another process may have finished the job while we waited for the lock
            manifest, _reason = _try_load(path, expected, origin, reader, verify, workers, meta)
            if manifest is not None:
                return manifest
            reasons: list[str] = []
            if published:
                source = publisher if publisher is not None else reader
                fetched, why = _fetch_published(source, path, expected, meta)
                if fetched:
                    manifest, why = _try_load(
                        path, expected, "published", reader, verify, workers, meta
                    )
                    if manifest is not None:
                        logger.info("using the published sidecar, copied to %s", path)
                        return manifest
                reasons.append(f"published: {why}")
            if not build:
                raise _NothingUsable(reasons)
            # files of the per-file index are reused; those read go into the whole sidecar
            # only (which serves every subset)
            built = index_episodes(
                reader,
                meta,
                store=store,
                add=False,
                verify=verify,
                workers=workers,
                progress=progress,
            )
            write_sidecar(built, path)
            logger.info("wrote sidecar %s", path)
            manifest = load_sidecar(path, expect=expected, origin=built.origin)
            manifest.build_stats = built.build_stats
            # spans planned from this table just now: each can be planned again
            assert built.span_end_s is not None
            manifest.set_span_ends(built.span_end_s)
            return manifest
    except filelock.Timeout as error:
        raise ManifestError(
            f"waited {lock_timeout_s:.0f} s for {path}.lock: another process is still "
            f"building the index (delete the lock file if that process died)"
        ) from error


@dataclass(frozen=True, slots=True)
class SidecarStatus:
    """One place a sidecar may be: ``state`` is valid, stale, absent, invalid, or partial
    (this dataset's, built for a subset of its episodes: the reason says which).

    ``where`` is ``"per-file"`` for the per-file index in the cache (always ``partial``:
    it is not a sidecar, its reason counts the video files it holds; listed only when it
    exists, its entries unchecked until an open uses them)."""

    where: Literal["explicit", "cache", "per-file", "published"]
    location: str
    state: Literal["valid", "stale", "absent", "invalid", "partial"]
    reason: str = ""


def sidecar_status(
    reader: RangeReader,
    meta: DatasetMeta,
    *,
    sidecar: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    published_reader: RangeReader | None = None,
) -> list[SidecarStatus]:
    """Report each candidate sidecar without building or downloading anything; a published
    one is looked for through ``published_reader`` when given (split roots: the metadata
    root, as :func:`open_manifest` looks), else ``reader``. Sidecars of a subset of the
    episodes in the cache are listed after the whole dataset's, then the per-file index."""
    expected = DatasetIdentity.of(meta)
    publisher = published_reader if published_reader is not None else reader
    result: list[SidecarStatus] = []
    candidates: list[tuple[Literal["explicit", "cache"], Path]] = []
    if sidecar is not None:
        candidates.append(("explicit", Path(sidecar)))
    cache_path = sidecar_cache_path(meta, cache_dir)
    candidates.append(("cache", cache_path))
    candidates.extend(("cache", path) for path in _subset_sidecars(cache_path, None))
    for where, path in candidates:
        if not path.is_file():
            result.append(SidecarStatus(where, str(path), "absent"))
            continue
        try:
            manifest = load_sidecar(path)
            if manifest.identity.dataset_mismatch(expected) is None:
                check_spans(manifest, meta, where=str(path))
        except ManifestError as error:
            result.append(SidecarStatus(where, str(path), "invalid", str(error)))
            continue
        identity = manifest.identity
        reason = identity.dataset_mismatch(expected) or verify_sources(
            reader, manifest, root=meta.root
        )
        if reason is None and identity.episodes is not None:
            gap = identity.coverage_gap(None) or ""
            result.append(SidecarStatus(where, str(path), "partial", gap))
            continue
        state: Literal["valid", "stale"] = "valid" if reason is None else "stale"
        result.append(SidecarStatus(where, str(path), state, reason or ""))
    store = FileEntryStore.beside(cache_path, meta, lock_timeout_s=0.0)
    if store.folder.is_dir():
        total = sum(len(meta.video_files(key)) for key in meta.video_keys)
        result.append(
            SidecarStatus(
                "per-file",
                str(store.folder),
                "partial",
                f"{store.count()} of the dataset's {total} video files indexed",
            )
        )
    try:
        size = publisher.size(PUBLISHED_SIDECAR_PATH)
    except NotFound:
        result.append(SidecarStatus("published", PUBLISHED_SIDECAR_PATH, "absent"))
    else:
        try:
            identity = read_sidecar_header(
                open_arrow_file(publisher, PUBLISHED_SIDECAR_PATH, size),
                where=PUBLISHED_SIDECAR_PATH,
            )
        except ManifestError as error:
            result.append(SidecarStatus("published", PUBLISHED_SIDECAR_PATH, "invalid", str(error)))
        else:
            reason = identity.mismatch(expected)
            result.append(
                SidecarStatus(
                    "published",
                    PUBLISHED_SIDECAR_PATH,
                    "valid" if reason is None else "stale",
                    reason or "",
                )
            )
    return result

"""Build a manifest by reading each source MP4's ``moov`` once, concurrently."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
from tqdm import tqdm

from episodestream.errors import (
    EpisodeStreamError,
    FrameNotFoundError,
    ManifestError,
    Mp4FormatError,
    NotFound,
    UnsupportedMp4Error,
)
from episodestream.lerobot import DatasetMeta, next_episode_starts
from episodestream.manifest._entries import FileEntryStore, IndexedFile
from episodestream.manifest._manifest import (
    SPAN_FIELDS,
    BuildStats,
    DatasetIdentity,
    EpisodeManifest,
    EpisodeSubset,
    SpanArrays,
)
from episodestream.manifest._tables import assemble_tracks
from episodestream.mp4 import (
    MAX_UNTABLED_SAMPLES,
    TrackIndex,
    locate_moov,
    parse_moov,
    plan_span,
)
from episodestream.storage import FileInfo, RangeReader

__all__ = [
    "DEFAULT_BUILD_WORKERS",
    "assemble_tracks",
    "build_manifest",
    "episode_video_files",
    "index_episodes",
    "max_moov_bytes",
    "source_info",
    "span_ends",
]

logger = logging.getLogger(__name__)

DEFAULT_BUILD_WORKERS = 16
# the first probe of each file is sized to hold a faststart moov whole: about this many
# bytes per frame (stsz 4 + stco 4-8 + ctts 8 + stss ~2 + slack) plus a fixed allowance
_MOOV_BYTES_PER_FRAME = 24
_MOOV_FIXED_BYTES = 16 << 10
_MIN_FIRST_PROBE = 16 << 10
_MAX_FIRST_PROBE = 16 << 20
# the largest moov read: a fixed allowance (codec configuration, metadata, a few other
# tracks) plus this much per frame the episodes table puts in the file (a video track's
# tables take ~30 bytes a frame, audio tracks beside it a few more): a moov claiming more
# is refused from its header, before its bytes are read or parsed
MOOV_CAP_FIXED_BYTES = 4 << 20
MOOV_CAP_BYTES_PER_FRAME = 256
# the span of an episode ends half a frame before the next episode's start in its file (see
# span_ends): every frame its rows can reach, not the next episode's first
_SPAN_END_FRAMES = 0.5
# episode-cameras whose frame count differs from their rows, logged one by one up to this
_MISMATCHES_LOGGED = 5
# whole build: per-file waits are bounded by the reader's own timeouts; this bounds the pool
DEFAULT_BUILD_TIMEOUT_S = 6 * 3600.0

# codec names of info.json -> sample entry fourccs they may appear as
_CODEC_ENTRIES = {
    "av1": {"av01"},
    "h264": {"avc1", "avc3"},
    "avc": {"avc1", "avc3"},
    "hevc": {"hvc1", "hev1"},
    "h265": {"hvc1", "hev1"},
    "vp9": {"vp09"},
    "mpeg4": {"mp4v"},
    "libsvtav1": {"av01"},
    "libx264": {"avc1", "avc3"},
}


def source_info(reader: RangeReader, path: str) -> FileInfo:
    """Size and validators (ETag, Last-Modified) of a file, as the reader pinned them (one
    request over HTTP)."""
    return reader.file_info(path)


def max_moov_bytes(frames: int) -> int:
    """The largest ``moov`` read from a file the episodes table puts ``frames`` frames in
    (``MOOV_CAP_FIXED_BYTES`` + ``MOOV_CAP_BYTES_PER_FRAME`` per frame)."""
    return MOOV_CAP_FIXED_BYTES + MOOV_CAP_BYTES_PER_FRAME * max(int(frames), 0)


def max_track_samples_of_moov(moov_bytes: int) -> int:
    """Most samples a moov of ``moov_bytes`` can table (half a byte each with 4-bit
    ``stz2`` sizes, or one size for up to ``MAX_UNTABLED_SAMPLES``)."""
    return 2 * moov_bytes + MAX_UNTABLED_SAMPLES


def _first_probe(frames: int, size: int) -> int:
    want = _MOOV_FIXED_BYTES + _MOOV_BYTES_PER_FRAME * frames
    return int(min(max(want, _MIN_FIRST_PROBE), _MAX_FIRST_PROBE, max(size, 1)))


_PLAN_FIELDS = (
    "sample_start",
    "sample_end",
    "byte_start",
    "byte_end",
    "first_pts_s",
    "last_pts_s",
    "time_offset_s",
    "frame_count",
)


@dataclass(frozen=True, slots=True, eq=False)
class _FileJob:
    """One source file and the episodes (rows of one camera column) it holds."""

    path: str
    camera: str
    column: int
    rows: np.ndarray
    episodes: np.ndarray
    lengths: np.ndarray
    t0: np.ndarray  # span bounds, seconds in the file
    t1: np.ndarray
    file_frames: int  # frames of every episode the table puts in the file (selected or not)

    @property
    def frames(self) -> int:
        return int(self.lengths.sum())

    @property
    def max_moov_bytes(self) -> int:
        return max_moov_bytes(self.file_frames)


def _read_track(reader: RangeReader, job: _FileJob) -> tuple[FileInfo, TrackIndex]:
    """One file's size, validators and sample table (its moov read once)."""
    path = job.path
    try:
        info = source_info(reader, path)
        size = info.size
        location = locate_moov(
            lambda offset, length: reader.read(path, offset, length),
            size,
            first_probe=_first_probe(job.frames, size),
            max_moov_bytes=job.max_moov_bytes,
        )
        track = parse_moov(location.moov, file_offset=location.offset)
    except NotFound as error:
        raise ManifestError(f"{path}: video file is missing ({error})") from error
    except (Mp4FormatError, UnsupportedMp4Error) as error:
        cap = (
            f" (the cap: {MOOV_CAP_FIXED_BYTES} bytes + {MOOV_CAP_BYTES_PER_FRAME} per frame "
            f"for the {job.file_frames} frames the episodes table puts in it)"
            if "max_moov_bytes" in str(error)
            else ""
        )
        raise ManifestError(f"{path}: cannot index: {error}{cap}") from error
    if track.num_samples == 0:
        raise ManifestError(f"{path}: the video track has no samples")
    # A damaged or truncated file can describe samples beyond its end; catch that here, with
    # the file named, rather than as a failed range read (or a huge budget need) later.
    ends = track.offsets + track.sizes
    outside = np.flatnonzero((track.offsets < 0) | (ends > size) | (ends < track.offsets))
    if outside.size:
        first = int(outside[0])
        raise ManifestError(
            f"{path}: sample {first} lies at bytes {int(track.offsets[first])}-"
            f"{int(ends[first]) - 1}, outside the {size}-byte file ({outside.size} of "
            f"{track.num_samples} samples do): the file is damaged or truncated"
        )
    return info, track


def _plan_episodes(job: _FileJob, track: TrackIndex) -> dict[str, np.ndarray]:
    """Plan the span of every episode ``job`` holds in ``track`` (pure: no I/O)."""
    path = job.path
    plans = {name: np.zeros(len(job.rows), dtype=SPAN_FIELDS[name]) for name in _PLAN_FIELDS}
    mismatched = 0
    for i in range(len(job.rows)):
        t0, t1 = float(job.t0[i]), float(job.t1[i])
        episode, length = int(job.episodes[i]), int(job.lengths[i])
        try:
            plan = plan_span(track, t0, t1)
        except FrameNotFoundError as error:
            # no frame at all: every sample of the episode raises when it is read (as in
            # LeRobot), the other episodes read on
            logger.warning("episode %d camera %r (%s): %s", episode, job.camera, path, error)
            plans["frame_count"][i] = 0
            continue
        except (Mp4FormatError, UnsupportedMp4Error, ValueError, LookupError) as error:
            raise ManifestError(
                f"episode {episode} camera {job.camera!r} ({path}): cannot plan span "
                f"[{t0:.6f}, {t1:.6f}] s: {error}"
            ) from error
        if plan.frame_count < length:
            # a frame a row asks for that is not there raises at that sample (more frames
            # than rows are harmless: the rows ask for theirs)
            mismatched += 1
            if mismatched <= _MISMATCHES_LOGGED:
                logger.warning(
                    "episode %d camera %r: %s presents %d frames in [%.6f, %.6f] s but the "
                    "episode has %d rows",
                    episode,
                    job.camera,
                    path,
                    plan.frame_count,
                    t0,
                    t1,
                    length,
                )
        for name in _PLAN_FIELDS:
            plans[name][i] = getattr(plan, name)
    if mismatched > _MISMATCHES_LOGGED:
        logger.warning(
            "%s: %d episodes present fewer frames than their rows",
            path,
            mismatched,
        )
    return plans


@dataclass(frozen=True, slots=True, eq=False)
class _Indexed:
    """One source file indexed: its record, sample table and episode plans."""

    info: FileInfo
    track: TrackIndex
    plans: dict[str, np.ndarray]
    read: bool  # its moov was read now (False: taken from the per-file index)


def _index_file(
    reader: RangeReader,
    job: _FileJob,
    store: FileEntryStore | None = None,
    *,
    verify: bool = False,
    build: bool = True,
    add: bool = True,
) -> _Indexed:
    """A file's sample table, read or taken from ``store`` (and added there when read,
    with ``add``), and the plan of every episode it holds (in the worker thread, so the
    planning of one file overlaps the network waits of the others)."""
    if store is None:
        info, track = _read_track(reader, job)
        read = True
    else:
        info, track, read = _stored_track(reader, job, store, verify=verify, build=build, add=add)
    return _Indexed(info, track, _plan_episodes(job, track), read)


def _current(reader: RangeReader, entry: IndexedFile) -> tuple[FileInfo | None, bool]:
    """The file's record now (None: missing) and whether ``entry`` still describes it."""
    try:
        current = source_info(reader, entry.path)
    except NotFound:
        return None, False
    if current.same_version(entry.info):
        return current, True
    logger.info(
        "%s changed since it was indexed (%s, was %s); indexing it again",
        entry.path,
        current,
        entry.info,
    )
    return current, False


def _stored_track(
    reader: RangeReader,
    job: _FileJob,
    store: FileEntryStore,
    *,
    verify: bool,
    build: bool,
    add: bool,
) -> tuple[FileInfo, TrackIndex, bool]:
    """``job``'s file from the per-file index, else read; with ``add``, once among
    concurrent processes (under its build lock, after looking again) and saved there."""
    max_samples = max_track_samples_of_moov(job.max_moov_bytes)
    entry = store.load(job.path, max_samples=max_samples)
    current: FileInfo | None = None
    if entry is not None and verify:
        current, usable = _current(reader, entry)
        entry = entry if usable else None
    if entry is not None:
        return entry.info, entry.track, False
    if not build:
        raise ManifestError(f"{job.path}: not in the per-file index and building is disabled")
    if not add:
        info, track = _read_track(reader, job)
        return info, track, True
    with store.building(job.path):
        # another process may have indexed it while we waited
        entry = store.load(job.path, max_samples=max_samples)
        if entry is not None and (current is None or current.same_version(entry.info)):
            return entry.info, entry.track, False
        info, track = _read_track(reader, job)
        store.save(IndexedFile(job.path, job.camera, info, track))
    return info, track, True


def _file_jobs(
    meta: DatasetMeta, selected: np.ndarray | slice
) -> tuple[list[_FileJob], np.ndarray]:
    """Distinct source files with the ``selected`` episodes (table rows) they hold, and
    each selected episode's file id per camera; a job's ``rows`` index the selection."""
    table = meta.episodes
    episode_index = table.episode_index[selected]
    length = table.length[selected]
    jobs: list[_FileJob] = []
    file_ids = np.empty((len(episode_index), len(meta.video_keys)), dtype=np.int32)
    for c, key in enumerate(meta.video_keys):
        columns = table.video(key)
        chunk_index = columns.chunk_index[selected]
        file_index = columns.file_index[selected]
        from_timestamp = columns.from_timestamp[selected]
        next_start = next_episode_starts(columns)[selected]
        pairs = np.stack([chunk_index, file_index], axis=1)
        unique, inverse = np.unique(pairs, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        file_ids[:, c] = len(jobs) + inverse
        order = np.argsort(inverse, kind="stable")
        groups = np.split(order, np.cumsum(np.bincount(inverse, minlength=len(unique)))[:-1])
        file_frames = _frames_per_file(columns, table.length, unique)
        for (chunk, file), rows, frames in zip(
            unique.tolist(), groups, file_frames.tolist(), strict=True
        ):
            jobs.append(
                _FileJob(
                    path=meta.video_file_path(key, chunk, file),
                    camera=key,
                    column=c,
                    rows=rows,
                    episodes=episode_index[rows],
                    lengths=length[rows],
                    t0=from_timestamp[rows],
                    t1=span_ends(from_timestamp[rows], next_start[rows], length[rows], meta.fps),
                    file_frames=int(frames),
                )
            )
    return jobs, file_ids


def _frames_per_file(columns: Any, length: np.ndarray, files: np.ndarray) -> np.ndarray:
    """Frames the whole episodes table puts in each (chunk, file) of ``files`` (rows of
    one camera's unique pairs): what bounds a file's moov, whichever episodes are read."""
    pairs = np.stack([columns.chunk_index, columns.file_index], axis=1)
    every, inverse = np.unique(pairs, axis=0, return_inverse=True)
    totals = np.bincount(inverse.reshape(-1), weights=length, minlength=len(every))
    by_file = dict(zip(map(tuple, every.tolist()), totals.tolist(), strict=True))
    return np.array([by_file[tuple(pair)] for pair in files.tolist()], dtype=np.int64)


def planned_span_ends(meta: DatasetMeta, selected: np.ndarray | slice) -> np.ndarray:
    """Where the spans of the ``selected`` episodes (table rows) end, shape ``(episodes,
    cameras)``: the window the builder plans each span for (see :func:`span_ends`)."""
    table = meta.episodes
    length = table.length[selected]
    ends = np.empty((len(length), len(meta.video_keys)), dtype=np.float64)
    for c, key in enumerate(meta.video_keys):
        columns = table.video(key)
        ends[:, c] = span_ends(
            columns.from_timestamp[selected],
            next_episode_starts(columns)[selected],
            length,
            meta.fps,
        )
    return ends


def span_ends(
    from_timestamp: np.ndarray, next_start: np.ndarray, length: np.ndarray, fps: float
) -> np.ndarray:
    """Where each episode's span ends in its file: half a frame before the next episode's
    ``from_timestamp`` in that file (the file's end for its last episode), and never before
    ``from + length / fps`` less half a frame. LeRobot decodes at ``from_timestamp`` + each
    row's timestamp, wherever in the file that lands, so a span holds every frame up to the
    next episode: rows timed past ``length / fps`` (an ``fps`` that is not the video's, extra
    frames, a late last row) read what LeRobot reads. ``to_timestamp`` is not used (writers
    store the episode's end or its last frame there, some nothing sensible)."""
    half_frame = _SPAN_END_FRAMES / fps
    return np.fmax(from_timestamp + length / fps - half_frame, next_start - half_frame)


def _index_files(
    reader: RangeReader,
    jobs: list[_FileJob],
    *,
    workers: int,
    progress: bool,
    timeout_s: float,
    store: FileEntryStore | None = None,
    verify: bool = False,
    build: bool = True,
    add: bool = True,
) -> list[_Indexed]:
    paths = [job.path for job in jobs]
    results: list[Any] = [None] * len(paths)
    show = progress and sys.stderr.isatty()
    # no tqdm object at all when hidden: even a disabled bar starts tqdm's monitor thread,
    # which then outlives the dataset (a thread left running in every process that builds)
    bar = tqdm(total=len(paths), desc="indexing videos", unit="file") if show else None
    lock = threading.Lock()
    pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="es-index")
    futures: dict[Future[Any], int] = {}
    try:
        for i, job in enumerate(jobs):
            future = pool.submit(
                _index_file, reader, job, store, verify=verify, build=build, add=add
            )
            futures[future] = i
        deadline = time.monotonic() + timeout_s
        pending = set(futures)
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ManifestError(
                    f"indexing {len(paths)} video files did not finish within {timeout_s:.0f} s"
                )
            done, pending = wait(pending, timeout=min(remaining, 1.0), return_when=FIRST_EXCEPTION)
            for future in done:
                error = future.exception()
                if error is not None:
                    if isinstance(error, EpisodeStreamError):
                        raise error
                    raise ManifestError(f"{paths[futures[future]]}: {error!r}") from error
                results[futures[future]] = future.result()
                if bar is not None:
                    with lock:
                        bar.update(1)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if bar is not None:
            bar.close()
    return results


def _check_codec(meta: DatasetMeta, camera: str, path: str, track: TrackIndex) -> None:
    expected = meta.feature(camera).codec.lower()
    allowed = _CODEC_ENTRIES.get(expected)
    if allowed is not None and track.codec not in allowed:
        logger.warning(
            "%s: sample entry %r but info.json says codec %r", path, track.codec, expected
        )


def build_manifest(
    reader: RangeReader,
    meta: DatasetMeta,
    *,
    workers: int = DEFAULT_BUILD_WORKERS,
    progress: bool = True,
    timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
    episodes: Sequence[int] | np.ndarray | EpisodeSubset | None = None,
) -> EpisodeManifest:
    """Index every source MP4 (one ``moov`` read each) and plan every episode's span.

    With ``episodes``, only those episodes are planned and only the files holding them are
    read; the manifest's identity records the subset (a list of every episode is the
    whole dataset).

    Each file costs one size/validator look-up and usually one ranged read (the first
    probe is sized from the frames the file holds so a faststart ``moov`` fits); files with
    ``moov`` at the end take one or two more.

    Args:
        reader: the dataset's reader.
        meta: its metadata.
        workers: files indexed concurrently (bounded thread pool).
        progress: show a tqdm bar (only when stderr is a terminal).
        timeout_s: bound on the whole build.
        episodes: index only these episodes (any order); None: all of them.

    Raises:
        UnknownEpisodesError: ``episodes`` names episodes the dataset lacks.
        ManifestError: a missing or unparsable video file, or an episode whose span does
            not present exactly ``length`` frames (names the episode and camera).
        StorageError: the store failed.
    """
    return index_episodes(
        reader, meta, episodes=episodes, workers=workers, progress=progress, timeout_s=timeout_s
    )


def episode_video_files(meta: DatasetMeta, subset: EpisodeSubset | None) -> list[str]:
    """The video files holding ``subset``'s episodes (None: every episode), all cameras."""
    selected = slice(None) if subset is None else meta.episodes.rows(subset.ids())
    return [job.path for job in _file_jobs(meta, selected)[0]]


def index_episodes(
    reader: RangeReader,
    meta: DatasetMeta,
    *,
    episodes: Sequence[int] | np.ndarray | EpisodeSubset | None = None,
    store: FileEntryStore | None = None,
    add: bool = True,
    verify: bool = False,
    build: bool = True,
    workers: int = DEFAULT_BUILD_WORKERS,
    progress: bool = True,
    timeout_s: float = DEFAULT_BUILD_TIMEOUT_S,
) -> EpisodeManifest:
    """:func:`build_manifest`, taking each file's sample table from the per-file index
    ``store`` when it holds it, and (with ``add``) saving there those it reads.

    Files are read only for the episodes asked for; spans are planned from the tables and
    the episodes table. The manifest is in memory, its origin ``"cache"`` when no file was
    read, else ``"built"``.

    Args:
        add: save the files read in ``store`` (each built under its lock, so concurrent
            processes read it once); a whole build, which writes the whole sidecar, need
            not (about 1 ms per file).
        verify: compare each stored file's size and validators with the store's (one
            look-up per file); a file that changed is indexed again.
        build: read files the store lacks; if false, a missing one raises.

    Raises:
        ManifestError: as :func:`build_manifest`; a file missing from ``store`` when
            ``build`` is false; a wait for another process's build that timed out.
    """
    started = time.monotonic()
    identity = DatasetIdentity.of(meta, episodes)
    table = meta.episodes
    subset = identity.episodes
    selected: np.ndarray | slice = slice(None) if subset is None else table.rows(subset.ids())
    jobs, file_ids = _file_jobs(meta, selected)
    before = reader.metrics()
    results = _index_files(
        reader,
        jobs,
        workers=workers,
        progress=progress,
        timeout_s=timeout_s,
        store=store,
        verify=verify,
        build=build,
        add=add,
    )
    for job, result in zip(jobs, results, strict=True):
        if result.read:
            _check_codec(meta, job.camera, job.path, result.track)

    shape = file_ids.shape
    arrays = {name: np.zeros(shape, dtype=dtype) for name, dtype in SPAN_FIELDS.items()}
    arrays["file_id"] = file_ids
    for c, camera in enumerate(meta.video_keys):
        columns = table.video(camera)
        arrays["from_timestamp_s"][:, c] = columns.from_timestamp[selected]
        arrays["to_timestamp_s"][:, c] = columns.to_timestamp[selected]
    for job, result in zip(jobs, results, strict=True):
        for name, values in result.plans.items():
            arrays[name][job.rows, job.column] = values
    for array in arrays.values():
        array.flags.writeable = False

    paths = [job.path for job in jobs]
    cameras = [job.camera for job in jobs]
    indexed = [(result.info, result.track) for result in results]
    read = sum(result.read for result in results)
    files, samples = assemble_tracks(paths, cameras, indexed)
    after = reader.metrics()
    stats = BuildStats(
        files=read,
        reused_files=len(paths) - read,
        requests=int(after.get("requests", 0)) - int(before.get("requests", 0)),
        bytes_read=int(after.get("bytes", 0)) - int(before.get("bytes", 0)),
        seconds=time.monotonic() - started,
    )
    logger.debug(
        "indexed %d video files, %d more from the per-file index (%d episodes x %d cameras) "
        "in %.2f s: %d requests, %d bytes",
        stats.files,
        stats.reused_files,
        file_ids.shape[0],
        len(meta.video_keys),
        stats.seconds,
        stats.requests,
        stats.bytes_read,
    )
    episode_index = table.episode_index[selected]
    if subset is not None:
        episode_index.flags.writeable = False
    manifest = EpisodeManifest(
        identity=identity,
        cameras=meta.video_keys,
        episode_index=episode_index,
        spans=SpanArrays(**arrays),
        files=files,
        samples=samples,
        origin="built" if read or store is None else "cache",
        span_end_s=planned_span_ends(meta, selected),
    )
    manifest.build_stats = stats
    if store is not None and add and not store.unsaved:  # every table it holds is stored
        manifest.entries_folder = store.folder
    return manifest

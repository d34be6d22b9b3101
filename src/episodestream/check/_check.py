""":func:`check_dataset`: which episodes read as LeRobot's reader reads them, found without
decoding any video.

LeRobot finds a camera's frame for a row at ``from_timestamp`` + the row's ``timestamp`` and
accepts the frame presented within ``tolerance_s`` of it; otherwise that sample raises. The
presentation times of every frame are in each MP4's sample table (the video index), so each
row's time is compared with them directly: the rows without a frame are exactly the samples
that raise. Rows come from the data Parquet files (four small columns), the sample tables from
the index (``open_manifest``: a cached or published sidecar, else each file's ``moov``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from episodestream._checks import (
    MAX_TOLERANCE_S,
    Bound,
    check_int,
    check_number,
    check_reader_bounds,
    shown,
)
from episodestream.check._report import (
    CheckFinding,
    DatasetCheck,
    EpisodeCheck,
    FindingKind,
    FindingOutcome,
    ranges,
    sorted_findings,
)
from episodestream.errors import (
    ConfigError,
    ConfigTypeError,
    DatasetFormatError,
    EpisodeStreamError,
    ManifestError,
    NotFound,
    SamplingError,
    SidecarCoverageError,
    UnknownEpisodesError,
)
from episodestream.lerobot import (
    DatasetMeta,
    EpisodeRowReader,
    VideoColumns,
    next_episode_starts,
    open_arrow_file,
    open_dataset_files,
    open_metadata_reader,
    to_timestamp_convention,
)
from episodestream.manifest import (
    DEFAULT_BUILD_WORKERS,
    EpisodeManifest,
    build_manifest,
    episode_subset,
    open_manifest,
)
from episodestream.mp4 import (
    DEFAULT_TOLERANCE_S,
    TrackIndex,
    clip_frame_times,
    locate_moov,
    parse_moov,
)
from episodestream.sampling import (
    MAX_COUNT,
    check_delta_timestamps,
    delta_frame_offsets,
    delta_query,
    episode_selection,
)
from episodestream.storage import Location, RangeReader, ReaderOptions

__all__ = ["check_dataset"]

logger = logging.getLogger(__name__)

#: files indexed, and episodes checked, at once: threads of one check
MAX_CHECK_WORKERS = Bound("MAX_CHECK_WORKERS", 256, "threads of one check")

# the data columns a check reads (all small scalars); the others are only looked for
_ROW_COLUMNS = ("timestamp", "episode_index", "frame_index", "index", "task_index")
# query times a finding's detail names before "..."
_NAMED_TIMES = 3
# info.json video.codec labels -> the sample entries (fourccs) files of that codec carry
_CODEC_ENTRIES: dict[str, frozenset[str]] = {
    "av1": frozenset({"av01"}),
    "libsvtav1": frozenset({"av01"}),
    "libaom-av1": frozenset({"av01"}),
    "libdav1d": frozenset({"av01"}),
    "h264": frozenset({"avc1", "avc3"}),
    "avc": frozenset({"avc1", "avc3"}),
    "libx264": frozenset({"avc1", "avc3"}),
    "hevc": frozenset({"hvc1", "hev1"}),
    "h265": frozenset({"hvc1", "hev1"}),
    "libx265": frozenset({"hvc1", "hev1"}),
    "vp9": frozenset({"vp09"}),
    "libvpx-vp9": frozenset({"vp09"}),
    "mpeg4": frozenset({"mp4v"}),
}


def check_dataset(
    root: str | os.PathLike[str] | Location,
    *,
    episodes: Sequence[int] | np.ndarray | None = None,
    num_episodes: int | None = None,
    delta_timestamps: Mapping[str, Sequence[float]] | None = None,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    data_root: str | os.PathLike[str] | None = None,
    sidecar: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    use_cache: bool = True,
    reader_options: ReaderOptions | Mapping[str, Any] | None = None,
    workers: int = DEFAULT_BUILD_WORKERS,
) -> DatasetCheck:
    """Report how each episode asked for reads, without decoding any video.

    For each episode: its data rows (``timestamp``, ``episode_index``, ``frame_index``,
    ``index``, ``task_index``; the other columns are only looked for) and, per camera, its
    video file's sample table. Each row's time ``from_timestamp + timestamp`` (and, with
    ``delta_timestamps``, every row a sample queries, clamped to the episode as LeRobot
    clamps) is compared with the frames the file presents: a row without a frame within
    ``tolerance_s`` is a sample that raises, in LeRobot (``FrameTimestampError``) and in
    episodestream (``FrameNotFoundError``). Missing or unreadable files are reported, not
    raised. So are what LeRobot reads but episodestream would not read the same way, and
    harmless oddities (a codec label that is not the file's, ``to_timestamp`` as the last
    frame's time, more frames than rows, ``frame_index`` not the row's position).

    Only the asked episodes' files are read where the index allows it
    (``open_manifest(episodes=...)``); each video file's size is checked against the
    index. When the index of the asked episodes cannot be opened at once (a file missing or
    damaged), each of their video files is read on its own, so the others are still checked.

    Args:
        root: the dataset: a path, ``file://``, ``http(s)://``, ``hf://`` or any fsspec URL.
        episodes: episode indices to check (None: all).
        num_episodes: check the dataset's first N episodes instead (not with ``episodes``).
        delta_timestamps: LeRobot's ``delta_timestamps``, to check the queries they add.
        tolerance_s: LeRobot's ``tolerance_s`` (default 1e-4 s).
        data_root: where ``data/`` and ``videos/`` live when not beside ``meta/``.
        sidecar: an explicit sidecar index path (as the datasets take it).
        cache_dir: the sidecar cache folder (default ``$EPISODESTREAM_CACHE``).
        use_cache: look in and write to the cache folder.
        reader_options: the reader's options (``ReaderOptions`` or a dict of them).
        workers: files indexed, and episodes checked, concurrently.

    Returns:
        The report (:class:`DatasetCheck`); ``ok`` when every episode reads as LeRobot reads it.

    Raises:
        UnknownEpisodesError: ``episodes`` names episodes the dataset lacks.
        SamplingError: ``delta_timestamps`` that LeRobot refuses too.
        ConfigError: a ``tolerance_s`` or ``workers`` out of range.
        DatasetFormatError: metadata that cannot be read at all (no episode can be checked).
        StorageError: the store failed before any episode could be checked.
    """
    started = time.monotonic()
    # every argument is checked before the first request
    tolerance_s = check_number("tolerance_s", tolerance_s, above=0, maximum=MAX_TOLERANCE_S)
    workers = check_int("workers", workers, minimum=1, maximum=MAX_CHECK_WORKERS)
    if num_episodes is not None:
        num_episodes = check_int("num_episodes", num_episodes, minimum=1, maximum=MAX_COUNT)
        if episodes is not None:
            raise ConfigError("pass episodes or num_episodes, not both")
    if episodes is not None:
        episodes = episode_selection(episodes, distinct=False)
    check_delta_timestamps(delta_timestamps)
    for name, path in (("data_root", data_root), ("sidecar", sidecar), ("cache_dir", cache_dir)):
        if path is not None and not isinstance(path, str | os.PathLike):
            raise ConfigTypeError(f"{name} must be a str or path, got {shown(path)}")
    if not isinstance(use_cache, bool):
        raise ConfigTypeError(f"use_cache must be a bool, got {shown(use_cache)}")
    reader_options = ReaderOptions.coerce(reader_options, what="reader_options")
    check_reader_bounds("reader_options", reader_options)
    location = root if isinstance(root, Location) else Location.parse(os.fspath(root))
    data_location = None if data_root is None else os.fspath(data_root)
    reader, meta = open_dataset_files(
        location, data_root=data_location, reader_options=reader_options
    )
    with reader:
        if meta.image_keys:
            raise DatasetFormatError(
                f"meta/info.json: features {list(meta.image_keys)} have dtype 'image' (still "
                "images inside Parquet); episodestream streams 'video' features only"
            )
        if meta.video_keys and "timestamp" not in meta.data_keys:
            raise DatasetFormatError(
                "meta/info.json: features lack 'timestamp', needed to find frames"
            )
        offsets = delta_frame_offsets(delta_timestamps or {}, meta.fps, tolerance_s=tolerance_s)
        unknown = sorted(set(offsets) - {f.key for f in meta.features})
        if unknown:
            raise SamplingError(
                f"delta_timestamps keys {unknown} are not features of the dataset "
                f"(have {sorted(f.key for f in meta.features)})"
            )
        if num_episodes is not None:
            episodes = meta.episodes.episode_index[:num_episodes]
        subset = episode_subset(meta, episodes)
        ids = subset.ids() if subset is not None else np.asarray(meta.episodes.episode_index)
        published = (
            open_metadata_reader(location, meta, reader_options) if data_root is not None else None
        )
        try:
            index = _open_index(
                reader,
                meta,
                ids,
                whole=subset is None,
                sidecar=sidecar,
                cache_dir=cache_dir,
                use_cache=use_cache,
                workers=workers,
                published=published,
            )
        finally:
            if published is not None:
                published.close()
        context = _Context(
            meta=meta,
            reader=reader,
            rows=EpisodeRowReader(reader, meta),
            index=index,
            offsets=offsets,
            tolerance_s=tolerance_s,
            positions={int(e): i for i, e in enumerate(ids.tolist())},
            conventions=_to_timestamp_conventions(meta, ids),
            next_starts={
                key: next_episode_starts(meta.episodes.video(key)) for key in meta.video_keys
            },
        )
        with ThreadPoolExecutor(
            max_workers=max(1, min(workers, len(ids))), thread_name_prefix="es-check"
        ) as pool:
            checked = tuple(pool.map(context.check_episode, ids.tolist()))
        metrics = reader.metrics()
    return DatasetCheck(
        root=meta.root,
        codebase_version=meta.codebase_version,
        fps=meta.fps,
        cameras=meta.video_keys,
        total_episodes=len(meta.episodes),
        tolerance_s=tolerance_s,
        delta_timestamps=(
            None
            if delta_timestamps is None
            else tuple((str(k), tuple(float(x) for x in v)) for k, v in delta_timestamps.items())
        ),
        index=index.origin,
        notes=tuple(index.notes),
        episodes=checked,
        requests=int(metrics.get("requests", 0)),
        bytes_read=int(metrics.get("bytes", 0)),
        seconds=time.monotonic() - started,
    )


# --------------------------------------------------------------------------------------------
# the video index of the asked episodes


@dataclass(slots=True)
class _VideoIndex:
    """Where each asked episode's spans and sample tables are, and what could not be read."""

    origin: str
    manifests: dict[int, EpisodeManifest]  # episode -> the manifest holding its spans
    tracks: dict[str, TrackIndex] = field(default_factory=dict)  # files read on their own
    file_errors: dict[str, EpisodeStreamError] = field(default_factory=dict)  # path -> why
    episode_errors: dict[int, EpisodeStreamError] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _open_index(
    reader: RangeReader,
    meta: DatasetMeta,
    ids: np.ndarray,
    *,
    whole: bool,
    sidecar: str | os.PathLike[str] | None,
    cache_dir: str | os.PathLike[str] | None,
    use_cache: bool,
    workers: int,
    published: RangeReader | None,
) -> _VideoIndex:
    """The asked episodes' index as a training run opens it; if that fails, each of their
    video files read on its own (the failures recorded), then the episodes whose files
    all read indexed together (one by one if that fails too)."""
    episodes = ids.tolist()
    if not meta.video_keys:
        return _VideoIndex("none", {})
    try:
        manifest = open_manifest(
            reader,
            meta,
            sidecar=sidecar,
            cache_dir=cache_dir,
            use_cache=use_cache,
            verify=True,  # the files as they are now, not as a cached index saw them
            workers=workers,
            progress=False,
            published_reader=published,
            episodes=None if whole else ids,
        )
    except (UnknownEpisodesError, SidecarCoverageError):
        raise
    except EpisodeStreamError as error:
        note = (
            f"the index of the asked episodes did not open ({type(error).__name__}: {error}); "
            "their video files were read one by one"
        )
        logger.info("%s", note)
    else:
        return _VideoIndex(manifest.origin, dict.fromkeys(episodes, manifest))

    paths = sorted({meta.episode_video_path(e, key) for e in episodes for key in meta.video_keys})
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="es-check") as pool:
        probed = dict(
            zip(paths, pool.map(lambda path: _probe_video(reader, path), paths), strict=True)
        )
    file_errors = {p: got for p, got in probed.items() if isinstance(got, EpisodeStreamError)}
    tracks = {p: got for p, got in probed.items() if isinstance(got, TrackIndex)}
    readable = [
        e
        for e in episodes
        if not any(meta.episode_video_path(e, key) in file_errors for key in meta.video_keys)
    ]
    index = _VideoIndex("files", {}, tracks, file_errors, {}, [note])
    if not readable:
        return index
    try:
        manifest = build_manifest(reader, meta, episodes=readable, workers=workers, progress=False)
        index.manifests = dict.fromkeys(readable, manifest)
    except EpisodeStreamError:
        for e in readable:
            try:
                index.manifests[e] = build_manifest(
                    reader, meta, episodes=[e], workers=workers, progress=False
                )
            except EpisodeStreamError as error:
                index.episode_errors[e] = error
    return index


def _probe_video(reader: RangeReader, path: str) -> TrackIndex | EpisodeStreamError:
    """``path``'s sample table (its size, then its moov), or why it cannot be had."""
    try:
        size = reader.file_info(path).size
        location = locate_moov(lambda offset, length: reader.read(path, offset, length), size)
        track = parse_moov(location.moov, file_offset=location.offset)
    except EpisodeStreamError as error:
        return error
    if track.num_samples == 0:
        return ManifestError(f"{path}: the video track has no samples")
    ends = track.offsets + track.sizes
    outside = int(((track.offsets < 0) | (ends > size)).sum())
    if outside:
        return ManifestError(
            f"{path}: {outside} of {track.num_samples} samples lie outside the {size}-byte "
            "file: it is damaged or truncated"
        )
    return track


# --------------------------------------------------------------------------------------------
# per-camera facts computed once


def _to_timestamp_conventions(meta: DatasetMeta, ids: np.ndarray) -> dict[str, list[str]]:
    """Per camera, each asked episode's ``to_timestamp`` convention (``end``, ``last frame``
    or ``other``): one vectorized test when all agree, else episode by episode."""
    table = meta.episodes
    rows = table.rows(ids)
    lengths = table.length[rows]
    result: dict[str, list[str]] = {}
    for key in meta.video_keys:
        video = table.video(key)

        def columns(selected: np.ndarray | slice, key: str = key, video: VideoColumns = video):
            return VideoColumns(
                key,
                video.chunk_index[selected],
                video.file_index[selected],
                video.from_timestamp[selected],
                video.to_timestamp[selected],
            )

        together = to_timestamp_convention(columns(rows), lengths, meta.fps)
        if together != "other":
            result[key] = [together] * len(rows)
        else:
            result[key] = [
                to_timestamp_convention(columns(rows[i : i + 1]), lengths[i : i + 1], meta.fps)
                for i in range(len(rows))
            ]
    return result


@dataclass(frozen=True, slots=True, eq=False)
class _VideoFile:
    """One source MP4 as the check needs it: its sample table and the times it presents."""

    track: TrackIndex
    times_s: np.ndarray  # presentation times of the frames FFmpeg shows, ascending


def _video_file(track: TrackIndex) -> _VideoFile:
    pts = track.pts
    if track.presentation_start is not None:
        pts = pts[pts >= track.presentation_start]
    return _VideoFile(track, np.sort(pts) / np.float64(track.timescale))


def has_frame(times_s: np.ndarray, queries_s: np.ndarray, tolerance_s: float) -> np.ndarray:
    """Whether each query time has a presented frame strictly within ``tolerance_s`` (LeRobot's
    rule, and episodestream's ``nearest_frame_indices``); NaN queries have none."""
    if times_s.size == 0:
        return np.zeros(queries_s.shape, dtype=bool)
    after = np.searchsorted(times_s, queries_s)
    last = times_s.size - 1
    nearest = np.minimum(
        np.abs(times_s[np.clip(after, 0, last)] - queries_s),
        np.abs(times_s[np.clip(after - 1, 0, last)] - queries_s),
    )
    return nearest < tolerance_s


def samples_querying(rows: np.ndarray, length: int, offsets: np.ndarray | None) -> np.ndarray:
    """The samples (rows) whose query touches one of ``rows``: the rows themselves, or with
    delta_timestamps ``offsets`` every sample one of whose clamped queries is among them."""
    if rows.size == 0 or offsets is None:
        return rows
    queried = delta_query(np.arange(length), length, {"key": offsets})["key"].frame_indices
    return np.flatnonzero(np.isin(queried, rows).any(axis=1))


def _rows(rows: np.ndarray, verb: str = "") -> str:
    """``"row 3"`` / ``"rows 2-4"``, with ``verb`` agreeing (``"holds"``, ``"hold"``)."""
    one = len(rows) == 1
    text = f"{'row' if one else 'rows'} {ranges(rows.tolist())}"
    return text + (f" {verb}{'s' if one else ''}" if verb else "")


def _times(values: np.ndarray) -> str:
    named = ", ".join(f"{float(t):.6f}" for t in values[:_NAMED_TIMES])
    return named + (", ..." if len(values) > _NAMED_TIMES else "") + " s"


# --------------------------------------------------------------------------------------------
# one episode


@dataclass(eq=False)
class _Context:
    meta: DatasetMeta
    reader: RangeReader
    rows: EpisodeRowReader
    index: _VideoIndex
    offsets: dict[str, np.ndarray]
    tolerance_s: float
    positions: dict[int, int]  # asked episode -> its place in ``conventions``' lists
    conventions: dict[str, list[str]]
    next_starts: dict[str, np.ndarray]
    _files: dict[str, _VideoFile] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # every sample table the asked episodes use, once (the per-episode work is threaded)
        for path, track in self.index.tracks.items():
            self._files[path] = _video_file(track)
        for episode, manifest in self.index.manifests.items():
            for key in self.meta.video_keys:
                path = self.meta.episode_video_path(episode, key)
                if path not in self._files:
                    self._files[path] = _video_file(manifest.track(path))

    def check_episode(self, episode: int) -> EpisodeCheck:
        table = self.meta.episodes
        row = table.row(episode)
        length = int(table.length[row])
        findings: list[CheckFinding] = []
        rows = self._episode_rows(episode, row, length, findings)
        for key in self.meta.video_keys:
            self._check_camera(episode, row, length, key, rows, findings)
        return EpisodeCheck(episode, length, sorted_findings(findings))

    # ---------------------------------------------------------------------- data rows

    def _episode_rows(
        self, episode: int, row: int, length: int, findings: list[CheckFinding]
    ) -> dict[str, np.ndarray] | None:
        meta = self.meta
        path = meta.episode_data_path(episode)

        def unreadable(kind: FindingKind, summary: str, error: Exception) -> None:
            findings.append(
                CheckFinding(
                    kind=kind,
                    outcome="raises",
                    summary=summary,
                    file=path,
                    whole_episode=True,
                    error=type(error).__name__,
                )
            )

        try:
            names = self.rows.columns(episode)
        except EpisodeStreamError as error:
            if isinstance(error.__cause__, NotFound) or isinstance(error, NotFound):
                unreadable("data_file_missing", f"{path} is missing", error)
            else:
                unreadable("data_unreadable", str(error), error)
            return None
        absent = [key for key in meta.data_keys if key not in names]
        if absent:
            findings.append(
                CheckFinding(
                    kind="data_unreadable",
                    outcome="raises",
                    summary=f"{path} lacks column(s) {absent} that info.json's features name",
                    file=path,
                    field=absent[0],
                    whole_episode=True,
                    error="DatasetFormatError",
                )
            )
        wanted = [c for c in _ROW_COLUMNS if c in names]
        try:
            rows = self.rows.rows(episode, wanted)
        except EpisodeStreamError as error:
            rows = self._rows_as_written(episode, row, length, path, wanted)
            if rows is None or not (rows["episode_index"] != episode).any():
                unreadable("data_unreadable", str(error), error)
                return None
            bad = np.flatnonzero(rows["episode_index"] != episode)
            named = sorted(set(rows["episode_index"][bad].tolist()))
            findings.append(
                CheckFinding(
                    kind="episode_index_mismatch",
                    outcome="differs",
                    summary=(
                        f"{path}: column 'episode_index' names another episode in the rows "
                        "dataset_from_index gives this one (episodestream raises for the whole "
                        "episode; LeRobot files such rows under the episode they name)"
                    ),
                    detail=f"{_rows(bad, 'hold')} episode_index {ranges(named)}",
                    file=path,
                    field="episode_index",
                    rows=tuple(bad.tolist()),
                    whole_episode=True,
                    error=type(error).__name__,
                )
            )
        self._check_row_columns(episode, row, length, path, rows, findings)
        return rows

    def _rows_as_written(
        self, episode: int, row: int, length: int, path: str, columns: list[str]
    ) -> dict[str, np.ndarray] | None:
        """The episode's rows by position alone (no episode_index check), or None: to name
        the rows at fault when the row reader refuses them. Reads the file's columns whole."""
        table = self.meta.episodes
        chunk, file = table.data_chunk_index[row], table.data_file_index[row]
        same = (table.data_chunk_index == chunk) & (table.data_file_index == file)
        start = int(table.dataset_from_index[row] - table.dataset_from_index[same].min())
        try:
            size = self.reader.size(path)
            data = pq.ParquetFile(open_arrow_file(self.reader, path, size)).read(columns=columns)
            if data.num_rows < start + length:
                return None
            part = data.slice(start, length)
            return {name: part.column(name).to_numpy() for name in columns}
        except (EpisodeStreamError, pa.ArrowException, OSError) as error:
            logger.debug("%s: rows of episode %d unreadable as written: %s", path, episode, error)
            return None

    def _check_row_columns(
        self,
        episode: int,
        row: int,
        length: int,
        path: str,
        rows: dict[str, np.ndarray],
        findings: list[CheckFinding],
    ) -> None:
        positions = np.arange(length)
        if "frame_index" in rows:
            bad = np.flatnonzero(rows["frame_index"] != positions)
            if bad.size:
                findings.append(
                    CheckFinding(
                        kind="frame_index_mismatch",
                        outcome="odd",
                        summary=(
                            f"{path}: column 'frame_index' is not the row's position in its "
                            "episode (returned as written; LeRobot's reader never uses it)"
                        ),
                        detail=_rows(bad),
                        file=path,
                        field="frame_index",
                        rows=tuple(bad.tolist()),
                    )
                )
        if "index" in rows:
            first = int(self.meta.episodes.dataset_from_index[row])
            bad = np.flatnonzero(rows["index"] != first + positions)
            if bad.size:
                deltas = bool(self.offsets)
                findings.append(
                    CheckFinding(
                        kind="index_mismatch",
                        outcome="differs" if deltas else "odd",
                        summary=(
                            f"{path}: column 'index' is not dataset_from_index + the row's "
                            "position"
                            + (
                                " (LeRobot's delta_timestamps queries follow the column, "
                                "episodestream's the rows)"
                                if deltas
                                else " (returned as written)"
                            )
                        ),
                        detail=_rows(bad),
                        file=path,
                        field="index",
                        rows=tuple(bad.tolist()),
                    )
                )
        if "task_index" in rows:
            tasks = len(self.meta.tasks)
            values = rows["task_index"].astype(np.int64)
            missing = np.flatnonzero((values >= tasks) | (values < -tasks))
            if missing.size:
                findings.append(
                    CheckFinding(
                        kind="task_index_out_of_range",
                        outcome="raises",
                        summary=f"{path}: column 'task_index' names no task (meta/tasks has "
                        f"{tasks})",
                        detail=f"{_rows(missing, 'hold')} "
                        f"{ranges(np.unique(values[missing]).tolist())}",
                        file=path,
                        field="task_index",
                        rows=tuple(missing.tolist()),
                        error="DatasetFormatError",
                    )
                )
            negative = np.flatnonzero((values < 0) & (values >= -tasks))
            if negative.size:
                findings.append(
                    CheckFinding(
                        kind="task_index_out_of_range",
                        outcome="differs",
                        summary=f"{path}: column 'task_index' is negative (LeRobot counts "
                        "it from the last task; episodestream refuses it)",
                        detail=_rows(negative),
                        file=path,
                        field="task_index",
                        rows=tuple(negative.tolist()),
                        error="DatasetFormatError",
                    )
                )

    # ---------------------------------------------------------------------- cameras

    def _check_camera(
        self,
        episode: int,
        row: int,
        length: int,
        key: str,
        rows: dict[str, np.ndarray] | None,
        findings: list[CheckFinding],
    ) -> None:
        meta = self.meta
        path = meta.episode_video_path(episode, key)

        def add(kind: FindingKind, outcome: FindingOutcome, summary: str, **values: Any) -> None:
            findings.append(
                CheckFinding(kind=kind, outcome=outcome, summary=summary, camera=key, **values)
            )

        error = self.index.file_errors.get(path) or self.index.episode_errors.get(episode)
        if error is not None:
            missing = isinstance(error, NotFound) or isinstance(error.__cause__, NotFound)
            # the index of a dataset opened with this episode cannot be built: the open
            # raises (LeRobot's open fails too: it looks for the file to download it)
            add(
                "video_file_missing" if missing else "video_unreadable",
                "raises",
                f"{key}: {path} is missing" if missing else f"{key}: {error}",
                file=path,
                whole_episode=True,
                error="ManifestError",
            )
            return
        video = self._files[path]
        columns = meta.episodes.video(key)
        start = float(columns.from_timestamp[row])
        end = float(self.next_starts[key][row])
        tolerance = self.tolerance_s
        times = video.times_s
        frames = int(
            np.searchsorted(times, end - tolerance) - np.searchsorted(times, start - tolerance)
        )
        offsets = self.offsets.get(key)
        missing_frames = np.zeros(0, dtype=np.int64)
        if rows is not None and "timestamp" in rows:
            queries = start + rows["timestamp"].astype(np.float64)
            found = has_frame(times, queries, tolerance)
            missing_frames = np.flatnonzero(~found)
            if missing_frames.size:
                count = (
                    f"; the video presents {frames} frames for {length} rows"
                    if frames != length
                    else ""
                )
                add(
                    "frame_not_found",
                    "raises",
                    f"{key}: {path} has no frame within {tolerance:g} s of "
                    "from_timestamp + timestamp",
                    detail=f"{_rows(missing_frames)} at {_times(queries[missing_frames])}{count}",
                    file=path,
                    field="timestamp",
                    rows=tuple(samples_querying(missing_frames, length, offsets).tolist()),
                    frame_rows=tuple(missing_frames.tolist()),
                    error="FrameNotFoundError",
                )
            if episode in self.index.manifests:
                self._check_span(episode, key, path, video, queries, found, length, add)
        if frames != length and not missing_frames.size:
            add(
                "frame_count",
                "odd",
                f"{key}: the video presents {'more' if frames > length else 'fewer'} frames "
                "than the episode has rows, from its from_timestamp to the next episode's (or "
                "the file's end)"
                + (
                    " (harmless: only a row timed there reads one, in LeRobot and here alike)"
                    if frames > length
                    else " (every row's time still finds one)"
                ),
                detail=f"{path}: {frames} frames for {length} rows",
                file=path,
            )
        label = meta.feature(key).codec.lower()
        entries = _CODEC_ENTRIES.get(label)
        if entries is not None and video.track.codec not in entries:
            add(
                "codec_label",
                "odd",
                # one summary per camera and codec, not per file: a dataset has thousands
                f"{key}: info.json says video.codec {label!r} but the files hold "
                f"{video.track.codec!r} (the file's codec is decoded)",
                detail=path,
                file=path,
                field=f"features.{key}.info.video.codec",
            )
        convention = self.conventions[key][self.positions[episode]]
        if convention != "end":
            to_field = f"videos/{key}/to_timestamp"
            if convention == "last frame":
                text = "is the last frame's time, from_timestamp + (length - 1) / fps"
            else:
                text = "is neither the episode's end nor its last frame's time"
            duration = float(columns.to_timestamp[row]) - start
            add(
                "to_timestamp",
                "odd",
                f"{to_field} {text} (a hint only: frames are found at from_timestamp + timestamp)",
                detail=f"to_timestamp - from_timestamp = {duration:.6f} s, length / fps = "
                f"{length / meta.fps:.6f} s",
                field=to_field,
            )

    def _check_span(
        self,
        episode: int,
        key: str,
        path: str,
        video: _VideoFile,
        queries: np.ndarray,
        found: np.ndarray,
        length: int,
        add: Callable[..., None],
    ) -> None:
        """Rows whose frame the file has but the episode's span (the bytes episodestream
        fetches and the clip it decodes) lacks: LeRobot reads them, episodestream raises."""
        span = self.index.manifests[episode].span(episode, key)
        if span.frame_count > 0:
            clip_times = clip_frame_times(video.track, span.to_plan())
            in_clip = has_frame(clip_times, queries - span.time_offset_s, self.tolerance_s)
        else:
            in_clip = np.zeros(queries.shape, dtype=bool)
        outside = np.flatnonzero(found & ~in_clip)
        if outside.size:
            add(
                "frame_outside_span",
                "differs",
                f"{key}: {path} has the frame but episodestream's span of the episode does not "
                "(LeRobot reads it, episodestream raises)",
                detail=f"{_rows(outside)} at {_times(queries[outside])}; the span presents "
                f"{span.frame_count} frames from {span.first_pts_s:.6f} to "
                f"{span.last_pts_s:.6f} s",
                file=path,
                field="timestamp",
                rows=tuple(samples_querying(outside, length, self.offsets.get(key)).tolist()),
                frame_rows=tuple(outside.tolist()),
                error="FrameNotFoundError",
            )

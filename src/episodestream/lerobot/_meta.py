"""LeRobot v3 dataset metadata: ``meta/info.json``, episodes, tasks and stats."""

from __future__ import annotations

import hashlib
import logging
import math
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from episodestream.errors import DatasetFormatError, NotFound, StorageError
from episodestream.lerobot._episode_rows import EpisodeRowLookup
from episodestream.lerobot._features import Feature, parse_features
from episodestream.lerobot._json import parse_json, shown_value
from episodestream.lerobot._paths import check_template, resolve_template
from episodestream.lerobot._rangefile import open_arrow_file
from episodestream.storage import ListableReader, RangeReader

__all__ = [
    "INFO_PATH",
    "DatasetMeta",
    "EpisodeTable",
    "VideoColumns",
    "is_v2_version",
    "load_v3_meta",
    "next_episode_starts",
    "read_info",
    "to_timestamp_convention",
]

logger = logging.getLogger(__name__)

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
EPISODES_TEMPLATE = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
_EPISODES_FILE = re.compile(r"^meta/episodes/chunk-(\d+)/file-(\d+)\.parquet$")
_VERSION = re.compile(r"^v3(\.\d+)*$")
_V2_VERSION = re.compile(r"^v2\.[01]$")
# files up to this size are fetched whole (one request); larger ones by footer + column chunks
WHOLE_FILE_MAX_BYTES = 1 << 20
# from/to timestamps may differ from length/fps by this fraction of a frame (float rounding
# by writers) and still count as one convention or the other
TIMESTAMP_TOLERANCE_FRAMES = 0.25
# bound on waiting for the metadata files (each read is bounded by the reader's timeouts)
META_TIMEOUT_S = 600.0
#: Largest ``chunks_size`` (it divides int64 episode indices). The totals are hints, as
#: LeRobot reads them: any size, logged when the tables disagree.
MAX_INFO_INT = (1 << 63) - 1
#: Largest meta/info.json read (LeRobot's are a few KiB; its parsed objects cost a multiple
#: of its bytes)
MAX_INFO_BYTES = 4 << 20
_FLOAT_INT_BITS = 1023  # an int of more bits overflows a float
# plain HTTP cannot list meta/episodes: the walk over file indices refuses the folder after
# this many files without rows (LeRobot writes none; a server answering every index with one
# would keep the walk going)
MAX_EMPTY_EPISODE_FILES = 8


@dataclass(frozen=True, slots=True, eq=False)
class VideoColumns:
    """Where each episode lives in one camera's MP4 files (arrays indexed like the table).

    ``from_timestamp`` is the episode's start in the MP4 file, in seconds: its frames are
    the ones presented at ``from_timestamp`` + each row's ``timestamp`` (LeRobot's rule).
    ``to_timestamp`` is as the writer stored it (its end, or its last frame's time: see
    :func:`to_timestamp_convention`), a hint only.
    """

    key: str
    chunk_index: np.ndarray
    file_index: np.ndarray
    from_timestamp: np.ndarray
    to_timestamp: np.ndarray


@dataclass(frozen=True, slots=True, eq=False)
class EpisodeTable:
    """``meta/episodes`` as read-only numpy arrays, one row per episode, sorted by index.

    ``dataset_from_index`` / ``dataset_to_index`` are the half-open global frame range.
    """

    episode_index: np.ndarray
    length: np.ndarray
    dataset_from_index: np.ndarray
    dataset_to_index: np.ndarray
    data_chunk_index: np.ndarray
    data_file_index: np.ndarray
    videos: tuple[VideoColumns, ...]
    tasks: tuple[tuple[str, ...], ...]
    _lookup: EpisodeRowLookup = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_lookup", EpisodeRowLookup(self.episode_index, "the dataset"))

    def __len__(self) -> int:
        return len(self.episode_index)

    def row(self, episode_index: int) -> int:
        """Row of ``episode_index`` in the table's arrays.

        Raises:
            KeyError: no such episode.
        """
        return self._lookup.row(episode_index)

    def rows(self, episode_indices: Sequence[int] | np.ndarray) -> np.ndarray:
        """Rows of many episodes at once (vectorized :meth:`row`)."""
        return self._lookup.rows(episode_indices)

    def video(self, key: str) -> VideoColumns:
        """Columns of camera ``key``."""
        for columns in self.videos:
            if columns.key == key:
                return columns
        raise KeyError(f"no video key {key!r}; have {[c.key for c in self.videos]}")


@dataclass(frozen=True, slots=True, eq=False)
class DatasetMeta:
    """Everything ``meta/`` says about a LeRobot v3 dataset.

    Attributes:
        root: the dataset location as given (informational; keys local caches).
        revision: the store's revision (Hub commit, ...) when known.
        codebase_version: as published: ``v3.x``, or ``v2.1`` / ``v2.0``, whose metadata is
            presented v3-shaped (``info`` then reads as LeRobot's v3.0 conversion of it).
        fps: frames per second from ``info.json``.
        features: every feature, in ``info.json`` order.
        episodes: the episodes table.
        tasks: task strings by ``task_index``.
        stats: ``meta/stats.json`` as parsed JSON, or None when the file is absent.
        info: ``meta/info.json`` as parsed JSON.
        info_sha256: hex SHA-256 of the ``info.json`` bytes (dataset identity).
        episode_files: the ``meta/episodes`` Parquet files read, in order.
        episode_columns: the ``meta/episodes`` columns other than ``stats/*``, one row per
            episode in ``episodes`` order (for LeRobot-shaped views).
    """

    root: str
    revision: str | None
    codebase_version: str
    robot_type: str | None
    fps: float
    total_episodes: int
    total_frames: int
    total_tasks: int
    chunks_size: int
    data_path: str
    video_path: str | None
    features: tuple[Feature, ...]
    episodes: EpisodeTable
    tasks: tuple[str, ...]
    stats: dict[str, Any] | None
    info: dict[str, Any]
    info_sha256: str
    episode_files: tuple[str, ...]
    # every non-``stats/`` column of ``meta/episodes``, rows sorted like ``episodes`` (what
    # LeRobot's own metadata exposes; stats columns are large and LeRobot drops them too)
    episode_columns: pa.Table | None = None

    @property
    def video_keys(self) -> tuple[str, ...]:
        """Camera keys (``dtype == "video"``), in ``info.json`` order."""
        return tuple(f.key for f in self.features if f.kind == "video")

    @property
    def image_keys(self) -> tuple[str, ...]:
        """Still-image keys (``dtype == "image"``, stored inside the data Parquet files)."""
        return tuple(f.key for f in self.features if f.kind == "image")

    @property
    def data_keys(self) -> tuple[str, ...]:
        """Keys stored as Parquet columns: numeric, string and image features."""
        return tuple(f.key for f in self.features if f.kind != "video")

    def feature(self, key: str) -> Feature:
        for feature in self.features:
            if feature.key == key:
                return feature
        raise KeyError(f"no feature {key!r}")

    def data_file_path(self, chunk_index: int, file_index: int) -> str:
        """Relative path of a data Parquet file (checked to stay inside the root)."""
        return resolve_template(
            self.data_path,
            what=f"{INFO_PATH} data_path",
            chunk_index=int(chunk_index),
            file_index=int(file_index),
        )

    def video_file_path(self, video_key: str, chunk_index: int, file_index: int) -> str:
        """Relative path of one camera's MP4 file (checked to stay inside the root)."""
        if self.video_path is None:
            raise DatasetFormatError(f"{INFO_PATH}: field 'video_path' is missing")
        return resolve_template(
            self.video_path,
            what=f"{INFO_PATH} video_path",
            video_key=video_key,
            chunk_index=int(chunk_index),
            file_index=int(file_index),
        )

    def episode_data_path(self, episode_index: int) -> str:
        row = self.episodes.row(episode_index)
        return self.data_file_path(
            self.episodes.data_chunk_index[row], self.episodes.data_file_index[row]
        )

    def episode_video_path(self, episode_index: int, video_key: str) -> str:
        row = self.episodes.row(episode_index)
        columns = self.episodes.video(video_key)
        return self.video_file_path(video_key, columns.chunk_index[row], columns.file_index[row])

    def video_files(self, video_key: str) -> tuple[str, ...]:
        """Distinct MP4 files of one camera, in (chunk, file) order."""
        columns = self.episodes.video(video_key)
        pairs = sorted(
            set(zip(columns.chunk_index.tolist(), columns.file_index.tolist(), strict=False))
        )
        return tuple(self.video_file_path(video_key, c, f) for c, f in pairs)

    def data_files(self) -> tuple[str, ...]:
        """Distinct data Parquet files, in (chunk, file) order."""
        table = self.episodes
        pairs = sorted(
            set(zip(table.data_chunk_index.tolist(), table.data_file_index.tolist(), strict=False))
        )
        return tuple(self.data_file_path(c, f) for c, f in pairs)


# --------------------------------------------------------------------------------------------
# reading


def read_whole(
    reader: RangeReader, path: str, *, required: bool = True, max_bytes: int | None = None
) -> bytes | None:
    """Every byte of a small file (one request where the store allows); None when absent and
    not ``required``. A file over ``max_bytes`` (default: the reader's) is refused unread.

    Raises:
        DatasetFormatError: a required file missing.
        InvalidResponse: the file is larger than ``max_bytes``.
    """
    try:
        if max_bytes is not None:
            return bytes(reader.read_file(path, max_bytes=max_bytes))
        return bytes(reader.read_file(path))
    except NotFound as error:
        if not required:
            return None
        raise DatasetFormatError(f"{path}: required file is missing ({error})") from error


def read_parquet(
    reader: RangeReader, path: str, *, columns: Sequence[str] | None = None, required: bool = True
) -> pa.Table | None:
    """Columns of a Parquet file: whole small files in one read, big ones by column chunk.

    Raises:
        DatasetFormatError: file missing (when required), unreadable, or lacking a column.
    """
    try:
        size = reader.size(path)
    except NotFound as error:
        if not required:
            return None
        raise DatasetFormatError(f"{path}: required file is missing ({error})") from error
    try:
        if size <= WHOLE_FILE_MAX_BYTES:
            source: Any = pa.BufferReader(reader.read(path, 0, size))
        else:
            source = open_arrow_file(reader, path, size)
        parquet = pq.ParquetFile(source, pre_buffer=True)
        names = parquet.schema_arrow.names
        if columns is not None:
            missing = [c for c in columns if c not in names]
            if missing:
                raise DatasetFormatError(f"{path}: missing column(s) {missing}")
        return parquet.read(columns=list(columns) if columns is not None else None)
    except StorageError:
        raise
    except (pa.ArrowException, OSError) as error:
        raise DatasetFormatError(f"{path}: not a readable Parquet file: {error}") from error


def _parse_json(data: bytes, path: str) -> Any:
    return parse_json(data, where=path)


def info_fps(info: dict[str, Any]) -> int | float:
    """``info.json``'s ``fps``, checked: a finite positive number (as written).

    Raises:
        DatasetFormatError: anything else (an int too large for a float included).
    """
    fps = info.get("fps")
    finite = isinstance(fps, float) and math.isfinite(fps)
    if isinstance(fps, int) and not isinstance(fps, bool):
        finite = fps.bit_length() <= _FLOAT_INT_BITS
    if not finite or not fps > 0:  # type: ignore[operator]
        raise DatasetFormatError(
            f"{INFO_PATH}: field 'fps' must be a finite positive number, got {shown_value(fps)}"
        )
    return fps  # type: ignore[return-value]


def _int_field(
    info: dict[str, Any], name: str, *, minimum: int = 0, maximum: int | None = None
) -> int:
    value = info.get(name)
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < minimum
        or (maximum is not None and value > maximum)
    ):
        bounds = f"in [{minimum}, 2**63 - 1]" if maximum == MAX_INFO_INT else f">= {minimum}"
        raise DatasetFormatError(
            f"{INFO_PATH}: field {name!r} must be an integer {bounds}, got {shown_value(value)}"
        )
    return value


def _episode_files(reader: RangeReader, total_episodes: int) -> list[tuple[str, pa.Table]]:
    """Find and read the ``meta/episodes`` files.

    A listable store is listed. Plain HTTP cannot list, so walk chunk and file indices from
    0, moving to the next chunk at the first missing file and stopping at a missing first
    file of a chunk — or as soon as ``total_episodes`` rows are in hand, which spares the
    final 404 probe. The walk is bounded: ``total_episodes`` files (each holds an episode at
    least) and :data:`MAX_EMPTY_EPISODE_FILES` files without rows; past either, a
    :class:`DatasetFormatError` naming the folder.
    """
    found: list[tuple[str, pa.Table]] = []
    if isinstance(reader, ListableReader):
        numbered = []
        for path in reader.list_files(EPISODES_DIR):
            match = _EPISODES_FILE.match(path)
            if match:
                numbered.append((int(match[1]), int(match[2]), path))
        for _, _, path in sorted(numbered):
            table = read_parquet(reader, path)
            assert table is not None
            found.append((path, table))
        return found
    rows = 0
    chunk = 0
    empty = 0
    while rows < total_episodes:
        file = 0
        while rows < total_episodes:
            if len(found) >= total_episodes or empty > MAX_EMPTY_EPISODE_FILES:
                raise DatasetFormatError(
                    f"{EPISODES_DIR}: {len(found)} files ({found[0][0]} to {found[-1][0]}) "
                    f"hold {rows} of the {total_episodes} episodes {INFO_PATH} announces, "
                    f"{empty} of them no rows at all: not a LeRobot episodes folder"
                )
            path = EPISODES_TEMPLATE.format(chunk_index=chunk, file_index=file)
            table = read_parquet(reader, path, required=False)
            if table is None:
                break
            found.append((path, table))
            rows += table.num_rows
            empty += table.num_rows == 0
            file += 1
        if file == 0:
            break
        chunk += 1
    return found


def _column(table: pa.Table, name: str, path: str, kind: str) -> np.ndarray:
    if name not in table.column_names:
        raise DatasetFormatError(f"{path}: missing episode column {name!r}")
    column = table.column(name)
    if column.null_count:
        raise DatasetFormatError(f"{path}: column {name!r} has {column.null_count} null(s)")
    try:
        values = column.to_numpy()
    except (pa.ArrowException, ValueError) as error:
        raise DatasetFormatError(f"{path}: column {name!r} is not numeric: {error}") from error
    if kind == "int":
        if values.dtype.kind not in "iu":
            raise DatasetFormatError(f"{path}: column {name!r} must be integer, got {column.type}")
        return values.astype(np.int64, copy=False)
    if values.dtype.kind not in "iuf":
        raise DatasetFormatError(f"{path}: column {name!r} must be numeric, got {column.type}")
    return values.astype(np.float64, copy=False)


def _frozen(array: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(array)
    array.flags.writeable = False
    return array


def _episode_columns(
    files: list[tuple[str, pa.Table]], order: np.ndarray | None
) -> pa.Table | None:
    """The non-``stats/`` columns of every episodes file, in episode order."""
    if not files:
        return None
    parts = [
        table.select([name for name in table.column_names if not name.startswith("stats/")])
        for _, table in files
    ]
    try:
        merged = pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowException, TypeError) as error:
        raise DatasetFormatError(
            f"{EPISODES_DIR}: the episodes files disagree on their columns: {error}"
        ) from error
    return merged.take(pa.array(order)) if order is not None else merged


def _episode_table(
    files: list[tuple[str, pa.Table]], video_keys: tuple[str, ...]
) -> tuple[EpisodeTable, np.ndarray | None]:
    int_columns = [
        "episode_index",
        "length",
        "dataset_from_index",
        "dataset_to_index",
        "data/chunk_index",
        "data/file_index",
    ]
    parts: dict[str, list[np.ndarray]] = {}
    task_lists: list[tuple[str, ...]] = []
    for path, table in files:
        for name in int_columns:
            parts.setdefault(name, []).append(_column(table, name, path, "int"))
        for key in video_keys:
            for suffix, kind in (
                ("chunk_index", "int"),
                ("file_index", "int"),
                ("from_timestamp", "float"),
                ("to_timestamp", "float"),
            ):
                name = f"videos/{key}/{suffix}"
                parts.setdefault(name, []).append(_column(table, name, path, kind))
        if "tasks" in table.column_names:
            for value in table.column("tasks").to_pylist():
                if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
                    raise DatasetFormatError(f"{path}: column 'tasks' must hold lists of strings")
                task_lists.append(tuple(value))
        else:
            task_lists.extend(() for _ in range(table.num_rows))

    merged = {name: np.concatenate(arrays) for name, arrays in parts.items()}
    order: np.ndarray | None = np.argsort(merged["episode_index"], kind="stable")
    assert order is not None
    if np.array_equal(order, np.arange(len(order))):
        order = None
    else:
        merged = {name: values[order] for name, values in merged.items()}
        task_lists = [task_lists[i] for i in order.tolist()]
    table = EpisodeTable(
        episode_index=_frozen(merged["episode_index"]),
        length=_frozen(merged["length"]),
        dataset_from_index=_frozen(merged["dataset_from_index"]),
        dataset_to_index=_frozen(merged["dataset_to_index"]),
        data_chunk_index=_frozen(merged["data/chunk_index"]),
        data_file_index=_frozen(merged["data/file_index"]),
        videos=tuple(
            VideoColumns(
                key=key,
                chunk_index=_frozen(merged[f"videos/{key}/chunk_index"]),
                file_index=_frozen(merged[f"videos/{key}/file_index"]),
                from_timestamp=_frozen(merged[f"videos/{key}/from_timestamp"]),
                to_timestamp=_frozen(merged[f"videos/{key}/to_timestamp"]),
            )
            for key in video_keys
        ),
        tasks=tuple(task_lists),
    )
    return table, order


def _first_bad(mask: np.ndarray, episodes: np.ndarray) -> int:
    return int(episodes[int(np.argmax(mask))])


def _validate_episodes(
    table: EpisodeTable, *, fps: float, total_episodes: int, total_frames: int, where: str
) -> None:
    """Consistency of the episodes table, checked as LeRobot's reader needs it.

    Raises DatasetFormatError (naming the episode) only where the table cannot be read at
    all: duplicate or negative indices, lengths that disagree with the row ranges, row
    ranges that overlap, non-finite times. What LeRobot's reader does not check either
    (``info.json`` totals, ``to_timestamp``, episodes sharing time in one file) is logged
    and left to the samples: a frame that is not there raises at that sample.
    """
    ep = table.episode_index
    n = len(ep)
    if n == 0 and total_episodes:
        raise DatasetFormatError(
            f"{where}: no episode rows, but {INFO_PATH} total_episodes is {total_episodes}"
        )
    if n != total_episodes:
        logger.warning(
            "%s: %d episode rows but %s total_episodes is %d; reading the rows",
            where,
            n,
            INFO_PATH,
            total_episodes,
        )
    if n == 0:
        return
    duplicate = np.diff(ep) == 0
    if duplicate.any():
        raise DatasetFormatError(f"{where}: episode {_first_bad(duplicate, ep[1:])} appears twice")
    for name in (
        "episode_index",
        "length",
        "dataset_from_index",
        "data_chunk_index",
        "data_file_index",
    ):
        values = getattr(table, name)
        if (values < 0).any():
            raise DatasetFormatError(
                f"{where}: column {name!r} is negative for episode {_first_bad(values < 0, ep)}"
            )
    if (table.length <= 0).any():
        raise DatasetFormatError(
            f"{where}: column 'length' must be positive "
            f"(episode {_first_bad(table.length <= 0, ep)})"
        )
    span = table.dataset_to_index - table.dataset_from_index
    bad = span != table.length
    if bad.any():
        i = int(np.argmax(bad))
        raise DatasetFormatError(
            f"{where}: episode {int(ep[i])}: dataset_to_index - dataset_from_index = "
            f"{int(span[i])} but length = {int(table.length[i])}"
        )
    by_start = np.argsort(table.dataset_from_index, kind="stable")
    starts = table.dataset_from_index[by_start]
    ends = table.dataset_to_index[by_start]
    overlap = starts[1:] < ends[:-1]
    if overlap.any():
        i = int(np.argmax(overlap))
        raise DatasetFormatError(
            f"{where}: episodes {int(ep[by_start[i]])} and {int(ep[by_start[i + 1]])} overlap in "
            f"dataset_from_index/dataset_to_index"
        )
    if int(table.length.sum()) != total_frames:
        logger.warning(
            "%s: episode lengths sum to %d but %s total_frames is %d; reading the rows",
            where,
            int(table.length.sum()),
            INFO_PATH,
            total_frames,
        )
    for video in table.videos:
        prefix = f"videos/{video.key}"
        for name in ("chunk_index", "file_index"):
            values = getattr(video, name)
            if (values < 0).any():
                raise DatasetFormatError(
                    f"{where}: column '{prefix}/{name}' is negative for episode "
                    f"{_first_bad(values < 0, ep)}"
                )
        t0 = video.from_timestamp
        bad = ~np.isfinite(t0) | (t0 < 0)
        if bad.any():
            raise DatasetFormatError(
                f"{where}: episode {_first_bad(bad, ep)}: '{prefix}/from_timestamp' must be "
                f"finite and non-negative"
            )
        _note_to_timestamp(video, table.length, fps, where)
        # episodes sharing time in one file read each other's frames, in LeRobot too
        order = np.lexsort((t0, video.file_index, video.chunk_index))
        same_file = (np.diff(video.chunk_index[order]) == 0) & (
            np.diff(video.file_index[order]) == 0
        )
        end = t0 + table.length / fps
        tolerance = TIMESTAMP_TOLERANCE_FRAMES / fps
        overlap = same_file & (t0[order][1:] < end[order][:-1] - tolerance)
        if overlap.any():
            i = int(np.argmax(overlap))
            logger.warning(
                "%s: episodes %d and %d overlap in time inside one '%s' file; each reads the "
                "frames at its from_timestamp + timestamps, as LeRobot does",
                where,
                int(ep[order[i]]),
                int(ep[order[i + 1]]),
                prefix,
            )


def next_episode_starts(video: VideoColumns) -> np.ndarray:
    """For every episode (table row), the ``from_timestamp`` of the next episode in the same
    file of this camera (+inf for the file's last): the frames up to there are the ones its
    rows can reach (LeRobot decodes at ``from_timestamp`` + each row's timestamp, anywhere in
    the file)."""
    order = np.lexsort((video.from_timestamp, video.file_index, video.chunk_index))
    same_file = (np.diff(video.chunk_index[order]) == 0) & (np.diff(video.file_index[order]) == 0)
    following = np.full(len(order), np.inf)
    following[:-1] = np.where(same_file, video.from_timestamp[order][1:], np.inf)
    result = np.empty_like(following)
    result[order] = following
    return result


def to_timestamp_convention(
    video: VideoColumns, length: np.ndarray, fps: float
) -> Literal["end", "last frame", "other"]:
    """How a camera's ``to_timestamp`` column was written: the episode's end
    (``from + length / fps``, LeRobot's writer), its last frame (``from + (length - 1) /
    fps``, some converters), or neither. Only a hint either way: frames are found at
    ``from_timestamp`` + each row's timestamp."""
    duration = video.to_timestamp - video.from_timestamp
    tolerance = TIMESTAMP_TOLERANCE_FRAMES / fps
    with np.errstate(invalid="ignore"):
        if bool(np.all(np.abs(duration - length / fps) <= tolerance)):
            return "end"
        if bool(np.all(np.abs(duration - (length - 1) / fps) <= tolerance)):
            return "last frame"
    return "other"


def _note_to_timestamp(video: VideoColumns, length: np.ndarray, fps: float, where: str) -> None:
    convention = to_timestamp_convention(video, length, fps)
    if convention == "other":
        logger.info(
            "%s: 'videos/%s/to_timestamp' is neither each episode's end nor its last frame; "
            "ignored (frames are found at from_timestamp + each row's timestamp)",
            where,
            video.key,
        )
    elif convention == "last frame":
        logger.debug(
            "%s: 'videos/%s/to_timestamp' marks each episode's last frame", where, video.key
        )


def _tasks(table: pa.Table | None, total_tasks: int) -> tuple[str, ...]:
    if table is None:
        raise DatasetFormatError(f"{TASKS_PATH}: required file is missing")
    text_column = next((c for c in ("task", "__index_level_0__") if c in table.column_names), None)
    if text_column is None or "task_index" not in table.column_names:
        raise DatasetFormatError(
            f"{TASKS_PATH}: needs columns 'task_index' and 'task' (or '__index_level_0__'), "
            f"has {table.column_names}"
        )
    indices = _column(table, "task_index", TASKS_PATH, "int")
    texts = table.column(text_column).to_pylist()
    if not all(isinstance(t, str) for t in texts):
        raise DatasetFormatError(f"{TASKS_PATH}: column {text_column!r} must hold strings")
    if not np.array_equal(indices, np.arange(len(indices))):
        # LeRobot looks a sample's task up by row position (tasks.iloc[task_index]), not by
        # this column: so do we, for the same task strings
        logger.warning(
            "%s: column 'task_index' is not 0..%d in row order; tasks are read by row "
            "position, as LeRobot reads them",
            TASKS_PATH,
            len(indices) - 1,
        )
    if len(indices) != total_tasks:
        logger.warning(
            "%s: %d tasks but %s total_tasks is %d; reading the tasks",
            TASKS_PATH,
            len(indices),
            INFO_PATH,
            total_tasks,
        )
    return tuple(texts)


def is_v2_version(version: object) -> bool:
    """Whether ``codebase_version`` names a LeRobot v2.x layout read as published (v2.0, v2.1)."""
    return isinstance(version, str) and bool(_V2_VERSION.match(version))


def read_info(reader: RangeReader) -> tuple[bytes, dict[str, Any]]:
    """``meta/info.json``'s bytes and its JSON object, whatever the version.

    Raises:
        DatasetFormatError: missing, too large, not JSON or not an object.
        StorageError: the store itself failed.
    """
    raw_info = read_whole(reader, INFO_PATH, max_bytes=MAX_INFO_BYTES)
    assert raw_info is not None
    info = _parse_json(raw_info, INFO_PATH)
    if not isinstance(info, dict):
        raise DatasetFormatError(f"{INFO_PATH}: must hold a JSON object")
    return raw_info, info


def load_v3_meta(
    reader: RangeReader,
    *,
    raw_info: bytes,
    info: dict[str, Any],
    root: str | None = None,
    revision: str | None = None,
    load_stats: bool = True,
) -> DatasetMeta:
    """The metadata of a LeRobot v3.x dataset whose ``info.json`` (``raw_info``, parsed as
    ``info``) was read already (see ``load_dataset_meta``).

    Raises:
        DatasetFormatError: missing or invalid content, naming the file and field.
        StorageError: the store itself failed.
    """
    version = info.get("codebase_version")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise DatasetFormatError(
            f"{INFO_PATH}: field 'codebase_version' is {shown_value(version)}; LeRobot v3.x, "
            "v2.1 and "
            f"v2.0 datasets are supported (convert older ones with LeRobot's scripts)"
        )
    fps = info_fps(info)
    total_episodes = _int_field(info, "total_episodes")
    total_frames = _int_field(info, "total_frames")
    total_tasks = _int_field(info, "total_tasks")
    chunks_size = (
        _int_field(info, "chunks_size", minimum=1, maximum=MAX_INFO_INT)
        if "chunks_size" in info
        else 1000
    )
    features = parse_features(info.get("features"), file=INFO_PATH)
    data_path = check_template(
        info.get("data_path"),
        file=INFO_PATH,
        field="data_path",
        required=frozenset({"chunk_index", "file_index"}),
    )
    video_keys = tuple(f.key for f in features if f.kind == "video")
    video_path: str | None = None
    if video_keys or info.get("video_path") is not None:
        video_path = check_template(
            info.get("video_path"),
            file=INFO_PATH,
            field="video_path",
            required=frozenset({"chunk_index", "file_index", "video_key"}),
        )
    for feature in features:
        if feature.kind == "video" and feature.fps_from_info and feature.fps_from_info != fps:
            logger.warning(
                "%s: features.%s.info video.fps %s differs from fps %s",
                INFO_PATH,
                feature.key,
                feature.fps_from_info,
                fps,
            )

    # the other metadata files only need info.json: fetch them concurrently, so a remote
    # dataset opens in about two round trips after info.json instead of six
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="es-meta") as pool:
        files_future = pool.submit(_episode_files, reader, total_episodes)
        tasks_future = pool.submit(read_parquet, reader, TASKS_PATH, required=False)
        stats_future = (
            pool.submit(read_whole, reader, STATS_PATH, required=False) if load_stats else None
        )
        files = files_future.result(timeout=META_TIMEOUT_S)
        tasks_table = tasks_future.result(timeout=META_TIMEOUT_S)
        raw_stats = stats_future.result(timeout=META_TIMEOUT_S) if stats_future else None
    if not files and total_episodes:
        raise DatasetFormatError(f"{EPISODES_DIR}: no episodes Parquet files found")
    table, order = _episode_table(files, video_keys)
    where = files[0][0] if len(files) == 1 else EPISODES_DIR
    _validate_episodes(
        table,
        fps=float(fps),
        total_episodes=total_episodes,
        total_frames=total_frames,
        where=where,
    )
    tasks = _tasks(tasks_table, total_tasks)
    stats = None
    if raw_stats is not None:
        stats = _parse_json(raw_stats, STATS_PATH)
        if not isinstance(stats, dict):
            raise DatasetFormatError(f"{STATS_PATH}: must hold a JSON object")
    if root is None:
        root = reader.root
    meta = DatasetMeta(
        root=root,
        revision=revision,
        codebase_version=version,
        robot_type=info.get("robot_type") if isinstance(info.get("robot_type"), str) else None,
        fps=float(fps),
        total_episodes=total_episodes,
        total_frames=total_frames,
        total_tasks=total_tasks,
        chunks_size=chunks_size,
        data_path=data_path,
        video_path=video_path,
        features=features,
        episodes=table,
        tasks=tasks,
        stats=stats,
        info=info,
        info_sha256=hashlib.sha256(raw_info).hexdigest(),
        episode_files=tuple(path for path, _ in files),
        episode_columns=_episode_columns(files, order),
    )
    # resolve every referenced file once so a traversal fails at load, not mid-training
    meta.data_files()
    for key in video_keys:
        meta.video_files(key)
    return meta

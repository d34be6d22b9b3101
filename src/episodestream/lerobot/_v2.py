"""LeRobot v2.0 / v2.1 metadata, read as published and presented v3-shaped.

A v2.x dataset (what LeRobot 0.3.x writes and reads) holds one Parquet and one MP4 per
episode, named by ``{episode_chunk}`` / ``{episode_index}`` templates, and its tables as JSON
Lines: ``meta/episodes.jsonl`` (``episode_index``, ``tasks``, ``length``), ``meta/tasks.jsonl``
(``task_index``, ``task``) and, in v2.1, ``meta/episodes_stats.jsonl`` (v2.0:
``meta/stats.json``). :func:`load_v2_meta` turns them into the same :class:`DatasetMeta` a v3
dataset gives, so nothing above this layer knows the difference:

- episodes sorted by index, ``dataset_from_index`` / ``dataset_to_index`` the cumulative lengths
  in that order (LeRobot 0.3.x's ``episode_data_index``, and what LeRobot 0.4's v2.1 -> v3.0
  converter writes);
- each episode's data and video file as (chunk, file) = (``episode_index // chunks_size``,
  ``episode_index``), which the v2 templates resolve (see ``_paths``); in its own MP4 an episode
  starts at 0 and ends at ``length / fps``;
- ``stats`` as LeRobot computes them: v2.1 aggregates the per-episode statistics exactly as
  ``lerobot.datasets.compute_stats.aggregate_stats`` does (0.4's, which 0.3's equals on v2.1's
  keys), v2.0 reads ``stats.json``;
- ``info`` and ``episode_columns`` as LeRobot 0.4's converter writes them (``codebase_version``
  ``v3.0``, no ``total_chunks`` / ``total_videos``, file sizes, per-feature ``fps``), except the
  path templates, which stay the published ones: they name the files that exist.
  ``DatasetMeta.codebase_version`` keeps the version the dataset was published as.

Only ``meta/`` is read here, as LeRobot reads it: no listing, every file by its fixed name.
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from episodestream.errors import DatasetFormatError
from episodestream.lerobot._features import parse_features
from episodestream.lerobot._json import parse_json, shown_value
from episodestream.lerobot._meta import (
    INFO_PATH,
    MAX_INFO_INT,
    META_TIMEOUT_S,
    STATS_PATH,
    DatasetMeta,
    EpisodeTable,
    VideoColumns,
    _frozen,
    _parse_json,
    _validate_episodes,
    info_fps,
    read_whole,
)
from episodestream.lerobot._paths import V2_FIELDS, check_template
from episodestream.storage import RangeReader

__all__ = [
    "V2_EPISODES_PATH",
    "V2_EPISODES_STATS_PATH",
    "V2_TASKS_PATH",
    "aggregate_stats",
    "load_v2_meta",
]

logger = logging.getLogger(__name__)

V2_EPISODES_PATH = "meta/episodes.jsonl"
V2_TASKS_PATH = "meta/tasks.jsonl"
V2_EPISODES_STATS_PATH = "meta/episodes_stats.jsonl"
# LeRobot 0.3.x's chunk size when info.json leaves it out (it reads the field unchecked)
_DEFAULT_CHUNKS_SIZE = 1000
# what LeRobot 0.4's converter records for the v3 files it writes (DEFAULT_*_FILE_SIZE_IN_MB)
_CONVERTED_DATA_FILES_SIZE_IN_MB = 100
_CONVERTED_VIDEO_FILES_SIZE_IN_MB = 200
_REQUIRED_STATS = ("min", "max", "mean", "std", "count")


# --------------------------------------------------------------------------------------------
# JSON Lines


def _for_version(error: DatasetFormatError, version: str) -> DatasetFormatError:
    # a v3 dataset labelled v2.x fails on what v2.x has: say why it was expected
    return DatasetFormatError(
        f"{error} ({INFO_PATH} field 'codebase_version' is {version!r}: LeRobot's v2.x layout)"
    )


def _read_required(reader: RangeReader, path: str, version: str) -> bytes:
    """A file every v2.x dataset has."""
    try:
        data = read_whole(reader, path)
    except DatasetFormatError as error:
        raise _for_version(error, version) from error
    assert data is not None
    return data


def _read_jsonl(data: bytes, path: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line.

    LeRobot reads these files with ``jsonlines``, which fails on blank lines; a blank line
    holds nothing, so it is skipped here.

    Raises:
        DatasetFormatError: not UTF-8, or a line that is not one JSON object (file and line).
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DatasetFormatError(f"{path}: not UTF-8 text: {error}") from error
    lines: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        value = parse_json(line, where=f"{path} line {number}")
        if not isinstance(value, dict):
            raise DatasetFormatError(
                f"{path} line {number}: must hold a JSON object, got {type(value).__name__}"
            )
        lines.append((number, value))
    return lines


def _line_int(value: object, *, path: str, number: int, name: str, minimum: int) -> int:
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or not minimum <= value <= MAX_INFO_INT
    ):
        raise DatasetFormatError(
            f"{path} line {number}: field {name!r} must be an integer in [{minimum}, 2**63 - 1], "
            f"got {shown_value(value)}"
        )
    return value


def _by_index(
    lines: list[tuple[int, dict[str, Any]]], *, path: str, name: str
) -> dict[int, tuple[int, dict[str, Any]]]:
    """Lines keyed by their integer field ``name``; a repeated line is dropped with a
    warning, two different lines for one index are an error."""
    found: dict[int, tuple[int, dict[str, Any]]] = {}
    for number, line in lines:
        index = _line_int(line.get(name), path=path, number=number, name=name, minimum=0)
        if index in found:
            first, earlier = found[index]
            if earlier != line:
                raise DatasetFormatError(
                    f"{path}: lines {first} and {number} both describe {name} {index}, differently"
                )
            logger.warning("%s: line %d repeats line %d; read once", path, number, first)
            continue
        found[index] = (number, line)
    return found


# --------------------------------------------------------------------------------------------
# tables


def _episodes(
    lines: list[tuple[int, dict[str, Any]]],
) -> tuple[np.ndarray, np.ndarray, list[tuple[str, ...]], list[dict[str, Any]]]:
    """Episode indices, lengths, task lists and the lines themselves, sorted by index."""
    by_index = _by_index(lines, path=V2_EPISODES_PATH, name="episode_index")
    indices = sorted(by_index)
    lengths = np.empty(len(indices), dtype=np.int64)
    tasks: list[tuple[str, ...]] = []
    rows: list[dict[str, Any]] = []
    for position, index in enumerate(indices):
        number, line = by_index[index]
        lengths[position] = _line_int(
            line.get("length"), path=V2_EPISODES_PATH, number=number, name="length", minimum=1
        )
        names = line.get("tasks", [])
        if not isinstance(names, list) or not all(isinstance(t, str) for t in names):
            raise DatasetFormatError(
                f"{V2_EPISODES_PATH} line {number}: field 'tasks' must be a list of strings, "
                f"got {names!r}"
            )
        tasks.append(tuple(names))
        rows.append(line)
    return np.array(indices, dtype=np.int64), lengths, tasks, rows


def _tasks(lines: list[tuple[int, dict[str, Any]]]) -> tuple[str, ...]:
    by_index = _by_index(lines, path=V2_TASKS_PATH, name="task_index")
    for number, line in by_index.values():
        if not isinstance(line.get("task"), str):
            raise DatasetFormatError(
                f"{V2_TASKS_PATH} line {number}: field 'task' must be a string, "
                f"got {line.get('task')!r}"
            )
    if sorted(by_index) != list(range(len(by_index))):
        missing = sorted(set(range(max(by_index, default=-1) + 1)) - set(by_index))
        raise DatasetFormatError(
            f"{V2_TASKS_PATH}: task_index must run 0..{len(by_index) - 1} once each; "
            f"missing {missing[:10]}"
        )
    return tuple(by_index[i][1]["task"] for i in range(len(by_index)))


def _episode_table(
    indices: np.ndarray,
    lengths: np.ndarray,
    tasks: list[tuple[str, ...]],
    *,
    chunks_size: int,
    fps: float,
    video_keys: tuple[str, ...],
) -> EpisodeTable:
    ends = np.cumsum(lengths)
    chunk = indices // chunks_size
    # one MP4 per episode-camera: the episode is the whole file, from 0 to length / fps
    starts_s = np.zeros(len(indices), dtype=np.float64)
    ends_s = lengths / fps
    return EpisodeTable(
        episode_index=_frozen(indices),
        length=_frozen(lengths),
        dataset_from_index=_frozen(ends - lengths),
        dataset_to_index=_frozen(ends),
        data_chunk_index=_frozen(chunk),
        data_file_index=_frozen(indices),
        videos=tuple(
            VideoColumns(
                key=key,
                chunk_index=_frozen(chunk),
                file_index=_frozen(indices),
                from_timestamp=_frozen(starts_s),
                to_timestamp=_frozen(ends_s),
            )
            for key in video_keys
        ),
        tasks=tuple(tasks),
    )


def _episode_columns(table: EpisodeTable, rows: list[dict[str, Any]]) -> pa.Table:
    """``meta/episodes`` as LeRobot 0.4's converter writes it (stats columns aside): its
    columns, in its order, with this layout's file indices and timestamps; fields of
    ``episodes.jsonl`` beyond ``episode_index``, ``tasks`` and ``length`` follow ``length``
    (dropped, with a warning, when Arrow cannot type them)."""
    n = len(table)
    columns: dict[str, pa.Array] = {
        "episode_index": pa.array(table.episode_index, type=pa.int64()),
        "data/chunk_index": pa.array(table.data_chunk_index, type=pa.int64()),
        "data/file_index": pa.array(table.data_file_index, type=pa.int64()),
        "dataset_from_index": pa.array(table.dataset_from_index, type=pa.int64()),
        "dataset_to_index": pa.array(table.dataset_to_index, type=pa.int64()),
    }
    for video in sorted(table.videos, key=lambda v: v.key):  # the converter sorts the cameras
        prefix = f"videos/{video.key}"
        columns[f"{prefix}/chunk_index"] = pa.array(video.chunk_index, type=pa.int64())
        columns[f"{prefix}/file_index"] = pa.array(video.file_index, type=pa.int64())
        columns[f"{prefix}/from_timestamp"] = pa.array(video.from_timestamp, type=pa.float64())
        columns[f"{prefix}/to_timestamp"] = pa.array(video.to_timestamp, type=pa.float64())
    columns["tasks"] = pa.array([list(t) for t in table.tasks], type=pa.list_(pa.string()))
    columns["length"] = pa.array(table.length, type=pa.int64())
    extra = dict.fromkeys(key for row in rows for key in row if key not in columns)
    for key in extra:
        try:
            columns[key] = pa.array([row.get(key) for row in rows])
        except (pa.ArrowException, TypeError, ValueError) as error:
            logger.warning(
                "%s: field %r left out of the episodes: %s", V2_EPISODES_PATH, key, error
            )
    zeros = np.zeros(n, dtype=np.int64)
    columns["meta/episodes/chunk_index"] = pa.array(zeros)
    columns["meta/episodes/file_index"] = pa.array(zeros)
    return pa.table(columns)


# --------------------------------------------------------------------------------------------
# statistics


def _stacked(stats: list[Mapping[str, Any]], name: str) -> np.ndarray:
    # one array over the episodes at once: equal to LeRobot's np.stack of each episode's
    # np.array, without a Python array per episode and statistic
    return np.array([s[name] for s in stats])


def _aggregate_feature(stats: list[Mapping[str, Any]], key: str) -> dict[str, np.ndarray]:
    counts = _stacked(stats, "count")
    if counts.ndim != 2 or counts.shape[1] != 1:
        raise DatasetFormatError(
            f"{V2_EPISODES_STATS_PATH}: stats of {key!r}: 'count' must be [n] in every episode"
        )
    # the operations and their order are LeRobot's, so the floats come out bit for bit equal
    means = _stacked(stats, "mean")
    variances = _stacked(stats, "std") ** 2
    total_count = counts.sum(axis=0)
    while counts.ndim < means.ndim:
        counts = np.expand_dims(counts, axis=-1)
    total_mean = (means * counts).sum(axis=0) / total_count
    delta_means = means - total_mean
    total_variance = ((variances + delta_means**2) * counts).sum(axis=0) / total_count
    aggregated = {
        "min": np.min(_stacked(stats, "min"), axis=0),
        "max": np.max(_stacked(stats, "max"), axis=0),
        "mean": total_mean,
        "std": np.sqrt(total_variance),
        "count": total_count,
    }
    for name in (k for k in stats[0] if k.startswith("q") and k[1:].isdigit()):
        if all(name in s for s in stats):
            aggregated[name] = (_stacked(stats, name) * counts).sum(axis=0) / total_count
    return aggregated


def aggregate_stats(episode_stats: list[Mapping[str, Any]]) -> dict[str, dict[str, np.ndarray]]:
    """LeRobot's ``aggregate_stats`` over per-episode statistics (feature -> stat -> values,
    as JSON gives them or as arrays): count-weighted means, pooled variances, elementwise
    min/max, count-weighted quantiles ``qNN`` where every episode has them. A feature absent
    from some episodes aggregates over those that have it.

    Raises:
        DatasetFormatError: a statistic is missing, ``count`` is not one number, or the
            episodes' shapes disagree (naming the feature).
    """
    keys = dict.fromkeys(key for stats in episode_stats for key in stats)
    result: dict[str, dict[str, np.ndarray]] = {}
    for key in keys:
        with_key = [stats[key] for stats in episode_stats if key in stats]
        for feature in with_key:
            if not isinstance(feature, Mapping):
                raise DatasetFormatError(
                    f"{V2_EPISODES_STATS_PATH}: stats of {key!r} must be an object"
                )
            missing = [name for name in _REQUIRED_STATS if name not in feature]
            if missing:
                raise DatasetFormatError(
                    f"{V2_EPISODES_STATS_PATH}: stats of {key!r} lack {missing}"
                )
        try:
            result[key] = _aggregate_feature(with_key, key)
        except (ValueError, TypeError) as error:  # shapes or values that do not combine
            raise DatasetFormatError(
                f"{V2_EPISODES_STATS_PATH}: stats of {key!r} cannot be aggregated: {error}"
            ) from error
    return result


def _episode_stats(lines: list[tuple[int, dict[str, Any]]]) -> dict[str, Any]:
    """The dataset's statistics from ``episodes_stats.jsonl``, as JSON values (what LeRobot
    0.4's converter writes to ``stats.json`` and reads back)."""
    path = V2_EPISODES_STATS_PATH
    by_index: dict[int, dict[str, Any]] = {}
    for number, line in lines:
        index = _line_int(
            line.get("episode_index"), path=path, number=number, name="episode_index", minimum=0
        )
        stats = line.get("stats")
        if not isinstance(stats, dict):
            raise DatasetFormatError(f"{path} line {number}: field 'stats' must be an object")
        by_index[index] = stats  # a later line of the same episode wins, as in LeRobot
    aggregated = aggregate_stats([by_index[i] for i in sorted(by_index)])
    return {
        key: {name: value.tolist() for name, value in stats.items()}
        for key, stats in aggregated.items()
    }


# --------------------------------------------------------------------------------------------
# info.json


def _presented_info(
    info: dict[str, Any], *, total_episodes: int, total_frames: int, total_tasks: int
) -> dict[str, Any]:
    """``info.json`` as LeRobot 0.4's converter rewrites it, with the published templates and
    the totals of the tables read."""
    presented = copy.deepcopy(info)
    presented["codebase_version"] = "v3.0"
    presented.pop("total_chunks", None)
    presented.pop("total_videos", None)
    presented.setdefault("data_files_size_in_mb", _CONVERTED_DATA_FILES_SIZE_IN_MB)
    presented.setdefault("video_files_size_in_mb", _CONVERTED_VIDEO_FILES_SIZE_IN_MB)
    presented["total_episodes"] = total_episodes
    presented["total_frames"] = total_frames
    presented["total_tasks"] = total_tasks
    fps = presented["fps"]
    if isinstance(fps, float) and fps.is_integer():
        presented["fps"] = fps = int(fps)
    for feature in presented["features"].values():
        if feature.get("dtype") != "video":
            feature["fps"] = fps
    return presented


def _only_video_info(feature: object) -> bool:
    return (
        isinstance(feature, dict)
        and "info" not in feature
        and isinstance(feature.get("video_info"), dict)
    )


def _with_video_info(info: dict[str, Any]) -> dict[str, Any]:
    """v1 -> v2.0 conversions wrote a video feature's ``info`` as ``video_info``: present it
    as ``info`` too, where later LeRobot versions and our features read it."""
    features = info.get("features")
    if not isinstance(features, dict) or not any(map(_only_video_info, features.values())):
        return info
    info = copy.deepcopy(info)
    for feature in info["features"].values():
        if _only_video_info(feature):
            feature["info"] = feature["video_info"]
    return info


def _check_total(info: dict[str, Any], name: str, counted: int, what: str) -> None:
    written = info.get(name)
    if written != counted:
        logger.warning("%s: %s is %r but %s; using %d", INFO_PATH, name, written, what, counted)


def load_v2_meta(
    reader: RangeReader,
    *,
    raw_info: bytes,
    info: dict[str, Any],
    root: str | None,
    revision: str | None,
    load_stats: bool = True,
) -> DatasetMeta:
    """The v3-shaped metadata of the LeRobot v2.0 / v2.1 dataset behind ``reader`` (see the
    module docstring); ``raw_info`` / ``info`` are its ``meta/info.json``, read already.

    Raises:
        DatasetFormatError: a missing required file (``episodes.jsonl``, ``tasks.jsonl``) or
            invalid content, naming the file, the line and the field.
        StorageError: the store itself failed.
    """
    version = info["codebase_version"]
    fps = info_fps(info)
    chunks_size = info.get("chunks_size", _DEFAULT_CHUNKS_SIZE)
    if (
        not isinstance(chunks_size, int)
        or isinstance(chunks_size, bool)
        or not 1 <= chunks_size <= MAX_INFO_INT
    ):
        raise DatasetFormatError(
            f"{INFO_PATH}: field 'chunks_size' must be an integer in [1, 2**63 - 1], got "
            f"{shown_value(chunks_size)}"
        )
    info = _with_video_info(info)
    features = parse_features(info.get("features"), file=INFO_PATH)
    video_keys = tuple(f.key for f in features if f.kind == "video")
    video_path: str | None = None
    try:
        data_path = check_template(
            info.get("data_path"),
            file=INFO_PATH,
            field="data_path",
            required=frozenset({"episode_chunk", "episode_index"}),
            allowed=V2_FIELDS,
        )
        if video_keys or info.get("video_path") is not None:
            video_path = check_template(
                info.get("video_path"),
                file=INFO_PATH,
                field="video_path",
                required=frozenset({"episode_chunk", "episode_index", "video_key"}),
                allowed=V2_FIELDS,
            )
    except DatasetFormatError as error:
        raise _for_version(error, version) from error

    # every metadata file has a fixed name: fetch them at once (no listing, plain HTTP too)
    stats_path = V2_EPISODES_STATS_PATH if version == "v2.1" else STATS_PATH
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="es-meta") as pool:
        episodes_future = pool.submit(_read_required, reader, V2_EPISODES_PATH, version)
        tasks_future = pool.submit(_read_required, reader, V2_TASKS_PATH, version)
        stats_future = (
            pool.submit(read_whole, reader, stats_path, required=False) if load_stats else None
        )
        raw_episodes = episodes_future.result(timeout=META_TIMEOUT_S)
        raw_tasks = tasks_future.result(timeout=META_TIMEOUT_S)
        raw_stats = stats_future.result(timeout=META_TIMEOUT_S) if stats_future else None

    indices, lengths, episode_tasks, rows = _episodes(_read_jsonl(raw_episodes, V2_EPISODES_PATH))
    tasks = _tasks(_read_jsonl(raw_tasks, V2_TASKS_PATH))
    total_frames = int(lengths.sum())
    _check_total(info, "total_episodes", len(indices), f"{V2_EPISODES_PATH} has that many lines")
    _check_total(info, "total_frames", total_frames, "the episode lengths sum to")
    _check_total(info, "total_tasks", len(tasks), f"{V2_TASKS_PATH} has that many lines")
    table = _episode_table(
        indices,
        lengths,
        episode_tasks,
        chunks_size=chunks_size,
        fps=float(fps),
        video_keys=video_keys,
    )
    _validate_episodes(
        table,
        fps=float(fps),
        total_episodes=len(indices),
        total_frames=total_frames,
        where=V2_EPISODES_PATH,
    )

    stats: dict[str, Any] | None = None
    if raw_stats is not None and version == "v2.1":
        stats = _episode_stats(_read_jsonl(raw_stats, V2_EPISODES_STATS_PATH))
    elif raw_stats is not None:
        stats = _parse_json(raw_stats, STATS_PATH)
        if not isinstance(stats, dict):
            raise DatasetFormatError(f"{STATS_PATH}: must hold a JSON object")
    elif load_stats and version == "v2.1":
        # LeRobot 0.3.x needs the per-episode file; some repositories kept v2.0's instead
        raw_stats = read_whole(reader, STATS_PATH, required=False)
        stats = None if raw_stats is None else _parse_json(raw_stats, STATS_PATH)
        if stats is not None and not isinstance(stats, dict):
            raise DatasetFormatError(f"{STATS_PATH}: must hold a JSON object")
        logger.warning(
            "%s is missing: statistics %s",
            V2_EPISODES_STATS_PATH,
            f"from {STATS_PATH}" if stats is not None else "absent",
        )

    meta = DatasetMeta(
        root=reader.root if root is None else root,
        revision=revision,
        codebase_version=version,
        robot_type=info.get("robot_type") if isinstance(info.get("robot_type"), str) else None,
        fps=float(fps),
        total_episodes=len(indices),
        total_frames=total_frames,
        total_tasks=len(tasks),
        chunks_size=chunks_size,
        data_path=data_path,
        video_path=video_path,
        features=features,
        episodes=table,
        tasks=tasks,
        stats=stats,
        info=_presented_info(
            info,
            total_episodes=len(indices),
            total_frames=total_frames,
            total_tasks=len(tasks),
        ),
        info_sha256=hashlib.sha256(raw_info).hexdigest(),
        episode_files=(V2_EPISODES_PATH,),
        episode_columns=_episode_columns(table, rows),
    )
    # resolve every referenced file once so a traversal fails at load, not mid-training
    meta.data_files()
    for key in video_keys:
        meta.video_files(key)
    return meta

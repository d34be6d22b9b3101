"""LeRobot v3.0 tables for synthetic datasets: data/episodes/tasks Parquet, info.json, stats.

Column names, Arrow types and order follow what LeRobot 0.4 itself writes (see
tests/data/lerobot_sim5): fixed-size float lists for vector features, ``list<element: ...>``
statistics, the task string as the pandas index column ``__index_level_0__``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "QUANTILES",
    "STAT_NAMES",
    "data_schema",
    "histogram_stats",
    "merge_histogram_stats",
    "numeric_stats",
    "stats_json",
    "write_data_file",
    "write_episodes_file",
    "write_json",
    "write_jsonl",
    "write_tasks_file",
]

QUANTILES: tuple[tuple[str, float], ...] = (
    ("q01", 0.01),
    ("q10", 0.10),
    ("q50", 0.50),
    ("q90", 0.90),
    ("q99", 0.99),
)
STAT_NAMES: tuple[str, ...] = ("min", "max", "mean", "std", "count", *(q for q, _ in QUANTILES))

# Stats = {"min": array, ..., "count": array}; numeric arrays shaped like the feature
Stats = dict[str, np.ndarray]


def _list_of(value_type: pa.DataType, depth: int = 1) -> pa.DataType:
    for _ in range(depth):
        value_type = pa.list_(pa.field("element", value_type))
    return value_type


def numeric_stats(values: np.ndarray) -> Stats:
    """Statistics of a ``(frames,)`` or ``(frames, size)`` array over frames, LeRobot-shaped:
    scalars become ``[value]``; min/max keep the integer dtype of integer features."""
    matrix = values.reshape(len(values), -1)
    integer = np.issubdtype(matrix.dtype, np.integer)
    as_float = matrix.astype(np.float64)
    stats: Stats = {
        "min": matrix.min(axis=0).astype(np.int64 if integer else np.float64),
        "max": matrix.max(axis=0).astype(np.int64 if integer else np.float64),
        "mean": as_float.mean(axis=0),
        "std": as_float.std(axis=0),
        "count": np.array([len(values)], dtype=np.int64),
    }
    for name, q in QUANTILES:
        stats[name] = np.quantile(as_float, q, axis=0)
    return stats


def histogram_stats(histogram: np.ndarray, frames: int) -> Stats:
    """Statistics of uint8 image values, from a ``(3, 256)`` per-channel histogram, in LeRobot's
    image form: values scaled to [0, 1], shaped ``(3, 1, 1)``, ``count`` = frames.

    Quantiles are the inverted-CDF ones (the smallest value whose cumulative share reaches q),
    exact for the sampled pixels."""
    levels = np.arange(256, dtype=np.float64) / 255.0
    totals = histogram.sum(axis=1)
    mean = (histogram * levels).sum(axis=1) / totals
    variance = (histogram * (levels[None, :] - mean[:, None]) ** 2).sum(axis=1) / totals
    present = histogram > 0
    first = present.argmax(axis=1)
    last = 255 - present[:, ::-1].argmax(axis=1)
    cumulative = np.cumsum(histogram, axis=1)
    stats: Stats = {
        "min": levels[first],
        "max": levels[last],
        "mean": mean,
        "std": np.sqrt(variance),
        "count": np.array([frames], dtype=np.int64),
    }
    for name, q in QUANTILES:
        ranks = np.array(
            [np.searchsorted(cumulative[c], q * totals[c], side="left") for c in range(3)]
        )
        stats[name] = levels[np.minimum(ranks, 255)]
    return {k: (v if k == "count" else v.reshape(3, 1, 1)) for k, v in stats.items()}


def merge_histogram_stats(histograms: Sequence[np.ndarray], frames: int) -> Stats:
    """Global image statistics: the per-episode histograms summed."""
    return histogram_stats(np.sum(histograms, axis=0), frames)


def _stats_to_json(stats: Stats, names: Sequence[str] = STAT_NAMES) -> dict[str, Any]:
    return {name: stats[name].tolist() for name in names}


def write_json(path: Path, value: Mapping[str, Any]) -> None:
    # LeRobot writes its metadata with indent=4
    path.write_text(json.dumps(value, indent=4) + "\n", encoding="utf-8")


def write_jsonl(path: Path, lines: Sequence[Mapping[str, Any]]) -> None:
    # one compact JSON object per line, as LeRobot 0.3.x's jsonlines writer puts them
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def stats_json(stats: Mapping[str, Stats], names: Sequence[str] = STAT_NAMES) -> dict[str, Any]:
    """``meta/stats.json`` content from feature -> Stats (the statistics ``names``)."""
    return {feature: _stats_to_json(s, names) for feature, s in stats.items()}


def _hf_features(state_size: int, action_size: int) -> dict[str, Any]:
    """The Hugging Face ``datasets`` schema LeRobot stores in the data Parquet metadata."""
    features: dict[str, Any] = {}
    for key, size in (("observation.state", state_size), ("action", action_size)):
        if size:
            features[key] = {
                "feature": {"dtype": "float32", "_type": "Value"},
                "length": size,
                "_type": "List",
            }
    features["timestamp"] = {"dtype": "float32", "_type": "Value"}
    for key in ("frame_index", "episode_index", "index", "task_index"):
        features[key] = {"dtype": "int64", "_type": "Value"}
    return features


def data_schema(state_size: int, action_size: int) -> pa.Schema:
    fields = []
    for key, size in (("observation.state", state_size), ("action", action_size)):
        if size:
            fields.append(pa.field(key, pa.list_(pa.field("element", pa.float32()), size)))
    fields.append(pa.field("timestamp", pa.float32()))
    fields += [
        pa.field(k, pa.int64()) for k in ("frame_index", "episode_index", "index", "task_index")
    ]
    metadata = {
        "huggingface": json.dumps({"info": {"features": _hf_features(state_size, action_size)}})
    }
    return pa.schema(fields, metadata=metadata)


def write_data_file(
    path: Path, schema: pa.Schema, episodes: Sequence[Mapping[str, np.ndarray]]
) -> None:
    """One data Parquet file, one row group per episode (as LeRobot appends them)."""
    with pq.ParquetWriter(path, schema) as writer:
        for columns in episodes:
            arrays = []
            for field in schema:
                values = columns[field.name]
                if pa.types.is_fixed_size_list(field.type):
                    flat = pa.array(values.reshape(-1), type=field.type.value_type)
                    arrays.append(pa.FixedSizeListArray.from_arrays(flat, type=field.type))
                else:
                    arrays.append(pa.array(values, type=field.type))
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))


def _stats_column_type(stats: Stats, name: str) -> pa.DataType:
    value = stats[name]
    base = pa.int64() if np.issubdtype(value.dtype, np.integer) else pa.float64()
    return _list_of(base, value.ndim)


def write_episodes_file(
    path: Path,
    rows: Sequence[Mapping[str, Any]],
    episode_stats: Sequence[Mapping[str, Stats]],
) -> None:
    """``meta/episodes/...parquet``: the plain columns of ``rows`` (in their order), then
    ``stats/{feature}/{stat}``, then ``meta/episodes/chunk_index`` / ``file_index``."""
    tail = ("meta/episodes/chunk_index", "meta/episodes/file_index")
    columns: dict[str, pa.Array] = {}
    for key in rows[0]:
        if key in tail:
            continue
        values = [row[key] for row in rows]
        if key == "tasks":
            columns[key] = pa.array(values, type=_list_of(pa.string()))
        elif isinstance(values[0], float):
            columns[key] = pa.array(values, type=pa.float64())
        else:
            columns[key] = pa.array(values, type=pa.int64())
    for feature, first in episode_stats[0].items():
        for name in STAT_NAMES:
            column_type = _stats_column_type(first, name)
            columns[f"stats/{feature}/{name}"] = pa.array(
                [s[feature][name].tolist() for s in episode_stats], type=column_type
            )
    for key in tail:
        columns[key] = pa.array([row[key] for row in rows], type=pa.int64())
    pq.write_table(pa.table(columns), path)


def write_tasks_file(path: Path, tasks: Sequence[str]) -> None:
    """``meta/tasks.parquet``: ``task_index`` plus the task string as pandas index column."""
    pandas_metadata = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": None,
                "field_name": "__index_level_0__",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "attributes": {},
        "creator": {"library": "pyarrow", "version": pa.__version__},
    }
    schema = pa.schema(
        [pa.field("task_index", pa.int64()), pa.field("__index_level_0__", pa.string())],
        metadata={"pandas": json.dumps(pandas_metadata)},
    )
    table = pa.Table.from_arrays(
        [pa.array(range(len(tasks)), type=pa.int64()), pa.array(list(tasks), type=pa.string())],
        schema=schema,
    )
    pq.write_table(table, path)

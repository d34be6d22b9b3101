"""One episode's rows of the data Parquet files, read by row group through a RangeReader."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from episodestream.errors import BudgetError, DatasetFormatError, NotFound, StorageError
from episodestream.lerobot._meta import DatasetMeta
from episodestream.lerobot._rangefile import open_arrow_file
from episodestream.storage import RangeReader

__all__ = ["DEFAULT_ROW_CACHE_BYTES", "EpisodeRowReader", "column_to_numpy"]

DEFAULT_ROW_CACHE_BYTES = 64 << 20
# always read: it proves the rows belong to the episode, and costs 8 bytes a frame
# (frame_index is returned as written: LeRobot's reader does not check it either)
_CHECK_COLUMNS = ("episode_index",)


def column_to_numpy(column: pa.ChunkedArray | pa.Array, *, what: str) -> np.ndarray:
    """Arrow column → numpy: scalars (n,), (nested) lists (n, d1, d2, ...), strings object.

    Raises:
        DatasetFormatError: nulls, or list rows of differing lengths.
    """
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if array.null_count:
        raise DatasetFormatError(f"{what}: {array.null_count} null value(s)")
    n = len(array)
    dims: list[int] = []
    values: pa.Array = array
    while (
        pa.types.is_list(values.type)
        or pa.types.is_large_list(values.type)
        or (pa.types.is_fixed_size_list(values.type))
    ):
        rows = len(values)
        flat = values.flatten()
        if rows and len(flat) % rows:
            raise DatasetFormatError(f"{what}: list rows have differing lengths")
        width = len(flat) // rows if rows else 0
        if not pa.types.is_fixed_size_list(values.type) and rows:
            lengths = values.value_lengths().to_numpy(zero_copy_only=False)
            if (lengths != width).any():
                raise DatasetFormatError(f"{what}: list rows have differing lengths")
        dims.append(width)
        values = flat
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        result = np.array(values.to_pylist(), dtype=object)
    elif pa.types.is_struct(values.type) or pa.types.is_binary(values.type):
        # e.g. LeRobot ``image`` features ({bytes, path}); handed over undecoded
        result = np.empty(len(values), dtype=object)
        result[:] = values.to_pylist()
    else:
        result = values.to_numpy(zero_copy_only=False)
    return result.reshape(n, *dims)


class _ByteLru:
    """Thread-safe LRU of numpy arrays bounded by their total ``nbytes``."""

    def __init__(self, budget_bytes: int) -> None:
        self._budget = budget_bytes
        self._items: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple[Any, ...]) -> np.ndarray | None:
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: tuple[Any, ...], value: np.ndarray) -> None:
        size = int(value.nbytes)
        if size > self._budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= int(old.nbytes)
            self._items[key] = value
            self._bytes += size
            while self._bytes > self._budget:
                _, evicted = self._items.popitem(last=False)
                self._bytes -= int(evicted.nbytes)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "hits": self.hits,
                "misses": self.misses,
                "bytes": self._bytes,
                "entries": len(self._items),
                "budget_bytes": self._budget,
            }


class EpisodeRowReader:
    """Reads one episode's rows from the data Parquet files.

    Only the row groups that hold the episode and only the requested columns are fetched
    (footer once per file, then column chunks, coalesced by pyarrow). Decoded row-group
    columns are cached in an LRU bounded by ``byte_budget`` bytes. Thread-safe; picklable
    (the cache is dropped).

    Rows of a data file are in global ``index`` order (as LeRobot writes them), so an
    episode occupies rows ``[dataset_from_index - first, dataset_to_index - first)`` where
    ``first`` is the smallest ``dataset_from_index`` of the episodes in that file; the
    ``episode_index`` column read back confirms it.
    """

    def __init__(
        self,
        reader: RangeReader,
        meta: DatasetMeta,
        byte_budget: int = DEFAULT_ROW_CACHE_BYTES,
    ) -> None:
        if not isinstance(byte_budget, int) or byte_budget < 0:
            raise BudgetError(f"byte_budget must be a non-negative int, got {byte_budget!r}")
        self._reader = reader
        self._meta = meta
        self._byte_budget = byte_budget
        self._file_start = self._first_rows(meta)
        self._init_state()

    def _init_state(self) -> None:
        self._cache = _ByteLru(self._byte_budget)
        self._footers: dict[str, tuple[int, pq.FileMetaData, np.ndarray]] = {}
        self._footer_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {
            "reader": self._reader,
            "meta": self._meta,
            "byte_budget": self._byte_budget,
            "file_start": self._file_start,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._reader = state["reader"]
        self._meta = state["meta"]
        self._byte_budget = state["byte_budget"]
        self._file_start = state["file_start"]
        self._init_state()

    @staticmethod
    def _first_rows(meta: DatasetMeta) -> dict[tuple[int, int], int]:
        table = meta.episodes
        first: dict[tuple[int, int], int] = {}
        for chunk, file, start in zip(
            table.data_chunk_index.tolist(),
            table.data_file_index.tolist(),
            table.dataset_from_index.tolist(),
            strict=True,
        ):
            key = (chunk, file)
            if start < first.get(key, start + 1):
                first[key] = start
        return first

    def cache_stats(self) -> dict[str, int]:
        """Row-group cache counters: hits, misses, bytes, entries, budget_bytes."""
        return self._cache.stats()

    def _footer(self, path: str) -> tuple[int, pq.FileMetaData, np.ndarray]:
        with self._lock:
            cached = self._footers.get(path)
            if cached is not None:
                return cached
            path_lock = self._footer_locks.setdefault(path, threading.Lock())
        # one footer read per file: rows prefetched on two threads would otherwise both
        # probe and read it (the cluster plan counts one)
        with path_lock:
            with self._lock:
                cached = self._footers.get(path)
            if cached is not None:
                return cached
            return self._read_footer(path)

    def _read_footer(self, path: str) -> tuple[int, pq.FileMetaData, np.ndarray]:
        try:
            size = self._reader.size(path)
            metadata = pq.ParquetFile(open_arrow_file(self._reader, path, size)).metadata
        except NotFound as error:
            raise DatasetFormatError(f"{path}: data file is missing") from error
        except StorageError:
            raise
        except (pa.ArrowException, OSError) as error:
            raise DatasetFormatError(f"{path}: not a readable Parquet file: {error}") from error
        counts = np.array(
            [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)],
            dtype=np.int64,
        )
        bounds = np.concatenate([[0], np.cumsum(counts)])
        entry = (size, metadata, bounds)
        with self._lock:
            self._footers.setdefault(path, entry)
        return entry

    def columns(self, episode_index: int) -> tuple[str, ...]:
        """Column names of the data file that holds ``episode_index``."""
        path = self._meta.episode_data_path(episode_index)
        _, metadata, _ = self._footer(path)
        return tuple(metadata.schema.to_arrow_schema().names)

    def rows(
        self, episode_index: int, columns: Sequence[str] | None = None
    ) -> dict[str, np.ndarray]:
        """The episode's rows: ``{column: array}`` with ``length`` rows each (fresh copies).

        Args:
            episode_index: the episode.
            columns: columns to return; None for every column of the data file.

        Raises:
            KeyError: no such episode.
            DatasetFormatError: a missing column, too few rows, or rows whose
                ``episode_index`` is not this episode's.
        """
        meta = self._meta
        table = meta.episodes
        row = table.row(episode_index)
        chunk = int(table.data_chunk_index[row])
        file = int(table.data_file_index[row])
        path = meta.data_file_path(chunk, file)
        size, metadata, bounds = self._footer(path)
        names = metadata.schema.to_arrow_schema().names
        wanted = list(names) if columns is None else list(dict.fromkeys(columns))
        missing = [c for c in (*wanted, *_CHECK_COLUMNS) if c not in names]
        if missing:
            raise DatasetFormatError(f"{path}: missing column(s) {missing}")
        needed = list(dict.fromkeys([*wanted, *_CHECK_COLUMNS]))

        length = int(table.length[row])
        start = int(table.dataset_from_index[row]) - self._file_start[(chunk, file)]
        stop = start + length
        if stop > bounds[-1]:
            raise DatasetFormatError(
                f"{path}: episode {episode_index} needs rows {start}..{stop - 1} but the file "
                f"has {int(bounds[-1])} rows"
            )
        first_group = int(np.searchsorted(bounds, start, side="right")) - 1
        last_group = int(np.searchsorted(bounds, stop - 1, side="right")) - 1
        groups = range(first_group, last_group + 1)

        pieces: dict[str, list[np.ndarray]] = {name: [] for name in needed}
        for group in groups:
            arrays = self._group_columns(path, size, metadata, group, needed)
            lo = max(start - int(bounds[group]), 0)
            hi = min(stop - int(bounds[group]), int(bounds[group + 1] - bounds[group]))
            for name in needed:
                pieces[name].append(arrays[name][lo:hi])
        result = {
            name: (np.concatenate(parts) if len(parts) > 1 else parts[0].copy())
            for name, parts in pieces.items()
        }
        episodes = result["episode_index"]
        if (episodes != episode_index).any():
            bad = int(np.argmax(episodes != episode_index))
            raise DatasetFormatError(
                f"{path}: row {start + bad} holds episode_index {int(episodes[bad])}, expected "
                f"{episode_index} (rows must follow dataset_from_index order)"
            )
        return {name: result[name] for name in wanted}

    def _group_columns(
        self, path: str, size: int, metadata: pq.FileMetaData, group: int, names: list[str]
    ) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        absent: list[str] = []
        for name in names:
            value = self._cache.get((path, group, name))
            if value is None:
                absent.append(name)
            else:
                found[name] = value
        if absent:
            try:
                parquet = pq.ParquetFile(
                    open_arrow_file(self._reader, path, size), metadata=metadata, pre_buffer=True
                )
                table = parquet.read_row_group(group, columns=absent)
            except StorageError:
                raise
            except (pa.ArrowException, OSError) as error:
                raise DatasetFormatError(
                    f"{path}: cannot read row group {group} columns {absent}: {error}"
                ) from error
            for name in absent:
                array = column_to_numpy(table.column(name), what=f"{path}: column {name!r}")
                array.flags.writeable = False
                self._cache.put((path, group, name), array)
                found[name] = array
        return found

"""Read what a cluster plan needs from an opened pool dataset: spans, Parquet footers, open cost."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from episodestream.datasets import EpisodePoolDataset
from episodestream.errors import DatasetFormatError, StorageError
from episodestream.lerobot import DEFAULT_ROW_CACHE_BYTES, open_arrow_file
from episodestream.plan._plan import (
    PARQUET_FOOTER_READ_BYTES,
    ColumnChunk,
    DataFile,
    DatasetLayout,
)

__all__ = ["read_plan_layout"]

# the row reader always reads these besides the data keys (they prove the rows' episode)
_CHECK_COLUMNS = ("episode_index", "frame_index")
_PARQUET_FOOTER_BYTES = 8  # metadata length + "PAR1"


def read_plan_layout(dataset: EpisodePoolDataset) -> DatasetLayout:
    """The layout of ``dataset``'s selected episodes, reading each data file's footer once.

    Call it right after constructing ``dataset``: the requests its reader counted so far are
    what opening the dataset cost, which every rank pays.
    """
    opened = dataset.dataset
    counters = opened.reader.metrics()
    open_requests, open_bytes = int(counters.get("requests", 0)), int(counters.get("bytes", 0))
    manifest, meta = opened.manifest, opened.meta
    ids = np.asarray(opened.episode_ids, dtype=np.int64)
    rows = np.searchsorted(manifest.episode_index, ids)
    span_bytes = np.asarray(manifest.episode_bytes(), dtype=np.int64)[rows]

    table = meta.episodes
    table_rows = table.rows(ids)
    chunks = table.data_chunk_index[table_rows].astype(np.int64)
    files = table.data_file_index[table_rows].astype(np.int64)
    starts = table.dataset_from_index[table_rows].astype(np.int64)
    lengths = table.length[table_rows].astype(np.int64)
    # rows of a data file start at the smallest dataset_from_index of ALL its episodes
    first_row: dict[tuple[int, int], int] = {}
    for chunk, file, start in zip(
        table.data_chunk_index.tolist(),
        table.data_file_index.tolist(),
        table.dataset_from_index.tolist(),
        strict=True,
    ):
        key = (int(chunk), int(file))
        first_row[key] = min(first_row.get(key, start), start)

    columns = list(dict.fromkeys([*dataset.samples.data_keys, *_CHECK_COLUMNS]))
    data_files: list[DataFile] = []
    group_file: list[int] = []
    group_columns: list[tuple[ColumnChunk, ...]] = []
    file_groups: dict[tuple[int, int], tuple[int, np.ndarray]] = {}  # -> (first group, bounds)
    episode_groups: list[tuple[int, ...]] = []
    for chunk, file, start, length in zip(
        chunks.tolist(), files.tolist(), starts.tolist(), lengths.tolist(), strict=True
    ):
        key = (chunk, file)
        if key not in file_groups:
            path = meta.data_file_path(chunk, file)
            data_file, metadata = _read_footer(opened.reader, path)
            counts = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
            file_groups[key] = (len(group_file), np.concatenate([[0], np.cumsum(counts)]))
            for group in range(metadata.num_row_groups):
                group_file.append(len(data_files))
                group_columns.append(_group_columns(metadata, group, columns, path))
            data_files.append(data_file)
        base, bounds = file_groups[key]
        low = start - first_row[key]
        first = int(np.searchsorted(bounds, low, side="right")) - 1
        last = int(np.searchsorted(bounds, low + length - 1, side="right")) - 1
        episode_groups.append(tuple(range(base + first, base + last + 1)))

    return DatasetLayout(
        episode_ids=ids,
        frame_counts=np.asarray(opened.episode_lengths, dtype=np.int64),
        fps=float(meta.fps),
        cameras=tuple(manifest.cameras),
        span_bytes=span_bytes,
        clip_nbytes=np.asarray(opened.episode_nbytes, dtype=np.int64),
        episode_groups=tuple(episode_groups),
        group_file=tuple(group_file),
        group_columns=tuple(group_columns),
        data_files=tuple(data_files),
        open_requests=open_requests,
        open_bytes=open_bytes,
        row_cache_bytes=DEFAULT_ROW_CACHE_BYTES,
        index_origin=manifest.origin,
    )


def _read_footer(reader, path: str) -> tuple[DataFile, pq.FileMetaData]:
    try:
        size = reader.size(path)
        metadata = pq.ParquetFile(open_arrow_file(reader, path, size)).metadata
    except StorageError:
        raise
    except (pa.ArrowException, OSError) as error:
        raise DatasetFormatError(f"{path}: not a readable Parquet file: {error}") from error
    # pyarrow reads the file's tail, then the part of a larger footer that tail missed
    tail = min(size, PARQUET_FOOTER_READ_BYTES)
    rest = metadata.serialized_size + _PARQUET_FOOTER_BYTES - tail
    reads = (tail, rest) if rest > 0 else (tail,)
    return DataFile(path=path, size=size, footer_reads=reads), metadata


def _group_columns(
    metadata: pq.FileMetaData, group: int, names: list[str], path: str
) -> tuple[ColumnChunk, ...]:
    row_group = metadata.row_group(group)
    schema = metadata.schema.to_arrow_schema()
    leaves: dict[str, list[tuple[int, int, int]]] = {name: [] for name in names}
    # field names may hold dots ("observation.state"): a leaf belongs to the longest field
    # name that its dotted path starts with
    fields = sorted(schema.names, key=len, reverse=True)
    for index in range(row_group.num_columns):
        column = row_group.column(index)
        leaf = column.path_in_schema
        top = next((f for f in fields if leaf == f or leaf.startswith(f + ".")), None)
        if top not in leaves:
            continue
        start = column.data_page_offset
        dictionary = column.dictionary_page_offset
        if column.has_dictionary_page and dictionary and 0 < dictionary < start:
            start = dictionary
        leaves[top].append((start, column.total_compressed_size, column.num_values))
    chunks = []
    for name in names:
        if not leaves[name]:
            raise DatasetFormatError(f"{path}: row group {group} has no column {name!r}")
        item = _leaf_itemsize(schema.field(name).type)
        chunks.append(
            ColumnChunk(
                name=name,
                ranges=tuple((start, length) for start, length, _ in leaves[name]),
                decoded_bytes=sum(values for _, _, values in leaves[name]) * item,
            )
        )
    return tuple(chunks)


def _leaf_itemsize(kind: pa.DataType) -> int:
    """Bytes per decoded leaf value (numpy), 8 for strings and other object values."""
    while (
        pa.types.is_list(kind)
        or pa.types.is_large_list(kind)
        or (pa.types.is_fixed_size_list(kind))
    ):
        kind = kind.value_type
    try:
        width = kind.bit_width
    except ValueError:
        return 8
    return max(width // 8, 1)

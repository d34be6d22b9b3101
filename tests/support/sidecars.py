"""Sidecar mutators for the hostile suite: edit a sidecar (``index.arrow``) or a per-file
index entry the way an attacker with write access to the cache or the repository would,
keeping the file readable so only the checks on its contents can refuse it.

Every mutator rewrites the Arrow IPC file in place, column by column, keeping each column's
type and metadata and the schema's header (edited only where a mutator says so):

- :func:`swap_spans`: two episodes' span rows of one camera exchanged, their time fields
  moved so each row's times still match its own episode (``adjust``);
- :func:`shift_samples`: one file's sample offsets, and the span byte ranges over them,
  moved by some bytes (still inside the file: the sidecar loads);
- :func:`zero_span`: one span emptied as the builder empties a span of no frames (an
  episode made unreadable);
- :func:`set_values`: any column's values set (zero a timescale, a lying count, ...);
- :func:`edit_header` / :func:`set_raw_header`: the JSON header changed, or replaced by
  any bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc as ipc

__all__ = [
    "ENTRY_HEADER_KEY",
    "SIDECAR_HEADER_KEY",
    "Columns",
    "edit_header",
    "edit_sidecar",
    "read_columns",
    "set_raw_header",
    "set_values",
    "shift_samples",
    "swap_spans",
    "zero_span",
]

SIDECAR_HEADER_KEY = b"episodestream.sidecar"
ENTRY_HEADER_KEY = b"episodestream.file_entry"
_SPAN_TIME_FIELDS = ("first_pts_s", "last_pts_s", "time_offset_s")

# column name -> values: writable numpy arrays for numeric columns, lists otherwise
Columns = dict[str, Any]


def _read(path: Path) -> tuple[pa.RecordBatch, Columns]:
    reader = ipc.open_file(pa.py_buffer(path.read_bytes()))
    batch = reader.get_batch(0)
    columns: Columns = {}
    for field, column in zip(batch.schema, batch.columns, strict=True):
        values = column.values
        if pa.types.is_integer(values.type) or pa.types.is_floating(values.type):
            columns[field.name] = values.to_numpy(zero_copy_only=False).copy()
        else:
            columns[field.name] = values.to_pylist()
    return batch, columns


def read_columns(path: Path) -> Columns:
    """Every column of a sidecar or entry file, flattened (see :data:`Columns`)."""
    return _read(Path(path))[1]


def edit_sidecar(
    path: Path,
    edit: Callable[[Columns], None],
    *,
    header: Callable[[dict[str, Any]], None] | None = None,
    raw_header: bytes | None = None,
) -> None:
    """Rewrite ``path`` after ``edit(columns)`` (and ``header(json)``) changed it in place;
    ``raw_header`` replaces the header's bytes."""
    path = Path(path)
    batch, columns = _read(path)
    edit(columns)
    metadata = dict(batch.schema.metadata or {})
    key = SIDECAR_HEADER_KEY if SIDECAR_HEADER_KEY in metadata else ENTRY_HEADER_KEY
    if header is not None:
        parsed = json.loads(metadata[key])
        header(parsed)
        metadata[key] = json.dumps(parsed).encode()
    if raw_header is not None:
        metadata[key] = raw_header
    fields, arrays = [], []
    for field in batch.schema:
        values = pa.array(columns[field.name], type=field.type.value_type)
        offsets = pa.array([0, len(values)], type=pa.int64())
        arrays.append(pa.LargeListArray.from_arrays(offsets, values))
        fields.append(field)
    out = pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=metadata))
    sink = pa.BufferOutputStream()
    with ipc.new_file(sink, out.schema) as writer:
        writer.write_batch(out)
    path.write_bytes(sink.getvalue().to_pybytes())


def edit_header(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    edit_sidecar(path, lambda columns: None, header=change)


def set_raw_header(path: Path, raw: bytes) -> None:
    edit_sidecar(path, lambda columns: None, raw_header=raw)


def _cameras(columns: Columns, path: Path) -> int:
    episodes = len(columns["episode.index"])
    return len(columns["span.file_id"]) // max(episodes, 1)


def swap_spans(path: Path, row_a: int, row_b: int, camera: int, *, adjust: bool = True) -> None:
    """Exchange the span rows ``row_a`` and ``row_b`` of camera column ``camera``.

    With ``adjust``, each row keeps its own episode's ``from_timestamp_s`` /
    ``to_timestamp_s`` and the swapped times move by the difference of the two episodes'
    starts: the clip of the other episode then answers exactly this episode's source times
    (the lie that yields the other episode's frames). Without it every field moves.
    """

    def edit(columns: Columns) -> None:
        width = _cameras(columns, path)
        a, b = row_a * width + camera, row_b * width + camera
        start_a = float(columns["span.from_timestamp_s"][a])
        start_b = float(columns["span.from_timestamp_s"][b])
        for name in [n for n in columns if n.startswith("span.")]:
            if adjust and name in ("span.from_timestamp_s", "span.to_timestamp_s"):
                continue
            values = columns[name]
            values[a], values[b] = values[b], values[a]
        if adjust:
            for name in _SPAN_TIME_FIELDS:
                values = columns[f"span.{name}"]
                values[a] += start_a - start_b
                values[b] += start_b - start_a

    edit_sidecar(path, edit)


def shift_samples(path: Path, file: int, by: int) -> None:
    """Move file ``file``'s sample offsets (and every span byte range in it) by ``by``
    bytes: the table stays inside the file and self-consistent, the bytes it names are not
    the samples'."""

    def edit(columns: Columns) -> None:
        bounds = columns["file.sample_bounds"]
        lo, hi = int(bounds[file]), int(bounds[file + 1])
        columns["sample.offsets"][lo:hi] += by
        if "span.file_id" in columns:
            in_file = columns["span.file_id"] == file
            in_file &= columns["span.frame_count"] > 0
            columns["span.byte_start"][in_file] += by
            columns["span.byte_end"][in_file] += by

    edit_sidecar(path, edit)


def set_values(path: Path, name: str, value: Any, where: Any = slice(None)) -> None:
    """Set column ``name`` (e.g. ``"file.timescale"``, ``"span.frame_count"``) at ``where``
    (an index, slice or mask over its flattened values) to ``value``."""

    def edit(columns: Columns) -> None:
        values = columns[name]
        if isinstance(values, list):
            if isinstance(where, slice):
                values[where] = [value] * len(values[where])
            else:
                values[where] = value
        else:
            values[where] = value

    edit_sidecar(path, edit)


def zero_span(path: Path, row: int, camera: int) -> None:
    """Span row ``row`` of camera column ``camera`` as the builder writes an episode whose
    file presents no frame for it: every planned field 0 (its timestamps kept)."""

    def edit(columns: Columns) -> None:
        at = row * _cameras(columns, path) + camera
        for name in columns:
            if name.startswith("span.") and name not in (
                "span.file_id",
                "span.from_timestamp_s",
                "span.to_timestamp_s",
            ):
                columns[name][at] = 0

    edit_sidecar(path, edit)

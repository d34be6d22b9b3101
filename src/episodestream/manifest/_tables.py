"""Per-file sample tables as Arrow columns: writing, loading and the checks made on load.

Both the whole sidecar (``_sidecar``) and the per-file entries of the local cache
(``_entries``) store source files the same way: ``file.<field>`` columns (one value per
file: path, camera, size, validators, each scalar ``TrackIndex`` field, and
``file.sample_bounds``, F + 1 CSR offsets) and ``sample.<field>`` columns (each per-sample
``TrackIndex`` array, all files concatenated; bool arrays stored as uint8). Every column is
a ``large_list`` of one row whose element holds the whole column, so tables of different
lengths share one record batch.

:func:`check_file_table` is the one place their contents are checked after loading; every
check is vectorised over files or samples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa

from episodestream.errors import ManifestError
from episodestream.mp4 import MAX_DURATION, MAX_TIMESCALE, MAX_UNTABLED_SAMPLES, TrackIndex
from episodestream.storage import FileInfo

__all__ = [
    "FILE_COLUMNS",
    "assemble_tracks",
    "check_file_samples",
    "check_file_table",
    "column_array",
    "file_table_columns",
    "file_table_track",
    "load_file_table",
    "max_track_samples",
    "numeric_column",
    "one_row",
    "one_row_batch",
]

Column = tuple[str, pa.Array, dict[bytes, bytes] | None]

_BOOL_MARK = {b"numpy_dtype": b"bool"}
# the per-file columns every table has besides the scalar TrackIndex fields
FILE_COLUMNS = ("path", "camera", "etag", "last_modified", "size", "sample_bounds")
# dtype each per-sample array must load as (the MP4 layer's; any other array: int64)
_SAMPLE_DTYPES: dict[str, type] = {"keyframes": np.bool_}
# ranges of the MP4 fields a table holds (stsz / stts 32-bit, ctts signed 32-bit, ...)
_U16_MAX = (1 << 16) - 1
_U32_MAX = (1 << 32) - 1
_S32_MIN, _S32_MAX = -(1 << 31), (1 << 31) - 1
_MAX_EDIT_TICKS = 1 << 62


# scalar TrackIndex annotations the sidecar can hold (one value per file), as Arrow types
_SCALAR_TYPES = {
    "int": "int64",
    "float": "float64",
    "bool": "bool",
    "str": "string",
    "bytes": "large_binary",
}


def _track_field_kinds() -> dict[str, str]:
    """TrackIndex field -> 'array', or the Arrow type name of a per-file scalar.

    Derived from the dataclass annotations so the sidecar follows the MP4 layer's record;
    ``X | None`` is a nullable ``X``. A field of any other type maps to 'unsupported' and
    makes building or loading a sidecar fail with a clear error (never the import).
    """
    kinds: dict[str, str] = {}
    for field in dataclasses.fields(TrackIndex):
        annotation = str(field.type).replace(" ", "")
        base = annotation.removesuffix("|None").removeprefix("None|")
        if "ndarray" in annotation:
            kinds[field.name] = "array"
        else:
            kinds[field.name] = _SCALAR_TYPES.get(base, "unsupported")
    return kinds


TRACK_FIELD_KINDS = _track_field_kinds()


def one_row(values: pa.Array) -> pa.Array:
    """``values`` as the single element of a one-row ``large_list`` column."""
    return pa.LargeListArray.from_arrays(pa.array([0, len(values)], type=pa.int64()), values)


def numeric_column(values: np.ndarray) -> tuple[pa.Array, dict[bytes, bytes] | None]:
    """A numpy array as an Arrow array (bool as uint8, marked) and its field metadata."""
    array = np.ascontiguousarray(values)
    if array.dtype == np.bool_:
        return pa.array(array.view(np.uint8)), _BOOL_MARK
    return pa.array(array), None


def file_table_columns(files: Mapping[str, Any], samples: Mapping[str, np.ndarray]) -> list[Column]:
    """The ``file.*`` and ``sample.*`` columns of a file table (see the module docstring)."""
    columns: list[Column] = [
        ("file.path", pa.array(list(files["path"]), pa.string()), None),
        ("file.camera", pa.array(list(files["camera"]), pa.string()), None),
        ("file.etag", pa.array(list(files["etag"]), pa.string()), None),
        ("file.last_modified", pa.array(list(files["last_modified"]), pa.string()), None),
        ("file.size", *numeric_column(np.asarray(files["size"], dtype=np.int64))),
        ("file.sample_bounds", *numeric_column(np.asarray(files["sample_bounds"], dtype=np.int64))),
    ]
    for name, kind in TRACK_FIELD_KINDS.items():
        if kind == "array":
            columns.append((f"sample.{name}", *numeric_column(samples[name])))
        elif kind == "unsupported":
            raise ManifestError(f"cannot store TrackIndex.{name} in a sidecar (unknown type)")
        else:
            arrow_type = pa.type_for_alias(kind)
            columns.append((f"file.{name}", pa.array(list(files[name]), arrow_type), None))
    return columns


def one_row_batch(columns: list[Column], metadata: dict[bytes, bytes]) -> pa.RecordBatch:
    """The record batch of one row holding ``columns`` (see :func:`one_row`), with schema
    ``metadata``."""
    fields = []
    arrays = []
    for name, values, field_metadata in columns:
        column = one_row(values)
        fields.append(pa.field(name, column.type, nullable=False, metadata=field_metadata))
        arrays.append(column)
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields, metadata=metadata))


def _flat(batch: pa.RecordBatch, name: str, where: str) -> pa.Array:
    index = batch.schema.get_field_index(name)
    if index < 0:
        raise ManifestError(
            f"{where}: sidecar lacks column {name!r} (written by another version); rebuild it"
        )
    column = batch.column(index)
    if len(column) != 1 or not isinstance(column, pa.LargeListArray) or column.null_count:
        raise ManifestError(f"{where}: column {name!r} must be one non-null list row")
    # .values and .offsets are plain buffer accessors; .flatten() would initialize pyarrow's
    # compute registry on first use (~0.2 s)
    start, end = column.offsets.to_numpy()
    values = column.values
    if start < 0 or end < start or end > len(values):
        raise ManifestError(f"{where}: column {name!r} has offsets outside its values")
    if start != 0 or end != len(values):
        values = values.slice(int(start), int(end - start))
    return values


def column_array(batch: pa.RecordBatch, name: str, where: str) -> np.ndarray:
    """Column ``name`` as a zero-copy, read-only numpy view (bool where marked)."""
    values = _flat(batch, name, where)
    try:
        array = values.to_numpy(zero_copy_only=True)
    except (pa.ArrowException, ValueError) as error:
        raise ManifestError(f"{where}: column {name!r} is not a plain numeric array") from error
    field = batch.schema.field(name)
    if field.metadata and field.metadata.get(b"numpy_dtype") == b"bool":
        array = array.view(np.bool_)
    return array


def column_values(batch: pa.RecordBatch, name: str, where: str) -> list[Any]:
    """Column ``name`` as Python values (strings, bytes, ints, None)."""
    return _flat(batch, name, where).to_pylist()


def load_file_table(
    batch: pa.RecordBatch, where: str
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The ``(files, samples)`` of a record batch written with :func:`file_table_columns`;
    sample arrays are zero-copy views. Call :func:`check_file_table` on the result."""
    files: dict[str, Any] = {
        "path": column_values(batch, "file.path", where),
        "camera": column_values(batch, "file.camera", where),
        "etag": column_values(batch, "file.etag", where),
        "last_modified": column_values(batch, "file.last_modified", where),
        "size": column_array(batch, "file.size", where),
        "sample_bounds": column_array(batch, "file.sample_bounds", where),
    }
    samples: dict[str, np.ndarray] = {}
    for name, kind in TRACK_FIELD_KINDS.items():
        if kind == "array":
            samples[name] = column_array(batch, f"sample.{name}", where)
        elif kind == "unsupported":
            raise ManifestError(f"cannot load TrackIndex.{name} from a sidecar (unknown type)")
        else:
            files[name] = column_values(batch, f"file.{name}", where)
    return files, samples


def _fail(where: str, message: str) -> ManifestError:
    return ManifestError(f"{where}: {message}")


def max_track_samples(file_size: int | np.ndarray) -> int | np.ndarray:
    """Most samples a track can have in a file of ``file_size`` bytes: its moov lies inside
    the file and tables at least half a byte per sample (``stz2`` with 4-bit sizes), or
    gives one size for up to ``MAX_UNTABLED_SAMPLES``."""
    return 2 * file_size + MAX_UNTABLED_SAMPLES


def _bad_scalars(values: list[Any], accept: Callable[[Any], bool]) -> int | None:
    """Position of the first value ``accept`` refuses, or None."""
    for i, value in enumerate(values):
        if not accept(value):
            return i
    return None


def _int_in(low: int, high: int, *, nullable: bool = False) -> Callable[[Any], bool]:
    def accept(value: Any) -> bool:
        if value is None:
            return nullable
        return type(value) is int and low <= value <= high

    return accept


# per-file scalar columns: what a value must be to have come from parse_moov and a store
_SCALAR_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "camera": (lambda v: isinstance(v, str) and bool(v), "a camera key"),
    "etag": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "last_modified": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "track_id": (_int_in(0, _U32_MAX), "an integer in [0, 2**32)"),
    "timescale": (_int_in(1, MAX_TIMESCALE), f"an integer in [1, {MAX_TIMESCALE}]"),
    "duration": (_int_in(0, MAX_DURATION), "an integer in [0, 2**63)"),
    "width": (_int_in(0, _U16_MAX), "an integer in [0, 65535]"),
    "height": (_int_in(0, _U16_MAX), "an integer in [0, 65535]"),
    "codec": (lambda v: isinstance(v, str) and len(v) == 4, "a four-character code"),
    "stsd": (
        lambda v: (
            isinstance(v, bytes)
            and len(v) >= 16
            and int.from_bytes(v[:4], "big") == len(v)
            and v[4:8] == b"stsd"
        ),
        "one whole 'stsd' box",
    ),
    "presentation_start": (
        _int_in(0, _MAX_EDIT_TICKS, nullable=True),
        "null or an integer in [0, 2**62]",
    ),
}


def check_file_table(
    files: Mapping[str, Any],
    samples: Mapping[str, np.ndarray],
    where: str,
    *,
    per_sample: bool,
) -> None:
    """Refuse a file table whose contents cannot describe real files, as ``parse_moov``
    and a store would have described them.

    Always (cost per file): every ``file.*`` column has one value per file, the sample
    bounds start at 0, never decrease and end at the sample arrays' length, paths are
    strings, sizes are not negative, each file holds no more samples than its bytes can
    table (:func:`max_track_samples`), and every scalar is of its type and range (timescale
    in [1, 2**31), duration and edit times in int64, dimensions 16-bit, a whole ``stsd``
    box, ...). With ``per_sample`` (cost per sample: for tables about to be used whole, not
    for a mapped sidecar whose pages are read on demand; see :func:`check_file_samples`):
    the checks of :func:`check_file_samples` for every file.

    Raises:
        ManifestError: naming ``where``, the column and the first offending file.
    """
    paths = files["path"]
    num_files = len(paths)
    for name, values in files.items():
        expected = num_files + 1 if name == "sample_bounds" else num_files
        if len(values) != expected:
            raise _fail(
                where, f"column 'file.{name}' has {len(values)} values, expected {expected}"
            )
    if not all(isinstance(path, str) and path for path in paths):
        raise _fail(where, "column 'file.path' holds an empty or null path")
    bounds = np.asarray(files["sample_bounds"])
    sizes = np.asarray(files["size"])
    if bounds.dtype != np.int64 or sizes.dtype != np.int64:
        raise _fail(where, "file sizes and sample bounds must be int64")
    if bounds[0] != 0 or (np.diff(bounds) < 0).any():
        raise _fail(where, "per-file sample bounds do not start at 0 and ascend")
    total = int(bounds[-1])
    for name, array in samples.items():
        dtype = _SAMPLE_DTYPES.get(name, np.int64)
        if array.dtype != dtype or array.ndim != 1:
            wanted = np.dtype(dtype)
            raise _fail(where, f"column 'sample.{name}' is {array.dtype}, expected {wanted}")
        if len(array) != total:
            raise _fail(where, f"column 'sample.{name}' has {len(array)} rows, expected {total}")
    bad = np.flatnonzero(sizes < 0)
    if bad.size:
        raise _fail(where, f"{paths[int(bad[0])]}: recorded size {int(sizes[bad[0]])} bytes")
    counts = np.diff(bounds)
    bad = np.flatnonzero(counts > max_track_samples(sizes))
    if bad.size:
        first = int(bad[0])
        raise _fail(
            where,
            f"{paths[first]}: {int(counts[first])} samples in a {int(sizes[first])}-byte file "
            "(more than its bytes can table)",
        )
    for name, (accept, wanted) in _SCALAR_RULES.items():
        if name not in files:
            continue
        first_bad = _bad_scalars(list(files[name]), accept)
        if first_bad is not None:
            raise _fail(
                where,
                f"{paths[first_bad]}: column 'file.{name}' must hold {wanted}, got "
                f"{_shown(files[name][first_bad])}",
            )
    if per_sample:
        check_file_samples(files, samples, where)


def check_file_samples(
    files: Mapping[str, Any],
    samples: Mapping[str, np.ndarray],
    where: str,
    *,
    file: int | None = None,
) -> None:
    """The per-sample checks of a file table (one file's, or every file's), vectorised:
    what ``parse_moov`` makes true of every track it returns.

    Every file has samples; every sample lies inside its file's bytes, sized as ``stsz``
    sizes them (32 bits); decode times start at 0 and step forward by at most 2**32 - 1
    ticks (``stts``); composition offsets are signed 32-bit (``ctts``); presentation times
    are decode time + composition offset + one constant per file (the edit list's), which
    is 0 without an edit list and at most its ``presentation_start`` with one. Call after
    :func:`check_file_table` (it checks the shapes and scalars these rely on).

    Raises:
        ManifestError: naming ``where``, the file and the first offending sample.
    """
    paths = files["path"]
    all_bounds = np.asarray(files["sample_bounds"])
    first_file, end_file = (0, len(paths)) if file is None else (file, file + 1)
    if end_file <= first_file:
        return
    bounds = all_bounds[first_file : end_file + 1]
    lo, hi = int(bounds[0]), int(bounds[-1])
    counts = np.diff(bounds)
    bad = np.flatnonzero(counts == 0)
    if bad.size:
        raise _fail(where, f"{paths[first_file + int(bad[0])]}: the video track has no samples")
    local = np.repeat(np.arange(len(counts)), counts)  # file of each sample, from 0
    starts = bounds[:-1] - lo  # each file's first sample, in the slice

    def name_sample(position: int) -> str:
        f = int(local[position])
        return f"{paths[first_file + f]}: sample {position - int(starts[f])}"

    file_sizes = np.asarray(files["size"])[first_file:end_file]
    offsets, lengths = samples["offsets"][lo:hi], samples["sizes"][lo:hi]
    ends = offsets + lengths
    outside = np.flatnonzero(
        (offsets < 0)
        | (lengths < 0)
        | (lengths > _U32_MAX)
        | (ends > file_sizes[local])
        | (ends < offsets)
    )
    if outside.size:
        first = int(outside[0])
        raise _fail(
            where,
            f"{name_sample(first)} lies at bytes {int(offsets[first])}-{int(ends[first]) - 1}, "
            f"outside the file ({outside.size} samples do)",
        )
    dts = samples["dts"][lo:hi]
    bad = np.flatnonzero(dts[starts] != 0)
    if bad.size:
        raise _fail(where, f"{paths[first_file + int(bad[0])]}: decode times do not start at 0")
    steps = np.diff(dts)
    across = np.zeros(len(steps), dtype=bool)  # one file's last sample to the next's first
    across[starts[1:] - 1] = True
    wrong = np.flatnonzero(((steps < 0) | (steps > _U32_MAX)) & ~across)
    if wrong.size:
        raise _fail(where, f"{name_sample(int(wrong[0]) + 1)}: decode times go backwards or jump")
    cts = samples["cts_offset"][lo:hi]
    wrong = np.flatnonzero((cts < _S32_MIN) | (cts > _S32_MAX))
    if wrong.size:
        raise _fail(where, f"{name_sample(int(wrong[0]))}: composition offset beyond 32 bits")
    # pts = dts + cts - media_start + empty_edit: one constant per file
    shift = samples["pts"][lo:hi] - dts - cts
    wrong = np.flatnonzero(shift != shift[starts][local])
    if wrong.size:
        raise _fail(
            where, f"{name_sample(int(wrong[0]))}: presentation time contradicts its decode time"
        )
    for f in range(len(counts)):
        start = files["presentation_start"][first_file + f] if "presentation_start" in files else 0
        constant = int(shift[starts[f]])
        if (
            constant < -_MAX_EDIT_TICKS
            or (start is None and constant != 0)
            or (start is not None and constant > start)
        ):
            raise _fail(
                where,
                f"{paths[first_file + f]}: presentation times are shifted by {constant} ticks, "
                f"which its edit list (presentation start {start}) cannot do",
            )


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} chars)"


def file_table_track(
    files: Mapping[str, Any], samples: Mapping[str, np.ndarray], file: int
) -> TrackIndex:
    """The ``TrackIndex`` of file ``file`` of a table; arrays are views of the table's."""
    bounds = files["sample_bounds"]
    lo, hi = int(bounds[file]), int(bounds[file + 1])
    kwargs: dict[str, Any] = {}
    for name, kind in TRACK_FIELD_KINDS.items():
        if kind == "array":
            kwargs[name] = samples[name][lo:hi]
        else:
            kwargs[name] = files[name][file]
    return TrackIndex(**kwargs)


def _plain(value: Any) -> Any:
    """numpy scalars to Python ones, so every file-level value is a plain object."""
    return value.item() if isinstance(value, np.generic) else value


def assemble_tracks(
    paths: list[str],
    cameras: list[str],
    indexed: list[tuple[FileInfo, TrackIndex]],
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Concatenate per-file sample tables (CSR layout) and collect per-file scalars."""
    tracks = [track for _, track in indexed]
    counts = np.array([t.num_samples for t in tracks], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    files: dict[str, Any] = {
        "path": list(paths),
        "camera": list(cameras),
        "size": np.array([info.size for info, _ in indexed], dtype=np.int64),
        "etag": [info.etag for info, _ in indexed],
        "last_modified": [info.last_modified for info, _ in indexed],
        "sample_bounds": bounds,
    }
    samples: dict[str, np.ndarray] = {}
    for name, kind in TRACK_FIELD_KINDS.items():
        values = [getattr(t, name) for t in tracks]
        if kind == "array":
            merged = np.concatenate(values) if values else np.zeros(0, dtype=np.int64)
            merged.flags.writeable = False
            samples[name] = merged
        elif kind == "unsupported":
            raise ManifestError(f"cannot store TrackIndex.{name} in a manifest (unknown type)")
        else:
            files[name] = [_plain(v) for v in values]
    return files, samples

"""The episode video manifest: for every (episode, camera), where its frames are.

Stored as a struct of arrays (shape ``(episodes, cameras)``) plus one concatenated sample
table for all files, so lookups are array indexing and a sidecar can be memory-mapped
without a Python object per episode or sample.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from episodestream.errors import (
    ConfigError,
    ConfigTypeError,
    ManifestError,
    StaleSourceError,
    UnknownEpisodesError,
    name_episodes,
)
from episodestream.lerobot import DatasetMeta, EpisodeRowLookup
from episodestream.manifest._entries import EntryKey, FileEntryStore
from episodestream.manifest._refusal import refuse_manifest
from episodestream.manifest._tables import TRACK_FIELD_KINDS, assemble_tracks
from episodestream.mp4 import SpanPlan, TrackIndex
from episodestream.storage import FileInfo

# episode indices are int64 everywhere (the episodes table's column)
_MAX_EPISODE_INDEX = (1 << 63) - 1

__all__ = [
    "SPAN_FIELDS",
    "BuildStats",
    "DatasetIdentity",
    "EpisodeManifest",
    "EpisodeSpan",
    "EpisodeSubset",
    "SourceFile",
    "SpanArrays",
    "episode_subset",
]


@dataclass(frozen=True, slots=True)
class EpisodeSubset:
    """The episodes a manifest indexes when it does not index them all.

    Stored as ascending, disjoint half-open runs ``[start, stop)`` of episode indices, so
    "the first N episodes" is one pair whatever N (a sidecar's header holds it as JSON).
    """

    runs: tuple[tuple[int, int], ...]

    def __post_init__(self) -> None:
        previous = None
        for start, stop in self.runs:
            if (
                start >= stop
                or start < 0
                or stop > _MAX_EPISODE_INDEX
                or (previous is not None and start <= previous)
            ):
                shown = list(self.runs[:5])
                raise ManifestError(
                    f"episode runs {shown}{'...' if len(self.runs) > 5 else ''} are not "
                    "ascending runs of int64 episode indices"
                )
            previous = stop

    @classmethod
    def of(cls, episodes: Sequence[int] | np.ndarray) -> EpisodeSubset:
        """The subset holding ``episodes`` (any order; repeats are ignored).

        Raises:
            ConfigTypeError: episode indices that are not integers.
        """
        ids = np.unique(_episode_ids(episodes))
        if ids.size == 0:
            raise ConfigError("an episode subset needs at least one episode")
        breaks = np.flatnonzero(np.diff(ids) != 1) + 1
        starts = ids[np.concatenate([[0], breaks])]
        stops = ids[np.concatenate([breaks - 1, [ids.size - 1]])] + 1
        return cls(tuple(zip(starts.tolist(), stops.tolist(), strict=True)))

    @property
    def count(self) -> int:
        return sum(stop - start for start, stop in self.runs)

    def ids(self) -> np.ndarray:
        """The episode indices, ascending."""
        return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in self.runs])

    def missing(self, episodes: Sequence[int] | np.ndarray) -> np.ndarray:
        """Those of ``episodes`` the subset lacks (ascending, without repeats)."""
        wanted = np.unique(np.asarray(episodes, dtype=np.int64))
        starts = np.array([a for a, _ in self.runs], dtype=np.int64)
        stops = np.array([b for _, b in self.runs], dtype=np.int64)
        run = np.searchsorted(starts, wanted, side="right") - 1
        inside = (run >= 0) & (wanted < stops[np.maximum(run, 0)])
        return wanted[~inside]

    def describe(self) -> str:
        """``"3 episodes (0..1, 4)"``, the runs cut short when there are many."""
        parts = [str(a) if b == a + 1 else f"{a}..{b - 1}" for a, b in self.runs[:5]]
        if len(self.runs) > 5:
            parts.append("...")
        count = self.count
        return f"{count} episode{'s' if count != 1 else ''} ({', '.join(parts)})"

    def key(self) -> str:
        """A short digest of the subset (names its file in the sidecar cache)."""
        return hashlib.sha256(json.dumps(self.to_json()).encode()).hexdigest()[:16]

    def to_json(self) -> list[list[int]]:
        return [[a, b] for a, b in self.runs]

    @classmethod
    def from_json(cls, data: Any) -> EpisodeSubset:
        try:
            runs = tuple((_json_int(a), _json_int(b)) for a, b in data)
        except (TypeError, ValueError) as error:
            raise ManifestError(f"sidecar episode runs are malformed: {error}") from error
        return cls(runs)


def _json_int(value: Any) -> int:
    """An int of a sidecar header (not a bool, float or string: a header is ours, written
    with ints)."""
    if type(value) is not int:
        raise ValueError(f"{type(value).__name__} where an integer belongs")
    return value


def _episode_ids(episodes: Sequence[int] | np.ndarray) -> np.ndarray:
    """``episodes`` as a flat int64 array; ConfigTypeError for anything but integers (1.5 is
    not episode 1, and a cast would say it was)."""
    given = np.asarray(episodes)
    if given.size and given.dtype.kind not in "iu":
        raise ConfigTypeError(f"episode indices must be integers, got dtype {given.dtype}")
    return given.astype(np.int64, copy=False).reshape(-1)


def episode_subset(
    meta: DatasetMeta, episodes: Sequence[int] | np.ndarray | EpisodeSubset | None
) -> EpisodeSubset | None:
    """``episodes`` of ``meta``'s dataset as a subset; None for every episode (``None``
    given, or a list naming them all).

    Raises:
        UnknownEpisodesError: episodes the dataset does not have (named).
        ConfigError: an empty list.
        ConfigTypeError: episode indices that are not integers.
    """
    if episodes is None:
        return None
    available = np.asarray(meta.episodes.episode_index, dtype=np.int64)
    wanted = episodes.ids() if isinstance(episodes, EpisodeSubset) else _episode_ids(episodes)
    unknown = np.setdiff1d(wanted, available)
    if unknown.size:
        raise UnknownEpisodesError(unknown, available)
    subset = episodes if isinstance(episodes, EpisodeSubset) else EpisodeSubset.of(wanted)
    return None if subset.count == available.size else subset


@dataclass(frozen=True, slots=True)
class DatasetIdentity:
    """What a manifest was built from; a sidecar is used only for the same identity.

    ``root`` is informational (a mirror serves the same dataset under another root);
    everything else must match. ``episodes`` is the subset a manifest indexes (None: every
    episode); a manifest serves any subset of it (see :meth:`mismatch`).
    """

    root: str
    revision: str | None
    total_episodes: int
    total_frames: int
    fps: float
    cameras: tuple[str, ...]
    info_sha256: str
    episodes_sha256: str
    episodes: EpisodeSubset | None = None

    @classmethod
    def of(
        cls,
        meta: DatasetMeta,
        episodes: Sequence[int] | np.ndarray | EpisodeSubset | None = None,
    ) -> DatasetIdentity:
        """The identity of ``meta``'s dataset, or of the ``episodes`` subset of it.

        Raises:
            UnknownEpisodesError: ``episodes`` names episodes the dataset lacks.
        """
        return cls(
            root=meta.root,
            revision=meta.revision,
            total_episodes=meta.total_episodes,
            total_frames=meta.total_frames,
            fps=float(meta.fps),
            cameras=meta.video_keys,
            info_sha256=meta.info_sha256,
            episodes_sha256=episodes_digest(meta),
            episodes=episode_subset(meta, episodes),
        )

    def mismatch(self, current: DatasetIdentity) -> str | None:
        """Why a manifest with this identity does not describe ``current``; None if it does.

        A manifest of every episode serves any subset; one of a subset serves that subset
        or a smaller one, never the whole dataset.
        """
        return self.dataset_mismatch(current) or self.coverage_gap(current.episodes)

    def dataset_mismatch(self, current: DatasetIdentity) -> str | None:
        """Why a manifest with this identity is not of ``current``'s dataset (whatever
        episodes either covers); None if it is."""
        if (
            self.revision is not None
            and current.revision is not None
            and self.revision != current.revision
        ):
            return f"built for revision {self.revision!r}, dataset is at {current.revision!r}"
        for name in ("total_episodes", "total_frames", "fps", "cameras"):
            mine, theirs = getattr(self, name), getattr(current, name)
            if mine != theirs:
                return f"{name} is {mine!r} in the sidecar but {theirs!r} in the dataset"
        if self.info_sha256 != current.info_sha256:
            return "meta/info.json changed since the sidecar was built"
        if self.episodes_sha256 != current.episodes_sha256:
            return "the meta/episodes table changed since the sidecar was built"
        return None

    def coverage_gap(self, episodes: EpisodeSubset | None) -> str | None:
        """Why a manifest with this identity cannot serve ``episodes`` (None: every
        episode of the dataset); None when it can."""
        if self.episodes is None:
            return None
        if episodes is None:
            return (
                f"the sidecar indexes only {self.episodes.describe()} of the dataset's "
                f"{self.total_episodes} (built with --episodes/--num-episodes)"
            )
        missing = self.episodes.missing(episodes.ids())
        if missing.size:
            return (
                f"the sidecar indexes only {self.episodes.describe()}; it lacks episode(s) "
                f"{name_episodes(missing)}"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["cameras"] = list(self.cameras)
        del data["episodes"]
        if self.episodes is not None:  # absent: every episode (sidecar format version 1)
            data["episodes"] = self.episodes.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DatasetIdentity:
        try:
            return cls(
                root=str(data["root"]),
                revision=None if data["revision"] is None else str(data["revision"]),
                total_episodes=_json_int(data["total_episodes"]),
                total_frames=_json_int(data["total_frames"]),
                fps=float(data["fps"]),
                cameras=tuple(str(c) for c in data["cameras"]),
                info_sha256=str(data["info_sha256"]),
                episodes_sha256=str(data["episodes_sha256"]),
                episodes=(
                    None
                    if data.get("episodes") is None
                    else EpisodeSubset.from_json(data["episodes"])
                ),
            )
        except (KeyError, TypeError, ValueError, OverflowError) as error:
            raise ManifestError(f"sidecar identity is malformed: {error!r}") from error


def episodes_digest(meta: DatasetMeta) -> str:
    """SHA-256 over the episode columns a manifest depends on."""
    table = meta.episodes
    digest = hashlib.sha256()
    arrays = [table.episode_index, table.length, table.dataset_from_index, table.dataset_to_index]
    for video in table.videos:
        digest.update(video.key.encode())
        arrays += [video.chunk_index, video.file_index, video.from_timestamp, video.to_timestamp]
    for array in arrays:
        digest.update(np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).data)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class BuildStats:
    """What a build cost: files read, reader requests and bytes, seconds; and the files
    whose tables came from the per-file index instead of being read."""

    files: int
    requests: int
    bytes_read: int
    seconds: float
    reused_files: int = 0

    @property
    def files_per_second(self) -> float:
        return self.files / self.seconds if self.seconds > 0 else float("inf")


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One source MP4 as its store described it when the manifest was built."""

    path: str
    camera: str
    size: int
    etag: str | None
    last_modified: str | None

    @property
    def info(self) -> FileInfo:
        return FileInfo(self.size, self.etag, self.last_modified)


@dataclass(frozen=True, slots=True)
class EpisodeSpan:
    """Where one episode of one camera lies in its MP4 file.

    Samples ``[sample_start, sample_end)`` in decode order (starting at a keyframe) occupy
    bytes ``[byte_start, byte_end)`` of ``file_path``; they present ``frame_count`` frames
    from ``first_pts_s`` to ``last_pts_s`` (source seconds, inclusive). A clip written from
    them shows source time ``t`` at clip time ``t - time_offset_s``. ``from_timestamp_s`` /
    ``to_timestamp_s`` are the episodes table's half-open episode bounds in the file.
    """

    episode_index: int
    camera: str
    file_path: str
    sample_start: int
    sample_end: int
    byte_start: int
    byte_end: int
    first_pts_s: float
    last_pts_s: float
    time_offset_s: float
    frame_count: int
    from_timestamp_s: float
    to_timestamp_s: float

    @property
    def byte_length(self) -> int:
        return self.byte_end - self.byte_start

    def to_plan(self) -> SpanPlan:
        """The MP4 layer's plan for this span (for ``mp4.write_clip``)."""
        return SpanPlan(
            sample_start=self.sample_start,
            sample_end=self.sample_end,
            byte_start=self.byte_start,
            byte_end=self.byte_end,
            time_offset_s=self.time_offset_s,
            first_pts_s=self.first_pts_s,
            last_pts_s=self.last_pts_s,
            frame_count=self.frame_count,
        )


# SpanArrays field -> numpy dtype (the sidecar stores exactly these)
SPAN_FIELDS: dict[str, type] = {
    "file_id": np.int32,
    "sample_start": np.int64,
    "sample_end": np.int64,
    "byte_start": np.int64,
    "byte_end": np.int64,
    "first_pts_s": np.float64,
    "last_pts_s": np.float64,
    "time_offset_s": np.float64,
    "frame_count": np.int64,
    "from_timestamp_s": np.float64,
    "to_timestamp_s": np.float64,
}


@dataclass(frozen=True, slots=True, eq=False)
class SpanArrays:
    """Every span as arrays of shape ``(episodes, cameras)`` (rows follow ``episode_index``).

    ``file_id`` indexes :attr:`EpisodeManifest.file_paths`; the other fields are those of
    :class:`EpisodeSpan`. Arrays are read-only.
    """

    file_id: np.ndarray
    sample_start: np.ndarray
    sample_end: np.ndarray
    byte_start: np.ndarray
    byte_end: np.ndarray
    first_pts_s: np.ndarray
    last_pts_s: np.ndarray
    time_offset_s: np.ndarray
    frame_count: np.ndarray
    from_timestamp_s: np.ndarray
    to_timestamp_s: np.ndarray

    @property
    def byte_length(self) -> np.ndarray:
        return self.byte_end - self.byte_start


class EpisodeManifest:
    """(episode, camera) → file, samples, bytes and times; per-file sample tables.

    Built by :func:`build_manifest` or memory-mapped from a sidecar by :func:`load_sidecar`
    (see :func:`open_manifest`). Immutable and thread-safe. Pickles cheaply when backed by
    a sidecar file (the worker maps the same file) or by the per-file index (the worker
    reads the same entries, checked against what the manifest recorded).

    Attributes:
        identity: the dataset it describes.
        cameras: camera keys, the column order of every span array.
        episode_index: episode of each span row (ascending).
        file_paths: source MP4 files; ``spans.file_id`` indexes them.
        spans: the struct of span arrays.
        origin: ``"built"``, ``"explicit"``, ``"cache"`` or ``"published"``.
        sidecar_path: the local sidecar file backing it, if any.
        entries_folder: the per-file index its file tables were taken from and saved in,
            if any (a manifest of a subset of the episodes).
        span_end_s: where each span's window ends (source seconds, shape ``(episodes,
            cameras)``), from the episodes table, once the manifest was built from it or
            checked against it (``check_spans``); with it every span can be planned again
            (:meth:`span_window`). None otherwise.
    """

    def __init__(
        self,
        *,
        identity: DatasetIdentity,
        cameras: tuple[str, ...],
        episode_index: np.ndarray,
        spans: SpanArrays,
        files: Mapping[str, Any],
        samples: Mapping[str, np.ndarray],
        origin: str = "built",
        sidecar_path: Path | None = None,
        span_end_s: np.ndarray | None = None,
    ) -> None:
        self.identity = identity
        self.cameras = cameras
        self.episode_index = episode_index
        self.spans = spans
        # files: 'path', 'camera', 'size', 'etag', 'last_modified', 'sample_bounds' (F+1
        # CSR offsets into the sample arrays) and one entry per scalar TrackIndex field
        self._files = dict(files)
        self._samples = dict(samples)
        self.file_paths: tuple[str, ...] = tuple(self._files["path"])
        self._file_ids = {path: i for i, path in enumerate(self.file_paths)}
        self._camera_ids = {camera: i for i, camera in enumerate(cameras)}
        self._rows = EpisodeRowLookup(episode_index, "the manifest")
        self.origin = origin
        self.sidecar_path = sidecar_path
        # the per-file index folder its file tables came from, all of them saved there: it
        # pickles by reference to those entries (see reassemble_manifest)
        self.entries_folder: Path | None = None
        # how another process maps the same sidecar again: set by the sidecar loader (which
        # lies above this module), a module-level function pickled by name
        self.reduce_by_reference: Callable[[EpisodeManifest], tuple[Any, ...]] | None = None
        self.build_stats: BuildStats | None = None
        self.span_end_s: np.ndarray | None = None
        # what the sidecar file was when mapped (device, inode, size, mtime), so a refusal
        # removes that file and not one another process renamed over it since
        self.sidecar_stat: tuple[int, int, int, int] | None = None
        # SHA-256 of a published sidecar's bytes, when it came from one
        self.published_sha256: str | None = None
        self._refused = False
        self._check_shapes()
        if span_end_s is not None:
            self.set_span_ends(span_end_s)

    def _check_shapes(self) -> None:
        shape = (len(self.episode_index), len(self.cameras))
        for name in SPAN_FIELDS:
            array = getattr(self.spans, name)
            if array.shape != shape:
                raise ManifestError(
                    f"span array {name!r} has shape {array.shape}, expected {shape}"
                )
        bounds = self._files["sample_bounds"]
        num_files = len(self.file_paths)
        if len(bounds) != num_files + 1 or (num_files and (np.diff(bounds) < 0).any()):
            raise ManifestError("per-file sample bounds are inconsistent")
        total = int(bounds[-1]) if len(bounds) else 0
        for name, array in self._samples.items():
            if len(array) != total:
                raise ManifestError(
                    f"sample array {name!r} has {len(array)} rows, expected {total}"
                )
        if shape[0] and shape[1]:
            ids = self.spans.file_id
            if int(ids.min()) < 0 or int(ids.max()) >= num_files:
                raise ManifestError("span file ids out of range")

    def set_span_ends(self, ends: np.ndarray) -> None:
        """Record where each span's window ends (from the episodes table the spans were built
        from or checked against): it lets :meth:`span_window` plan any span again."""
        ends = np.asarray(ends, dtype=np.float64)
        shape = (self.num_episodes, len(self.cameras))
        if ends.shape != shape:
            raise ManifestError(f"span ends of shape {ends.shape}, expected {shape}")
        ends.flags.writeable = False
        self.span_end_s = ends

    def span_window(self, episode_index: int, camera: str | int) -> tuple[float, float] | None:
        """``[t0, t1]``, the source seconds the builder planned the span of ``episode_index``
        for ``camera`` to present (``from_timestamp`` to the end ``span_ends`` gives it), or
        None when the span ends are unknown (see :attr:`span_end_s`)."""
        if self.span_end_s is None:
            return None
        r = self.row(episode_index)
        c = self.camera_column(camera)
        return float(self.spans.from_timestamp_s[r, c]), float(self.span_end_s[r, c])

    def refuse(self, reason: str, *, file: str | int | None = None) -> None:
        """The index proved wrong at a sample (``reason``): log it and make the next open
        index again instead of using it. A sidecar in the cache is removed (a published
        one, copied there, is also remembered as refused so it is not fetched again); the
        per-file index entry of ``file`` is removed; an explicit sidecar is the caller's
        and is left as it is. Logged once per manifest; never raises."""
        refuse_manifest(self, reason, file=file)

    # --- pickling: map the same sidecar again instead of copying arrays -----------------

    def __reduce__(self) -> tuple[Any, ...]:
        if self.sidecar_path is not None and self.reduce_by_reference is not None:
            return self.reduce_by_reference(self)
        if self.entries_folder is not None:
            state = self._state()
            state["files"] = {name: self._files[name] for name in _RECORDED_FILE_FIELDS}
            del state["samples"]
            return (reassemble_manifest, (str(self.entries_folder), state))
        return (_rebuild_manifest, (self._state(),))

    def _state(self) -> dict[str, Any]:
        return {
            "identity": self.identity,
            "cameras": self.cameras,
            "episode_index": self.episode_index,
            "spans": self.spans,
            "files": self._files,
            "samples": self._samples,
            "origin": self.origin,
            "span_end_s": self.span_end_s,
        }

    # --- lookups ----------------------------------------------------------------------------

    @property
    def num_episodes(self) -> int:
        return len(self.episode_index)

    @property
    def num_files(self) -> int:
        return len(self.file_paths)

    @property
    def num_samples(self) -> int:
        return int(self._files["sample_bounds"][-1])

    def row(self, episode_index: int) -> int:
        """Span row of an episode. Raises KeyError if it is not in the manifest (and
        ConfigTypeError if ``episode_index`` is not an integer)."""
        return self._rows.row(episode_index)

    def camera_column(self, camera: str | int) -> int:
        """Column of a camera key (or a column number, checked)."""
        if isinstance(camera, str):
            try:
                return self._camera_ids[camera]
            except KeyError:
                raise KeyError(f"no camera {camera!r}; have {list(self.cameras)}") from None
        if not 0 <= camera < len(self.cameras):
            raise KeyError(f"no camera column {camera}; have {len(self.cameras)}")
        return int(camera)

    def span(self, episode_index: int, camera: str | int) -> EpisodeSpan:
        """Where ``episode_index`` lies for ``camera`` (key or column number)."""
        r = self.row(episode_index)
        c = self.camera_column(camera)
        s = self.spans
        return EpisodeSpan(
            episode_index=int(episode_index),
            camera=self.cameras[c],
            file_path=self.file_paths[int(s.file_id[r, c])],
            sample_start=int(s.sample_start[r, c]),
            sample_end=int(s.sample_end[r, c]),
            byte_start=int(s.byte_start[r, c]),
            byte_end=int(s.byte_end[r, c]),
            first_pts_s=float(s.first_pts_s[r, c]),
            last_pts_s=float(s.last_pts_s[r, c]),
            time_offset_s=float(s.time_offset_s[r, c]),
            frame_count=int(s.frame_count[r, c]),
            from_timestamp_s=float(s.from_timestamp_s[r, c]),
            to_timestamp_s=float(s.to_timestamp_s[r, c]),
        )

    def file_id(self, file_path: str) -> int:
        try:
            return self._file_ids[file_path]
        except KeyError:
            raise KeyError(f"{file_path!r} is not a source file of this manifest") from None

    def track(self, file: str | int) -> TrackIndex:
        """The sample table of one source file (path or file id); arrays are read-only views."""
        f = self.file_id(file) if isinstance(file, str) else int(file)
        if not 0 <= f < self.num_files:
            raise KeyError(f"no file id {f}")
        bounds = self._files["sample_bounds"]
        lo, hi = int(bounds[f]), int(bounds[f + 1])
        kwargs: dict[str, Any] = {}
        for name, kind in TRACK_FIELD_KINDS.items():
            if kind == "array":
                kwargs[name] = self._samples[name][lo:hi]
            else:
                kwargs[name] = self._files[name][f]
        return TrackIndex(**kwargs)

    def source(self, file: str | int) -> SourceFile:
        """The recorded size and validators of one source file (path or file id)."""
        f = self.file_id(file) if isinstance(file, str) else int(file)
        etag = self._files["etag"][f]
        modified = self._files["last_modified"][f]
        return SourceFile(
            path=self.file_paths[f],
            camera=str(self._files["camera"][f]),
            size=int(self._files["size"][f]),
            etag=None if etag is None else str(etag),
            last_modified=None if modified is None else str(modified),
        )

    def sources(self) -> tuple[SourceFile, ...]:
        return tuple(self.source(f) for f in range(self.num_files))

    def source_change(
        self, file: str | int, current: FileInfo, *, root: str | None = None
    ) -> str | None:
        """Why ``current`` shows the file changed since the build, or None.

        The size is always compared. ETag / Last-Modified are compared (ETag when both
        have one, else Last-Modified) only when ``root`` is None or the root the manifest
        was built from: a mirror or a copy serves the same bytes with other validators.
        """
        recorded = self.source(file)
        if current.size != recorded.size:
            return f"{recorded.path} is {current.size} bytes, the index recorded {recorded.size}"
        if root is not None and root != self.identity.root:
            return None
        if not recorded.info.same_version(current):
            return (
                f"{recorded.path} changed: ETag {current.etag!r} / Last-Modified "
                f"{current.last_modified!r}, the index recorded {recorded.etag!r} / "
                f"{recorded.last_modified!r}"
            )
        return None

    def check_source(self, file: str | int, current: FileInfo, *, root: str | None = None) -> None:
        """Raise :class:`StaleSourceError` if the file changed (see :meth:`source_change`)."""
        reason = self.source_change(file, current, root=root)
        if reason is not None:
            raise StaleSourceError(f"{reason}; rebuild the index (episodestream index)")

    def codecs(self) -> dict[str, tuple[str, ...]]:
        """Camera → distinct sample-entry codecs of its files."""
        result: dict[str, set[str]] = {camera: set() for camera in self.cameras}
        for camera, codec in zip(self._files["camera"], self._files["codec"], strict=True):
            result[str(camera)].add(str(codec))
        return {camera: tuple(sorted(codecs)) for camera, codecs in result.items()}

    def episode_bytes(self) -> np.ndarray:
        """Bytes of every span, shape ``(episodes, cameras)``."""
        return self.spans.byte_end - self.spans.byte_start

    def __repr__(self) -> str:
        return (
            f"EpisodeManifest(episodes={self.num_episodes}, cameras={len(self.cameras)}, "
            f"files={self.num_files}, samples={self.num_samples}, origin={self.origin!r})"
        )


# what a manifest pickled by reference to its per-file entries records of each file
_RECORDED_FILE_FIELDS = ("path", "camera", "size", "etag", "last_modified", "sample_bounds")


def _rebuild_manifest(state: dict[str, Any]) -> EpisodeManifest:
    return EpisodeManifest(**state)


def reassemble_manifest(folder: str, state: dict[str, Any]) -> EpisodeManifest:
    """Unpickling a manifest whose file tables came from the per-file index ``folder``:
    read the same entries again, each checked against what the manifest recorded.

    Raises:
        ManifestError: an entry is missing, refused, or now describes another version of
            its file (the dataset must be opened again).
    """
    identity: DatasetIdentity = state["identity"]
    key = EntryKey(identity.root, identity.revision, identity.info_sha256)
    store = FileEntryStore(Path(folder), key, lock_timeout_s=0.0)
    recorded = state["files"]
    counts = np.diff(np.asarray(recorded["sample_bounds"]))
    indexed: list[tuple[FileInfo, TrackIndex]] = []
    for i, path in enumerate(recorded["path"]):
        info = FileInfo(int(recorded["size"][i]), recorded["etag"][i], recorded["last_modified"][i])
        entry = store.load(path)
        if entry is None or entry.info != info or entry.track.num_samples != counts[i]:
            raise ManifestError(
                f"{store.entry_path(path)} ({path}): the per-file index changed since the "
                "dataset was opened; open it again"
            )
        indexed.append((entry.info, entry.track))
    files, samples = assemble_tracks(list(recorded["path"]), list(recorded["camera"]), indexed)
    manifest = EpisodeManifest(
        identity=identity,
        cameras=state["cameras"],
        episode_index=state["episode_index"],
        spans=state["spans"],
        files=files,
        samples=samples,
        origin=state["origin"],
        span_end_s=state.get("span_end_s"),
    )
    manifest.entries_folder = Path(folder)
    return manifest

"""A manifest from a sidecar or the per-file index is untrusted input: the checks it passes.

Three places, each as cheap as what it protects allows:

- :func:`check_spans`, when a sidecar is loaded: every span row against what the dataset's
  own metadata says of it (the file it must lie in, its episode's ``from_timestamp`` and
  ``to_timestamp``, the end the builder plans it to) and against its file's record (sample
  range inside the track, byte range inside the file), with every count, time and range in
  bounds. Vectorised over rows, and it reads no sample page of a mapped sidecar.
- :func:`check_file_track`, when a file's sample table is first used: the per-sample
  checks the sidecar's load skipped (``check_file_samples``).
- :func:`check_span`, before a clip is cut: the span planned again from the track and the
  metadata, exactly as the builder planned it (:func:`replan_span`), must be the span the
  manifest holds.

What the builder writes passes all three (it plans with the same functions); a sidecar
that fails is refused (at load) or refused at that sample (``EpisodeManifest.refuse``).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from episodestream.errors import (
    FrameNotFoundError,
    ManifestError,
    Mp4FormatError,
    UnsupportedMp4Error,
)
from episodestream.lerobot import DatasetMeta, next_episode_starts
from episodestream.manifest._build import span_ends
from episodestream.manifest._manifest import EpisodeManifest, EpisodeSpan
from episodestream.manifest._tables import check_file_samples
from episodestream.mp4 import DEFAULT_TOLERANCE_S, SpanPlan, TrackIndex, plan_span

__all__ = ["check_file_track", "check_span", "check_spans", "replan_span"]

# the fields of a span the builder plans (the rest come from the episodes table)
_PLAN_FIELDS = tuple(field.name for field in dataclasses.fields(SpanPlan))


def _error(
    where: str, manifest: EpisodeManifest, row: int, column: int, what: str
) -> ManifestError:
    episode = int(manifest.episode_index[row])
    return ManifestError(
        f"{where}: episode {episode} camera {manifest.cameras[column]!r}: {what}; the index "
        "does not describe this dataset"
    )


def _first(mask: np.ndarray) -> tuple[int, int] | None:
    found = np.argwhere(mask)
    return None if found.size == 0 else (int(found[0][0]), int(found[0][1]))


def check_spans(manifest: EpisodeManifest, meta: DatasetMeta, *, where: str) -> None:
    """Refuse a manifest whose span rows ``meta`` contradicts, then record the episode
    span ends (``manifest.set_span_ends``) so every span can be planned again later.

    Expects a manifest whose identity matches ``meta`` (same cameras, totals, episodes
    table digest). Costs a few vectorised passes over the span arrays and one look-up per
    distinct file; no sample is read.

    Raises:
        ManifestError: the first span row that cannot be the builder's (names ``where``,
            the episode, the camera and what is wrong).
    """
    table = meta.episodes
    if manifest.cameras != meta.video_keys:
        raise ManifestError(
            f"{where}: cameras {list(manifest.cameras)}, the dataset has {list(meta.video_keys)}"
        )
    episodes = manifest.episode_index
    try:
        rows = table.rows(episodes)
    except KeyError as error:
        raise ManifestError(f"{where}: {error.args[0]} (its episode column)") from None
    if len(episodes) > 1 and not (np.diff(episodes) > 0).all():
        raise ManifestError(f"{where}: the episode column is not ascending")
    identity = manifest.identity
    if identity.episodes is None and len(rows) != len(table):
        raise ManifestError(
            f"{where}: {len(rows)} episode rows for the dataset's {len(table)} episodes"
        )
    spans = manifest.spans
    num_files = manifest.num_files
    bounds = np.asarray(manifest._files["sample_bounds"])
    file_sizes = np.asarray(manifest._files["size"])
    file_cameras = list(manifest._files["camera"])
    length = table.length[rows]
    shape = spans.file_id.shape

    expected_file = np.full(shape, -1, dtype=np.int64)
    ends = np.empty(shape, dtype=np.float64)
    for c, camera in enumerate(manifest.cameras):
        columns = table.video(camera)
        pairs = np.stack([columns.chunk_index[rows], columns.file_index[rows]], axis=1)
        unique, inverse = np.unique(pairs, axis=0, return_inverse=True)
        ids = []
        for chunk, file in unique.tolist():
            path = meta.video_file_path(camera, chunk, file)
            try:
                file_id = manifest.file_id(path)
            except KeyError:
                file_id = -1
            if file_id >= 0 and file_cameras[file_id] != camera:
                file_id = -1
            ids.append(file_id)
        expected_file[:, c] = np.asarray(ids, dtype=np.int64)[inverse.reshape(-1)]
        from_ts = columns.from_timestamp[rows]
        to_ts = columns.to_timestamp[rows]
        same = (spans.from_timestamp_s[:, c] == from_ts) & (
            (spans.to_timestamp_s[:, c] == to_ts)
            | (np.isnan(spans.to_timestamp_s[:, c]) & np.isnan(to_ts))
        )
        bad = np.flatnonzero(~same)
        if bad.size:
            r = int(bad[0])
            raise _error(
                where,
                manifest,
                r,
                c,
                f"its from/to_timestamp {float(spans.from_timestamp_s[r, c])!r}/"
                f"{float(spans.to_timestamp_s[r, c])!r} s are not the episodes table's "
                f"{float(from_ts[r])!r}/{float(to_ts[r])!r} s",
            )
        ends[:, c] = span_ends(from_ts, next_episode_starts(columns)[rows], length, identity.fps)

    found = _first(spans.file_id != expected_file)
    if found is not None:
        r, c = found
        wanted = int(expected_file[r, c])
        what = (
            "the episodes table names a file the index does not hold"
            if wanted < 0
            else f"its span lies in {manifest.file_paths[int(spans.file_id[r, c])]}, the "
            f"episodes table says {manifest.file_paths[wanted]}"
        )
        raise _error(where, manifest, r, c, what)

    count = spans.frame_count
    found = _first(count < 0)
    if found is not None:
        raise _error(where, manifest, *found, f"frame count {int(count[found])}")
    empty = count == 0
    plan_arrays = [getattr(spans, name) for name in _PLAN_FIELDS]
    found = _first(empty & np.logical_or.reduce([array != 0 for array in plan_arrays]))
    if found is not None:
        raise _error(where, manifest, *found, "a span of no frames with samples, bytes or times")

    has = ~empty
    samples_in_file = np.diff(bounds)[spans.file_id] if num_files else np.zeros(shape, np.int64)
    size = file_sizes[spans.file_id] if num_files else np.zeros(shape, np.int64)
    tolerance = DEFAULT_TOLERANCE_S
    with np.errstate(invalid="ignore"):
        checks = [
            (
                (spans.sample_start < 0)
                | (spans.sample_start >= spans.sample_end)
                | (spans.sample_end > samples_in_file),
                "its samples are not inside its file's track",
            ),
            (
                count > spans.sample_end - spans.sample_start,
                "it presents more frames than it has samples",
            ),
            (
                (spans.byte_start < 0)
                | (spans.byte_start >= spans.byte_end)
                | (spans.byte_end > size),
                "its bytes are not inside its file",
            ),
            (
                ~np.isfinite(spans.time_offset_s)
                | ~np.isfinite(spans.first_pts_s)
                | ~np.isfinite(spans.last_pts_s),
                "its times are not finite",
            ),
            (
                ~(spans.time_offset_s <= spans.first_pts_s)
                | ~(spans.first_pts_s <= spans.last_pts_s)
                | ((count == 1) & (spans.first_pts_s != spans.last_pts_s)),
                "its times are out of order",
            ),
            (
                # every frame the builder puts in a span is played by its end (plan_span)
                ~(spans.last_pts_s <= ends + tolerance),
                "it presents frames after the episode's end",
            ),
        ]
    for mask, what in checks:
        found = _first(has & mask)
        if found is not None:
            raise _error(where, manifest, *found, what)
    manifest.set_span_ends(ends)


def check_file_track(manifest: EpisodeManifest, file: int, *, where: str) -> TrackIndex:
    """The sample table of file ``file`` after the per-sample checks a mapped sidecar's load
    skips (``check_file_samples``: samples inside the file, decode and presentation times
    as ``parse_moov`` makes them).

    Raises:
        ManifestError: naming ``where``, the file and the first offending sample.
    """
    check_file_samples(manifest._files, manifest._samples, where, file=file)
    return manifest.track(file)


def replan_span(
    manifest: EpisodeManifest, episode: int, camera: str, track: TrackIndex, *, where: str
) -> EpisodeSpan | None:
    """The span of ``episode`` / ``camera`` as the builder plans it from ``track`` (its
    file's sample table) over the window the episodes table gives
    (``manifest.span_window``): a span of no frames when none is played there. None when
    the window is unknown (the manifest was never checked against the metadata).

    Raises:
        ManifestError: the track does not plan it at all (the builder would have refused
            the file).
    """
    window = manifest.span_window(episode, camera)
    if window is None:
        return None
    held = manifest.span(episode, camera)
    try:
        plan = plan_span(track, *window)
    except FrameNotFoundError:
        empty = dict.fromkeys(_PLAN_FIELDS, 0)
        return dataclasses.replace(held, **empty)
    except (Mp4FormatError, UnsupportedMp4Error, ValueError, LookupError) as error:
        r, c = manifest.row(episode), manifest.camera_column(camera)
        raise _error(
            where, manifest, r, c, f"its file's track does not plan it ({error})"
        ) from None
    return dataclasses.replace(held, **{name: getattr(plan, name) for name in _PLAN_FIELDS})


def check_span(
    manifest: EpisodeManifest, episode: int, camera: str, track: TrackIndex, *, where: str
) -> EpisodeSpan:
    """The span of ``episode`` / ``camera``, after checking it against ``track`` (its file's
    sample table): planned again (:func:`replan_span`), it must be exactly the span held;
    without the window, its first sample must be a sync sample presenting at
    ``time_offset_s``, and the frames of its samples presented from ``first_pts_s`` to
    ``last_pts_s`` must number ``frame_count``.

    Raises:
        ManifestError: the span is not what its track and the metadata give (names
            ``where``, the episode, the camera and the first field that differs).
    """
    held = manifest.span(episode, camera)
    r, c = manifest.row(episode), manifest.camera_column(camera)
    planned = replan_span(manifest, episode, camera, track, where=where)
    if planned is not None:
        for name in _PLAN_FIELDS:
            mine, theirs = getattr(held, name), getattr(planned, name)
            if mine != theirs:
                raise _error(
                    where, manifest, r, c, f"{name} is {mine!r}, its track plans {theirs!r}"
                )
        return held
    if held.frame_count:
        _check_consistent(manifest, held, track, where, r, c)
    return held


def _check_consistent(
    manifest: EpisodeManifest,
    span: EpisodeSpan,
    track: TrackIndex,
    where: str,
    r: int,
    c: int,
) -> None:
    """The span against its track alone (no window): what ``plan_span`` makes true."""
    start, end = span.sample_start, span.sample_end
    if not 0 <= start < end <= track.num_samples:
        raise _error(where, manifest, r, c, "its samples are not inside its file's track")
    ts = np.float64(track.timescale)
    if not track.keyframes[start] or float(track.pts[start] / ts) != span.time_offset_s:
        raise _error(where, manifest, r, c, "it does not start at a sync sample at its time offset")
    pts = track.pts[start:end]
    if track.presentation_start is not None:
        pts = pts[pts >= track.presentation_start]
    seconds = pts / ts
    shown = seconds[(seconds >= span.first_pts_s) & (seconds <= span.last_pts_s)]
    if (
        shown.size != span.frame_count
        or shown.size == 0
        or float(shown.min()) != span.first_pts_s
        or float(shown.max()) != span.last_pts_s
    ):
        raise _error(where, manifest, r, c, "its samples do not present its frames")

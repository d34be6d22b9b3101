"""Clip jobs planned from the episode manifest: one range read and one clip per camera.

A manifest from a sidecar or the per-file index is untrusted: before a clip is cut, its
file's sample table passes the per-sample checks (once per file), its span is planned
again from that table and the episodes table (``manifest.check_span``), and the fetched
bytes must be framed as the table's samples (``mp4.check_sample_framing``). A manifest
that fails is refused (``EpisodeManifest.refuse``: the next open indexes again). A span
that differs from its re-planned self is replaced by it (the build's span from the same
checked table); a table that fails, or bytes that are not its samples, raise
:class:`ManifestError` at that sample: the wrong bytes are never decoded.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from episodestream.cache._source import ClipJob
from episodestream.errors import FrameNotFoundError, ManifestError, Mp4FormatError
from episodestream.manifest import (
    EpisodeManifest,
    EpisodeSpan,
    check_file_track,
    check_span,
    replan_span,
)
from episodestream.mp4 import (
    SpanPlan,
    TrackIndex,
    check_sample_framing,
    clip_frame_times,
    clip_size,
    write_clip,
)
from episodestream.storage import RangeReader

__all__ = ["ManifestClipSource"]

# episodes whose planned jobs are kept (a few KiB each)
_PLANNED_EPISODES = 1024


class ManifestClipSource:
    """Plans each episode's clip jobs from ``manifest``; checks every source file once.

    The first clip built from a file compares what ``reader`` pinned for it (size, ETag or
    Last-Modified) with what the manifest recorded, so bytes from a replaced file never
    become a clip (the check runs in the fetch thread, not under the cache's lock).
    """

    def __init__(
        self,
        manifest: EpisodeManifest,
        reader: RangeReader,
        *,
        cameras: Sequence[str] | None = None,
        root: str | None = None,
    ) -> None:
        self._manifest = manifest
        self._reader = reader
        self._cameras = tuple(manifest.cameras if cameras is None else cameras)
        unknown = sorted(set(self._cameras) - set(manifest.cameras))
        if unknown:
            raise KeyError(f"cameras {unknown} are not in the manifest ({manifest.cameras})")
        self._root = root
        self._tracks: dict[int, TrackIndex] = {}
        self._checked: set[int] = set()
        self._jobs: OrderedDict[int, tuple[ClipJob, ...]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def cameras(self) -> tuple[str, ...]:
        return self._cameras

    @property
    def _trusted(self) -> bool:
        """Planned in this process from every file's moov, read just now (a build that
        took nothing from the per-file index)."""
        manifest = self._manifest
        stats = manifest.build_stats
        return manifest.origin == "built" and stats is not None and stats.reused_files == 0

    def _where(self) -> str:
        manifest = self._manifest
        if manifest.sidecar_path is not None:
            return f"{manifest.sidecar_path} ({manifest.origin} index)"
        return f"the {manifest.origin} index"

    def _track(self, file_id: int) -> TrackIndex:
        with self._lock:
            track = self._tracks.get(file_id)
        if track is None:
            if self._trusted:
                track = self._manifest.track(file_id)
            else:
                try:
                    track = check_file_track(self._manifest, file_id, where=self._where())
                except ManifestError as error:
                    self._manifest.refuse(str(error), file=file_id)
                    raise
            with self._lock:
                self._tracks.setdefault(file_id, track)
        return track

    def _checked_span(self, episode: int, camera: str, track: TrackIndex) -> EpisodeSpan:
        """The span to cut: the manifest's once it matches what its (checked) track plans;
        when it does not, the index is refused and the span planned again from the track
        is used, as a build would plan it (a track that lies can only be caught by the
        bytes it names: see _check_payload)."""
        if self._trusted:
            return self._manifest.span(episode, camera)
        where = self._where()
        try:
            return check_span(self._manifest, episode, camera, track, where=where)
        except ManifestError as error:
            self._manifest.refuse(str(error), file=self._manifest.span(episode, camera).file_path)
            replanned = replan_span(self._manifest, episode, camera, track, where=where)
            if replanned is None:
                raise
            return replanned

    def _check_source(self, file_id: int) -> None:
        with self._lock:
            if file_id in self._checked:
                return
        path = self._manifest.file_paths[file_id]
        self._manifest.check_source(file_id, self._reader.file_info(path), root=self._root)
        with self._lock:
            self._checked.add(file_id)

    def clip_jobs(self, episode: int) -> Sequence[ClipJob]:
        # planned once per episode: the cache asks again while it waits for budget
        with self._lock:
            known = self._jobs.get(episode)
            if known is not None:
                self._jobs.move_to_end(episode)
                return known
        jobs = self._plan_jobs(episode)
        with self._lock:
            self._jobs[episode] = jobs
            while len(self._jobs) > _PLANNED_EPISODES:
                self._jobs.popitem(last=False)
        return jobs

    def _plan_jobs(self, episode: int) -> tuple[ClipJob, ...]:
        jobs = []
        for camera in self._cameras:
            file_id = self._manifest.file_id(self._manifest.span(episode, camera).file_path)
            track = self._track(file_id)
            span = self._checked_span(episode, camera, track)
            if span.frame_count == 0:
                # LeRobot cannot read it either: raised when the episode is read, not at open
                raise FrameNotFoundError(
                    f"episode {episode} camera {camera!r}: {span.file_path} presents no frame "
                    f"from its from_timestamp {span.from_timestamp_s:.6f} s on"
                )
            plan = span.to_plan()

            def build(
                payload: bytes, track=track, plan=plan, file_id=file_id, camera=camera
            ) -> bytes:
                self._check_source(file_id)
                self._check_payload(episode, camera, file_id, track, plan, payload)
                return write_clip(track, plan, payload)

            jobs.append(
                ClipJob(
                    episode=episode,
                    camera=camera,
                    path=span.file_path,
                    byte_start=span.byte_start,
                    byte_end=span.byte_end,
                    clip_nbytes=clip_size(track, plan),
                    time_offset_s=span.time_offset_s,
                    build=build,
                    frame_times_s=_read_only(clip_frame_times(track, plan)),
                )
            )
        return tuple(jobs)

    def _check_payload(
        self,
        episode: int,
        camera: str,
        file_id: int,
        track: TrackIndex,
        plan: SpanPlan,
        payload: bytes,
    ) -> None:
        """The fetched bytes hold the samples the index places there (else the index, or
        the file since it was indexed, is wrong: refused, never decoded)."""
        path = self._manifest.file_paths[file_id]
        try:
            check_sample_framing(
                track, plan, payload, where=f"episode {episode} camera {camera!r} ({path}): "
            )
        except Mp4FormatError as error:
            if self._trusted:  # indexed from this file's moov just now: the file is wrong
                raise Mp4FormatError(
                    f"{error}: the file's bytes are not what its moov describes (damaged?)"
                ) from error
            reason = f"{error}: the index does not describe the file's bytes"
            self._manifest.refuse(reason, file=file_id)
            raise ManifestError(f"{self._where()}: {reason}") from error


def _read_only(values: np.ndarray) -> np.ndarray:
    values.flags.writeable = False  # shared by every decoder opened on the clip
    return values

"""Clip jobs planned from the episode manifest: one range read and one clip per camera."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from episodestream.cache._source import ClipJob
from episodestream.errors import FrameNotFoundError
from episodestream.manifest import EpisodeManifest
from episodestream.mp4 import TrackIndex, clip_frame_times, clip_size, write_clip
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

    def _track(self, file_id: int) -> TrackIndex:
        with self._lock:
            track = self._tracks.get(file_id)
        if track is None:
            track = self._manifest.track(file_id)
            with self._lock:
                self._tracks.setdefault(file_id, track)
        return track

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
            span = self._manifest.span(episode, camera)
            if span.frame_count == 0:
                # LeRobot cannot read it either: raised when the episode is read, not at open
                raise FrameNotFoundError(
                    f"episode {episode} camera {camera!r}: {span.file_path} presents no frame "
                    f"from its from_timestamp {span.from_timestamp_s:.6f} s on"
                )
            file_id = self._manifest.file_id(span.file_path)
            track = self._track(file_id)
            plan = span.to_plan()

            def build(payload: bytes, track=track, plan=plan, file_id=file_id) -> bytes:
                self._check_source(file_id)
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


def _read_only(values: np.ndarray) -> np.ndarray:
    values.flags.writeable = False  # shared by every decoder opened on the clip
    return values

"""What the cache needs to know about an episode: one clip job per camera."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from episodestream.errors import ConfigError

__all__ = ["ClipJob", "ClipSource", "EpisodeClip"]


@dataclass(frozen=True, slots=True)
class ClipJob:
    """How to make one camera's clip of one episode: one range read, then ``build(payload)``.

    ``clip_nbytes`` is the exact size ``build`` returns, known before anything is fetched, so the
    cache can reserve budget up front. ``frame_times_s``, when the planner knows them, are the
    clip's presentation times (a decoder opened with them skips reading the clip's packets).
    """

    episode: int
    camera: str
    path: str
    byte_start: int
    byte_end: int
    clip_nbytes: int
    time_offset_s: float
    build: Callable[[bytes], bytes]
    frame_times_s: np.ndarray | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.byte_end <= self.byte_start or self.byte_start < 0:
            raise ConfigError(
                f"episode {self.episode} camera {self.camera!r}: empty or negative byte range "
                f"[{self.byte_start}, {self.byte_end}) in {self.path!r}"
            )
        if self.clip_nbytes <= 0:
            raise ConfigError(f"episode {self.episode} camera {self.camera!r}: clip size <= 0")

    @property
    def payload_nbytes(self) -> int:
        return self.byte_end - self.byte_start


@dataclass(frozen=True, slots=True)
class EpisodeClip:
    """A resident standalone MP4 of one episode-camera; source time = clip time + offset.
    ``frame_times_s``: the clip's frame times (clip seconds) when known, else None."""

    episode: int
    camera: str
    data: bytes
    time_offset_s: float
    frame_times_s: np.ndarray | None = field(default=None, compare=False)

    @property
    def nbytes(self) -> int:
        return len(self.data)


@runtime_checkable
class ClipSource(Protocol):
    """Plans the clip jobs of an episode (implemented over the manifest)."""

    def clip_jobs(self, episode: int) -> Sequence[ClipJob]:
        """One job per camera; raises for an unknown episode."""
        ...

"""Cache layer: byte-budgeted episode clip cache with background prefetch."""

from episodestream.cache._cache import (
    DEFAULT_FETCH_WORKERS,
    CacheMetrics,
    EpisodeByteCache,
    ResidentEpisode,
)
from episodestream.cache._manifest_source import ManifestClipSource
from episodestream.cache._source import ClipJob, ClipSource, EpisodeClip

__all__ = [
    "DEFAULT_FETCH_WORKERS",
    "CacheMetrics",
    "ClipJob",
    "ClipSource",
    "EpisodeByteCache",
    "EpisodeClip",
    "ManifestClipSource",
    "ResidentEpisode",
]

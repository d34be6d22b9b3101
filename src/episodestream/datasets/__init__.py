"""Datasets layer: what training code calls.

- :class:`EpisodeStreamDataset`: map-style, LeRobot-identical samples by index.
- :class:`EpisodePoolDataset`: iterable, the exact-coverage episode pool (sharded, resumable).
"""

from episodestream.datasets._map import EpisodeStreamDataset
from episodestream.datasets._options import (
    DEFAULT_BYTE_BUDGET,
    MAX_FETCH_WORKERS,
    MAX_FFMPEG_THREADS,
    StreamOptions,
    parse_bytes,
)
from episodestream.datasets._pool import (
    MAX_DECODE_THREADS,
    MAX_POOL_EPISODES,
    MAX_WINDOW_FRAMES,
    EpisodePoolDataset,
)
from episodestream.datasets._samples import row_tensor
from episodestream.datasets._transport import images_to_float

__all__ = [
    "DEFAULT_BYTE_BUDGET",
    "MAX_DECODE_THREADS",
    "MAX_FETCH_WORKERS",
    "MAX_FFMPEG_THREADS",
    "MAX_POOL_EPISODES",
    "MAX_WINDOW_FRAMES",
    "EpisodePoolDataset",
    "EpisodeStreamDataset",
    "StreamOptions",
    "images_to_float",
    "parse_bytes",
    "row_tensor",
]

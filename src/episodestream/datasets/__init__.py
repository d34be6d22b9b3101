"""Datasets layer: what training code calls.

- :class:`EpisodeStreamDataset`: map-style, LeRobot-identical samples by index.
- :class:`EpisodePoolDataset`: iterable, the exact-coverage episode pool (sharded, resumable).
- Their configuration: :class:`Source` (where a dataset lives), and the option groups
  :class:`Resources`, :class:`SampleOptions` and :class:`Order`, each setting with one default;
  :class:`StreamOptions` is the flat form of before, still accepted.
- :class:`MixtureStreamDataset`: map-style, several datasets mapped onto one schema.
"""

from episodestream.datasets._groups import (
    DEFAULT_BYTE_BUDGET,
    DEFAULT_DECODED_BUDGET,
    DEFAULT_IMAGE_DTYPE,
    MAX_DECODE_THREADS,
    MAX_FETCH_WORKERS,
    MAX_FFMPEG_THREADS,
    MAX_POOL_EPISODES,
    MAX_WINDOW_FRAMES,
    Order,
    Resources,
    SampleOptions,
    parse_bytes,
)
from episodestream.datasets._map import EpisodeStreamDataset
from episodestream.datasets._mixture_map import MixtureStreamDataset
from episodestream.datasets._options import StreamOptions
from episodestream.datasets._pool import EpisodePoolDataset
from episodestream.datasets._samples import row_tensor
from episodestream.datasets._source import Source
from episodestream.datasets._transport import images_to_float

__all__ = [
    "DEFAULT_BYTE_BUDGET",
    "DEFAULT_DECODED_BUDGET",
    "DEFAULT_IMAGE_DTYPE",
    "MAX_DECODE_THREADS",
    "MAX_FETCH_WORKERS",
    "MAX_FFMPEG_THREADS",
    "MAX_POOL_EPISODES",
    "MAX_WINDOW_FRAMES",
    "EpisodePoolDataset",
    "EpisodeStreamDataset",
    "MixtureStreamDataset",
    "Order",
    "Resources",
    "SampleOptions",
    "Source",
    "StreamOptions",
    "images_to_float",
    "parse_bytes",
    "row_tensor",
]

"""Datasets layer: what training code calls.

- :class:`EpisodeStreamDataset`: map-style, LeRobot-identical samples by index.
- :class:`EpisodePoolDataset`: iterable, the exact-coverage episode pool (sharded, resumable).
- :class:`MixtureStreamDataset`: map-style, several datasets mapped onto one schema.
"""

from episodestream.datasets._map import EpisodeStreamDataset
from episodestream.datasets._mixture_map import MixtureStreamDataset
from episodestream.datasets._options import DEFAULT_BYTE_BUDGET, StreamOptions, parse_bytes
from episodestream.datasets._pool import EpisodePoolDataset
from episodestream.datasets._transport import images_to_float

__all__ = [
    "DEFAULT_BYTE_BUDGET",
    "EpisodePoolDataset",
    "EpisodeStreamDataset",
    "MixtureStreamDataset",
    "StreamOptions",
    "images_to_float",
    "parse_bytes",
]

"""Datasets layer: what training code calls.

- :class:`EpisodeStreamDataset`: map-style, LeRobot-identical samples by index.
- :class:`EpisodePoolDataset`: iterable, the exact-coverage episode pool (sharded, resumable).
"""

from episodestream.datasets._map import EpisodeStreamDataset
from episodestream.datasets._options import StreamOptions, parse_bytes
from episodestream.datasets._pool import EpisodePoolDataset

__all__ = ["EpisodePoolDataset", "EpisodeStreamDataset", "StreamOptions", "parse_bytes"]

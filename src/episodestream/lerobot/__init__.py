"""LeRobot layer: dataset metadata (v3.x; v2.1 and v2.0 presented v3-shaped) and per-episode
Parquet rows, read through a RangeReader."""

from episodestream.lerobot._episode_rows import EpisodeRowLookup
from episodestream.lerobot._features import Feature, FeatureKind
from episodestream.lerobot._json import parse_json
from episodestream.lerobot._lerobot_view import (
    LeRobotEpisodes,
    LeRobotInfo,
    LeRobotMetadata,
)
from episodestream.lerobot._load import load_dataset_meta
from episodestream.lerobot._meta import (
    DatasetMeta,
    EpisodeTable,
    VideoColumns,
    next_episode_starts,
    to_timestamp_convention,
)
from episodestream.lerobot._open import open_dataset_files, open_metadata_reader
from episodestream.lerobot._rangefile import open_arrow_file
from episodestream.lerobot._rows import DEFAULT_ROW_CACHE_BYTES, EpisodeRowReader

__all__ = [
    "DEFAULT_ROW_CACHE_BYTES",
    "DatasetMeta",
    "EpisodeRowLookup",
    "EpisodeRowReader",
    "EpisodeTable",
    "Feature",
    "FeatureKind",
    "LeRobotEpisodes",
    "LeRobotInfo",
    "LeRobotMetadata",
    "VideoColumns",
    "load_dataset_meta",
    "next_episode_starts",
    "open_arrow_file",
    "open_dataset_files",
    "open_metadata_reader",
    "parse_json",
    "to_timestamp_convention",
]

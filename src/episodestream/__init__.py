"""episodestream: stream LeRobot v3 video datasets straight into PyTorch training.

Heavy layers (torch, decoders) load lazily on first use of the name that needs them, so
``import episodestream`` stays cheap for the CLI and for DataLoader worker start-up.
"""

from __future__ import annotations

import importlib
from typing import Any

from episodestream.errors import (
    BudgetConfigError,
    BudgetError,
    CacheError,
    ConfigError,
    ConfigTypeError,
    DatasetFormatError,
    DecodeError,
    EpisodeStreamError,
    FrameNotFoundError,
    InvalidResponse,
    LocationError,
    ManifestError,
    Mp4FormatError,
    NotFound,
    ProxyError,
    PublishError,
    RangeNotSupported,
    SampleIndexError,
    SamplingConfigError,
    SamplingError,
    ServingError,
    SidecarCoverageError,
    StaleSourceError,
    StorageError,
    StorageTimeout,
    UnknownEpisodesError,
    UnsupportedMp4Error,
)

__version__ = "0.1.0"

# public name -> module that defines it; imported on first attribute access
_LAZY: dict[str, str] = {
    "CheckFinding": "episodestream.check",
    "DatasetCheck": "episodestream.check",
    "EpisodeCheck": "episodestream.check",
    "EpisodePoolDataset": "episodestream.datasets",
    "EpisodeStreamDataset": "episodestream.datasets",
    "Location": "episodestream.storage",
    "Order": "episodestream.datasets",
    "ReaderOptions": "episodestream.storage",
    "Resources": "episodestream.datasets",
    "SampleOptions": "episodestream.datasets",
    "Source": "episodestream.datasets",
    "StreamOptions": "episodestream.datasets",
    "check_dataset": "episodestream.check",
    "open_reader": "episodestream.storage",
    "MixtureStreamDataset": "episodestream.datasets",
}

__all__ = [
    "BudgetConfigError",
    "BudgetError",
    "CacheError",
    "CheckFinding",
    "ConfigError",
    "ConfigTypeError",
    "DatasetCheck",
    "DatasetFormatError",
    "DecodeError",
    "EpisodeCheck",
    "EpisodePoolDataset",
    "EpisodeStreamDataset",
    "EpisodeStreamError",
    "FrameNotFoundError",
    "InvalidResponse",
    "Location",
    "LocationError",
    "ManifestError",
    "MixtureStreamDataset",
    "Mp4FormatError",
    "NotFound",
    "Order",
    "ProxyError",
    "PublishError",
    "RangeNotSupported",
    "ReaderOptions",
    "Resources",
    "SampleIndexError",
    "SampleOptions",
    "SamplingConfigError",
    "SamplingError",
    "ServingError",
    "SidecarCoverageError",
    "Source",
    "StaleSourceError",
    "StorageError",
    "StorageTimeout",
    "StreamOptions",
    "UnknownEpisodesError",
    "UnsupportedMp4Error",
    "__version__",
    "check_dataset",
    "open_reader",
]


def __getattr__(name: str) -> Any:
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module 'episodestream' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

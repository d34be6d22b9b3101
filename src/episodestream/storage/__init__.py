"""Storage layer: locations and exact byte-range readers (local, HTTP, Hub, fsspec)."""

from episodestream.storage._base import (
    BaseRangeReader,
    FileInfo,
    ListableReader,
    RangeReader,
    ReaderStats,
    ReadRequest,
    normalize_relative_path,
)
from episodestream.storage._config import (
    DEFAULT_LIMITS,
    DEFAULT_RETRY,
    RETRYABLE_STATUSES,
    Limits,
    ReaderOptions,
    RetryPolicy,
    Timeouts,
)
from episodestream.storage._deadline import Deadline
from episodestream.storage._fsspec import FsspecRangeReader
from episodestream.storage._local import LocalRangeReader
from episodestream.storage._location import Location, LocationKind
from episodestream.storage._open import open_reader
from episodestream.storage._publish import (
    DEFAULT_PUBLISH_MESSAGE,
    PublishResult,
    check_publishable,
    publish_file,
)
from episodestream.storage._urls import redact_url
from episodestream.storage._within import reads_within
from episodestream.storage.http._hostgate import (
    RATE_LIMIT_DIR_ENV,
    reset_rate_limits,
    share_rate_limits,
)
from episodestream.storage.http._reader import HttpRangeReader
from episodestream.storage.hub._reader import HubRangeReader, hub_token

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_PUBLISH_MESSAGE",
    "DEFAULT_RETRY",
    "RATE_LIMIT_DIR_ENV",
    "RETRYABLE_STATUSES",
    "BaseRangeReader",
    "Deadline",
    "FileInfo",
    "FsspecRangeReader",
    "HttpRangeReader",
    "HubRangeReader",
    "Limits",
    "ListableReader",
    "LocalRangeReader",
    "Location",
    "LocationKind",
    "PublishResult",
    "RangeReader",
    "ReadRequest",
    "ReaderOptions",
    "ReaderStats",
    "RetryPolicy",
    "Timeouts",
    "check_publishable",
    "hub_token",
    "normalize_relative_path",
    "open_reader",
    "publish_file",
    "reads_within",
    "redact_url",
    "reset_rate_limits",
    "share_rate_limits",
]

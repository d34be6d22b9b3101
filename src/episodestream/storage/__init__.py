"""Storage layer: locations and exact byte-range readers (local, HTTP, Hub, fsspec)."""

from episodestream.storage._base import (
    FileInfo,
    ListableReader,
    RangeReader,
    ReadRequest,
    normalize_relative_path,
)
from episodestream.storage._config import (
    DEFAULT_LIMITS,
    DEFAULT_RETRY,
    DEFAULT_TIMEOUTS,
    RETRYABLE_STATUSES,
    Limits,
    RetryPolicy,
    Timeouts,
)
from episodestream.storage._fsspec import FsspecRangeReader
from episodestream.storage._http import (
    DEFAULT_MAX_SKIP_BYTES,
    DEFAULT_READ_FILE_MAX_BYTES,
    HttpRangeReader,
)
from episodestream.storage._hub import DEFAULT_HUB_ENDPOINT, HubRangeReader, hub_token
from episodestream.storage._local import LocalRangeReader
from episodestream.storage._location import Location, LocationKind
from episodestream.storage._open import open_reader
from episodestream.storage._urls import redact_url

__all__ = [
    "DEFAULT_HUB_ENDPOINT",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_SKIP_BYTES",
    "DEFAULT_READ_FILE_MAX_BYTES",
    "DEFAULT_RETRY",
    "DEFAULT_TIMEOUTS",
    "RETRYABLE_STATUSES",
    "FileInfo",
    "FsspecRangeReader",
    "HttpRangeReader",
    "HubRangeReader",
    "Limits",
    "ListableReader",
    "LocalRangeReader",
    "Location",
    "LocationKind",
    "RangeReader",
    "ReadRequest",
    "RetryPolicy",
    "Timeouts",
    "hub_token",
    "normalize_relative_path",
    "open_reader",
    "redact_url",
]

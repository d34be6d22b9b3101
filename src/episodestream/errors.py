"""The one exception hierarchy of episodestream.

::

    EpisodeStreamError
    ├── StorageError
    │   ├── NotFound                (also FileNotFoundError)
    │   ├── RangeNotSupported
    │   ├── InvalidResponse          a reply that is not the range asked for
    │   ├── StaleSourceError         a source file changed under us
    │   ├── StorageTimeout           (also TimeoutError)
    │   ├── ProxyError               a proxy from HTTPS_PROXY etc. refused or unreachable
    │   ├── PublishError             a write (a published sidecar) refused: no access, conflict
    │   └── LocationError            a root or path we cannot (or must not) resolve
    ├── Mp4FormatError               malformed ISO-BMFF, names box path and offset
    ├── UnsupportedMp4Error          valid MP4 using a feature we do not handle
    ├── DatasetFormatError           LeRobot metadata or rows that are missing or invalid
    ├── ManifestError                sidecar or manifest that does not match the dataset
    ├── CacheError
    │   └── BudgetError              a byte budget that cannot hold what is asked
    ├── DecodeError
    │   └── FrameNotFoundError       no frame within tolerance of a timestamp
    ├── SamplingError                bad pool/shard parameters or resume state
    ├── ConfigError                  an argument or option outside its accepted values
    │   └── ConfigTypeError          one of the wrong type, or an unknown option (also TypeError)
    └── ServingError                 nginx / WAN emulator could not start or stop

Every library error a user can see is one of these; third-party exceptions are translated
at the boundary that calls the third party and chained with ``from``.
"""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "CacheError",
    "ConfigError",
    "ConfigTypeError",
    "DatasetFormatError",
    "DecodeError",
    "EpisodeStreamError",
    "FrameNotFoundError",
    "InvalidResponse",
    "LocationError",
    "ManifestError",
    "Mp4FormatError",
    "NotFound",
    "ProxyError",
    "PublishError",
    "RangeNotSupported",
    "SamplingError",
    "ServingError",
    "StaleSourceError",
    "StorageError",
    "StorageTimeout",
    "UnsupportedMp4Error",
]


class EpisodeStreamError(Exception):
    """Root of every error raised by episodestream."""


class StorageError(EpisodeStreamError):
    """A byte-range read failed."""


class NotFound(StorageError, FileNotFoundError):
    """The file does not exist at the location."""


class RangeNotSupported(StorageError):
    """The server does not honour byte ranges."""


class InvalidResponse(StorageError):
    """A reply that is not the range that was asked for (status, Content-Range, length)."""


class StaleSourceError(StorageError):
    """A source file changed (ETag / Last-Modified / size) since it was first seen."""


class StorageTimeout(StorageError, TimeoutError):
    """A read did not complete within its time bound."""


class ProxyError(StorageError):
    """The proxy named by an environment variable (``HTTPS_PROXY``, ``HTTP_PROXY``,
    ``ALL_PROXY``) refused the request, cannot be reached or is of a kind not supported; the
    message names the variable and the proxy (never its credentials)."""


class PublishError(StorageError):
    """Writing a file for others (``episodestream index --publish``) failed: the destination
    refused it (no write access: the Hub's 401/403 and its message), moved on meanwhile, or
    cannot be written. The message names the destination and where the local copy is."""


class LocationError(StorageError, ValueError):
    """A root or relative path that cannot be resolved, or that escapes the root."""


class Mp4FormatError(EpisodeStreamError, ValueError):
    """Malformed ISO-BMFF data; the message names the box path and byte offset."""


class UnsupportedMp4Error(EpisodeStreamError):
    """A valid MP4 that uses a feature episodestream does not handle."""


class DatasetFormatError(EpisodeStreamError, ValueError):
    """LeRobot dataset content that is missing or invalid; names the file and field."""


class ManifestError(EpisodeStreamError):
    """A manifest or sidecar index that is invalid or does not match its dataset."""


class CacheError(EpisodeStreamError):
    """The episode byte cache cannot do what was asked."""


class BudgetError(CacheError, ValueError):
    """A byte budget too small for what must fit in it."""


class DecodeError(EpisodeStreamError):
    """A decoder could not open a clip or produce a frame."""


class FrameNotFoundError(DecodeError, LookupError):
    """No frame lies within tolerance of a requested timestamp."""


class SamplingError(EpisodeStreamError, ValueError):
    """Invalid sampling parameters or resume state."""


class ConfigError(EpisodeStreamError, ValueError):
    """An argument or option outside its accepted values; the message names it.

    Raised by configuration classes and constructors when they are built, never later.
    """


class ConfigTypeError(ConfigError, TypeError):
    """An argument of the wrong type, or an option name that is not accepted.

    Also a ``TypeError``, as Python raises for a wrong type or an unexpected keyword.
    """


class ServingError(EpisodeStreamError):
    """The loopback server (nginx) or WAN emulator could not start or stop."""

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
    │   ├── UnknownEpisodesError     episodes the dataset lacks (also ConfigError)
    │   └── SidecarCoverageError     a subset's sidecar lacking episodes asked of it
    ├── CacheError
    │   └── BudgetError              a byte budget that cannot hold what is asked
    │       └── BudgetConfigError    a byte size argument that is no size (also ConfigError)
    ├── DecodeError
    │   └── FrameNotFoundError       no frame within tolerance of a timestamp
    ├── SamplingError                bad pool/shard parameters or resume state
    │   ├── SampleIndexError         ds[i] outside the dataset (also IndexError)
    │   └── SamplingConfigError      a sampling argument refused when given (also ConfigError)
    ├── ConfigError                  an argument or option outside its accepted values
    │   └── ConfigTypeError          one of the wrong type, or an unknown option (also TypeError)
    └── ServingError                 nginx / WAN emulator could not start or stop

Every library error a user can see is one of these; third-party exceptions are translated
at the boundary that calls the third party and chained with ``from``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = [
    "BudgetConfigError",
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
    "SampleIndexError",
    "SamplingConfigError",
    "SamplingError",
    "ServingError",
    "SidecarCoverageError",
    "StaleSourceError",
    "StorageError",
    "StorageTimeout",
    "UnknownEpisodesError",
    "UnsupportedMp4Error",
]

# episode ids a message names before it says "and N more"
_NAMED_EPISODES = 10


def name_episodes(ids: Sequence[int]) -> str:
    """``"0, 3, 7"``: the first episode ids of ``ids``, then ``"and N more"``."""
    named = ", ".join(str(int(e)) for e in ids[:_NAMED_EPISODES])
    more = len(ids) - _NAMED_EPISODES
    return named + (f" and {more} more" if more > 0 else "")


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


class SampleIndexError(SamplingError, IndexError):
    """A sample index outside the dataset (``ds[len(ds)]``). Also an ``IndexError``, which
    Python's sequence protocol and index samplers expect at the end of a dataset."""


class ConfigError(EpisodeStreamError, ValueError):
    """An argument or option outside its accepted values; the message names it.

    Raised by configuration classes and constructors when they are built, never later.
    """


class ConfigTypeError(ConfigError, TypeError):
    """An argument of the wrong type, or an option name that is not accepted.

    Also a ``TypeError``, as Python raises for a wrong type or an unexpected keyword.
    """


class BudgetConfigError(BudgetError, ConfigError):
    """A byte size argument (``byte_budget``, ``decoded_budget``) that is not a positive size
    within bounds; refused when the option group holding it is built, before any request.
    Still a :class:`BudgetError`, as such values raised before the option groups."""


class SamplingConfigError(SamplingError, ConfigError):
    """A sampling argument (``episodes``, ``delta_timestamps``, ``image_dtype``, ``pool_size``,
    ``seed``, ``shuffle``) refused when the option group holding it is built, before any
    request. Still a :class:`SamplingError`, as such values raised before the option groups."""


class UnknownEpisodesError(ManifestError, ConfigError):
    """Episode indices the dataset does not have; ``episodes`` holds them (ascending).

    Built from the indices asked for that are unknown and the dataset's episode indices
    (sequences or 1-D arrays of ints).
    """

    def __init__(self, episodes: Iterable[int], available: Sequence[int]) -> None:
        self.episodes = tuple(sorted({int(e) for e in episodes}))
        span = (
            f"{int(min(available))}..{int(max(available))}, {len(available)} in all"
            if len(available)
            else "none"
        )
        super().__init__(
            f"unknown episode(s) {name_episodes(self.episodes)}: the dataset has episodes {span}"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_unknown_episodes, (self.episodes, str(self)))


def _unknown_episodes(episodes: tuple[int, ...], message: str) -> UnknownEpisodesError:
    error = UnknownEpisodesError.__new__(UnknownEpisodesError)
    Exception.__init__(error, message)
    error.episodes = episodes
    return error


class SidecarCoverageError(ManifestError):
    """A sidecar of the right dataset that lacks episodes it was asked for (it was built for
    a subset: ``episodestream index --episodes/--num-episodes``). ``path`` is the sidecar,
    ``missing`` the episodes it lacks (ascending)."""

    def __init__(self, path: str, missing: Iterable[int], indexed: str) -> None:
        self.path = path
        self.missing = tuple(int(e) for e in missing)
        super().__init__(
            f"{path}: the sidecar indexes only {indexed}; it lacks episode(s) "
            f"{name_episodes(self.missing)} ({len(self.missing)} in all): "
            "pass a sidecar of every episode you select, or none (one is then found or built)"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (_coverage_error, (self.path, self.missing, str(self)))


def _coverage_error(path: str, missing: tuple[int, ...], message: str) -> SidecarCoverageError:
    error = SidecarCoverageError.__new__(SidecarCoverageError)
    Exception.__init__(error, message)
    error.path, error.missing = path, missing
    return error


class ServingError(EpisodeStreamError):
    """The loopback server (nginx) or WAN emulator could not start or stop."""

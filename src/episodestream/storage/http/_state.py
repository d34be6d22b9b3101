"""What the HTTP reader knows of each file, and the bounds its exchanges keep."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_MAX_SKIP_BYTES",
    "MAX_REDIRECTS",
    "MAX_ROUTES",
    "MAX_SMALL_BODY_BYTES",
    "MAX_TARGET_REFUSALS",
    "USER_AGENT",
    "FileState",
]

# A server that ignores Range sends the whole file from byte 0: we stream past at most this many
# bytes to reach a range (never buffering them); beyond it, RangeNotSupported.
DEFAULT_MAX_SKIP_BYTES = 8 * 1024 * 1024
MAX_REDIRECTS = 5
# Refused (403) redirect targets in a row, each followed by a fresh resolve, before a read
# gives up; reset whenever bytes arrive.
MAX_TARGET_REFUSALS = 3
MAX_ROUTES = 4096  # URLs whose request headers are kept (signed URLs must not pile up)
# read_file() refuses files larger than this unless told otherwise (metadata, not videos).
# Error bodies, redirect bodies and API documents are read whole only up to this size.
MAX_SMALL_BODY_BYTES = 64 * 1024 * 1024
USER_AGENT = "episodestream/0.1"


@dataclass(slots=True)
class FileState:
    """What the reader knows of one file; fields change only under the reader's lock."""

    url: str
    label: str = ""  # the URL as error messages show it (redacted), computed once
    target: str | None = None  # last redirect target, reused where its host allows
    size: int | None = None
    etag: str | None = None
    last_modified: str | None = None

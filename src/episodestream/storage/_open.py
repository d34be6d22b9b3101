"""Pick the reader for a location by its scheme."""

from __future__ import annotations

import os
from typing import Any

from episodestream.storage._base import RangeReader
from episodestream.storage._location import Location

__all__ = ["open_reader"]


def open_reader(location: str | os.PathLike[str] | Location, **options: Any) -> RangeReader:
    """A range reader for ``location`` (parsed with :meth:`Location.parse`).

    ``options`` go to the backend:

    - local path / ``file://``: :class:`LocalRangeReader` (no options);
    - ``http(s)://``: :class:`HttpRangeReader` (``token``, ``headers``, ``timeouts``, ``limits``,
      ``retry``, ``failure_log``, ``max_skip_bytes``, ``verify``, ``seed``);
    - ``hf://``: :class:`HubRangeReader` (``token``, ``endpoint`` and the HTTP options);
    - any other protocol: :class:`FsspecRangeReader` (``storage_options`` dict passed through to
      fsspec, ``max_concurrency``).
    """
    parsed = Location.parse(location)
    if parsed.kind == "local":
        if options:
            raise TypeError(f"a local reader takes no options, got {sorted(options)}")
        from episodestream.storage._local import LocalRangeReader

        return LocalRangeReader(parsed.path)
    if parsed.kind == "http":
        from episodestream.storage._http import HttpRangeReader

        return HttpRangeReader(parsed.path, **options)
    if parsed.kind == "hub":
        from episodestream.storage._hub import HubRangeReader

        return HubRangeReader(parsed, **options)
    from episodestream.storage._fsspec import FsspecRangeReader

    return FsspecRangeReader(parsed, **options)

"""Pick the reader for a location by its scheme."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from typing import Any

from episodestream._checks import check_options
from episodestream.errors import ConfigError
from episodestream.storage._base import RangeReader
from episodestream.storage._config import ReaderOptions
from episodestream.storage._location import Location

__all__ = ["open_reader"]


def open_reader(
    location: str | os.PathLike[str] | Location,
    options: ReaderOptions | Mapping[str, Any] | None = None,
    **keywords: Any,
) -> RangeReader:
    """A range reader for ``location`` (parsed with :meth:`Location.parse`).

    ``options`` (a :class:`ReaderOptions`, a dict of its fields, or the same as keyword
    arguments) go to the backend, which takes the fields that apply to it:

    - local path / ``file://``: :class:`LocalRangeReader` (none);
    - ``http(s)://``: :class:`HttpRangeReader` (``token``, ``headers``, ``timeouts``, ``limits``,
      ``retry``, ``failure_log``, ``max_skip_bytes``, ``verify``, ``seed``, ``transport``);
    - ``hf://``: :class:`HubRangeReader` (``token``, ``endpoint`` and the HTTP options);
    - any other protocol: :class:`FsspecRangeReader` (``storage_options`` dict passed through to
      fsspec — ``{"anon": True}`` for a public S3 bucket —, ``max_concurrency``, ``limits``:
      its ``max_connections_per_host`` sizes the S3 client's connection pool).

    Raises:
        LocationError: ``location`` cannot be parsed.
        ConfigError: both ``options`` and keyword options given.
        ConfigTypeError: an option that is no field of :class:`ReaderOptions`, one the backend
            does not take (the error lists those it does), or a value of the wrong type.
    """
    if options is not None and keywords:
        raise ConfigError(
            f"open_reader: give options= or keyword options, not both (got {sorted(keywords)})"
        )
    given = ReaderOptions.coerce(
        options if options is not None else keywords, what="open_reader"
    ).given()
    parsed = Location.parse(location)
    if parsed.kind == "local":
        check_options("open_reader(local path)", given, ())
        from episodestream.storage._local import LocalRangeReader

        return LocalRangeReader(parsed.path)
    if parsed.kind == "http":
        from episodestream.storage.http._reader import HttpRangeReader

        check_options("open_reader(http(s) URL)", given, _option_names(HttpRangeReader))
        return HttpRangeReader(parsed, **given)  # its credentials, if any, go as Basic auth
    if parsed.kind == "hub":
        from episodestream.storage.hub._reader import HubRangeReader

        check_options("open_reader(hf:// location)", given, _option_names(HubRangeReader))
        return HubRangeReader(parsed, **given)
    from episodestream.storage._fsspec import FsspecRangeReader

    check_options("open_reader(fsspec URL)", given, _option_names(FsspecRangeReader))
    return FsspecRangeReader(parsed, **given)


def _option_names(reader: type) -> set[str]:
    """Keyword options of a reader's constructor, the location it is given aside; a
    constructor that passes ``**options`` on adds those of the class it passes them to."""
    names: set[str] = set()
    for cls in reader.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None:
            continue
        params = list(inspect.signature(init).parameters.values())[2:]  # self, location
        names.update(p.name for p in params if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD))
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return names

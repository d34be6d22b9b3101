"""Pick the reader for a location by its scheme."""

from __future__ import annotations

import inspect
import os
from typing import Any

from episodestream._checks import check_options
from episodestream.errors import ConfigTypeError
from episodestream.storage._base import RangeReader
from episodestream.storage._config import Limits, RetryPolicy, Timeouts
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
      fsspec — ``{"anon": True}`` for a public S3 bucket —, ``max_concurrency``, ``limits``:
      its ``max_connections_per_host`` sizes the S3 client's connection pool).

    Raises:
        LocationError: ``location`` cannot be parsed.
        ConfigTypeError: an option the backend does not take (the error lists those it
            does), or ``timeouts`` / ``limits`` / ``retry`` that are not a
            :class:`Timeouts` / :class:`Limits` / :class:`RetryPolicy`.
    """
    parsed = Location.parse(location)
    if parsed.kind == "local":
        check_options("open_reader(local path)", options, ())
        from episodestream.storage._local import LocalRangeReader

        return LocalRangeReader(parsed.path)
    _check_typed(options)
    if parsed.kind == "http":
        from episodestream.storage._http import HttpRangeReader

        check_options("open_reader(http(s) URL)", options, _option_names(HttpRangeReader))
        return HttpRangeReader(parsed.path, **options)
    if parsed.kind == "hub":
        from episodestream.storage._hub import HubRangeReader

        check_options("open_reader(hf:// location)", options, _option_names(HubRangeReader))
        return HubRangeReader(parsed, **options)
    from episodestream.storage._fsspec import FsspecRangeReader

    check_options("open_reader(fsspec URL)", options, _option_names(FsspecRangeReader))
    return FsspecRangeReader(parsed, **options)


_TYPED_OPTIONS = {"timeouts": Timeouts, "limits": Limits, "retry": RetryPolicy}


def _check_typed(options: dict[str, Any]) -> None:
    for name, kind in _TYPED_OPTIONS.items():
        value = options.get(name)
        if value is not None and not isinstance(value, kind):
            raise ConfigTypeError(
                f"open_reader: {name} must be a {kind.__name__}, got {type(value).__name__}"
            )


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

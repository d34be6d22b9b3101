"""Source: where one dataset lives and how to reach it, apart from the dataset that reads it.

A :class:`Source` is a value (frozen, hashable, compared by its fields): it holds no reader,
metadata or other state of an opened dataset, so one may be built ahead, put in a list beside
others (a mixture of datasets), pickled and compared. Its ``repr`` shows no credential: the
reader options (tokens, headers, fsspec storage options) are left out, and a URL's user
information and query string are masked.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from episodestream._checks import check_choice, check_reader_bounds, shown
from episodestream.datasets._groups import check_bool, check_path
from episodestream.errors import ConfigTypeError, SamplingConfigError, SamplingError
from episodestream.sampling import episode_selection
from episodestream.storage import Location, ReaderOptions

__all__ = ["Source"]

# "org/name" as the Hub spells repository ids
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]*/[A-Za-z0-9][A-Za-z0-9._\-]*$")
_USERINFO = re.compile(r"(://)[^/@?#]*@")
_QUERY = re.compile(r"\?.*$")


def looks_like_root(value: str) -> bool:
    """A path or URL rather than a Hub repository id (``org/name``)."""
    return "://" in value or value.startswith(("/", ".", "~")) or os.path.exists(value)


def _masked(value: object) -> str:
    """``repr`` of a root or path with a URL's ``user:password@`` and ``?query`` masked."""
    text = value.url if isinstance(value, Location) else os.fspath(value)  # type: ignore[arg-type]
    text = _USERINFO.sub(r"\1***@", str(text))
    return repr(_QUERY.sub("?***", text))


@dataclass(frozen=True, slots=True)
class Source:
    """Where one dataset lives and how to reach it.

    Attributes:
        root: local path, ``http(s)://`` URL, ``hf://datasets/org/name[@rev]``,
            ``hf://buckets/org/name``, ``s3://``, ... (a path is kept as its ``str``).
        repo_id: LeRobot's name of the dataset (``org/name``); without ``root`` it streams
            ``hf://datasets/org/name`` (or ``hf://buckets/`` with ``repo_type="bucket"``).
        revision: Hub branch, tag or commit (pinned to a commit when opened).
        repo_type: ``"dataset"`` or ``"bucket"``, for a bare ``repo_id``.
        data_root: where ``data/`` and ``videos/`` live when not beside ``meta/``.
        episodes: episode indices to read, in this order (None: all), as a tuple of ints.
        sidecar: explicit sidecar index path.
        build_index: build the index from the videos when no sidecar is usable.
        progress: show a progress bar on stderr while the index is built (on a terminal).
        reader_options: how the reader reaches the store (token, endpoint, timeouts, limits,
            retry, fsspec storage options, ...): a :class:`~episodestream.ReaderOptions` or a
            dict of its fields; never in ``repr``.
        data_reader_options: the same for ``data_root`` when it needs others (say a Hub token
            for the root and ``{"storage_options": {"anon": True}}`` for S3).

    Raises:
        ConfigError: any field outside its accepted values, naming it (``episodes`` as a
            :class:`~episodestream.errors.SamplingConfigError`).
    """

    root: str | Location | None = None
    repo_id: str | None = None
    revision: str | None = None
    repo_type: str = "dataset"
    data_root: str | None = None
    episodes: tuple[int, ...] | None = None
    sidecar: str | None = None
    build_index: bool = True
    progress: bool = False
    reader_options: ReaderOptions = field(default_factory=ReaderOptions, repr=False)
    data_reader_options: ReaderOptions | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.root is not None and not isinstance(self.root, Location):
            check_path("root", self.root)
            object.__setattr__(self, "root", os.fspath(self.root))
        for name in ("repo_id", "revision"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise ConfigTypeError(f"{name} must be a str, got {shown(value)}")
        check_choice("repo_type", self.repo_type, ("dataset", "bucket"))
        for name in ("data_root", "sidecar"):
            value = check_path(name, getattr(self, name))
            if value is not None:
                object.__setattr__(self, name, os.fspath(value))
        try:
            selected = episode_selection(self.episodes)
        except SamplingError as error:
            raise SamplingConfigError(str(error)) from None
        if selected is not None:
            object.__setattr__(self, "episodes", tuple(selected.tolist()))
        check_bool("build_index", self.build_index)
        check_bool("progress", self.progress)
        # typed at once: a misspelt option fails here, naming it, not when a reader opens
        options = ReaderOptions.coerce(self.reader_options, what="reader_options")
        check_reader_bounds("reader_options", options)
        object.__setattr__(self, "reader_options", options)
        if self.data_reader_options is not None:
            data = ReaderOptions.coerce(self.data_reader_options, what="data_reader_options")
            check_reader_bounds("data_reader_options", data)
            object.__setattr__(self, "data_reader_options", data)

    @classmethod
    def coerce(cls, value: Source | str | os.PathLike[str] | Location) -> Source:
        """``value`` as a Source: itself, or a root (a path or URL; a bare ``org/name`` that
        names no local folder is a Hub repository id, as the datasets read their first
        argument).

        Raises:
            ConfigTypeError: ``value`` is none of these.
        """
        if isinstance(value, Source):
            return value
        if isinstance(value, str) and REPO_ID.match(value) and not looks_like_root(value):
            return cls(repo_id=value)
        if isinstance(value, str | os.PathLike | Location):
            return cls(root=value)  # type: ignore[arg-type]
        raise ConfigTypeError(
            f"source must be a Source, a path or a URL, got {type(value).__name__}"
        )

    def __repr__(self) -> str:
        shown_fields: list[str] = []
        for name in ("root", "repo_id", "revision", "repo_type", "data_root", "episodes"):
            value: Any = getattr(self, name)
            if name == "repo_type" and value == "dataset":
                continue
            if value is None:
                continue
            if name in ("root", "data_root"):
                shown_fields.append(f"{name}={_masked(value)}")
            elif name == "episodes" and len(value) > 8:
                shown_fields.append(f"episodes=<{len(value)} episodes>")
            else:
                shown_fields.append(f"{name}={value!r}")
        return f"Source({', '.join(shown_fields)})"

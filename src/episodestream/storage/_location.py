"""Where a dataset lives: a parsed root (local path, URL, ``hf://`` or any fsspec protocol)."""

from __future__ import annotations

import os
import posixpath
import re
import urllib.parse
from dataclasses import dataclass, field, replace
from typing import Literal

from episodestream._checks import shown
from episodestream.errors import LocationError
from episodestream.storage._base import normalize_relative_path
from episodestream.storage._urls import shorten, split_userinfo
from episodestream.storage._urls import shown_url as _redact

__all__ = ["Location", "LocationKind"]

LocationKind = Literal["local", "http", "hub", "fsspec"]

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_HUB_TYPES = ("datasets", "buckets")
# A Hub namespace or repo name as the Hub accepts one: ASCII letters, digits, '.', '_' and '-',
# starting with a letter or digit and ending with a letter, digit or '_', at most
# MAX_HUB_NAME_CHARS long, with no '--' or '..', the name not ending in '.git'
MAX_HUB_NAME_CHARS = 96
_HUB_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._\-]*[A-Za-z0-9_])?$")
# Revisions that contain slashes and are written as they are after '@' (huggingface_hub's
# hf:// grammar): pull-request refs and conversion refs. Any other revision with a slash is
# written percent-encoded (``feature%2Fx``). The ref must end at a '/' or at the end.
_SPECIAL_REF = re.compile(r"^refs/(?:pr/\d+|convert/[\w.\-]+)(?=/|$)")
_UNSAFE_REVISION = re.compile(r"[\x00-\x20\x7f]")


@dataclass(frozen=True, slots=True)
class Location:
    """A parsed dataset root. Build one with :meth:`Location.parse`.

    Fields:
        kind: which reader family serves it: ``"local"``, ``"http"``, ``"hub"`` or ``"fsspec"``.
        protocol: ``"file"``, ``"http"``, ``"https"``, ``"hf"`` or the fsspec protocol
            (``"s3"``, ``"gs"``, ``"memory"``, …).
        path: local: an absolute path; http(s): the URL without a trailing slash; hub: the folder
            inside the repo or bucket (``""`` for its top); fsspec: the URL without
            ``protocol://`` (e.g. ``"bucket/prefix"``).
        repo_type: hub only: ``"datasets"`` or ``"buckets"``.
        repo_id: hub only: ``"org/name"``.
        revision: hub datasets only: the branch, tag or commit asked for (``None``: the default
            branch); buckets have none.
        credentials: http(s) only: ``(user, password)`` from a root written
            ``http://user:password@host/…``, sent as Basic auth to that origin by the reader
            and nowhere else. Kept apart from ``path``/``url`` (which never hold them), out of
            ``repr`` and of comparisons: a location is where the data is, not who asks.
    """

    kind: LocationKind
    protocol: str
    path: str
    repo_type: Literal["datasets", "buckets"] | None = None
    repo_id: str | None = None
    revision: str | None = None
    credentials: tuple[str, str] | None = field(default=None, repr=False, compare=False)

    @classmethod
    def parse(cls, root: str | os.PathLike[str] | Location) -> Location:
        """Parse a dataset root; :class:`LocationError` says why one is refused."""
        if isinstance(root, Location):
            return root
        if isinstance(root, os.PathLike):
            root = os.fspath(root)
        if not isinstance(root, str) or not root:
            raise LocationError(
                f"a dataset root must be a non-empty str or path, got {shown(root)}"
            )
        if "\x00" in root:
            raise LocationError("a dataset root must not contain NUL bytes")
        if "::" in root:
            raise LocationError(
                f"chained fsspec URLs are not supported: {_redact(root)!r}; "
                "pass the inner URL and storage options instead"
            )
        match = _SCHEME.match(root)
        if match is None:
            return cls("local", "file", os.path.abspath(os.path.expanduser(root)))
        protocol = match.group(1).lower()
        rest = root[match.end() :]
        if protocol == "file":
            return cls._parse_file(root, rest)
        if protocol in ("http", "https"):
            return cls._parse_http(root, protocol)
        if protocol == "hf":
            return cls._parse_hub(root, rest)
        rest = rest.rstrip("/")
        if not rest:
            raise LocationError(
                f"{shorten(root)!r} names no bucket or path after {shorten(protocol)}://"
            )
        if _has_password(root):
            # fsspec would keep it in the URL we show and key caches by: refuse it here
            raise LocationError(
                f"{_redact(root)!r}: a password in an fsspec URL would be kept in cache keys "
                "and messages; pass it in reader_options' storage_options instead"
            )
        return cls("fsspec", protocol, rest)

    @classmethod
    def _parse_file(cls, root: str, rest: str) -> Location:
        host, slash, path = rest.partition("/")
        if host not in ("", "localhost"):
            raise LocationError(f"file URL {shorten(root)!r} names a remote host {shorten(host)!r}")
        if not slash:
            raise LocationError(f"file URL {shorten(root)!r} has no path")
        return cls("local", "file", os.path.abspath(urllib.parse.unquote("/" + path)))

    @classmethod
    def _parse_http(cls, root: str, protocol: str) -> Location:
        # user:password@ is for the request only (Basic auth): never in path, url or repr
        root, credentials = split_userinfo(root)
        parts = urllib.parse.urlsplit(root)
        if not parts.hostname:
            raise LocationError(f"URL {_redact(root)!r} has no host")
        if parts.query or parts.fragment:
            raise LocationError(f"a root URL must not carry a query or fragment: {_redact(root)!r}")
        try:
            parts.port  # noqa: B018 - raises on a malformed port
        except ValueError as error:
            raise LocationError(f"URL {_redact(root)!r} has an invalid port") from error
        path = parts.path.rstrip("/")
        url = urllib.parse.urlunsplit((protocol, parts.netloc, path, "", ""))
        return cls("http", protocol, url, credentials=credentials)

    @classmethod
    def _parse_hub(cls, root: str, rest: str) -> Location:
        repo_type, _, body = rest.partition("/")
        if repo_type not in _HUB_TYPES:
            raise LocationError(
                f"{shorten(root)!r}: only hf://datasets/ORG/NAME[@REVISION]/... and "
                "hf://buckets/ORG/NAME/... are supported"
            )
        org, _, body = body.partition("/")
        name, _, inner = body.partition("/")
        if not org or not name:
            raise LocationError(f"{shorten(root)!r}: expected hf://{repo_type}/ORG/NAME/...")
        revision: str | None = None
        if "@" in name:
            if repo_type == "buckets":
                raise LocationError(f"{shorten(root)!r}: buckets have no revisions")
            name, _, after = name.partition("@")
            revision, inner = _split_revision(f"{after}/{inner}" if inner else after)
            if not revision:
                raise LocationError(f"{shorten(root)!r}: empty revision after '@'")
            if _UNSAFE_REVISION.search(revision):
                raise LocationError(
                    f"{shorten(root)!r}: revision with control characters or whitespace"
                )
        for part in (org, name):
            why = _hub_name_problem(part)
            if why is not None:
                raise LocationError(
                    f"{shorten(root)!r}: invalid namespace or name {shorten(part)!r}: {why}"
                )
        if name.endswith(".git"):
            raise LocationError(f"{shorten(root)!r}: a Hub repo name cannot end in '.git'")
        inner = "/".join(s for s in inner.split("/") if s)
        return cls(
            "hub",
            "hf",
            normalize_relative_path(inner),
            repo_type=repo_type,  # type: ignore[arg-type]
            repo_id=f"{org}/{name}",
            revision=revision,
        )

    @property
    def url(self) -> str:
        """The location written as a URL (local paths as plain paths)."""
        if self.kind in ("local", "http"):
            return self.path
        if self.kind == "hub":
            revision = ""
            if self.revision is not None:
                revision = "@" + _quote_revision(self.revision)
            base = f"hf://{self.repo_type}/{self.repo_id}{revision}"
            return f"{base}/{self.path}" if self.path else base
        return f"{self.protocol}://{self.path}"

    def __str__(self) -> str:
        return self.url

    @property
    def can_list(self) -> bool:
        """Whether readers of this location can list folders (plain HTTP cannot)."""
        return self.kind != "http"

    def join(self, relative: str) -> Location:
        """The location of ``relative`` under this one; :class:`LocationError` if it escapes."""
        clean = normalize_relative_path(relative)
        if not clean:
            return self
        if self.kind == "local":
            return replace(self, path=os.path.join(self.path, *clean.split("/")))
        if self.kind == "http":
            return replace(self, path=f"{self.path}/{urllib.parse.quote(clean, safe='/')}")
        if self.kind == "hub":
            return replace(self, path=posixpath.join(self.path, clean) if self.path else clean)
        return replace(self, path=f"{self.path}/{clean}")


def _hub_name_problem(part: str) -> str | None:
    """Why the Hub would refuse ``part`` as a namespace or repo name, or None."""
    if len(part) > MAX_HUB_NAME_CHARS:
        return f"{len(part)} characters, the Hub takes at most {MAX_HUB_NAME_CHARS}"
    if not _HUB_NAME.match(part):
        return (
            "the Hub takes ASCII letters, digits, '.', '_' and '-', starting with a letter "
            "or digit and ending with a letter, digit or '_'"
        )
    if "--" in part or ".." in part:
        return "the Hub refuses '--' and '..' in names"
    return None


def _has_password(url: str) -> bool:
    try:
        return urllib.parse.urlsplit(url).password is not None
    except ValueError:
        return False


def _split_revision(text: str) -> tuple[str, str]:
    """``(revision, path)`` from what follows ``@`` in an ``hf://`` root.

    ``refs/pr/N`` and ``refs/convert/NAME`` are taken whole (they contain slashes); any other
    revision ends at the first ``/`` and is percent-decoded (``feature%2Fx`` is ``feature/x``).
    """
    special = _SPECIAL_REF.match(text)
    if special is not None:
        revision = special.group()
        return revision, text[len(revision) :].lstrip("/")
    revision, _, path = text.partition("/")
    return urllib.parse.unquote(revision), path


def _quote_revision(revision: str) -> str:
    """``revision`` as written after ``@``: special refs as they are, others percent-encoded."""
    special = _SPECIAL_REF.match(revision)
    if special is not None and special.group() == revision:
        return revision
    return urllib.parse.quote(revision, safe="")

"""Hugging Face Hub reader: dataset repos (revision pinned to a commit) and buckets.

The control plane (the token to send, the endpoint, a revision's commit) is huggingface_hub's
(``_api.py``). Files are read through the Hub's ``resolve`` URLs with the native HTTP reader,
measured to win on byte ranges (docs/HTTP_CLIENTS.md). Small git files
are served by the Hub itself; large (LFS/Xet) files are redirected to one of several CDN hosts
with a signed, expiring URL that may be valid for the exact ``Range`` of the redirected request
only (the HTTP reader learns that once per CDN host: ``_redirects.py``). The token goes to the
Hub only, never to a CDN host.

A file's identity comes from the Hub, never from a CDN edge: the resolve answer's
``X-Linked-Size`` and ``X-Linked-Etag`` (or ``X-Xet-Hash``) are pinned at first sight and checked
on every later resolve, so :class:`StaleSourceError` means the Hub says the file changed (a
bucket file replaced). CDN hosts send different ETags for the same bytes; their answers are
checked for size only, and they are never sent ``If-Range``.
"""

from __future__ import annotations

import json
import logging
import posixpath
import re
import threading
import urllib.parse
from collections.abc import Mapping
from typing import Any

from episodestream.errors import InvalidResponse, LocationError, NotFound, StorageError
from episodestream.storage._base import FileInfo, normalize_relative_path
from episodestream.storage._location import Location
from episodestream.storage._urls import origin_of, shown_url
from episodestream.storage.http._reader import FileState, HttpRangeReader
from episodestream.storage.hub._api import hub_commit, hub_endpoint, hub_token

__all__ = ["DEFAULT_HUB_ENDPOINT", "HubRangeReader", "hub_endpoint", "hub_token"]

logger = logging.getLogger(__name__)

DEFAULT_HUB_ENDPOINT = "https://huggingface.co"
# Hub hosts that receive the token besides the configured endpoint: an HF_ENDPOINT mirror may
# redirect back to them, and huggingface_hub keeps the token on such a redirect (its
# ``_is_same_or_hub_host``). Never a CDN host.
HUB_ORIGINS: frozenset[tuple[str, str, int]] = frozenset(
    {("https", "huggingface.co", 443), ("https", "hub-ci.huggingface.co", 443)}
)
_COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?', re.IGNORECASE)
# A tree listing is paginated; this bounds the pages followed (1,000 entries each on the Hub).
_MAX_LIST_PAGES = 100_000
# bound on waiting for another thread's listing of the same folder
_LISTING_WAIT_S = 120.0


class HubRangeReader(HttpRangeReader):
    """Byte ranges of the files of a Hub dataset repo or bucket, relative to its location.

    Args:
        location: an ``hf://datasets/…`` or ``hf://buckets/…`` root (str or :class:`Location`).
        token: a token, ``False`` for none, or ``None`` for the ambient login (:func:`hub_token`).
        endpoint: the Hub's base URL; default :func:`hub_endpoint`.
        **http_options: passed to :class:`HttpRangeReader` (timeouts, limits, retry, …).

    A dataset's revision (default ``main``) is resolved to its commit sha when the reader is
    created — one ``dataset_info`` call through huggingface_hub — and every file is read at that
    commit, so a push during a run changes nothing. Buckets are not versioned; there, the
    per-file validators pinned by the HTTP reader catch a replaced file.
    """

    def __init__(
        self,
        location: str | Location,
        *,
        token: str | bool | None = None,
        endpoint: str | None = None,
        **http_options: Any,
    ) -> None:
        parsed = Location.parse(location)
        if parsed.kind != "hub":
            raise LocationError(f"not a Hub location: {shown_url(parsed.url)!r}")
        endpoint = (endpoint or hub_endpoint()).rstrip("/")
        resolved_token = hub_token(token)
        super().__init__(endpoint, token=resolved_token, **http_options)
        self._token = resolved_token  # for huggingface_hub's calls (revision lookups)
        self._location = parsed
        self._listed_folders: dict[str, threading.Event] = {}
        self._commit: str | None = None
        if parsed.repo_type == "datasets":
            revision = parsed.revision or "main"
            self._commit = revision if _COMMIT_SHA.match(revision) else self._resolve(revision)

    @property
    def location(self) -> Location:
        return self._location

    @property
    def root(self) -> str:
        return self._location.url

    @property
    def commit(self) -> str | None:
        """The commit sha every file is read at (``None`` for buckets)."""
        return self._commit

    @property
    def revision(self) -> str | None:
        """The pinned commit: a dataset repo's files never change under it (buckets: None)."""
        return self._commit

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._location.url!r})"

    def _resolve(self, revision: str) -> str:
        """The commit ``revision`` points at now, asked through huggingface_hub."""
        assert self._location.repo_id is not None
        return hub_commit(
            self._location.repo_id,
            revision,
            endpoint=self.base_url,
            token=self._token,
            timeout_seconds=max(self._timeouts.connect_seconds, self._timeouts.read_seconds),
            retry=self._retry,
            stop=self._stop,
            rng=self._rng,
        )

    def _is_hub(self, url: str) -> bool:
        origin = origin_of(url)
        return origin == self._auth_origin or origin in HUB_ORIGINS

    def _trusts_validators(self, url: str) -> bool:
        # the Hub's own answers (plain git files) carry the file's ETag; a CDN host's do not
        return self._is_hub(url)

    def _headers_for(self, url: str) -> dict[str, str]:
        headers = super()._headers_for(url)
        if self._credentials and self._is_hub(url):
            headers.update(self._credentials)
        return headers

    def _on_resolve(
        self, state: FileState, headers: Mapping[str, str], start: int, end: int
    ) -> None:
        """Pin (first resolve) or check (later ones) the identity the Hub gives the file."""
        identity = headers.get("X-Linked-Etag") or headers.get("X-Xet-Hash")
        size_text = (headers.get("X-Linked-Size") or "").strip()
        size = int(size_text) if size_text.isdigit() else None
        pinned = {"ETag": identity} if identity else {}
        self._pin(state, pinned, size, start, end, trusted=True)

    def _repo_path(self, clean: str) -> str:
        inner = self._location.path
        if inner and clean:
            return f"{inner}/{clean}"
        return inner or clean

    def _url_for(self, clean: str) -> str:
        quoted = urllib.parse.quote(self._repo_path(clean), safe="/")
        repo_id = self._location.repo_id
        if self._location.repo_type == "buckets":
            return f"{self.base_url}/buckets/{repo_id}/resolve/{quoted}"
        return f"{self.base_url}/datasets/{repo_id}/resolve/{self._commit}/{quoted}"

    def list_files(self, prefix: str) -> list[str]:
        """Relative paths of all files under ``prefix`` (the Hub tree API, recursive), sorted.

        At a pinned commit the listing's sizes are kept, so :meth:`file_info` of a listed file
        costs no request (a file at a commit cannot change; its size is its identity there).
        """
        return sorted(path for path, _ in self._tree(prefix))

    def file_info(self, path: str) -> FileInfo:
        """Size and validators of ``path``. At a pinned commit, the first look into a folder
        lists it (one tree request per 1,000 files) instead of probing each file with a
        ``bytes=0-0`` request through the CDN. A file at the reader's root is probed: the
        root's listing is recursive, the whole repo below it."""
        clean = normalize_relative_path(path)
        folder = posixpath.dirname(clean)
        if self._commit is not None and folder:
            self._list_folder_once(folder)
        return super().file_info(clean)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_listed_folders"] = {}  # the sizes travel in the file states; events do not
        return state

    def _after_fork_in_child(self) -> None:
        super()._after_fork_in_child()
        # a listing in flight in a parent thread never finishes here
        self._listed_folders = {}

    def _list_folder_once(self, folder: str) -> None:
        """List ``folder`` once per reader; threads asking meanwhile wait for that listing
        (bounded) rather than each probing its file."""
        with self._lock:
            listed = self._listed_folders.get(folder)
            first = listed is None
            if first:
                listed = self._listed_folders[folder] = threading.Event()
        assert listed is not None
        if not first:
            listed.wait(timeout=_LISTING_WAIT_S)  # on timeout, the probe still answers
            return
        try:
            self._tree(folder)
        except StorageError as error:
            # a mirror without the tree API, a missing folder: each file's own probe answers
            # (and names the file when it is missing)
            logger.debug("no size listing of %r (%s); probing its files", folder, error)
        finally:
            listed.set()

    def _tree(self, prefix: str) -> list[tuple[str, int | None]]:
        """``(relative path, size)`` of every file under ``prefix``; sizes are kept (pinned
        commits only) for the files' states."""
        clean = normalize_relative_path(prefix)
        wanted = self._repo_path(clean)
        # one path segment, as huggingface_hub's list_repo_tree / list_bucket_tree send it
        folder = urllib.parse.quote(wanted, safe="")
        repo_id = self._location.repo_id
        if self._location.repo_type == "buckets":
            url = f"{self.base_url}/api/buckets/{repo_id}/tree/{folder}"
        else:
            url = f"{self.base_url}/api/datasets/{repo_id}/tree/{self._commit}/{folder}"
        url = url.rstrip("/") + "?recursive=true"
        inner = self._location.path
        # a bucket lists every path that starts with the prefix as a string ("runs" also gives
        # "runs2/..."): only the folder itself counts
        boundary = wanted + "/" if wanted else ""
        files: list[tuple[str, int | None]] = []
        for page in range(_MAX_LIST_PAGES):
            try:
                body, headers = self._get_document(url)
            except NotFound:
                if page:
                    raise  # a cursor that vanished: never a silently shortened listing
                return []
            try:
                entries = json.loads(body)
            except ValueError as error:
                raise InvalidResponse(f"Hub tree listing of {wanted!r} is not JSON") from error
            if not isinstance(entries, list):
                raise InvalidResponse(f"Hub tree listing of {wanted!r} is not a list")
            for entry in entries:
                if not isinstance(entry, dict) or entry.get("type") != "file":
                    continue
                path = entry.get("path")
                if not isinstance(path, str):
                    raise InvalidResponse(f"Hub tree entry without a path: {entry!r}")
                if boundary and not path.startswith(boundary) and path != wanted:
                    continue
                if inner:
                    if not path.startswith(inner + "/"):
                        continue
                    path = path[len(inner) + 1 :]
                path = normalize_relative_path(path)
                size = _entry_size(entry)
                files.append((path, size))
                if size is not None and self._commit is not None:
                    self._learn_size(path, size)
            match = _NEXT_LINK.search(headers.get("Link", ""))
            if match is None:
                return files
            following = urllib.parse.urljoin(url, match.group(1))
            if origin_of(following) != origin_of(url):
                # a mirror or proxy in HF_ENDPOINT may pass on links to the Hub's own host,
                # where our token must not go: ask the endpoint we talk to for the same
                # listing at the link's cursor (its query), keeping our own path and prefix
                here = urllib.parse.urlsplit(url)
                query = urllib.parse.urlsplit(following).query
                following = urllib.parse.urlunsplit(
                    (here.scheme, here.netloc, here.path, query, "")
                )
            url = following
        raise StorageError(f"Hub tree listing of {wanted!r} has more than {_MAX_LIST_PAGES} pages")

    def _learn_size(self, clean: str, size: int) -> None:
        state = self._state(clean)
        with self._lock:
            if state.size is None:
                state.size = size


def _entry_size(entry: Mapping[str, Any]) -> int | None:
    """A tree entry's file size (an LFS entry's own size where given)."""
    lfs = entry.get("lfs")
    size = lfs.get("size") if isinstance(lfs, Mapping) else None
    if size is None:
        size = entry.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        return None
    return size

"""Publish a dataset's sidecar where others find it: ``meta/episodestream/index.arrow``.

A published sidecar is keyed by the dataset's content (``info.json`` and the episodes table
digests, totals, cameras), not by the commit it was built at: publishing to a Hub repo makes a
new commit, and a sidecar keyed by the old one would be refused by every reader of the new.
Source files are still checked on each fetch (size; validators at the same root).

Before anything is written the local sidecar is re-opened and checked as a reader would check
it (identity, shapes, every source file's size and validators); the published bytes are
re-loaded too. What is already published is read first: the same bytes are left alone (no
empty commit); another dataset's sidecar is replaced, with a warning saying why.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from episodestream.errors import (
    InvalidResponse,
    ManifestError,
    NotFound,
    PublishError,
    StorageError,
)
from episodestream.lerobot import DatasetMeta
from episodestream.manifest._manifest import DatasetIdentity, EpisodeManifest
from episodestream.manifest._open import PUBLISHED_SIDECAR_PATH, verify_sources
from episodestream.manifest._sidecar import load_sidecar, read_sidecar_header, sidecar_bytes
from episodestream.storage import (
    DEFAULT_PUBLISH_MESSAGE,
    Location,
    RangeReader,
    ReaderOptions,
    open_reader,
    publish_file,
)

__all__ = ["DEFAULT_PUBLISH_MESSAGE", "PublishedSidecar", "publish_sidecar", "published_identity"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PublishedSidecar:
    """What :func:`publish_sidecar` did.

    Fields:
        destination: the published file's URL or path.
        changed: False when the same bytes were already published (nothing written).
        replaced: why the sidecar found there was another dataset's (empty if none was).
        commit: the Hub commit holding it (repos only, when written).
        pull_request: the pull request's URL (``create_pr``).
    """

    destination: str
    changed: bool
    replaced: str = ""
    commit: str | None = None
    pull_request: str | None = None


def published_identity(identity: DatasetIdentity) -> DatasetIdentity:
    """``identity`` as a published sidecar records it: without the commit (see module doc)."""
    return dataclasses.replace(identity, revision=None)


def _published_form(manifest: EpisodeManifest) -> bytes:
    republished = EpisodeManifest(
        identity=published_identity(manifest.identity),
        cameras=manifest.cameras,
        episode_index=manifest.episode_index,
        spans=manifest.spans,
        files=manifest._files,
        samples=manifest._samples,
        origin="published",
    )
    return sidecar_bytes(republished)


def _current(
    reader: RangeReader, where: str, max_bytes: int
) -> tuple[bytes | None, DatasetIdentity | None, str]:
    """(bytes, identity, why unreadable) of the sidecar published now, if any: one request,
    and none larger than ``max_bytes`` is held in memory."""
    try:
        data = reader.read_file(PUBLISHED_SIDECAR_PATH, max_bytes=max_bytes)
    except NotFound:
        return None, None, ""
    except InvalidResponse as error:  # larger than the bound: not ours, and replaced
        return None, None, str(error)
    try:
        return data, read_sidecar_header(pa.py_buffer(data), where=where), ""
    except ManifestError as error:
        return data, None, str(error)


def publish_sidecar(
    sidecar: str | os.PathLike[str],
    reader: RangeReader,
    meta: DatasetMeta,
    root: str | os.PathLike[str] | Location,
    *,
    reader_options: ReaderOptions | Mapping[str, Any] | None = None,
    create_pr: bool = False,
    commit_message: str = DEFAULT_PUBLISH_MESSAGE,
) -> PublishedSidecar:
    """Check the local ``sidecar`` against the dataset, then publish it under ``root``.

    Args:
        sidecar: the local sidecar file (it stays where it is, whatever happens).
        reader: the reader of the dataset's data and videos (sources are checked through it).
        meta: the dataset's metadata, as the sidecar was built from it.
        root: the metadata root (with split roots, where ``meta/`` lives, not the data
            root): the sidecar goes to ``root/meta/episodestream/index.arrow``. A Hub repo
            is written by a commit on its branch, or a pull request with ``create_pr``.
        reader_options: options for the reader of ``root`` (``token``, ``endpoint``,
            ``storage_options``); the writer uses the same credentials.
        create_pr: Hub repos: open a pull request instead of committing to the branch.
        commit_message: Hub repos: the commit's title.

    Raises:
        ManifestError: the sidecar is unreadable, describes another dataset or only a
            subset of its episodes, or a source file changed since it was built (nothing is
            published).
        PublishError: the destination refused the write; the message says where the local
            copy is.
    """
    local = Path(sidecar)
    expected = DatasetIdentity.of(meta)
    subset = load_sidecar(local).identity
    if subset.episodes is not None and subset.dataset_mismatch(expected) is None:
        raise ManifestError(
            f"{local}: not published: it indexes only {subset.episodes.describe()} of "
            f"{subset.total_episodes}, and a published sidecar is the dataset's whole index "
            "(build it without --episodes/--num-episodes)"
        )
    manifest = load_sidecar(local, expect=expected)  # as a reader would take it
    reason = verify_sources(reader, manifest, root=meta.root)
    if reason is not None:
        raise ManifestError(f"{local}: not published: stale sidecar: {reason}")
    data = _published_form(manifest)
    load_sidecar(pa.py_buffer(data), expect=published_identity(expected))

    location = Location.parse(root)
    destination = location.join(PUBLISHED_SIDECAR_PATH).url
    options = ReaderOptions.coerce(reader_options).given()
    try:
        with open_reader(location, **options) as destination_reader:
            # twice the new sidecar's size, at least 64 MiB: room for another build of it
            bound = max(2 * len(data), 64 * 2**20)
            current, identity, unreadable = _current(destination_reader, destination, bound)
    except StorageError as error:  # a repo that does not exist, no access, the store down
        raise PublishError(
            f"{destination}: cannot read the destination before writing: {error}; "
            f"the sidecar is kept at {local}"
        ) from error
    if current == data:
        logger.info("%s already holds this sidecar; nothing to publish", destination)
        return PublishedSidecar(destination, changed=False)
    replaced = unreadable
    if identity is not None:
        replaced = identity.mismatch(expected) or "the same dataset, other bytes (another build)"
    if replaced:
        logger.warning("replacing the sidecar published at %s: %s", destination, replaced)

    writer_options = {
        name: options[name] for name in ("token", "endpoint", "storage_options") if name in options
    }
    is_repo = location.kind == "hub" and location.repo_type == "datasets"
    try:
        result = publish_file(
            location,
            PUBLISHED_SIDECAR_PATH,
            data,
            create_pr=create_pr,
            # the branch must still be at the commit whose metadata was indexed
            parent_commit=meta.revision if is_repo else None,
            commit_message=commit_message,
            **writer_options,
        )
    except PublishError as error:
        raise PublishError(f"{error}; the sidecar is kept at {local}") from error
    logger.info("published the sidecar to %s", result.destination)
    return PublishedSidecar(
        result.destination,
        changed=True,
        replaced=replaced,
        commit=result.commit,
        pull_request=result.pull_request,
    )

"""Reading a dataset's metadata: ``info.json`` says the version, v3.x (``_meta``) or v2.x
(``_v2``, presented v3-shaped) reads the rest."""

from __future__ import annotations

from episodestream.errors import EpisodeStreamError
from episodestream.lerobot._meta import DatasetMeta, is_v2_version, load_v3_meta, read_info
from episodestream.lerobot._v2 import load_v2_meta
from episodestream.storage import RangeReader, reads_within, redact_url

__all__ = ["load_dataset_meta"]


def load_dataset_meta(
    reader: RangeReader,
    *,
    root: str | None = None,
    revision: str | None = None,
    load_stats: bool = True,
) -> DatasetMeta:
    """Read and validate the metadata of the LeRobot dataset behind ``reader`` (see
    :func:`_read_dataset_meta`), all of it within the reader's ``timeouts.open_seconds``
    (every read, retry and wait together, on every thread: ``storage.reads_within``).

    Raises:
        DatasetFormatError: missing or invalid content, naming the file and field.
        StorageError: the store itself failed; :class:`~episodestream.StorageTimeout` when
            reading took longer than ``open_seconds``.
    """
    shown = redact_url(root if root is not None else reader.root)
    with reads_within(reader, what=f"reading the metadata of {shown}") as deadline:
        try:
            return _read_dataset_meta(reader, root=root, revision=revision, load_stats=load_stats)
        except TimeoutError as error:
            if isinstance(error, EpisodeStreamError):
                raise
            # a wait on the metadata threads ran out (their reads end by the deadline)
            raise deadline.error() from error


def _read_dataset_meta(
    reader: RangeReader,
    *,
    root: str | None = None,
    revision: str | None = None,
    load_stats: bool = True,
) -> DatasetMeta:
    """Read and validate the metadata of the LeRobot dataset behind ``reader``: v3.x, or
    v2.1 / v2.0 presented v3-shaped (``episodestream.lerobot._v2``).

    Args:
        reader: reads the dataset's files (paths relative to the dataset root).
        root: how the dataset was addressed (URL, path); defaults to the reader's ``root``
            attribute when it has one. Recorded for cache keys, never re-resolved.
        revision: the store's revision when known (keys caches, checked against sidecars).
        load_stats: read ``meta/stats.json`` (absent is fine: ``stats`` is then None).

    Raises:
        DatasetFormatError: missing or invalid content, naming the file and field.
        StorageError: the store itself failed.
    """
    raw_info, info = read_info(reader)
    # v2.x: one Parquet and one MP4 per episode, JSON Lines tables: read as published
    load = load_v2_meta if is_v2_version(info.get("codebase_version")) else load_v3_meta
    return load(
        reader,
        raw_info=raw_info,
        info=info,
        root=root,
        revision=revision,
        load_stats=load_stats,
    )

"""Open a dataset's files and metadata from one root, or metadata and data from two."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

from episodestream.lerobot._load import load_dataset_meta
from episodestream.lerobot._meta import DatasetMeta
from episodestream.storage import Location, RangeReader, ReaderOptions, open_reader

__all__ = ["open_dataset_files", "open_metadata_reader"]


def open_dataset_files(
    location: Location,
    *,
    label: str | None = None,
    data_root: str | os.PathLike[str] | None = None,
    reader_options: ReaderOptions | Mapping[str, Any] | None = None,
    data_reader_options: ReaderOptions | Mapping[str, Any] | None = None,
) -> tuple[RangeReader, DatasetMeta]:
    """A reader for the dataset's data and videos, and its metadata.

    Both come from ``location``, or the metadata from ``location`` (at its revision) and data
    and videos from ``data_root`` (``data_reader_options``, default ``reader_options``). The
    metadata's ``root`` names both, the data root with the commit it resolved to, so a
    sidecar index is keyed by everything it was built from. The reader is closed on error.
    """
    label = label or location.url
    reader = open_reader(location, reader_options)
    try:
        meta = load_dataset_meta(reader, root=label, revision=reader.revision)
        if data_root is not None:
            options = reader_options if data_reader_options is None else data_reader_options
            meta_reader, reader = reader, open_reader(data_root, options)
            meta_reader.close()
            data_label = Location.parse(data_root).url
            data_commit = reader.revision
            if data_commit:  # a repo on a branch: key the index by what it resolved to
                data_label = f"{data_label}@{data_commit}"
            meta = dataclasses.replace(meta, root=f"{label} + {data_label}")
    except BaseException:
        reader.close()
        raise
    return reader, meta


def open_metadata_reader(
    location: Location,
    meta: DatasetMeta,
    reader_options: ReaderOptions | Mapping[str, Any] | None = None,
) -> RangeReader:
    """A reader of the metadata root at the commit ``meta`` was read at: with split roots a
    published sidecar lives beside ``meta/`` (where ``index --publish`` writes it)."""
    if location.kind == "hub" and meta.revision is not None:
        location = dataclasses.replace(location, revision=meta.revision)
    return open_reader(location, reader_options)

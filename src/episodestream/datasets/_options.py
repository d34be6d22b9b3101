"""StreamOptions: the datasets' flat options of before the option groups, still accepted.

Its fields belong to :class:`~episodestream.datasets.Source` (where and how to reach the
data), :class:`~episodestream.datasets.Resources` (what to spend) and
:class:`~episodestream.datasets.SampleOptions` (``tolerance_s``); it is checked by building
those groups (one check per setting, one default per setting: theirs), and a dataset given
``options=`` splits it into them (``datasets/_compat.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from episodestream._checks import MAX_BYTES, MAX_CONNECTIONS, MAX_TOLERANCE_S, MAX_WAIT_SECONDS
from episodestream.cache import DEFAULT_FETCH_WORKERS
from episodestream.datasets._groups import (
    DEFAULT_BYTE_BUDGET,
    DEFAULT_MAX_DECODER_BYTES,
    DEFAULT_WAIT_TIMEOUT_S,
    MAX_FETCH_WORKERS,
    MAX_FFMPEG_THREADS,
    MAX_OPEN_DECODERS,
    ImageDtype,
    Resources,
    SampleOptions,
    parse_bytes,
)
from episodestream.datasets._source import Source
from episodestream.decode import DEFAULT_FFMPEG_THREADS, DEFAULT_TOLERANCE_S, BackendName
from episodestream.storage import ReaderOptions

__all__ = [
    "DEFAULT_BYTE_BUDGET",
    "DEFAULT_FETCH_WORKERS",
    "DEFAULT_WAIT_TIMEOUT_S",
    "MAX_BYTES",
    "MAX_CONNECTIONS",
    "MAX_FETCH_WORKERS",
    "MAX_FFMPEG_THREADS",
    "MAX_OPEN_DECODERS",
    "MAX_TOLERANCE_S",
    "MAX_WAIT_SECONDS",
    "RESOURCE_FIELDS",
    "SAMPLE_FIELDS",
    "SOURCE_FIELDS",
    "ImageDtype",
    "StreamOptions",
    "parse_bytes",
]

#: StreamOptions' fields by the option group that owns each
SOURCE_FIELDS = (
    "revision",
    "sidecar",
    "build_index",
    "progress",
    "reader_options",
    "data_root",
    "data_reader_options",
)
RESOURCE_FIELDS = (
    "byte_budget",
    "fetch_workers",
    "decoder",
    "device",
    "ffmpeg_threads",
    "wait_timeout_s",
    "cache_dir",
    "max_open_decoders",
    "max_decoder_bytes",
)
SAMPLE_FIELDS = ("tolerance_s",)


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """How a dataset reaches and decodes its data; shared by both dataset classes.

    Attributes:
        revision: branch, tag or commit for Hub roots (pinned to a commit when opened).
        byte_budget: bytes of episode clips a rank may hold, split among its DataLoader
            workers (int or "8GiB").
        fetch_workers: concurrent episode fetches per process.
        decoder: "auto" (torchcodec, else PyAV), "torchcodec" or "pyav".
        device: "cpu" or "cuda[:N]" (torchcodec only).
        ffmpeg_threads: FFmpeg threads per open decoder.
        tolerance_s: accepted distance between a requested timestamp and a frame (LeRobot's).
        wait_timeout_s: bound on waiting for one episode's bytes.
        sidecar: explicit sidecar index path; cache_dir: local cache folder for sidecars.
        build_index: build the manifest from the videos when no sidecar is usable.
        progress: show a progress bar on stderr while the manifest is built (on a terminal).
        reader_options: how the reader reaches the store: a
            :class:`~episodestream.storage.ReaderOptions` (token, timeouts, limits, retry,
            storage_options for fsspec, ...) or a dict of its fields.
        max_open_decoders, max_decoder_bytes: bounds of the open-decoder LRU (None: the
            default, which the pool raises to one per resident episode-camera and thread).

    Every default is the option group's (:class:`~episodestream.datasets.Resources`, ...).
        data_root: where ``data/`` and ``videos/`` live when not beside ``meta/`` (metadata
            from a Hub repo at a revision, videos and Parquet from a bucket, say); the same
            ``reader_options`` reach both unless ``data_reader_options`` are given (say,
            a Hub token for the root and ``{"storage_options": {"anon": True}}`` for S3).
    """

    revision: str | None = None
    byte_budget: int | str = DEFAULT_BYTE_BUDGET
    fetch_workers: int = DEFAULT_FETCH_WORKERS
    decoder: BackendName = "auto"
    device: str = "cpu"
    ffmpeg_threads: int = DEFAULT_FFMPEG_THREADS
    tolerance_s: float = DEFAULT_TOLERANCE_S
    wait_timeout_s: float = DEFAULT_WAIT_TIMEOUT_S
    sidecar: str | os.PathLike[str] | None = None
    cache_dir: str | os.PathLike[str] | None = None
    build_index: bool = True
    progress: bool = False
    # may hold a token: never in repr(); a dict of ReaderOptions' fields is taken too
    reader_options: ReaderOptions = field(default_factory=ReaderOptions, repr=False)
    max_open_decoders: int | None = None
    max_decoder_bytes: int = DEFAULT_MAX_DECODER_BYTES
    data_root: str | os.PathLike[str] | None = None
    # may hold a token: never in repr()
    data_reader_options: ReaderOptions | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # checked by the groups that own the fields: the messages and bounds are theirs
        resources = Resources(**self.group_fields(RESOURCE_FIELDS))
        source = Source(**self.group_fields(SOURCE_FIELDS))
        SampleOptions(**self.group_fields(SAMPLE_FIELDS))
        object.__setattr__(self, "byte_budget", resources.byte_budget)
        object.__setattr__(self, "reader_options", source.reader_options)
        object.__setattr__(self, "data_reader_options", source.data_reader_options)

    def group_fields(self, names: tuple[str, ...]) -> dict[str, Any]:
        """The fields ``names`` (one group's) as keyword arguments of that group."""
        return {name: getattr(self, name) for name in names}

"""Typed options shared by the datasets, and byte-size parsing ("8GiB")."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

from episodestream._checks import (
    MAX_BYTES,
    MAX_CONNECTIONS,
    MAX_TOLERANCE_S,
    MAX_WAIT_SECONDS,
    Bound,
    check_choice,
    check_int,
    check_number,
    check_reader_bounds,
    shown,
)
from episodestream.cache import DEFAULT_FETCH_WORKERS
from episodestream.decode import DEFAULT_FFMPEG_THREADS, DEFAULT_TOLERANCE_S, BackendName
from episodestream.errors import BudgetError, ConfigError, ConfigTypeError
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
    "ImageDtype",
    "StreamOptions",
    "parse_bytes",
    "resolve_stream_options",
]

ImageDtype = Literal["float32", "uint8"]

DEFAULT_BYTE_BUDGET = 2 * 2**30
#: How long a sample may wait for its episode's bytes before a StorageTimeout (seconds).
DEFAULT_WAIT_TIMEOUT_S = 300.0
DEFAULT_MAX_OPEN_DECODERS = 64
DEFAULT_MAX_DECODER_BYTES = 1 * 2**30

# Upper limits of the settings (named in the error that refuses a value above one): each is
# far above any useful value and below where a number overflows, or a thread count exhausts
# the machine before the first sample.
MAX_FETCH_WORKERS = Bound("MAX_FETCH_WORKERS", 256, "fetch threads of one process")
MAX_FFMPEG_THREADS = Bound("MAX_FFMPEG_THREADS", 256, "threads of one open decoder")
MAX_OPEN_DECODERS = Bound("MAX_OPEN_DECODERS", 65536, "decoders one process keeps open")

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
# what decoders take; a GPU index of more digits names no GPU
_DEVICE = re.compile(r"^(cpu|cuda)(:\d{1,4})?$")
# digits of a size read exactly; a whole part longer is beyond MAX_BYTES in any unit
_SIZE_DIGITS = 30
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | str, *, name: str = "byte_budget") -> int:
    """``8GiB``, ``500MB``, ``1.5GiB`` or a plain int of bytes → int bytes (> 0).

    Raises:
        BudgetError: (a ``ValueError``) not a size, or not positive; names ``name``.
    """
    if isinstance(value, bool):
        raise BudgetError(f"{name} must be a byte count or a size like '8GiB', got {value!r}")
    if isinstance(value, int):
        result = value
    elif isinstance(value, str):
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise BudgetError(
                f"{name}={shown(value)} is not a size: use bytes or a number with one of "
                "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
            )
        result = _size_in_bytes(match.group(1), _UNITS[unit])
    else:
        raise BudgetError(f"{name} must be a byte count or a size like '8GiB', got {shown(value)}")
    if result <= 0:
        raise BudgetError(f"{name} must be positive, got {shown(value)}")
    if result > MAX_BYTES.value:
        raise BudgetError(f"{name} must be <= {MAX_BYTES}, got {shown(value)}")
    return result


def _size_in_bytes(number: str, unit: int) -> int:
    """``number`` (digits, maybe a fraction) times ``unit``, exact: no float overflow for
    400 digits, no int conversion of a million; a number past MAX_BYTES stays past it."""
    whole, _, fraction = number.partition(".")
    whole = whole.lstrip("0") or "0"
    if len(whole) > _SIZE_DIGITS:
        return MAX_BYTES.value + 1
    return int(Fraction(f"{whole}.{fraction[:_SIZE_DIGITS] or '0'}") * unit)


def _holds_nul(path: str | os.PathLike[str]) -> bool:
    text = os.fspath(path)
    return ("\x00" if isinstance(text, str) else b"\x00") in text  # type: ignore[operator]


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """How a dataset reaches and decodes its data; shared by both dataset classes.

    Attributes:
        revision: branch, tag or commit for Hub roots (pinned to a commit when opened).
        byte_budget: bytes of episode clips a process may hold (the pool splits it among
            DataLoader workers).
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
        max_open_decoders, max_decoder_bytes: bounds of the open-decoder LRU.
        data_root: where ``data/`` and ``videos/`` live when not beside ``meta/`` (metadata
            from a Hub repo at a revision, videos and Parquet from a bucket, say); the same
            ``reader_options`` reach both unless ``data_reader_options`` are given (say,
            a Hub token for the root and ``{"storage_options": {"anon": True}}`` for S3).
    """

    revision: str | None = None
    byte_budget: int = DEFAULT_BYTE_BUDGET
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
    max_open_decoders: int = DEFAULT_MAX_OPEN_DECODERS
    max_decoder_bytes: int = DEFAULT_MAX_DECODER_BYTES
    data_root: str | os.PathLike[str] | None = None
    # may hold a token: never in repr()
    data_reader_options: ReaderOptions | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "byte_budget", parse_bytes(self.byte_budget))
        check_choice("decoder", self.decoder, ("auto", "torchcodec", "pyav"))
        check_int("fetch_workers", self.fetch_workers, minimum=1, maximum=MAX_FETCH_WORKERS)
        check_int("max_open_decoders", self.max_open_decoders, minimum=1, maximum=MAX_OPEN_DECODERS)
        check_int("max_decoder_bytes", self.max_decoder_bytes, minimum=1, maximum=MAX_BYTES)
        check_int("ffmpeg_threads", self.ffmpeg_threads, minimum=0, maximum=MAX_FFMPEG_THREADS)
        check_number("tolerance_s", self.tolerance_s, above=0, maximum=MAX_TOLERANCE_S)
        check_number("wait_timeout_s", self.wait_timeout_s, above=0, maximum=MAX_WAIT_SECONDS)
        for name in ("revision", "device"):
            value = getattr(self, name)
            if not (isinstance(value, str) or (value is None and name == "revision")):
                raise ConfigTypeError(f"{name} must be a str, got {shown(value)}")
        if not _DEVICE.match(self.device):  # the decoders say more once one is chosen
            raise ConfigError(f"device must be 'cpu' or 'cuda[:N]', got {shown(self.device)}")
        for name in ("sidecar", "cache_dir", "data_root"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str | os.PathLike):
                raise ConfigTypeError(f"{name} must be a str or path, got {shown(value)}")
            if value is not None and _holds_nul(value):  # every OS call would refuse it
                raise ConfigError(f"{name} holds a NUL character: {shown(value)}")
        for name in ("build_index", "progress"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigTypeError(f"{name} must be a bool, got {shown(getattr(self, name))}")
        # typed at once: a misspelt option fails here, naming it, not when a reader opens
        object.__setattr__(
            self, "reader_options", ReaderOptions.coerce(self.reader_options, what="reader_options")
        )
        check_reader_bounds("reader_options", self.reader_options)
        if self.data_reader_options is not None:
            object.__setattr__(
                self,
                "data_reader_options",
                ReaderOptions.coerce(self.data_reader_options, what="data_reader_options"),
            )
            check_reader_bounds("data_reader_options", self.data_reader_options)


def resolve_stream_options(
    given: StreamOptions | None,
    keywords: Mapping[str, Any],
    defaults: Mapping[str, Any],
    *,
    what: str,
) -> StreamOptions:
    """A dataset's options: ``given`` as it is, or built from its keyword arguments.

    ``keywords`` are the constructor's stream options as called (shortcut parameters and
    ``**options``); ``defaults`` the shortcut parameters' defaults. Passing ``options=`` with
    a keyword option that is not at its default is ambiguous, and refused.

    Raises:
        ConfigTypeError: ``given`` is not a :class:`StreamOptions`.
        ConfigError: ``options=`` and keyword options both given; names the keywords.
    """
    if given is None:
        return StreamOptions(**keywords)
    if not isinstance(given, StreamOptions):
        raise ConfigTypeError(
            f"{what}: options must be a StreamOptions, got {type(given).__name__}"
        )
    # compared as StreamOptions hold them (a byte size in any spelling: 2**31 is "2GiB")
    called, default = StreamOptions(**keywords), StreamOptions(**defaults)
    clashing = sorted(
        name
        for name in keywords
        if name not in defaults or getattr(called, name) != getattr(default, name)
    )
    if clashing:
        raise ConfigError(
            f"{what}: options= already says how to stream; set {', '.join(clashing)} in the "
            "StreamOptions (dataclasses.replace) instead of as keyword arguments"
        )
    return given

"""The decoder seam: one opened clip, frames at timestamps, shared matching and conversion."""

from __future__ import annotations

import abc
import logging
import math
import os
import threading
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Literal, Protocol, Self, TypeAlias, runtime_checkable

import numpy as np
import torch

from episodestream._checks import check_number
from episodestream._closing import Closing
from episodestream.decode._buffers import float_frame_buffers
from episodestream.errors import ConfigError, ConfigTypeError, DecodeError, FrameNotFoundError

# LeRobot's default tolerance between a requested timestamp and a frame's time: one constant,
# the mp4 layer's, so span planning and frame lookup agree
from episodestream.mp4 import DEFAULT_TOLERANCE_S

__all__ = [
    "DEFAULT_FFMPEG_THREADS",
    "DEFAULT_SEEK_MODE",
    "DEFAULT_TOLERANCE_S",
    "BackendName",
    "ClipSource",
    "Decoder",
    "SeekMode",
    "nearest_frame_indices",
    "to_float",
]

_LOG = logging.getLogger(__name__)

# how long close() waits for a call in progress on another thread before freeing anyway
_CLOSE_WAIT_S = 30.0
#: Makes close()'s check-and-set of ``_closed`` one step (held only for that): of two threads
#: closing one decoder, exactly one frees its state.
_CLOSE_LOCK = threading.Lock()


def _new_close_lock() -> None:  # a lock held by another thread at fork stays held in the child
    global _CLOSE_LOCK
    _CLOSE_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_close_lock)

#: FFmpeg decode threads per decoder. Measured (docs/BENCHMARKS.md, "Decoding"): for small g=2
#: AV1 clips accessed at random, 1 thread beats FFmpeg's automatic count, whose frame threading
#: adds pipeline latency to every seek; parallelism comes from decoding clips concurrently.
DEFAULT_FFMPEG_THREADS = 1
#: torchcodec seek mode. Measured (docs/BENCHMARKS.md): per-frame cost ties with "exact", and
#: "approximate" skips torchcodec's scan at open. Frames stay exact either way: each is asked
#: for by its own presentation time and checked; a decoder that meets a clip its mode gets
#: wrong reopens itself once in the other mode.
DEFAULT_SEEK_MODE: SeekMode = "approximate"

BackendName: TypeAlias = Literal["auto", "torchcodec", "pyav"]
SeekMode: TypeAlias = Literal["exact", "approximate"]
#: A clip: its encoded bytes (bytes, bytearray, memoryview, 1-D uint8 CPU tensor) or a local path.
ClipSource: TypeAlias = bytes | bytearray | memoryview | torch.Tensor | str | os.PathLike[str]

# how many timestamps a FrameNotFoundError message spells out
_MAX_REPORTED = 5
# Memory of an open decoder beyond its encoded bytes, measured with RSS (docs/BENCHMARKS.md,
# "Decoding"): about 0.5 MiB of FFmpeg/dav1d state plus about four YUV 4:2:0 frames after
# random access with one thread; each further FFmpeg thread keeps frames of its own in flight.
_DECODER_FIXED_BYTES = 512 * 1024
_FRAMES_ONE_THREAD = 4
_FRAMES_PER_EXTRA_THREAD = 2
_FLOAT_255 = np.float32(255)


@runtime_checkable
class Decoder(Protocol):
    """One opened clip. Used by one thread at a time (a second concurrent caller gets
    :class:`DecodeError`); see :class:`DecoderPool` for sharing decoders between threads.

    Times are in the clip's own time base: presentation time stamps in seconds, as the
    container states them (a caller holding a clip cut from a larger file subtracts the clip's
    time offset first).
    """

    @property
    def name(self) -> str:
        """A label for the clip (used in error messages), e.g. ``"episode 3 / cam_high"``."""
        ...

    @property
    def nbytes(self) -> int:
        """Approximate memory the decoder holds: encoded bytes plus decoder frame buffers."""
        ...

    @property
    def width(self) -> int:
        """Frame width in pixels."""
        ...

    @property
    def height(self) -> int:
        """Frame height in pixels."""
        ...

    def frame_times(self) -> np.ndarray:
        """Presentation times (float64 seconds) of every frame, ascending; read-only."""
        ...

    def frames_at(
        self,
        timestamps_s: Sequence[float] | np.ndarray,
        *,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
    ) -> torch.Tensor:
        """The frames nearest to ``timestamps_s`` as uint8 ``N x C x H x W`` (RGB).

        Raises:
            FrameNotFoundError: a timestamp has no frame strictly within ``tolerance_s``.
            DecodeError: the clip cannot be decoded, or the decoder is closed or busy.
        """
        ...

    def close(self) -> None:
        """Release the decoder and its bytes; idempotent."""
        ...

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


def to_float(frames: torch.Tensor) -> torch.Tensor:
    """uint8 frames as float32 in [0, 1], computed exactly as LeRobot does (``x / 255``).

    The result has the layout (strides) of ``frames``, as LeRobot's ``.to(float32) / 255``
    has. On the CPU it is one buffer written by one thread: torch's elementwise kernels wake
    its intra-op thread pool for a frame this size (and allocate a second float buffer for the
    division), which costs several times the arithmetic on a busy machine
    (benchmarks/per_frame.py). Large buffers are recycled once freed (``decode/_buffers.py``).
    """
    if frames.dtype != torch.uint8:
        raise ConfigTypeError(f"to_float expects uint8 frames, got {frames.dtype}")
    if frames.device.type != "cpu":
        # by a tensor on the same device: CUDA turns division by a Python scalar into
        # multiplication by its reciprocal, 1 ulp off x / 255 for some values
        divisor = torch.full((), 255.0, dtype=torch.float32, device=frames.device)
        return frames.to(torch.float32).div_(divisor)
    out = float_frame_buffers().empty_like(frames)  # pages already mapped, when recycled
    converted = out.numpy()
    # IEEE division in float32, as torch's CPU kernel does it: every uint8 value maps to the
    # same float (tests/integration/test_decode_fast_paths.py checks all 256). Two unbuffered
    # passes, the second over a buffer still in cache, cost 0.7x one mixed-type ufunc (whose
    # casting goes through numpy's buffered iterator)
    np.copyto(converted, frames.numpy())
    np.divide(converted, _FLOAT_255, out=converted)
    return out


def nearest_frame_indices(
    frame_times_s: np.ndarray,
    timestamps_s: Sequence[float] | np.ndarray,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    *,
    name: str = "clip",
) -> np.ndarray:
    """Index (into ``frame_times_s``, ascending) of the frame nearest each timestamp.

    A timestamp matches when its distance to the nearest frame is strictly below
    ``tolerance_s`` (LeRobot's rule); on a tie the earlier frame wins.

    Raises:
        FrameNotFoundError: some timestamp has no frame within tolerance; the message lists
            those timestamps with the frame times on either side.
        ConfigError: ``timestamps_s`` is not one-dimensional or ``tolerance_s`` is not positive.
    """
    check_number("tolerance_s", tolerance_s, above=0)
    query = np.asarray(timestamps_s, dtype=np.float64)
    if query.ndim != 1:
        raise ConfigError(f"timestamps_s must be one-dimensional, got shape {query.shape}")
    times = frame_times_s
    count = len(times)
    if count == 0:
        raise FrameNotFoundError(f"{name}: the clip has no frames")
    if query.size == 0:
        return np.zeros(0, dtype=np.int64)
    if query.size == 1:  # the common case (no delta_timestamps): Python floats, no array ops
        return np.array([_nearest_one(times, float(query[0]), tolerance_s, name)], np.int64)
    after = np.searchsorted(times, query)
    before = np.clip(after - 1, 0, count - 1)
    after = np.clip(after, 0, count - 1)
    pick = np.where(np.abs(times[after] - query) < np.abs(times[before] - query), after, before)
    distance = np.abs(times[pick] - query)
    bad = ~(distance < tolerance_s)  # NaN timestamps count as bad
    if bad.any():
        raise FrameNotFoundError(_not_found_message(name, times, query[bad], tolerance_s))
    return pick.astype(np.int64, copy=False)


def _nearest_one(times: np.ndarray, t: float, tolerance_s: float, name: str) -> int:
    """:func:`nearest_frame_indices` for one timestamp, by the same rules."""
    after = int(times.searchsorted(t))
    last = len(times) - 1
    before = min(max(after - 1, 0), last)
    after = min(after, last)
    to_after = abs(float(times[after]) - t)
    to_before = abs(float(times[before]) - t)
    pick, distance = (after, to_after) if to_after < to_before else (before, to_before)
    if not distance < tolerance_s:  # NaN timestamps count as bad
        raise FrameNotFoundError(_not_found_message(name, times, np.array([t]), tolerance_s))
    return pick


def _not_found_message(name: str, times: np.ndarray, bad: np.ndarray, tolerance_s: float) -> str:
    parts = []
    for t in bad[:_MAX_REPORTED]:
        at = int(np.searchsorted(times, t)) if math.isfinite(t) else 0
        near = times[max(at - 1, 0) : at + 1]
        parts.append(f"{t:.6f} s (nearest frames at {', '.join(f'{x:.6f}' for x in near)} s)")
    more = f" and {len(bad) - _MAX_REPORTED} more" if len(bad) > _MAX_REPORTED else ""
    return (
        f"{name}: no frame within {tolerance_s:g} s of {len(bad)} timestamp(s): "
        f"{'; '.join(parts)}{more}; the clip has {len(times)} frames from {times[0]:.6f} s "
        f"to {times[-1]:.6f} s"
    )


def validate_frame_times(frame_times_s: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    """``frame_times_s`` as a read-only, strictly increasing float64 array, or DecodeError."""
    times = np.array(frame_times_s, dtype=np.float64)
    if times.ndim != 1 or times.size == 0:
        raise DecodeError(f"{name}: frame times must be a non-empty 1-D sequence")
    if not np.all(np.isfinite(times)) or np.any(np.diff(times) <= 0):
        raise DecodeError(f"{name}: frame times must be finite and strictly increasing")
    times.flags.writeable = False
    return times


def probe_points(frame_times_s: np.ndarray, *, end_s: float | None = None) -> np.ndarray:
    """A time inside each frame's display interval, clear of float rounding at its start.

    Time-based seeking returns the frame displayed at a time; asking at a frame's exact pts
    may round to the previous tick, so ask halfway to the next frame. The last frame: half the
    smallest frame interval after it, kept below ``end_s`` (the stream's end, which
    torchcodec will not seek past) when that lies after the last frame.
    """
    gaps = np.diff(frame_times_s)
    last_half = float(gaps.min()) / 2 if gaps.size else 1e-6
    if end_s is not None and end_s > frame_times_s[-1]:
        last_half = min(last_half, (end_s - float(frame_times_s[-1])) / 2)
    return frame_times_s + np.append(gaps / 2, last_half)


class UseGuard:
    """Detects a decoder used by two threads at once (a bug in the caller) instead of letting
    FFmpeg state be corrupted silently."""

    __slots__ = ("_lock", "_name")

    def __init__(self, name: str) -> None:
        self._lock = threading.Lock()
        self._name = name

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            raise DecodeError(
                f"{self._name}: decoder used by two threads at once; lease decoders from a "
                "DecoderPool or give each thread its own"
            )

    def __exit__(self, *exc_info: object) -> None:
        self._lock.release()

    def wait_idle(self, timeout_s: float) -> bool:
        """Block until no call is in progress (True), or ``timeout_s`` passes (False)."""
        if self._lock.acquire(timeout=timeout_s):
            self._lock.release()
            return True
        return False


def guarded_frames_at(
    timestamps_s: Sequence[float] | np.ndarray,
    tolerance_s: float,
    *,
    name: str,
    frame_times_s: np.ndarray,
    guard: UseGuard,
    is_closed: Callable[[], bool],
    shape: tuple[int, int],
    device: torch.device | None,
    fetch: Callable[[np.ndarray], torch.Tensor],
) -> torch.Tensor:
    """The shared body of ``Decoder.frames_at``: match ``timestamps_s`` to frames, then call
    ``fetch`` (under ``guard``) with the distinct presentation indices, ascending, for a
    ``(n, 3, H, W)`` uint8 tensor in that order, and put its rows back in request order.

    ``shape`` is ``(height, width)`` for the empty result of an empty request.
    """
    if is_closed():
        raise DecodeError(f"{name}: decoder is closed")
    index = nearest_frame_indices(frame_times_s, timestamps_s, tolerance_s, name=name)
    with guard:
        # close() may have flipped the flag since the check above
        if is_closed():
            raise DecodeError(f"{name}: decoder is closed")
        if index.size == 0:
            return torch.empty((0, 3, *shape), dtype=torch.uint8, device=device)
        if index.size == 1:
            return fetch(index)
        unique, inverse = np.unique(index, return_inverse=True)
        frames = fetch(unique)
    if not np.array_equal(unique, index):  # repeated or unsorted timestamps
        frames = frames[torch.from_numpy(inverse).to(frames.device)]
    return frames


def source_label(source: ClipSource, name: str | None) -> str:
    """A name for error messages: the caller's, else the path, else the byte count."""
    if name is not None:
        return name
    if isinstance(source, str | os.PathLike):
        return os.fspath(source)
    return f"<clip of {source_nbytes(source)} bytes>"


def source_nbytes(source: ClipSource) -> int:
    """Encoded size of a bytes-like source; a path's file size."""
    if isinstance(source, torch.Tensor):
        return source.numel() * source.element_size()
    if isinstance(source, memoryview):
        return source.nbytes
    if isinstance(source, bytes | bytearray):
        return len(source)
    try:
        return os.stat(source).st_size
    except OSError:
        return 0


def estimate_decoder_bytes(encoded_bytes: int, width: int, height: int, threads: int) -> int:
    """Approximate memory of an open decoder holding ``encoded_bytes`` of clip data."""
    effective = threads if threads > 0 else (os.cpu_count() or 1)
    frames = _FRAMES_ONE_THREAD + _FRAMES_PER_EXTRA_THREAD * (effective - 1)
    return encoded_bytes + _DECODER_FIXED_BYTES + frames * (width * height * 3 // 2)


def parse_device(device: str | torch.device) -> torch.device:
    """``device`` as a ``torch.device``; ConfigError naming it when torch cannot parse it."""
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise ConfigTypeError(f"device must be a str or torch.device, got {device!r}")
    try:
        return torch.device(device)
    except RuntimeError as error:
        raise ConfigError(f"device must be 'cpu' or 'cuda[:N]', got {device!r}") from error


def check_source(source: ClipSource, name: str) -> None:
    """DecodeError for an empty clip or a path that does not exist; ConfigTypeError (a
    TypeError) for a wrong type."""
    if isinstance(source, torch.Tensor):
        if source.dtype != torch.uint8 or source.dim() != 1 or source.device.type != "cpu":
            raise ConfigTypeError(
                f"{name}: a tensor clip must be 1-D uint8 on the CPU, got {source.dtype} "
                f"{tuple(source.shape)} on {source.device}"
            )
    elif isinstance(source, str | os.PathLike):
        if not os.path.isfile(source):
            raise DecodeError(f"{name}: no such clip file")
    elif not isinstance(source, bytes | bytearray | memoryview):
        raise ConfigTypeError(
            f"{name}: clip must be bytes, bytearray, memoryview, a uint8 tensor or a path, "
            f"got {type(source).__name__}"
        )
    if source_nbytes(source) == 0:
        raise DecodeError(f"{name}: the clip is empty (0 bytes)")


def log_open(backend: str, name: str, frames: int, width: int, height: int) -> None:
    _LOG.debug("opened %s decoder for %s: %d frames %dx%d", backend, name, frames, width, height)


class ClipDecoderBase(Closing, abc.ABC):
    """The :class:`Decoder` protocol surface both backends share; a backend sets the fields
    below in ``__init__`` and defines :meth:`_fetch_frames` and :meth:`_release`."""

    _name: str
    _nbytes: int
    _width: int
    _height: int
    _closed: bool
    _times: np.ndarray
    _guard: UseGuard
    #: where frames are returned (None: the CPU)
    _frames_device: torch.device | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def nbytes(self) -> int:
        return 0 if self._closed else self._nbytes

    @property
    def width(self) -> int:
        return self._width

    @property
    def height(self) -> int:
        return self._height

    @property
    def closed(self) -> bool:
        return self._closed

    def frame_times(self) -> np.ndarray:
        return self._times

    def frames_at(
        self,
        timestamps_s: Sequence[float] | np.ndarray,
        *,
        tolerance_s: float = DEFAULT_TOLERANCE_S,
    ) -> torch.Tensor:
        return guarded_frames_at(
            timestamps_s,
            tolerance_s,
            name=self._name,
            frame_times_s=self._times,
            guard=self._guard,
            is_closed=lambda: self._closed,
            shape=(self._height, self._width),
            device=self._frames_device,
            fetch=self._fetch_frames,
        )

    @abc.abstractmethod
    def _fetch_frames(self, unique: np.ndarray) -> torch.Tensor:
        """Frames at presentation indices ``unique`` (ascending) as ``(n, 3, H, W)``."""

    def close(self) -> None:
        """Free the backend's decoder state; idempotent. A call still in progress on another
        thread is waited for first (bounded: past that, a warning and the state is freed).
        Atomic: of threads closing the decoder at once, one frees the state, the others return."""
        with _CLOSE_LOCK:
            if self._closed:
                return
            self._closed = True
        if not self._guard.wait_idle(_CLOSE_WAIT_S):
            _LOG.warning(
                "%s: closing a decoder still in use after %.0f s", self._name, _CLOSE_WAIT_S
            )
        self._release()

    @abc.abstractmethod
    def _release(self) -> None:
        """Drop the backend's decoder state: from :meth:`close` (once, whatever the threads),
        or from the backend's ``__init__`` when opening fails part-way, so it must cope with
        state only partly set up."""

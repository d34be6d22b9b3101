"""The datasets' option groups, each setting with its one default, checked in full when built.

- :class:`Resources`: what a dataset may spend (bytes, threads, decoders, waits) and where it
  caches.
- :class:`SampleOptions`: what one sample holds (delta timestamps, image dtype, transforms,
  tolerance).
- :class:`Order`: which samples come in which order (pool size, seed, shuffle, unit, ranks).

Where the dataset lives is :class:`~episodestream.datasets.Source`. A group is a frozen value:
``__post_init__`` checks every field and raises a :class:`~episodestream.errors.ConfigError`
naming it, so a bad value fails where it is written, before any request. The layers below
receive the checked values and do not check them again.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from episodestream._checks import (
    MAX_BYTES,
    MAX_TOLERANCE_S,
    MAX_WAIT_SECONDS,
    Bound,
    check_choice,
    check_int,
    check_number,
    shown,
)
from episodestream._frozen import FrozenDict
from episodestream.cache import DEFAULT_FETCH_WORKERS
from episodestream.decode import (
    DEFAULT_DECODE_THREADS,
    DEFAULT_FFMPEG_THREADS,
    DEFAULT_TOLERANCE_S,
    BackendName,
)
from episodestream.errors import (
    BudgetConfigError,
    ConfigError,
    ConfigTypeError,
    SamplingConfigError,
    SamplingError,
)
from episodestream.sampling import (
    DEFAULT_POOL_SIZE,
    DEFAULT_WINDOW_FRAMES,
    MAX_SEED,
    MAX_WORLD_SIZE,
    PoolParams,
    check_delta_timestamps,
)

__all__ = [
    "DEFAULT_BYTE_BUDGET",
    "DEFAULT_DECODED_BUDGET",
    "DEFAULT_IMAGE_DTYPE",
    "DEFAULT_MAX_DECODER_BYTES",
    "DEFAULT_MAX_OPEN_DECODERS",
    "DEFAULT_PREFETCH_EPISODES",
    "DEFAULT_SEED",
    "DEFAULT_WAIT_TIMEOUT_S",
    "MAX_DECODE_THREADS",
    "MAX_FETCH_WORKERS",
    "MAX_FFMPEG_THREADS",
    "MAX_OPEN_DECODERS",
    "MAX_PENDING_SAMPLES",
    "MAX_POOL_EPISODES",
    "MAX_WINDOW_FRAMES",
    "ImageDtype",
    "Order",
    "PoolUnit",
    "Resources",
    "SampleOptions",
    "check_bool",
    "check_path",
    "parse_bytes",
]

ImageDtype = Literal["float32", "uint8"]
PoolUnit = Literal["episode", "window"]
ImageTransform = Callable[[Any], Any]

#: Bytes of compressed episode clips one rank holds: the pool splits it evenly among its
#: DataLoader workers, each of which must hold ``pool_size`` episodes plus one in flight; the
#: map-style dataset splits it likewise. 8 GiB gives each of 8 workers 1 GiB, room for a pool
#: of 16 episodes of up to ~60 MB (three cameras of a minute at 30 fps); 2 GiB (the map-style
#: dataset's former default) left 256 MiB per worker, which refused common datasets at 8
#: workers. Raise it for long episodes, lower it where memory is short (docs/ARCHITECTURE.md,
#: "Configuration").
DEFAULT_BYTE_BUDGET = 8 * 2**30
#: Bytes of decoded uint8 frames the window pool (``unit="window"``) holds per rank.
DEFAULT_DECODED_BUDGET = 4 * 2**30
#: How long a sample may wait for its episode's bytes before a StorageTimeout (seconds).
DEFAULT_WAIT_TIMEOUT_S = 300.0
#: Open decoders kept (LRU); the pool raises it to one per resident episode-camera per thread.
DEFAULT_MAX_OPEN_DECODERS = 64
DEFAULT_MAX_DECODER_BYTES = 1 * 2**30
#: Episodes the pool fetches ahead of those resident.
DEFAULT_PREFETCH_EPISODES = 8
#: Frames as LeRobot returns them: float32 in [0, 1].
DEFAULT_IMAGE_DTYPE: ImageDtype = "float32"
DEFAULT_SEED = 0
#: Samples decoded ahead per decode thread when ``max_pending_samples`` is not given.
PENDING_PER_DECODE_THREAD = 4

# Upper limits of the settings (named in the error that refuses a value above one): each is
# far above any useful value and below where a number overflows, or a thread count exhausts
# the machine before the first sample.
MAX_FETCH_WORKERS = Bound("MAX_FETCH_WORKERS", 256, "fetch threads of one process")
MAX_FFMPEG_THREADS = Bound("MAX_FFMPEG_THREADS", 256, "threads of one open decoder")
MAX_OPEN_DECODERS = Bound("MAX_OPEN_DECODERS", 65536, "decoders one process keeps open")
MAX_DECODE_THREADS = Bound("MAX_DECODE_THREADS", 256, "decode threads of one process")
MAX_PENDING_SAMPLES = Bound(
    "MAX_PENDING_SAMPLES", 4096, "samples decoded ahead, each holding its frames"
)
MAX_POOL_EPISODES = Bound(
    "MAX_POOL_EPISODES", 2**20, "episodes a worker holds, or fetches ahead, at once"
)
MAX_WINDOW_FRAMES = Bound("MAX_WINDOW_FRAMES", 2**16, "frames of one decoded window")
_MAX_RANK = Bound("MAX_WORLD_SIZE - 1", MAX_WORLD_SIZE.value - 1, "ranks count from 0")

_IMAGE_DTYPES = ("float32", "uint8")
_BACKENDS = ("auto", "torchcodec", "pyav")
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
        BudgetConfigError: (a ``BudgetError`` and a ``ConfigError``) not a size, or not
            positive, or above ``MAX_BYTES``; names ``name``.
    """
    if isinstance(value, bool):
        raise BudgetConfigError(f"{name} must be a byte count or a size like '8GiB', got {value!r}")
    if isinstance(value, int):
        result = value
    elif isinstance(value, str):
        match = _SIZE.match(value)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _UNITS:
            raise BudgetConfigError(
                f"{name}={shown(value)} is not a size: use bytes or a number with one of "
                "B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"
            )
        result = _size_in_bytes(match.group(1), _UNITS[unit])
    else:
        raise BudgetConfigError(
            f"{name} must be a byte count or a size like '8GiB', got {shown(value)}"
        )
    if result <= 0:
        raise BudgetConfigError(f"{name} must be positive, got {shown(value)}")
    if result > MAX_BYTES.value:
        raise BudgetConfigError(f"{name} must be <= {MAX_BYTES}, got {shown(value)}")
    return result


def _size_in_bytes(number: str, unit: int) -> int:
    """``number`` (digits, maybe a fraction) times ``unit``, exact: no float overflow for
    400 digits, no int conversion of a million; a number past MAX_BYTES stays past it."""
    whole, _, fraction = number.partition(".")
    whole = whole.lstrip("0") or "0"
    if len(whole) > _SIZE_DIGITS:
        return MAX_BYTES.value + 1
    return int(Fraction(f"{whole}.{fraction[:_SIZE_DIGITS] or '0'}") * unit)


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is a bool (a truthy string or number is not one)."""
    if not isinstance(value, bool):
        raise ConfigTypeError(f"{name} must be a bool, got {shown(value)}")
    return value


def check_path(name: str, value: Any) -> str | os.PathLike[str] | None:
    """``value`` if it is None, a str or a path without a NUL character (every OS call would
    refuse one)."""
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike):
        raise ConfigTypeError(f"{name} must be a str or path, got {shown(value)}")
    text = os.fspath(value)
    if ("\x00" if isinstance(text, str) else b"\x00") in text:  # type: ignore[operator]
        raise ConfigError(f"{name} holds a NUL character: {shown(value)}")
    return value


def check_decoder(decoder: Any, device: Any) -> None:
    """``decoder`` one of the backends, ``device`` 'cpu' or 'cuda[:N]' (the decoders say more
    once one is chosen)."""
    check_choice("decoder", decoder, _BACKENDS)
    if not isinstance(device, str):
        raise ConfigTypeError(f"device must be a str, got {shown(device)}")
    if not _DEVICE.match(device):
        raise ConfigError(f"device must be 'cpu' or 'cuda[:N]', got {shown(device)}")


def _as_sampling(check: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``check(...)``, its SamplingError or ConfigError raised as a SamplingConfigError (both,
    so that handlers of either keep working)."""
    try:
        return check(*args, **kwargs)
    except SamplingConfigError:
        raise
    except (SamplingError, ConfigError) as error:
        raise SamplingConfigError(str(error)) from None


def _set(instance: Any, name: str, value: Any) -> None:
    object.__setattr__(instance, name, value)


@dataclass(frozen=True, slots=True)
class Resources:
    """What a dataset may spend, and where it caches: one default per setting, here.

    Attributes:
        byte_budget: bytes of compressed episode clips per rank (int or ``"8GiB"``), split
            evenly among its DataLoader workers (see :data:`DEFAULT_BYTE_BUDGET`).
        decoded_budget: bytes of decoded frames per rank of the window pool (``unit="window"``).
        fetch_workers: concurrent episode fetches per process.
        prefetch_episodes: episodes the pool fetches ahead of those resident.
        prefetch_next: the map-style dataset fetches the next selected episode when one is
            first touched.
        decode_threads: the pool's decode threads per process (0: decode in the iterating
            thread).
        max_pending_samples: samples the pool decodes ahead (None:
            ``4 * max(decode_threads, 1)``).
        decoder: ``"auto"`` (torchcodec, else PyAV), ``"torchcodec"`` or ``"pyav"``.
        device: ``"cpu"`` or ``"cuda[:N]"`` (torchcodec only).
        ffmpeg_threads: FFmpeg threads per open decoder (0: FFmpeg's choice).
        max_open_decoders: open decoders kept (None: ``DEFAULT_MAX_OPEN_DECODERS``, raised by
            the pool to one per resident episode-camera per decode thread).
        max_decoder_bytes: bytes of the clips the open decoders hold.
        wait_timeout_s: bound on waiting for one episode's bytes.
        cache_dir: local folder for built sidecar indexes (None: the user cache).
    """

    byte_budget: int | str = DEFAULT_BYTE_BUDGET
    decoded_budget: int | str = DEFAULT_DECODED_BUDGET
    fetch_workers: int = DEFAULT_FETCH_WORKERS
    prefetch_episodes: int = DEFAULT_PREFETCH_EPISODES
    prefetch_next: bool = True
    decode_threads: int = DEFAULT_DECODE_THREADS
    max_pending_samples: int | None = None
    decoder: BackendName = "auto"
    device: str = "cpu"
    ffmpeg_threads: int = DEFAULT_FFMPEG_THREADS
    max_open_decoders: int | None = None
    max_decoder_bytes: int = DEFAULT_MAX_DECODER_BYTES
    wait_timeout_s: float = DEFAULT_WAIT_TIMEOUT_S
    cache_dir: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        _set(self, "byte_budget", parse_bytes(self.byte_budget))
        _set(self, "decoded_budget", parse_bytes(self.decoded_budget, name="decoded_budget"))
        _set(
            self,
            "fetch_workers",
            check_int("fetch_workers", self.fetch_workers, minimum=1, maximum=MAX_FETCH_WORKERS),
        )
        _set(
            self,
            "prefetch_episodes",
            check_int(
                "prefetch_episodes", self.prefetch_episodes, minimum=0, maximum=MAX_POOL_EPISODES
            ),
        )
        check_bool("prefetch_next", self.prefetch_next)
        _set(
            self,
            "decode_threads",
            check_int("decode_threads", self.decode_threads, minimum=0, maximum=MAX_DECODE_THREADS),
        )
        if self.max_pending_samples is not None:
            check_int(
                "max_pending_samples",
                self.max_pending_samples,
                minimum=1,
                maximum=MAX_PENDING_SAMPLES,
            )
        check_decoder(self.decoder, self.device)
        _set(
            self,
            "ffmpeg_threads",
            check_int("ffmpeg_threads", self.ffmpeg_threads, minimum=0, maximum=MAX_FFMPEG_THREADS),
        )
        if self.max_open_decoders is not None:
            _set(
                self,
                "max_open_decoders",
                check_int(
                    "max_open_decoders",
                    self.max_open_decoders,
                    minimum=1,
                    maximum=MAX_OPEN_DECODERS,
                ),
            )
        _set(
            self,
            "max_decoder_bytes",
            check_int("max_decoder_bytes", self.max_decoder_bytes, minimum=1, maximum=MAX_BYTES),
        )
        _set(
            self,
            "wait_timeout_s",
            check_number("wait_timeout_s", self.wait_timeout_s, above=0, maximum=MAX_WAIT_SECONDS),
        )
        check_path("cache_dir", self.cache_dir)

    @property
    def pending_samples(self) -> int:
        """Samples the pool decodes ahead: ``max_pending_samples`` or its default."""
        if self.max_pending_samples is not None:
            return int(self.max_pending_samples)
        return PENDING_PER_DECODE_THREAD * max(int(self.decode_threads), 1)

    def open_decoders(self, wanted: int = 0) -> int:
        """Open decoders to keep: ``max_open_decoders`` when given, else the default raised
        to ``wanted`` (bounded by ``MAX_OPEN_DECODERS``)."""
        if self.max_open_decoders is not None:
            return int(self.max_open_decoders)
        return max(DEFAULT_MAX_OPEN_DECODERS, min(int(wanted), MAX_OPEN_DECODERS.value))


@dataclass(frozen=True, slots=True)
class SampleOptions:
    """What one sample holds.

    Attributes:
        delta_timestamps: LeRobot's ``{key: [offsets in seconds]}`` (kept as a read-only
            copy); which keys are features is checked once the dataset is open.
        image_dtype: ``"float32"`` (LeRobot's [0, 1]) or ``"uint8"``.
        image_transforms: applied to each camera's frames (after the dtype conversion).
        tolerance_s: accepted distance between a requested timestamp and a frame (LeRobot's).
        depth_output_unit: LeRobot 0.6's unit for depth maps; a dataset with depth cameras
            refuses one (they are streamed as stored).
    """

    delta_timestamps: Mapping[str, Sequence[float]] | None = None
    image_dtype: ImageDtype = DEFAULT_IMAGE_DTYPE
    image_transforms: ImageTransform | None = None
    tolerance_s: float = DEFAULT_TOLERANCE_S
    depth_output_unit: str | None = None

    def __post_init__(self) -> None:
        _as_sampling(check_delta_timestamps, self.delta_timestamps)
        if self.delta_timestamps is not None:
            _set(self, "delta_timestamps", FrozenDict(self.delta_timestamps))
        if not isinstance(self.image_dtype, str) or self.image_dtype not in _IMAGE_DTYPES:
            raise SamplingConfigError(
                f"image_dtype must be 'float32' or 'uint8', got {shown(self.image_dtype)}"
            )
        if self.image_transforms is not None and not callable(self.image_transforms):
            raise ConfigTypeError(
                "image_transforms must be a callable (frames -> frames), "
                f"got {shown(self.image_transforms)}"
            )
        _set(
            self,
            "tolerance_s",
            check_number("tolerance_s", self.tolerance_s, above=0, maximum=MAX_TOLERANCE_S),
        )
        if self.depth_output_unit is not None and not isinstance(self.depth_output_unit, str):
            raise ConfigTypeError(
                f"depth_output_unit must be a str, got {shown(self.depth_output_unit)}"
            )


@dataclass(frozen=True, slots=True)
class Order:
    """Which samples an :class:`~episodestream.EpisodePoolDataset` yields in which order.

    Attributes:
        pool_size: episodes resident at once per DataLoader worker (window pool: episodes
            open at once).
        seed: seed of every random choice (None: ``DEFAULT_SEED``, as LeRobot's "unseeded").
        shuffle: random entry order, frame order and draws; False gives sequential order.
        unit: ``"episode"`` (whole episodes resident) or ``"window"`` (windows of
            ``window_frames`` consecutive frames decoded once, README "Decoding each frame
            once").
        window_frames: frames of one window (``unit="window"``).
        rank, world_size: this process's rank (None: ``torch.distributed``, then
            ``RANK``/``WORLD_SIZE``, read when iterating).
    """

    pool_size: int = DEFAULT_POOL_SIZE
    seed: int | None = DEFAULT_SEED
    shuffle: bool = True
    unit: PoolUnit = "episode"
    window_frames: int = DEFAULT_WINDOW_FRAMES
    rank: int | None = None
    world_size: int | None = None

    def __post_init__(self) -> None:
        # LeRobot's StreamingLeRobotDataset takes seed=None for "unseeded"; the pool's order
        # must be reproducible across ranks and workers, so None means the default seed
        if self.seed is None:
            _set(self, "seed", DEFAULT_SEED)
        params = _as_sampling(
            PoolParams, pool_size=self.pool_size, seed=self.seed, shuffle=self.shuffle
        )
        for name, value, bound in (
            ("pool_size", params.pool_size, MAX_POOL_EPISODES),
            ("seed", params.seed, MAX_SEED),
        ):
            if value > bound.value:
                raise SamplingConfigError(f"{name} must be <= {bound}, got {shown(value)}")
        _set(self, "pool_size", params.pool_size)
        _set(self, "seed", params.seed)
        _set(self, "shuffle", params.shuffle)
        check_choice("unit", self.unit, ("episode", "window"))
        _set(
            self,
            "window_frames",
            check_int("window_frames", self.window_frames, minimum=1, maximum=MAX_WINDOW_FRAMES),
        )
        # given ones are checked now; detected ones when iterating (torch.distributed may be
        # initialized after the dataset is made)
        if self.rank is not None:
            _set(self, "rank", check_int("rank", self.rank, minimum=0, maximum=_MAX_RANK))
        if self.world_size is not None:
            _set(
                self,
                "world_size",
                check_int("world_size", self.world_size, minimum=1, maximum=MAX_WORLD_SIZE),
            )
        if self.rank is not None and self.world_size is not None and self.rank >= self.world_size:
            raise ConfigError(f"rank must be < world_size ({self.world_size}), got {self.rank}")

    @property
    def params(self) -> PoolParams:
        """The sampling layer's parameters of this order."""
        return PoolParams(pool_size=self.pool_size, seed=self.seed, shuffle=self.shuffle)

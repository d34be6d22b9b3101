"""What ``episodestream bench`` runs: the tracks and the settings they share."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeAlias

import torch

from episodestream.cache import DEFAULT_FETCH_WORKERS
from episodestream.datasets import parse_bytes
from episodestream.decode import (
    DEFAULT_DECODE_THREADS,
    DEFAULT_FFMPEG_THREADS,
    BackendName,
    parse_device,
    resolve_backend,
)
from episodestream.errors import ConfigError
from episodestream.helpers import check_choice, check_int, check_number
from episodestream.plan import DEFAULT_BATCH_SIZE, DEFAULT_PREFETCH_EPISODES
from episodestream.sampling import DEFAULT_POOL_SIZE

__all__ = [
    "ALL_TRACKS",
    "BENCH_BYTE_BUDGET",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CONNECTIONS",
    "DEFAULT_DECODE_SAMPLES",
    "DEFAULT_NAIVE_SAMPLES",
    "DEFAULT_SAMPLES",
    "BenchConfig",
    "ImageDtypeName",
    "RangeBackend",
    "TrackName",
    "detect_shard",
]

TrackName: TypeAlias = Literal["stream", "local", "floor", "lerobot", "naive", "download"]
ALL_TRACKS: tuple[TrackName, ...] = ("stream", "local", "floor", "lerobot", "naive", "download")
RangeBackend: TypeAlias = Literal["native", "fsspec"]
ImageDtypeName: TypeAlias = Literal["float32", "uint8"]

#: Samples every track draws (capped at the shard's frames).
DEFAULT_SAMPLES = 2000
#: NAIVE reads through a generic remote file object; it is capped to stay short.
DEFAULT_NAIVE_SAMPLES = 100
#: Samples of the resident-pool random-decode measurement.
DEFAULT_DECODE_SAMPLES = 200
#: HTTP connections (and request threads) of the reader, per process.
DEFAULT_CONNECTIONS = 16
#: Share of the LOCAL (else STREAM) steady rate used as the keep-up target when none is given:
#: below the decode ceiling, so keep-up tests refills rather than CPU noise on a shared machine.
AUTO_TARGET_SHARE = 0.75


#: the benchmark's pool budget (the CLI's --byte-budget default): docs/BENCHMARKS.md ran
#: with it; a library default of its own (8 GiB) would change the figures, not the code
BENCH_BYTE_BUDGET = 2 * 2**30


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """Settings of one benchmark run (one rank).

    Attributes:
        root: the dataset as STREAM reads it (path, http(s)://, hf://, s3://, ...).
        local_root: a local copy for LOCAL; ``None`` downloads the touched files first.
        tracks: which of STREAM, LOCAL, FLOOR, LEROBOT, NAIVE, DOWNLOAD run (STREAM always
            runs: the other figures are ratios to it). FLOOR and LEROBOT decode the local copy
            (LEROBOT only where ``lerobot`` imports, and only from a complete local copy).
        samples: samples drawn by STREAM and LOCAL (the first ``samples`` of the pool order).
        keepup_samples: samples consumed at ``target_samples_s`` (``None``: ``samples``;
            ``0``: no keep-up run).
        naive_samples: cap on NAIVE's samples (a prefix of the same order).
        decode_samples: samples of the resident-pool random-decode measurement.
        target_samples_s: keep-up target; ``None``: ``AUTO_TARGET_SHARE`` x LOCAL's steady
            samples/s (STREAM's when LOCAL does not run).
        pool_size, prefetch_episodes, byte_budget, seed: the pool's settings.
        fetch_workers: concurrent episode fetches; connections: HTTP connections per host.
        decoder, decode_threads, ffmpeg_threads: decoding, the same in every track.
        device: where STREAM, LOCAL and FLOOR decode: ``"cpu"`` or ``"cuda[:N]"`` (NVDEC
            through torchcodec; the decode table then also compares the device's frames with
            the CPU's). A bare ``"cuda"`` under torchrun (``LOCAL_RANK`` set) is each rank's own
            GPU, ``cuda:LOCAL_RANK``. LEROBOT and NAIVE decode on the CPU whatever this says.
        batch_size: samples per batch for the randomness and keep-up figures.
        torch_threads: torch's intra-op threads while the tracks run (restored after); 1 as in
            DataLoader workers, where torch sets it — more threads make every small tensor op
            an OpenMP region that spins against the decode threads. ``None``: torch's default.
        rounds: STREAM, LOCAL, FLOOR and LEROBOT run this many times, interleaved (the order
            rotates each round); each reports its median round (shared machines are noisy; every
            round is kept in the JSON). The scaling run's worker counts too, apart from the
            tracks: its efficiency is the median of each round's side-by-side ratio.
        episodes: only these episodes (ids) are sampled; ``num_episodes``: only the first
            ``num_episodes`` of the dataset. ``None``: every episode.
        range_backend: ``"native"`` (our HTTP reader) or ``"fsspec"`` (fsspec's HTTP filesystem
            for an http(s) root, to compare the two on the same server).
        image_dtype: the images STREAM, LOCAL, LEROBOT (where it can) and the worker runs
            return: ``"float32"`` in [0, 1] or ``"uint8"``. FLOOR is always uint8.
        num_workers: DataLoader worker counts of the scaling run (STREAM through a real
            DataLoader with persistent workers); empty: no scaling run.
        scaling_samples: samples each scaling run draws (``None``: ``samples``).
        shard_index, shard_count: this rank of a distributed run (``None``: torchrun's
            ``RANK``/``WORLD_SIZE``, else a single rank).
        access_log: nginx access log of the server in front of ``root``, when it is ours
            (adds server-side figures: requests per file kind, statuses, bytes sent).
        cache_dir: where sidecar indexes are cached (default ``$EPISODESTREAM_CACHE``).
        work_dir: where downloads go (default: a temporary folder, removed after).
        progress: progress bars (on a terminal; periodic log lines otherwise).
        wait_timeout_s: bound on any single wait for an episode's bytes.
    """

    root: str
    local_root: str | None = None
    tracks: tuple[TrackName, ...] = ALL_TRACKS
    samples: int = DEFAULT_SAMPLES
    keepup_samples: int | None = None
    naive_samples: int = DEFAULT_NAIVE_SAMPLES
    decode_samples: int = DEFAULT_DECODE_SAMPLES
    target_samples_s: float | None = None
    pool_size: int = DEFAULT_POOL_SIZE
    prefetch_episodes: int = DEFAULT_PREFETCH_EPISODES
    byte_budget: int = BENCH_BYTE_BUDGET
    seed: int = 0
    fetch_workers: int = DEFAULT_FETCH_WORKERS
    connections: int = DEFAULT_CONNECTIONS
    decoder: BackendName = "auto"
    decode_threads: int = DEFAULT_DECODE_THREADS
    ffmpeg_threads: int = DEFAULT_FFMPEG_THREADS
    batch_size: int = DEFAULT_BATCH_SIZE
    rounds: int = 1
    torch_threads: int | None = 1
    shard_index: int | None = None
    shard_count: int | None = None
    access_log: str | None = None
    cache_dir: str | None = None
    work_dir: str | None = None
    progress: bool = True
    wait_timeout_s: float = 300.0
    episodes: tuple[int, ...] | None = None
    num_episodes: int | None = None
    range_backend: RangeBackend = "native"
    image_dtype: ImageDtypeName = "float32"
    num_workers: tuple[int, ...] = ()
    scaling_samples: int | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", os.fspath(self.root))
        if self.local_root is not None:
            object.__setattr__(self, "local_root", os.fspath(self.local_root))
        object.__setattr__(self, "byte_budget", parse_bytes(self.byte_budget))
        tracks = tuple(dict.fromkeys(("stream", *self.tracks)))
        unknown = [t for t in tracks if t not in ALL_TRACKS]
        if unknown:
            raise ConfigError(f"unknown track(s) {unknown}; choose from {list(ALL_TRACKS)}")
        object.__setattr__(self, "tracks", tracks)
        for name, minimum in (
            ("samples", 1),
            ("pool_size", 1),
            ("fetch_workers", 1),
            ("connections", 1),
            ("batch_size", 1),
            ("rounds", 1),
            ("naive_samples", 0),
            ("decode_samples", 0),
            ("prefetch_episodes", 0),
            ("seed", 0),
            ("decode_threads", 0),
            ("ffmpeg_threads", 0),
        ):
            check_int(name, getattr(self, name), minimum=minimum)
        if self.keepup_samples is not None:
            check_int("keepup_samples", self.keepup_samples, minimum=0)
        if self.torch_threads is not None:
            check_int("torch_threads", self.torch_threads, minimum=1)
        if self.target_samples_s is not None:
            check_number("target_samples_s", self.target_samples_s, above=0)
        check_choice("decoder", self.decoder, ("auto", "torchcodec", "pyav"))
        if (self.shard_index is None) != (self.shard_count is None):
            raise ConfigError("give both shard_index and shard_count, or neither")
        if self.shard_count is not None:
            assert self.shard_index is not None
            count = check_int("shard_count", self.shard_count, minimum=1)
            if not 0 <= check_int("shard_index", self.shard_index) < count:
                raise ConfigError(
                    f"shard_index must lie in [0, shard_count), got {self.shard_index} of "
                    f"{self.shard_count}"
                )
        check_number("wait_timeout_s", self.wait_timeout_s, above=0)
        check_choice("range_backend", self.range_backend, ("native", "fsspec"))
        check_choice("image_dtype", self.image_dtype, ("float32", "uint8"))
        if self.episodes is not None and self.num_episodes is not None:
            raise ConfigError("give episodes or num_episodes, not both")
        if self.episodes is not None:
            ids = tuple(check_int("episodes[]", e, minimum=0) for e in self.episodes)
            if not ids:
                raise ConfigError("episodes must name at least one episode")
            object.__setattr__(self, "episodes", tuple(dict.fromkeys(ids)))
        if self.num_episodes is not None:
            check_int("num_episodes", self.num_episodes, minimum=1)
        workers = tuple(check_int("num_workers[]", n, minimum=1) for n in self.num_workers)
        object.__setattr__(self, "num_workers", tuple(dict.fromkeys(workers)))
        if self.scaling_samples is not None:
            check_int("scaling_samples", self.scaling_samples, minimum=1)
        self._check_device()
        if self.work_dir is not None and not os.path.isdir(self.work_dir):
            raise ConfigError(f"work_dir {self.work_dir!r} is not an existing folder")

    def _check_device(self) -> None:
        """Refuse a device the run could not decode on before anything is fetched."""
        device = parse_device(self.device)
        if device.type == "cpu":
            object.__setattr__(self, "device", "cpu")
            return
        if device.type != "cuda":
            raise ConfigError(f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}")
        local_rank = os.environ.get("LOCAL_RANK", "")
        if device.index is None and local_rank.isdigit():
            device = torch.device("cuda", int(local_rank))  # one GPU per rank, as torchrun runs
        object.__setattr__(self, "device", str(device))
        if self.decoder == "pyav":
            raise ConfigError(
                f"device={self.device!r}: the PyAV backend decodes on the CPU only; use "
                "decoder='torchcodec' (or 'auto') for GPU decoding"
            )
        if self.num_workers:
            raise ConfigError(
                f"device={self.device!r} with num_workers: DataLoader workers are forked, and "
                "CUDA cannot be used in a forked process; run the scaling table on the CPU"
            )
        if not torch.cuda.is_available():
            raise ConfigError(
                f"device={self.device!r}: torch {torch.__version__} sees no CUDA device "
                "(torch.cuda.is_available() is False); use device='cpu'"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"device={self.device!r}: only {torch.cuda.device_count()} CUDA device(s) exist"
            )
        resolve_backend(self.decoder, device)  # torchcodec must load (DecodeError saying why)

    @property
    def effective_keepup_samples(self) -> int:
        return self.samples if self.keepup_samples is None else self.keepup_samples

    def shard(self) -> tuple[int, int]:
        """``(index, count)``: the explicit shard, else torchrun's environment, else (0, 1)."""
        if self.shard_index is not None and self.shard_count is not None:
            return self.shard_index, self.shard_count
        return detect_shard()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["tracks"] = list(self.tracks)
        data["episodes"] = None if self.episodes is None else list(self.episodes)
        data["num_workers"] = list(self.num_workers)
        return data


def detect_shard(environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``(RANK, WORLD_SIZE)`` as torchrun sets them; ``(0, 1)`` outside a distributed launch."""
    env = os.environ if environ is None else environ
    try:
        rank = int(env.get("RANK", "0"))
        world = int(env.get("WORLD_SIZE", "1"))
    except ValueError as error:
        raise ConfigError(f"RANK/WORLD_SIZE must be integers: {error}") from error
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} is not within WORLD_SIZE={world}")
    return rank, world

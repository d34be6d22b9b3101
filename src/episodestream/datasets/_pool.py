"""EpisodePoolDataset: the exact-coverage episode pool as a torch IterableDataset."""

from __future__ import annotations

import collections
import dataclasses
import logging
import multiprocessing
import multiprocessing.context
import os
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import CancelledError, Future
from typing import Any, Literal

import numpy as np
import torch.utils.data

from episodestream._checks import Bound, check_choice, check_int, shown
from episodestream._closing import Closing
from episodestream.datasets._arguments import check_bool, check_sample_arguments
from episodestream.datasets._compat import (
    LeRobotSurface,
    dataset_options,
    resolve_dataset_name,
)
from episodestream.datasets._engine import (
    OpenedDataset,
    StreamEngine,
    check_budget,
    open_for_samples,
)
from episodestream.datasets._options import (
    MAX_OPEN_DECODERS,
    ImageDtype,
    StreamOptions,
    parse_bytes,
)
from episodestream.datasets._samples import EpisodeRows, ImageTransform
from episodestream.datasets._waits import result_within
from episodestream.datasets._windows import (
    DEFAULT_DECODE_AHEAD,
    DecodedBudget,
    WindowRun,
    max_window_bytes,
)
from episodestream.datasets._world import detect_rank, detect_slot
from episodestream.decode import DEFAULT_DECODE_THREADS, BackendName, DecodeExecutor
from episodestream.errors import ConfigError, DecodeError, SamplingError
from episodestream.sampling import (
    DEFAULT_SPREAD,
    DEFAULT_WINDOW_FRAMES,
    MAX_COUNT,
    MAX_LOADER_WORKERS,
    MAX_SEED,
    MAX_WORLD_SIZE,
    PoolParams,
    PoolSchedule,
    ResumeState,
    WindowParams,
    WindowSchedule,
    WorkerSlot,
    episodes_digest,
    loader_consumption,
    plan_shards,
    split_budget,
    window_slots,
)
from episodestream.storage import BaseRangeReader, Location

__all__ = ["EpisodePoolDataset"]

logger = logging.getLogger(__name__)

DEFAULT_DECODED_BUDGET = "4GiB"
_BYTE_BUDGET = "8GiB"
PoolUnit = Literal["episode", "window"]
MAX_DECODE_THREADS = Bound("MAX_DECODE_THREADS", 256, "decode threads of one process")
MAX_PENDING_SAMPLES = Bound(
    "MAX_PENDING_SAMPLES", 4096, "samples decoded ahead, each holding its frames"
)
MAX_POOL_EPISODES = Bound(
    "MAX_POOL_EPISODES", 2**20, "episodes a worker holds, or fetches ahead, at once"
)
MAX_WINDOW_FRAMES = Bound("MAX_WINDOW_FRAMES", 2**16, "frames of one decoded window")
_MAX_RANK = Bound("MAX_WORLD_SIZE - 1", MAX_WORLD_SIZE.value - 1, "ranks count from 0")
#: bound on waiting for one decoded sample (decode of one multi-camera sample)
DEFAULT_SAMPLE_TIMEOUT_S = 120.0
_METRICS_WINDOW = 32
#: threads reading Parquet rows ahead (network-bound reads of entering episodes)
_ROWS_THREADS = 2
#: row reads queued per episode the rows cache holds (reads are queued once per episode)
_ROWS_QUEUE_PER_EPISODE = 2


class _PoolMetrics:
    """Counters of one iteration (one process / worker)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = time.perf_counter()
        self.first_sample_s: float | None = None
        self.samples = 0
        self.refill_waits = 0
        self.refill_wait_s = 0.0
        self.episodes_entered = 0
        self.window: list[int] = []
        self.window_unique: list[int] = []
        self.per_episode: collections.Counter[int] = collections.Counter()

    def sample(self, episode: int) -> None:
        with self.lock:
            if self.first_sample_s is None:
                self.first_sample_s = time.perf_counter() - self.started
            self.samples += 1
            self.per_episode[episode] += 1
            self.window.append(episode)
            if len(self.window) == _METRICS_WINDOW:
                self.window_unique.append(len(set(self.window)))
                self.window.clear()

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            elapsed = time.perf_counter() - self.started
            unique = self.window_unique
            counts = list(self.per_episode.values())
            return {
                "samples": self.samples,
                "elapsed_s": elapsed,
                "samples_per_s": self.samples / elapsed if elapsed > 0 else 0.0,
                "time_to_first_sample_s": self.first_sample_s,
                "refill_waits": self.refill_waits,
                "refill_wait_s": self.refill_wait_s,
                "episodes_entered": self.episodes_entered,
                "unique_episodes": len(self.per_episode),
                f"unique_episodes_per_{_METRICS_WINDOW}_mean": float(np.mean(unique))
                if unique
                else None,
                f"unique_episodes_per_{_METRICS_WINDOW}_min": int(min(unique)) if unique else None,
                "samples_per_episode_max": max(counts) if counts else 0,
            }


class _PassThreads:
    """One process's fetch, rows and decode threads and the engine they serve (with its
    decoder-open thread), kept from one pass (epoch) to the next.

    Fresh threads every pass made glibc give each new thread a malloc arena of its own, and
    RSS grew by a few MiB per pass; kept threads keep their arenas, so memory stays flat.
    They belong to the process that started them: a forked child (a DataLoader worker)
    inherits the object but not the threads, and never uses or closes it.
    """

    def __init__(
        self,
        dataset: OpenedDataset,
        options: StreamOptions,
        *,
        byte_budget: int,
        decode_threads: int,
        decode_pending: int,
        rows_pending: int,
    ) -> None:
        #: what the threads were sized for: a pass needing other sizes starts its own
        self.key = (byte_budget, decode_threads, decode_pending, rows_pending)
        self.pid = os.getpid()
        self.engine = StreamEngine(dataset, options, byte_budget=byte_budget)
        decode: DecodeExecutor | None = None
        try:
            decode = DecodeExecutor(
                decode_threads, max_pending=decode_pending, name="episodestream-pool"
            )
            # rows read ahead on threads of their own: a Parquet read over a WAN must not
            # hold a decode thread
            rows = DecodeExecutor(
                _ROWS_THREADS, max_pending=rows_pending, name="episodestream-rows"
            )
        except BaseException:
            if decode is not None:
                decode.close()
            self.engine.close()
            raise
        self.decode, self.rows = decode, rows

    def start_pass(self) -> None:
        """Counters from zero: metrics() reports the pass that starts now."""
        self.engine.cache.reset_metrics()
        self.engine.decoders.reset_stats()

    def close(self) -> None:
        """Join every thread (idempotent); a no-op in a process that did not start them."""
        if os.getpid() != self.pid:
            return
        # the engine first: a pass still running in another thread then fails fast with a
        # typed error (cache or decoder pool closed) instead of waiting on cancelled work
        self.engine.close()
        self.decode.close()
        self.rows.close()


def _close_parked(parked: list[_PassThreads]) -> None:
    """Finalizer of a dataset dropped without close(), also run at interpreter exit."""
    while parked:
        try:
            threads = parked.pop()
        except IndexError:  # emptied by another thread meanwhile
            return
        threads.close()


class EpisodePoolDataset(Closing, LeRobotSurface, torch.utils.data.IterableDataset):
    """Iterable dataset drawing every selected frame exactly once per epoch from a pool of
    resident episodes (see docs/ARCHITECTURE.md, "A sample's way through").

    Episodes are split between ranks (``torch.distributed`` or ``RANK``/``WORLD_SIZE``) and
    then DataLoader workers, balanced by frames; ``byte_budget`` is per rank and is split
    between its workers. Each worker keeps ``pool_size`` episodes resident, draws uniformly
    over the frames left in its pool, prefetches the next ``prefetch_episodes`` entries, and
    decodes on ``decode_threads`` threads (image transforms run there too; 0: in the iterating
    thread, one core per DataLoader worker, for as many workers as cores). Samples equal
    :class:`EpisodeStreamDataset`'s for the same (episode, frame).

    Resume: ``state_dict(samples_consumed=..., num_workers=..., batch_size=...)`` then, in a new
    run, ``load_state_dict(state)`` before iterating: the iteration yields exactly the samples
    the interrupted one had not delivered, in the same order. Call ``set_epoch(e)`` each epoch.

    Threads: an iteration that runs to its end keeps this process's fetch, rows, decode and
    decoder-open threads for the next one (in persistent DataLoader workers too): no epoch
    starts fresh threads, which glibc gave fresh malloc arenas. One ended early (``break``, an
    error) stops them. ``close()`` joins them all, as does dropping the dataset or leaving the
    interpreter.

    ``unit="window"`` (README, "Decoding each frame once") makes the resident unit a window
    of ``window_frames`` consecutive frames of one episode (all cameras), decoded once, in
    order, into uint8 frames held under ``decoded_budget`` (per rank, split between workers
    like ``byte_budget``), and drawn from memory: about one decoded frame per sample instead of
    a seek per sample. ``pool_size`` episodes are then open at once (their compressed bytes in
    the byte cache, their windows interleaved); as many windows as the decoded budget holds
    are resident. Coverage, resume, epochs and samples are as with whole episodes;
    ``metrics()`` reports ``decoded_frames_per_sample`` and unique episodes per batch.
    """

    def __init__(
        self,
        repo_id: str | os.PathLike[str] | Location | None = None,
        root: str | os.PathLike[str] | Location | None = None,
        *,
        pool_size: int = 16,
        prefetch_episodes: int = 8,
        byte_budget: int | str = _BYTE_BUDGET,
        seed: int | None = 0,
        shuffle: bool = True,
        episodes: Sequence[int] | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        decode_threads: int = DEFAULT_DECODE_THREADS,
        max_pending_samples: int | None = None,
        image_dtype: ImageDtype = "float32",
        image_transforms: ImageTransform | None = None,
        decoder: BackendName = "auto",
        device: str = "cpu",
        revision: str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        tolerance_s: float | None = None,
        video_backend: str | None = None,
        return_uint8: bool = False,
        repo_type: str = "dataset",
        depth_output_unit: str | None = None,
        unit: PoolUnit = "episode",
        window_frames: int = DEFAULT_WINDOW_FRAMES,
        decoded_budget: int | str = DEFAULT_DECODED_BUDGET,
        options: StreamOptions | None = None,
        reader: BaseRangeReader | None = None,
        **stream_options: Any,
    ) -> None:
        super().__init__()
        # every argument is checked before anything is opened (no request for a bad one)
        self.unit: PoolUnit = check_choice("unit", unit, ("episode", "window"))
        self.window_frames = check_int(
            "window_frames", window_frames, minimum=1, maximum=MAX_WINDOW_FRAMES
        )
        self.decoded_budget = parse_bytes(decoded_budget, name="decoded_budget")
        # LeRobot's StreamingLeRobotDataset takes seed=None for "unseeded"; the pool's order
        # must be reproducible across ranks and workers, so None means the default seed
        self.params = PoolParams(
            pool_size=pool_size, seed=0 if seed is None else seed, shuffle=shuffle
        )
        for name, value, bound in (
            ("pool_size", self.params.pool_size, MAX_POOL_EPISODES),
            ("seed", self.params.seed, MAX_SEED),
        ):
            if value > bound.value:
                raise SamplingError(f"{name} must be <= {bound}, got {shown(value)}")
        self.prefetch_episodes = check_int(
            "prefetch_episodes", prefetch_episodes, minimum=0, maximum=MAX_POOL_EPISODES
        )
        self.decode_threads = check_int(
            "decode_threads", decode_threads, minimum=0, maximum=MAX_DECODE_THREADS
        )
        self.max_pending_samples = (
            check_int(
                "max_pending_samples",
                max_pending_samples,
                minimum=1,
                maximum=MAX_PENDING_SAMPLES,
            )
            if max_pending_samples is not None
            else 4 * max(self.decode_threads, 1)
        )
        # checked now when given (detected ones are read when iterating: torch.distributed
        # may be initialized after the dataset is made)
        if rank is not None:
            rank = check_int("rank", rank, minimum=0, maximum=_MAX_RANK)
        if world_size is not None:
            world_size = check_int("world_size", world_size, minimum=1, maximum=MAX_WORLD_SIZE)
        if rank is not None and world_size is not None and rank >= world_size:
            raise ConfigError(f"rank must be < world_size ({world_size}), got {rank}")
        selected, image_dtype = check_sample_arguments(
            episodes=episodes,
            delta_timestamps=delta_timestamps,
            image_dtype=image_dtype,
            return_uint8=return_uint8,
            image_transforms=image_transforms,
            depth_output_unit=depth_output_unit,
        )
        self._rank_args = (rank, world_size)
        self.name = resolve_dataset_name(repo_id, root, repo_type=repo_type, reader=reader)
        self.options = dataset_options(
            "EpisodePoolDataset",
            options,
            stream_options,
            revision=revision,
            video_backend=video_backend,
            decoder=decoder,
            device=device,
            byte_budget=byte_budget,
            tolerance_s=tolerance_s,
            default_byte_budget=_BYTE_BUDGET,
        )
        self.dataset, self.samples = open_for_samples(
            self.name.location,
            selected,
            self.options,
            delta_timestamps=delta_timestamps,
            image_dtype=image_dtype,
            image_transforms=image_transforms,
            resident_episodes=self.params.pool_size,
            reader=reader,
        )
        self._describe_for_lerobot(episodes, depth_output_unit)
        try:  # the reader is open: any refusal below must close it
            #: decoded bytes of the largest window (margins included), from info.json's shapes
            self.window_bytes = max_window_bytes(
                self.dataset.meta, self.samples.offsets, self.window_frames
            )
            if self.unit == "window":
                # fail fast: the whole budget must hold two windows (workers split it later)
                window_slots(
                    self.decoded_budget, self.window_bytes, decode_ahead=DEFAULT_DECODE_AHEAD
                )
        except BaseException:
            self.dataset.close()
            raise
        if options is None and "max_open_decoders" not in stream_options:
            # one decoder per resident (and next) episode-camera per decode thread, so random
            # draws across the pool reuse decoders instead of reopening evicted ones
            # (options= given: used as it is)
            cameras = len(self.dataset.meta.video_keys)
            wanted = (self.params.pool_size + 1) * cameras * max(self.decode_threads, 1)
            wanted = min(wanted, MAX_OPEN_DECODERS.value)
            self.options = dataclasses.replace(
                self.options, max_open_decoders=max(self.options.max_open_decoders, wanted)
            )
        # shared with DataLoader workers, so set_epoch reaches persistent workers too
        self._epoch = multiprocessing.get_context().RawValue("q", 0)
        # iterations DataLoader workers started on copies of this dataset (shared likewise):
        # after one, this process's own count says nothing about what the loader delivered
        self._worker_iterations = multiprocessing.get_context().RawValue("q", 0)
        # the worker iterations counted when this process last began iterating itself
        self._worker_iterations_seen = 0
        #: a restored position (load_state_dict), until an iteration of its epoch resumes it
        self._resume: ResumeState | None = None
        self._yielded = 0
        self._yielded_epoch: int | None = None
        self._iterated_workers: int | None = None
        self._metrics: _PoolMetrics | None = None
        # the engine of the pass running in this process (metrics, close from another thread)
        self._engine: StreamEngine | None = None
        self._window_run: WindowRun | None = None
        self._init_threads()

    def _init_threads(self) -> None:
        """Per-process thread state: none yet; a finalizer joins kept threads when this
        dataset is dropped without close() or the interpreter exits."""
        #: threads of the last finished pass, kept for the next one (at most one set)
        self._parked: list[_PassThreads] = []
        #: threads of the pass running now
        self._active: _PassThreads | None = None
        #: close() calls so far: a pass that saw one after it started does not park
        self._closes = 0
        self._guard_lock = threading.Lock()
        self._guard_pid = os.getpid()
        weakref.finalize(self, _close_parked, self._parked)

    def _guard(self) -> threading.Lock:
        """The lock guarding the thread state, fresh in a forked child (where another
        thread of the parent may have held it at the fork)."""
        if self._guard_pid != os.getpid():
            self._guard_lock, self._guard_pid = threading.Lock(), os.getpid()
        return self._guard_lock

    # -- epochs and resume ----------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return int(self._epoch.value)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration draws (also in persistent DataLoader workers)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 0:
            raise SamplingError(f"epoch must be an int >= 0, got {shown(epoch)}")
        if epoch > MAX_COUNT.value:  # the shared counter is an int64
            raise SamplingError(f"epoch must be <= {MAX_COUNT}, got {shown(epoch)}")
        self._epoch.value = int(epoch)

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all its workers together)."""
        rank, world_size = detect_rank(*self._rank_args)
        plan = self._plan(world_size, 1)
        return int(plan.frames_per_rank[rank])

    def _plan(self, world_size: int, num_workers: int):
        return plan_shards(
            self.dataset.episode_ids,
            self.dataset.episode_lengths,
            world_size=world_size,
            num_workers=num_workers,
            seed=self.params.seed,
            epoch=self.epoch,
            shuffle=self.params.shuffle,
        )

    def state_dict(
        self,
        samples_consumed: int | None = None,
        *,
        num_workers: int | None = None,
        batch_size: int = 1,
        drop_last: bool = False,
    ) -> dict[str, Any]:
        """Resume state after ``samples_consumed`` samples of the current epoch.

        Iterating in this process (no DataLoader workers), both default to what was iterated.
        With a ``DataLoader(num_workers=N, batch_size=B)``, pass the samples your loop
        received and the loader's ``num_workers``, ``batch_size`` and ``drop_last``.
        ``samples_consumed`` counts from the start of the epoch, samples received before an
        earlier resume included.

        Called without arguments inside a DataLoader worker (torchdata's
        ``StatefulDataLoader`` does so after each batch), it returns that worker's own
        position; the loader hands it back to the same worker through
        :meth:`load_state_dict`.

        Raises:
            SamplingError: ``samples_consumed`` is not a count such a loader can have
                delivered (not on a batch boundary, or more than the epoch holds), or it is
                missing while DataLoader workers iterated copies of this dataset.
        """
        worker = torch.utils.data.get_worker_info()
        if samples_consumed is None and worker is not None:
            return self._worker_state(worker.id, worker.num_workers)
        if samples_consumed is None:
            if self._worker_iterations.value > self._worker_iterations_seen:
                raise SamplingError(
                    "state_dict() needs samples_consumed= (and num_workers=, batch_size=): "
                    "DataLoader workers iterated copies of this dataset, so this process "
                    "cannot know what the loader delivered"
                )
            if self._resume is not None and self._resume.kind == "rank":
                return self._resume.to_dict()  # restored, not iterated since
            if self._iterated_workers is None:
                samples_consumed, num_workers = 0, num_workers or 1
            else:
                samples_consumed = self._progress()
        if num_workers is None:
            num_workers = self._iterated_workers or 1
        rank, world_size = detect_rank(*self._rank_args)
        # a DataLoader's num_workers=0 iterates in the main process: one slot
        num_workers = max(
            check_int("num_workers", num_workers, minimum=0, maximum=MAX_LOADER_WORKERS), 1
        )
        batch_size = check_int("batch_size", batch_size, minimum=1, maximum=MAX_COUNT)
        drop_last = check_bool("drop_last", drop_last)
        # refuse a count the loader cannot have delivered now, not when resuming later
        loader_consumption(
            samples_consumed,
            worker_totals=self._plan(world_size, num_workers).frames_per_slot[rank],
            batch_size=batch_size,
            drop_last=drop_last,
        )
        return ResumeState(
            kind="rank",
            **self._identity(rank, world_size),
            num_workers=num_workers,
            batch_size=batch_size,
            drop_last=bool(drop_last),
            samples_consumed=samples_consumed,
        ).to_dict()

    def _identity(self, rank: int, world_size: int) -> dict[str, Any]:
        """:class:`ResumeState` fields of this run's order (what makes two runs' orders the
        same), the window ones unset for an episode pool."""
        window = self.unit == "window"
        return {
            "unit": self.unit,
            "window_frames": self.window_frames if window else None,
            "decoded_budget": self.decoded_budget if window else None,
            "window_bytes": self.window_bytes if window else None,
            "window_spread": DEFAULT_SPREAD if window else None,
            "seed": self.params.seed,
            "epoch": self.epoch,
            "pool_size": self.params.pool_size,
            "shuffle": self.params.shuffle,
            "rank": rank,
            "world_size": world_size,
            "episodes_digest": episodes_digest(
                self.dataset.episode_ids, self.dataset.episode_lengths
            ),
        }

    def _progress(self) -> int:
        """Samples of the current epoch this process's iteration has yielded (a restored
        position counts until iteration resumes it)."""
        if self._yielded_epoch == self.epoch:
            return self._yielded
        resume = self._resume
        if resume is not None and resume.epoch == self.epoch:
            worker = resume.kind == "worker"
            return int((resume.samples_yielded if worker else resume.samples_consumed) or 0)
        return 0

    def _worker_state(self, worker: int, num_workers: int) -> dict[str, Any]:
        rank, world_size = detect_rank(*self._rank_args)
        return ResumeState(
            kind="worker",
            **self._identity(rank, world_size),
            num_workers=num_workers,
            worker=worker,
            samples_yielded=self._progress(),
        ).to_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`; the next iteration of its epoch continues it.

        Takes both a rank's state (from ``state_dict(samples_consumed=...)``) and a DataLoader
        worker's own (what ``StatefulDataLoader`` collects and restores per worker).

        Raises:
            SamplingError: the state is malformed or newer than this version reads, or it
                does not resume this dataset's order (seed, pool, ranks, episode set, unit,
                window parameters), naming the field.
        """
        saved = ResumeState.from_dict(state)
        rank, world_size = detect_rank(*self._rank_args)
        # this run's order at the saved kind and position: only the identity is compared
        saved.check_matches(dataclasses.replace(saved, **self._identity(rank, world_size)))
        self._epoch.value = saved.epoch
        self._resume = saved
        # a restored position is a fresh start: earlier iterations here or in workers no
        # longer describe what comes next
        self._yielded_epoch = None
        self._worker_iterations_seen = int(self._worker_iterations.value)

    def _resume_slot(self, slot: WorkerSlot, plan) -> tuple[WorkerSlot, int]:
        """The slot this DataLoader worker plays and the draws it has already delivered
        (:meth:`ResumeState.resume_position`); a fresh start outside the restored epoch."""
        state = self._resume
        if state is None or state.epoch != self.epoch:
            return slot, 0
        return state.resume_position(slot, plan.frames_per_slot[slot.rank])

    # -- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        slot = detect_slot(*self._rank_args)
        plan = self._plan(slot.world_size, slot.num_workers)
        slot, start = self._resume_slot(slot, plan)
        self._resume = None  # applies to one iteration only
        ids = plan.episodes_for(slot)
        counts = plan.frame_counts_for(slot)
        schedule = PoolSchedule(
            ids, counts, params=self.params, slot=slot, epoch=self.epoch, start=start
        )
        in_worker = torch.utils.data.get_worker_info() is not None
        self._iterated_workers = None if in_worker else slot.num_workers
        if in_worker:
            self._worker_iterations.value += 1  # racy increments still leave it > 0
        else:
            self._worker_iterations_seen = int(self._worker_iterations.value)
        self._yielded, self._yielded_epoch = start, self.epoch
        if ids.size == 0:
            return
        budget = split_budget(self.options.byte_budget, slot)
        mine = np.isin(self.dataset.episode_ids, ids)
        mine_dataset = _restrict(self.dataset, mine)
        check_budget(
            mine_dataset,
            budget,
            resident_episodes=min(self.params.pool_size, int(ids.size)),
            what=f"byte_budget share of worker {slot.worker} (rank {slot.rank})",
        )
        rows_capacity = self.params.pool_size + self.prefetch_episodes + 1
        decode_pending = self.max_pending_samples + 1
        windows: tuple[int, int, int] | None = None
        if self.unit == "window":
            share = split_budget(self.decoded_budget, slot)
            resident_windows, ahead = window_slots(
                share, self.window_bytes, decode_ahead=DEFAULT_DECODE_AHEAD
            )
            windows = (share, resident_windows, ahead)
            rows_capacity += resident_windows
            decode_pending = self.max_pending_samples + ahead + 2
        threads, closes = self._start_pass(
            byte_budget=budget,
            decode_pending=decode_pending,
            rows_pending=_ROWS_QUEUE_PER_EPISODE * rows_capacity,
        )
        metrics = _PoolMetrics()
        self._engine, self._metrics, self._window_run = threads.engine, metrics, None
        finished = False
        try:
            if windows is not None:
                yield from self._run_windows(
                    threads, slot, ids, counts, start, metrics, rows_capacity, *windows
                )
            else:
                yield from self._run(threads, schedule, metrics, rows_capacity)
            finished = True
        except CancelledError as error:  # close() cancelled queued work under this pass
            raise DecodeError(
                f"{self.name.location.url}: the dataset was closed while samples were decoded"
            ) from error
        finally:
            self._engine = None
            self._end_pass(threads, closes=closes, finished=finished)

    def _start_pass(
        self, *, byte_budget: int, decode_pending: int, rows_pending: int
    ) -> tuple[_PassThreads, int]:
        """This process's kept threads if sized alike, else fresh ones; and the close count."""
        with self._guard():
            parked = self._parked[:]
            self._parked.clear()
            closes = self._closes
        key = (byte_budget, self.decode_threads, decode_pending, rows_pending)
        kept = None
        for threads in parked:
            if threads.pid != os.getpid():
                continue  # a parent's, inherited by fork: its threads do not exist here
            if kept is None and threads.key == key:
                kept = threads
            else:
                threads.close()
        if kept is None:
            kept = _PassThreads(
                self.dataset,
                self.options,
                byte_budget=byte_budget,
                decode_threads=self.decode_threads,
                decode_pending=decode_pending,
                rows_pending=rows_pending,
            )
        else:
            kept.start_pass()
        with self._guard():
            self._active = kept
        return kept, closes

    def _end_pass(self, threads: _PassThreads, *, closes: int, finished: bool) -> None:
        """Keep the threads of a pass that ran to its end for the next pass; a pass ended
        early (break, error, close) may leave work in flight: its threads stop."""
        with self._guard():
            if self._active is threads:
                self._active = None
            keep = finished and closes == self._closes and not self._parked
            if keep and threads.engine.cache.idle:
                self._parked.append(threads)
                return
        threads.close()

    def _run(
        self,
        threads: _PassThreads,
        schedule: PoolSchedule,
        metrics: _PoolMetrics,
        rows_capacity: int,
    ) -> Iterator[dict[str, Any]]:
        engine = threads.engine
        cache = engine.cache
        # entering and upcoming episodes' Parquet rows are read ahead on their own threads, so
        # a decode thread never waits a network round trip for them
        rows = EpisodeRows(
            engine.rows, self.samples.data_keys, capacity=rows_capacity, executor=threads.rows
        )
        order = schedule.entry_order
        entry_position = {int(e): i for i, e in enumerate(order.tolist())}
        next_entry = 0
        residents: dict[int, Any] = {}
        pending: collections.deque[tuple[str, Any]] = collections.deque()
        timeout = self.options.wait_timeout_s
        has_video = bool(self.samples.video_keys)
        executor = threads.decode

        def build(episode: int, frame: int, resident: Any) -> dict[str, Any]:
            return self.samples.build(episode, frame, rows.get(episode), resident, engine.frames)

        def pop() -> dict[str, Any] | None:
            kind, item = pending.popleft()
            if kind == "leave":  # every sample of the episode is out: close its decoders
                engine.forget(item)
                return None
            episode, frame, future = item
            sample = result_within(
                future,
                DEFAULT_SAMPLE_TIMEOUT_S,
                lambda: DecodeError(
                    f"{self.name.location.url}: episode {episode} frame {frame} was not "
                    f"decoded within {DEFAULT_SAMPLE_TIMEOUT_S:g} s"
                ),
            )
            metrics.sample(episode)
            self._yielded += 1
            return sample

        for event in schedule.events():
            episode = event.episode_id
            if event.kind == "enter":
                metrics.episodes_entered += 1
                cache.retain(episode)
                rows.prefetch(episode)
                if has_video:
                    cache.prefetch(episode, evict=True)  # needed now
                next_entry = max(next_entry, entry_position[episode] + 1)
                for upcoming in order[next_entry : next_entry + self.prefetch_episodes]:
                    if not cache.prefetch(int(upcoming)):
                        break
                    rows.prefetch(int(upcoming))
            elif event.kind == "draw":
                resident = residents.get(episode)
                if resident is None and has_video:
                    if not cache.is_ready(episode):
                        waited = time.perf_counter()
                        resident = cache.wait_ready(episode, timeout=timeout)
                        metrics.refill_waits += 1
                        metrics.refill_wait_s += time.perf_counter() - waited
                    else:
                        resident = cache.wait_ready(episode, timeout=timeout)
                    residents[episode] = resident
                future: Future[dict[str, Any]] = executor.submit(
                    build, episode, event.frame_index, resident
                )
                pending.append(("sample", (episode, event.frame_index, future)))
                while len(pending) > self.max_pending_samples:
                    sample = pop()
                    if sample is not None:
                        yield sample
            else:
                # Unpin at once: the pending samples hold their own reference to the
                # clips, and a pin kept until they drain could starve the budget while
                # this thread blocks in wait_ready for the entering episode (a stall).
                cache.release(episode)
                cache.evict(episode)  # not drawn again this epoch: room for prefetches
                residents.pop(episode, None)
                pending.append(("leave", episode))
        while pending:
            sample = pop()
            if sample is not None:
                yield sample

    def _run_windows(
        self,
        threads: _PassThreads,
        slot: WorkerSlot,
        ids: np.ndarray,
        counts: np.ndarray,
        start: int,
        metrics: _PoolMetrics,
        rows_capacity: int,
        share: int,
        resident_windows: int,
        ahead: int,
    ) -> Iterator[dict[str, Any]]:
        params = WindowParams(
            window_frames=self.window_frames,
            open_episodes=self.params.pool_size,
            resident_windows=resident_windows,
            seed=self.params.seed,
            shuffle=self.params.shuffle,
        )
        schedule = WindowSchedule(
            ids, counts, params=params, slot=slot, epoch=self.epoch, start=start
        )
        rows = EpisodeRows(
            threads.engine.rows,
            self.samples.data_keys,
            capacity=rows_capacity,
            executor=threads.rows,
        )

        def on_sample(episode: int) -> None:
            metrics.sample(episode)
            self._yielded += 1

        run = WindowRun(
            threads.engine,
            self.samples,
            rows,
            schedule,
            budget=DecodedBudget(share),
            executor=threads.decode,
            prefetch_episodes=self.prefetch_episodes,
            decode_ahead=ahead,
            max_pending_samples=self.max_pending_samples,
            wait_timeout_s=self.options.wait_timeout_s,
            on_sample=on_sample,
            episode_lengths=dict(zip(ids.tolist(), counts.tolist(), strict=True)),
        )
        self._window_run = run
        yield from run

    # -- introspection --------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """Counters of the current (or last) iteration in this process."""
        result: dict[str, Any] = {"reader": self.dataset.reader.metrics()}
        if self._metrics is not None:
            result.update(self._metrics.snapshot())
        if self._window_run is not None:
            window = self._window_run.snapshot()
            result["refill_waits"] += window.pop("refill_waits")
            result["refill_wait_s"] += window.pop("refill_wait_s")
            result.update(window)
        engine = self._engine
        if engine is not None:
            result["cache"] = engine.cache.metrics()
            result["decoders"] = engine.decoders.stats()
        return result

    def close(self) -> None:
        """Stop this process's fetch, rows, decode and open threads (those of a pass running now
        and those kept for the next pass) and close its connections."""
        with self._guard():
            self._closes += 1
            stopping = self._parked[:]
            self._parked.clear()
            if self._active is not None:
                stopping.append(self._active)
            self._active = None
        self._engine = None
        for threads in stopping:
            threads.close()  # a no-op for threads a parent process started before a fork
        self.dataset.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_engine"] = None
        state["_metrics"] = None
        state["_window_run"] = None
        for name in ("_parked", "_active", "_closes", "_guard_lock", "_guard_pid"):
            del state[name]  # threads and locks stay in this process
        if multiprocessing.context.get_spawning_popen() is None:
            # pickled for something other than starting a worker: shared memory cannot go
            # there, the epoch and the worker-iteration count travel as values
            state["_epoch"] = self.epoch
            state["_worker_iterations"] = int(self._worker_iterations.value)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name in ("_epoch", "_worker_iterations"):
            if isinstance(state[name], int):
                shared = multiprocessing.get_context().RawValue("q", 0)
                shared.value = state[name]
                state[name] = shared
        self.__dict__.update(state)
        self._init_threads()

    def __repr__(self) -> str:
        return (
            f"EpisodePoolDataset(root={self.dataset.root!r}, episodes="
            f"{len(self.dataset.episode_ids)}, frames={self.dataset.num_frames}, "
            f"pool_size={self.params.pool_size}, epoch={self.epoch}"
            + (
                f", unit='window', window_frames={self.window_frames}, "
                f"decoded_budget={self.decoded_budget})"
                if self.unit == "window"
                else ")"
            )
        )


def _restrict(dataset: OpenedDataset, mask: np.ndarray) -> OpenedDataset:
    from dataclasses import replace

    return replace(
        dataset,
        episode_ids=dataset.episode_ids[mask],
        episode_lengths=dataset.episode_lengths[mask],
        episode_nbytes=dataset.episode_nbytes[mask],
    )

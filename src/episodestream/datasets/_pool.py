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
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
import torch.utils.data

from episodestream._checks import check_choice, check_int
from episodestream.datasets._compat import (
    LeRobotSurface,
    check_depth,
    decoder_for_backend,
    lerobot_meta,
    resolve_dataset_name,
    split_lerobot_args,
)
from episodestream.datasets._engine import (
    OpenedDataset,
    StreamEngine,
    check_budget,
    open_for_samples,
)
from episodestream.datasets._options import ImageDtype, StreamOptions, parse_bytes
from episodestream.datasets._samples import EpisodeRows, ImageTransform
from episodestream.datasets._windows import (
    DEFAULT_DECODE_AHEAD,
    DecodedBudget,
    WindowRun,
    max_window_bytes,
)
from episodestream.datasets._world import detect_rank, detect_slot
from episodestream.decode import BackendName, DecodeExecutor
from episodestream.errors import SamplingError
from episodestream.sampling import (
    DEFAULT_WINDOW_FRAMES,
    PoolParams,
    PoolSchedule,
    WindowParams,
    WindowSchedule,
    WorkerSlot,
    episodes_digest,
    loader_consumption,
    plan_shards,
    split_budget,
    window_slots,
)
from episodestream.storage import Location

__all__ = ["EpisodePoolDataset"]

logger = logging.getLogger(__name__)

POOL_STATE_VERSION = 1
DEFAULT_DECODE_THREADS = 2
DEFAULT_DECODED_BUDGET = "4GiB"
PoolUnit = Literal["episode", "window"]
# resume-state fields a window pool adds: its order depends on them
_WINDOW_STATE_FIELDS = ("window_frames", "decoded_budget", "window_bytes")
#: bound on waiting for one decoded sample (decode of one multi-camera sample)
DEFAULT_SAMPLE_TIMEOUT_S = 120.0
_METRICS_WINDOW = 32
#: threads reading Parquet rows ahead (network-bound reads of entering episodes)
_ROWS_THREADS = 2


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


class EpisodePoolDataset(LeRobotSurface, torch.utils.data.IterableDataset):
    """Iterable dataset drawing every selected frame exactly once per epoch from a pool of
    resident episodes (see DESIGN.md, "Exact-coverage pool").

    Episodes are split between ranks (``torch.distributed`` or ``RANK``/``WORLD_SIZE``) and
    then DataLoader workers, balanced by frames; ``byte_budget`` is per rank and is split
    between its workers. Each worker keeps ``pool_size`` episodes resident, draws uniformly
    over the frames left in its pool, prefetches the next ``prefetch_episodes`` entries, and
    decodes on ``decode_threads`` threads (image transforms run there too). Samples equal
    :class:`EpisodeStreamDataset`'s for the same (episode, frame).

    Resume: ``state_dict(samples_consumed=..., num_workers=..., batch_size=...)`` then, in a new
    run, ``load_state_dict(state)`` before iterating: the iteration yields exactly the samples
    the interrupted one had not delivered, in the same order. Call ``set_epoch(e)`` each epoch.

    ``unit="window"`` (DESIGN.md, "Decode once (window pool)") makes the resident unit a window
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
        byte_budget: int | str = "8GiB",
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
        **options: Any,
    ) -> None:
        super().__init__()
        self.unit: PoolUnit = check_choice("unit", unit, ("episode", "window"))
        self.window_frames = check_int("window_frames", window_frames, minimum=1)
        self.decoded_budget = parse_bytes(decoded_budget, name="decoded_budget")
        options = split_lerobot_args(options, "EpisodePoolDataset")
        if tolerance_s is not None:
            options["tolerance_s"] = tolerance_s
        self.name = resolve_dataset_name(repo_id, root, repo_type=repo_type)
        # LeRobot's StreamingLeRobotDataset takes seed=None for "unseeded"; the pool's order
        # must be reproducible across ranks and workers, so None means the default seed
        self.params = PoolParams(
            pool_size=pool_size, seed=0 if seed is None else seed, shuffle=shuffle
        )
        if isinstance(prefetch_episodes, bool) or not isinstance(prefetch_episodes, int):
            raise SamplingError(f"prefetch_episodes must be an int >= 0, got {prefetch_episodes!r}")
        if prefetch_episodes < 0:
            raise SamplingError(f"prefetch_episodes must be >= 0, got {prefetch_episodes}")
        if isinstance(decode_threads, bool) or not isinstance(decode_threads, int):
            raise SamplingError(f"decode_threads must be an int >= 0, got {decode_threads!r}")
        if decode_threads < 0:
            raise SamplingError(f"decode_threads must be >= 0, got {decode_threads}")
        self.prefetch_episodes = prefetch_episodes
        self.decode_threads = decode_threads
        self.max_pending_samples = (
            max_pending_samples if max_pending_samples is not None else 4 * max(decode_threads, 1)
        )
        if self.max_pending_samples < 1:
            raise SamplingError(f"max_pending_samples must be >= 1, got {max_pending_samples}")
        self._rank_args = (rank, world_size)
        self.options = StreamOptions(
            revision=revision,
            decoder=decoder_for_backend(video_backend, decoder),
            device=device,
            byte_budget=byte_budget,
            **options,
        )
        self.dataset, self.samples = open_for_samples(
            self.name.location,
            episodes,
            self.options,
            delta_timestamps=delta_timestamps,
            image_dtype="uint8" if return_uint8 else image_dtype,
            image_transforms=image_transforms,
            resident_episodes=pool_size,
        )
        # validated by opening: the selection as given, for LeRobot's ``dataset.episodes``
        self._requested_episodes = (
            None if episodes is None else self.dataset.episode_ids.astype(int).tolist()
        )
        try:  # the reader is open: any refusal below must close it
            self._meta = lerobot_meta(self.dataset.meta, self.name, revision)
            check_depth(self._meta, depth_output_unit)
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
        if "max_open_decoders" not in options:
            # one decoder per resident (and next) episode-camera per decode thread, so random
            # draws across the pool reuse decoders instead of reopening evicted ones
            cameras = len(self.dataset.meta.video_keys)
            wanted = (pool_size + 1) * cameras * max(decode_threads, 1)
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
        self._resume: dict[str, Any] | None = None
        self._yielded = 0
        self._yielded_epoch: int | None = None
        self._iterated_workers: int | None = None
        self._metrics: _PoolMetrics | None = None
        self._engine: StreamEngine | None = None
        self._window_run: WindowRun | None = None

    # -- epochs and resume ----------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return int(self._epoch.value)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration draws (also in persistent DataLoader workers)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise SamplingError(f"epoch must be an int >= 0, got {epoch!r}")
        self._epoch.value = epoch

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
            if self._resume is not None and self._resume.get("kind", "rank") == "rank":
                return dict(self._resume)  # restored, not iterated since
            if self._iterated_workers is None:
                samples_consumed, num_workers = 0, num_workers or 1
            else:
                samples_consumed = self._progress()
        if num_workers is None:
            num_workers = self._iterated_workers or 1
        rank, world_size = detect_rank(*self._rank_args)
        num_workers = max(int(num_workers), 1)
        # refuse a count the loader cannot have delivered now, not when resuming later
        loader_consumption(
            samples_consumed,
            worker_totals=self._plan(world_size, num_workers).frames_per_slot[rank],
            batch_size=batch_size,
            drop_last=drop_last,
        )
        return {
            **self._identity(rank, world_size),
            "kind": "rank",
            "num_workers": num_workers,
            "batch_size": int(batch_size),
            "drop_last": bool(drop_last),
            "samples_consumed": int(samples_consumed),
        }

    def _identity(self, rank: int, world_size: int) -> dict[str, Any]:
        """The fields every resume state carries: what makes two runs' orders the same."""
        window = (
            {
                "unit": "window",
                "window_frames": self.window_frames,
                "decoded_budget": self.decoded_budget,
                "window_bytes": self.window_bytes,
            }
            if self.unit == "window"
            else {}
        )
        return {
            **window,
            "version": POOL_STATE_VERSION,
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
        if self._resume is not None and self._resume["epoch"] == self.epoch:
            key = "samples_yielded" if self._resume.get("kind") == "worker" else "samples_consumed"
            return int(self._resume[key])
        return 0

    def _worker_state(self, worker: int, num_workers: int) -> dict[str, Any]:
        rank, world_size = detect_rank(*self._rank_args)
        return {
            **self._identity(rank, world_size),
            "kind": "worker",
            "worker": int(worker),
            "num_workers": int(num_workers),
            "samples_yielded": self._progress(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`; the next iteration of its epoch continues it.

        Takes both a rank's state (from ``state_dict(samples_consumed=...)``) and a DataLoader
        worker's own (what ``StatefulDataLoader`` collects and restores per worker)."""
        kind = state.get("kind", "rank") if isinstance(state, Mapping) else None
        if kind not in ("rank", "worker"):
            raise SamplingError(f"resume state kind {kind!r} is not 'rank' or 'worker'")
        required = (
            "version",
            "seed",
            "epoch",
            "pool_size",
            "shuffle",
            "rank",
            "world_size",
            "num_workers",
            "episodes_digest",
        ) + (
            ("batch_size", "drop_last", "samples_consumed")
            if kind == "rank"
            else ("worker", "samples_yielded")
        )
        missing = [name for name in required if name not in state]
        if missing:
            raise SamplingError(f"resume state lacks field(s) {missing}")
        if state["version"] > POOL_STATE_VERSION:
            raise SamplingError(
                f"resume state version {state['version']} is newer than {POOL_STATE_VERSION}"
            )
        rank, world_size = detect_rank(*self._rank_args)
        expected = self._identity(rank, world_size)
        if state.get("unit", "episode") != self.unit:
            raise SamplingError(
                f"resume state unit={state.get('unit', 'episode')!r} does not match this run's "
                f"{self.unit!r}"
            )
        window_fields = _WINDOW_STATE_FIELDS if self.unit == "window" else ()
        for name in (
            "seed",
            "pool_size",
            "shuffle",
            "rank",
            "world_size",
            "episodes_digest",
            *window_fields,
        ):
            if state[name] != expected[name]:
                raise SamplingError(
                    f"resume state {name}={state[name]!r} does not match this run's "
                    f"{expected[name]!r}"
                    + (" (the episode set differs)" if name == "episodes_digest" else "")
                )
        self._epoch.value = int(state["epoch"])
        self._resume = dict(state)
        # a restored position is a fresh start: earlier iterations here or in workers no
        # longer describe what comes next
        self._yielded_epoch = None
        self._worker_iterations_seen = int(self._worker_iterations.value)

    def _resume_slot(self, slot: WorkerSlot, plan) -> tuple[WorkerSlot, int]:
        """The slot this DataLoader worker plays and the draws it has already delivered.

        A fresh DataLoader polls worker 0 first, while the interrupted one would next have
        polled some worker ``w``; so on resume DataLoader worker ``d`` plays worker
        ``(d + w) % N`` of the saved run, and the batches come out in the original order.
        """
        state = self._resume
        if state is None or state["epoch"] != self.epoch:
            return slot, 0
        if state.get("kind") == "worker":
            if (state["worker"], state["num_workers"]) != (slot.worker, slot.num_workers):
                raise SamplingError(
                    f"resume state of DataLoader worker {state['worker']} of "
                    f"{state['num_workers']} was handed to worker {slot.worker} of "
                    f"{slot.num_workers}"
                )
            return slot, int(state["samples_yielded"])
        if state["num_workers"] != slot.num_workers:
            raise SamplingError(
                f"resume state num_workers={state['num_workers']} does not match this "
                f"DataLoader's {slot.num_workers}"
            )
        totals = plan.frames_per_slot[slot.rank]
        consumed = loader_consumption(
            state["samples_consumed"],
            worker_totals=totals,
            batch_size=state["batch_size"],
            drop_last=state["drop_last"],
        )
        first = _next_worker(consumed, totals, state["batch_size"], state["drop_last"])
        worker = (slot.worker + first) % slot.num_workers
        return slot.with_worker(worker, slot.num_workers), int(consumed[worker])

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
        engine = StreamEngine(self.dataset, self.options, byte_budget=budget)
        metrics = _PoolMetrics()
        self._engine, self._metrics, self._window_run = engine, metrics, None
        try:
            if self.unit == "window":
                yield from self._run_windows(engine, slot, ids, counts, start, metrics)
            else:
                yield from self._run(engine, schedule, metrics)
        finally:
            engine.close()
            self._engine = None

    def _run(
        self, engine: StreamEngine, schedule: PoolSchedule, metrics: _PoolMetrics
    ) -> Iterator[dict[str, Any]]:
        cache = engine.cache
        # entering and upcoming episodes' Parquet rows are read ahead on their own threads, so
        # a decode thread never waits a network round trip for them
        rows_executor = ThreadPoolExecutor(
            max_workers=_ROWS_THREADS, thread_name_prefix="episodestream-rows"
        )
        rows = EpisodeRows(
            engine.rows,
            self.samples.data_keys,
            capacity=self.params.pool_size + self.prefetch_episodes + 1,
            executor=rows_executor,
        )
        order = schedule.entry_order
        entry_position = {int(e): i for i, e in enumerate(order.tolist())}
        next_entry = 0
        residents: dict[int, Any] = {}
        pending: collections.deque[tuple[str, Any]] = collections.deque()
        timeout = self.options.wait_timeout_s
        has_video = bool(self.samples.video_keys)
        executor = DecodeExecutor(
            self.decode_threads, max_pending=self.max_pending_samples + 1, name="episodestream-pool"
        )

        def build(episode: int, frame: int, resident: Any) -> dict[str, Any]:
            return self.samples.build(episode, frame, rows.get(episode), resident, engine.frames)

        def pop() -> dict[str, Any] | None:
            kind, item = pending.popleft()
            if kind == "leave":  # every sample of the episode is out: close its decoders
                engine.forget(item)
                return None
            episode, future = item
            sample = future.result(timeout=DEFAULT_SAMPLE_TIMEOUT_S)
            metrics.sample(episode)
            self._yielded += 1
            return sample

        try:
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
                    pending.append(("sample", (episode, future)))
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
        finally:
            executor.close()
            rows_executor.shutdown(wait=True, cancel_futures=True)

    def _run_windows(
        self,
        engine: StreamEngine,
        slot: WorkerSlot,
        ids: np.ndarray,
        counts: np.ndarray,
        start: int,
        metrics: _PoolMetrics,
    ) -> Iterator[dict[str, Any]]:
        share = split_budget(self.decoded_budget, slot)
        resident_windows, ahead = window_slots(
            share, self.window_bytes, decode_ahead=DEFAULT_DECODE_AHEAD
        )
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
        rows_executor = ThreadPoolExecutor(
            max_workers=_ROWS_THREADS, thread_name_prefix="episodestream-rows"
        )
        rows = EpisodeRows(
            engine.rows,
            self.samples.data_keys,
            capacity=self.params.pool_size + self.prefetch_episodes + resident_windows + 1,
            executor=rows_executor,
        )
        executor = DecodeExecutor(
            self.decode_threads,
            max_pending=self.max_pending_samples + ahead + 2,
            name="episodestream-pool",
        )

        def on_sample(episode: int) -> None:
            metrics.sample(episode)
            self._yielded += 1

        run = WindowRun(
            engine,
            self.samples,
            rows,
            schedule,
            budget=DecodedBudget(share),
            executor=executor,
            prefetch_episodes=self.prefetch_episodes,
            decode_ahead=ahead,
            max_pending_samples=self.max_pending_samples,
            wait_timeout_s=self.options.wait_timeout_s,
            on_sample=on_sample,
            episode_lengths=dict(zip(ids.tolist(), counts.tolist(), strict=True)),
        )
        self._window_run = run
        try:
            yield from run
        finally:
            executor.close()
            rows_executor.shutdown(wait=True, cancel_futures=True)

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
        """Stop this process's fetch and decode threads and close its connections."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()
        self.dataset.close()

    def __enter__(self) -> EpisodePoolDataset:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_engine"] = None
        state["_metrics"] = None
        state["_window_run"] = None
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


def _next_worker(consumed: np.ndarray, totals: np.ndarray, batch_size: int, drop_last: bool) -> int:
    """The worker a DataLoader polls next after delivering ``consumed`` samples per worker.

    It takes one batch from each unfinished worker in turn (round-major), so the next batch
    belongs to the unfinished worker with the fewest batches delivered, lowest id first.
    """
    delivered = totals // batch_size * batch_size if drop_last else totals
    unfinished = np.flatnonzero(consumed < delivered)
    if unfinished.size == 0:
        return 0
    batches = -(-consumed[unfinished] // batch_size)
    return int(unfinished[np.lexsort((unfinished, batches))[0]])


def _restrict(dataset: OpenedDataset, mask: np.ndarray) -> OpenedDataset:
    from dataclasses import replace

    return replace(
        dataset,
        episode_ids=dataset.episode_ids[mask],
        episode_lengths=dataset.episode_lengths[mask],
        episode_nbytes=dataset.episode_nbytes[mask],
    )

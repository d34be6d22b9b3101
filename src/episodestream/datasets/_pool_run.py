"""The pool's run loops: one pass of whole episodes (:func:`run_episodes`) or of windows
(:func:`window_run`), each yielding one worker's samples in its schedule's order."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from episodestream.datasets._engine import OpenedDataset, check_budget, restrict
from episodestream.datasets._groups import Order, Resources
from episodestream.datasets._pool_progress import PoolMetrics
from episodestream.datasets._pool_threads import PassThreads
from episodestream.datasets._samples import EpisodeRows, SampleBuilder
from episodestream.datasets._waits import result_within
from episodestream.datasets._windows import DEFAULT_DECODE_AHEAD, DecodedBudget, WindowRun
from episodestream.errors import DecodeError
from episodestream.sampling import (
    PoolSchedule,
    WindowParams,
    WindowSchedule,
    WorkerSlot,
    split_budget,
    window_slots,
)

__all__ = ["PassSizes", "RunSettings", "pass_sizes", "run_episodes", "window_run"]

#: row reads queued per episode the rows cache holds (reads are queued once per episode)
ROWS_QUEUE_PER_EPISODE = 2


@dataclass(frozen=True, slots=True)
class PassSizes:
    """What one worker's pass may hold, from its share of the rank's budgets.

    Attributes:
        byte_budget: this worker's share of ``byte_budget``.
        rows_capacity: episodes whose Parquet rows are kept.
        decode_pending: samples queued for the decode threads.
        rows_pending: row reads queued for the rows threads.
        windows: for ``unit="window"``, (decoded-budget share, resident windows, windows
            decoded ahead); None for whole episodes.
    """

    byte_budget: int
    rows_capacity: int
    decode_pending: int
    rows_pending: int
    windows: tuple[int, int, int] | None


def pass_sizes(
    dataset: OpenedDataset,
    ids: np.ndarray,
    slot: WorkerSlot,
    resources: Resources,
    order: Order,
    *,
    window_bytes: int,
) -> PassSizes:
    """The sizes of ``slot``'s pass over episodes ``ids``; refuses a budget share that cannot
    hold the worker's pool (:func:`~episodestream.datasets._engine.check_budget`)."""
    budget = split_budget(resources.byte_budget, slot)
    check_budget(
        restrict(dataset, np.isin(dataset.episode_ids, ids)),
        budget,
        resident_episodes=min(order.pool_size, int(ids.size)),
        what=f"byte_budget share of worker {slot.worker} (rank {slot.rank})",
    )
    pending = resources.pending_samples
    rows_capacity = order.pool_size + resources.prefetch_episodes + 1
    decode_pending = pending + 1
    windows: tuple[int, int, int] | None = None
    if order.unit == "window":
        share = split_budget(resources.decoded_budget, slot)
        resident_windows, ahead = window_slots(
            share, window_bytes, decode_ahead=DEFAULT_DECODE_AHEAD
        )
        windows = (share, resident_windows, ahead)
        rows_capacity += resident_windows
        decode_pending = pending + ahead + 2
    return PassSizes(
        budget, rows_capacity, decode_pending, ROWS_QUEUE_PER_EPISODE * rows_capacity, windows
    )


class RunSettings:
    """What a pass needs besides its threads and schedule (checked values, from the groups).

    Attributes:
        samples: the sample builder.
        url: the dataset's root, for messages.
        prefetch_episodes, max_pending_samples, wait_timeout_s: from ``Resources``.
        sample_timeout_s: bound on waiting for one decoded sample.
        rows_capacity: episodes whose Parquet rows are kept.
        on_sample: called with the episode of each sample yielded (metrics, position).
    """

    def __init__(
        self,
        *,
        samples: SampleBuilder,
        url: str,
        prefetch_episodes: int,
        max_pending_samples: int,
        wait_timeout_s: float,
        sample_timeout_s: float,
        rows_capacity: int,
        on_sample: Callable[[int], None],
    ) -> None:
        self.samples = samples
        self.url = url
        self.prefetch_episodes = prefetch_episodes
        self.max_pending_samples = max_pending_samples
        self.wait_timeout_s = wait_timeout_s
        self.sample_timeout_s = sample_timeout_s
        self.rows_capacity = rows_capacity
        self.on_sample = on_sample


def run_episodes(
    threads: PassThreads,
    schedule: PoolSchedule,
    metrics: PoolMetrics,
    settings: RunSettings,
) -> Iterator[dict[str, Any]]:
    """One pass of whole resident episodes: enter, draw and leave events of ``schedule``."""
    engine = threads.engine
    cache = engine.cache
    samples = settings.samples
    # entering and upcoming episodes' Parquet rows are read ahead on their own threads, so
    # a decode thread never waits a network round trip for them
    rows = EpisodeRows(
        engine.rows, samples.data_keys, capacity=settings.rows_capacity, executor=threads.rows
    )
    order = schedule.entry_order
    entry_position = {int(e): i for i, e in enumerate(order.tolist())}
    next_entry = 0
    residents: dict[int, Any] = {}
    pending: collections.deque[tuple[str, Any]] = collections.deque()
    timeout = settings.wait_timeout_s
    sample_timeout = settings.sample_timeout_s
    has_video = bool(samples.video_keys)
    executor = threads.decode

    def build(episode: int, frame: int, resident: Any) -> dict[str, Any]:
        return samples.build(episode, frame, rows.get(episode), resident, engine.frames)

    def pop() -> dict[str, Any] | None:
        kind, item = pending.popleft()
        if kind == "leave":  # every sample of the episode is out: close its decoders
            engine.forget(item)
            return None
        episode, frame, future = item
        sample = result_within(
            future,
            sample_timeout,
            lambda: DecodeError(
                f"{settings.url}: episode {episode} frame {frame} was not "
                f"decoded within {sample_timeout:g} s"
            ),
        )
        settings.on_sample(episode)
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
            for upcoming in order[next_entry : next_entry + settings.prefetch_episodes]:
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
            while len(pending) > settings.max_pending_samples:
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


def window_run(
    threads: PassThreads,
    ids: np.ndarray,
    counts: np.ndarray,
    order: Order,
    slot: WorkerSlot,
    *,
    epoch: int,
    start: int,
    settings: RunSettings,
    windows: tuple[int, int, int],
) -> WindowRun:
    """One pass of windows (``unit="window"``), ready to iterate."""
    share, resident_windows, ahead = windows
    params = WindowParams(
        window_frames=order.window_frames,
        open_episodes=order.pool_size,
        resident_windows=resident_windows,
        seed=order.seed,
        shuffle=order.shuffle,
    )
    schedule = WindowSchedule(ids, counts, params=params, slot=slot, epoch=epoch, start=start)
    rows = EpisodeRows(
        threads.engine.rows,
        settings.samples.data_keys,
        capacity=settings.rows_capacity,
        executor=threads.rows,
    )
    return WindowRun(
        threads.engine,
        settings.samples,
        rows,
        schedule,
        budget=DecodedBudget(share),
        executor=threads.decode,
        prefetch_episodes=settings.prefetch_episodes,
        decode_ahead=ahead,
        max_pending_samples=settings.max_pending_samples,
        wait_timeout_s=settings.wait_timeout_s,
        on_sample=settings.on_sample,
        episode_lengths=dict(zip(ids.tolist(), counts.tolist(), strict=True)),
    )

"""The pool's epoch and resume bookkeeping: the epoch shared with DataLoader workers, what an
iteration has yielded, and the resume states ``state_dict``/``load_state_dict`` exchange."""

from __future__ import annotations

import dataclasses
import multiprocessing
import multiprocessing.context
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from episodestream._checks import check_int, shown
from episodestream.datasets._groups import check_bool
from episodestream.errors import SamplingError
from episodestream.sampling import (
    MAX_COUNT,
    MAX_LOADER_WORKERS,
    ResumeState,
    WorkerSlot,
    loader_consumption,
)

__all__ = ["PoolPosition"]

#: ``(rank, world_size) -> ResumeState fields`` of a run's order (what makes two runs' orders
#: the same)
Identity = Callable[[int, int], dict[str, Any]]
#: ``(world_size, num_workers) -> frames per slot of each rank`` (a ShardPlan's
#: ``frames_per_slot``) at the current epoch
FramesPerSlot = Callable[[int, int], Any]


class PoolPosition:
    """Where a pool dataset stands: its epoch, what its iteration here has yielded, and a
    restored position waiting for the iteration of its epoch.

    The epoch and the count of iterations DataLoader workers started are shared memory, so
    ``set_epoch`` reaches persistent workers and this process can tell that workers iterated
    copies of the dataset. Pickled for something other than starting a worker, they travel as
    values.
    """

    def __init__(self) -> None:
        # shared with DataLoader workers, so set_epoch reaches persistent workers too
        self._epoch = multiprocessing.get_context().RawValue("q", 0)
        # iterations DataLoader workers started on copies of this dataset (shared likewise):
        # after one, this process's own count says nothing about what the loader delivered
        self._worker_iterations = multiprocessing.get_context().RawValue("q", 0)
        # the worker iterations counted when this process last began iterating itself
        self._worker_iterations_seen = 0
        #: a restored position (load_state_dict), until an iteration of its epoch resumes it
        self.resume: ResumeState | None = None
        self.yielded = 0
        self.yielded_epoch: int | None = None
        self.iterated_workers: int | None = None

    # -- epochs ---------------------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return int(self._epoch.value)

    def set_epoch(self, epoch: int) -> None:
        if isinstance(epoch, bool) or not isinstance(epoch, int | np.integer) or epoch < 0:
            raise SamplingError(f"epoch must be an int >= 0, got {shown(epoch)}")
        if epoch > MAX_COUNT.value:  # the shared counter is an int64
            raise SamplingError(f"epoch must be <= {MAX_COUNT}, got {shown(epoch)}")
        self._epoch.value = int(epoch)

    # -- an iteration ---------------------------------------------------------------------------

    def begin(
        self, slot: WorkerSlot, frames_per_rank_slot: Any, *, in_worker: bool
    ) -> tuple[WorkerSlot, int]:
        """An iteration starts in ``slot``: the slot it plays and the draws already delivered
        (a restored position of this epoch resumes; it applies to one iteration only)."""
        state = self.resume
        start = 0
        if state is not None and state.epoch == self.epoch:
            slot, start = state.resume_position(slot, frames_per_rank_slot)
        self.resume = None
        self.iterated_workers = None if in_worker else slot.num_workers
        if in_worker:
            self._worker_iterations.value += 1  # racy increments still leave it > 0
        else:
            self._worker_iterations_seen = int(self._worker_iterations.value)
        self.yielded, self.yielded_epoch = start, self.epoch
        return slot, start

    def delivered(self) -> None:
        """One more sample yielded."""
        self.yielded += 1

    def progress(self) -> int:
        """Samples of the current epoch this process's iteration has yielded (a restored
        position counts until iteration resumes it)."""
        if self.yielded_epoch == self.epoch:
            return self.yielded
        resume = self.resume
        if resume is not None and resume.epoch == self.epoch:
            worker = resume.kind == "worker"
            return int((resume.samples_yielded if worker else resume.samples_consumed) or 0)
        return 0

    # -- resume states --------------------------------------------------------------------------

    def state_dict(
        self,
        identity: Identity,
        frames_per_slot: FramesPerSlot,
        rank_and_world: tuple[int, int],
        worker: Any,
        *,
        samples_consumed: int | None,
        num_workers: int | None,
        batch_size: int,
        drop_last: bool,
    ) -> dict[str, Any]:
        """``EpisodePoolDataset.state_dict`` (which documents it); ``worker`` is the
        DataLoader worker info of the calling process (None outside one)."""
        if samples_consumed is None and worker is not None:
            return self.worker_state(identity, rank_and_world, worker.id, worker.num_workers)
        if samples_consumed is None:
            if self._worker_iterations.value > self._worker_iterations_seen:
                raise SamplingError(
                    "state_dict() needs samples_consumed= (and num_workers=, batch_size=): "
                    "DataLoader workers iterated copies of this dataset, so this process "
                    "cannot know what the loader delivered"
                )
            if self.resume is not None and self.resume.kind == "rank":
                return self.resume.to_dict()  # restored, not iterated since
            if self.iterated_workers is None:
                samples_consumed, num_workers = 0, num_workers or 1
            else:
                samples_consumed = self.progress()
        if num_workers is None:
            num_workers = self.iterated_workers or 1
        rank, world_size = rank_and_world
        # a DataLoader's num_workers=0 iterates in the main process: one slot
        num_workers = max(
            check_int("num_workers", num_workers, minimum=0, maximum=MAX_LOADER_WORKERS), 1
        )
        batch_size = check_int("batch_size", batch_size, minimum=1, maximum=MAX_COUNT)
        drop_last = check_bool("drop_last", drop_last)
        # refuse a count the loader cannot have delivered now, not when resuming later
        loader_consumption(
            samples_consumed,
            worker_totals=frames_per_slot(world_size, num_workers)[rank],
            batch_size=batch_size,
            drop_last=drop_last,
        )
        return ResumeState(
            kind="rank",
            **identity(rank, world_size),
            num_workers=num_workers,
            batch_size=batch_size,
            drop_last=bool(drop_last),
            samples_consumed=samples_consumed,
        ).to_dict()

    def worker_state(
        self, identity: Identity, rank_and_world: tuple[int, int], worker: int, num_workers: int
    ) -> dict[str, Any]:
        return ResumeState(
            kind="worker",
            **identity(*rank_and_world),
            num_workers=num_workers,
            worker=worker,
            samples_yielded=self.progress(),
        ).to_dict()

    def load_state_dict(
        self, state: Mapping[str, Any], identity: Identity, rank_and_world: tuple[int, int]
    ) -> None:
        """``EpisodePoolDataset.load_state_dict`` (which documents it)."""
        saved = ResumeState.from_dict(state)
        # this run's order at the saved kind and position: only the identity is compared
        saved.check_matches(dataclasses.replace(saved, **identity(*rank_and_world)))
        self._epoch.value = saved.epoch
        self.resume = saved
        # a restored position is a fresh start: earlier iterations here or in workers no
        # longer describe what comes next
        self.yielded_epoch = None
        self._worker_iterations_seen = int(self._worker_iterations.value)

    # -- pickling -------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
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

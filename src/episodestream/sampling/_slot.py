"""Who am I in the job: one DataLoader worker of one rank, as a plain validated value.

Detection from torch.distributed, environment variables or ``get_worker_info()`` belongs to
the datasets layer; here a ``WorkerSlot`` is built from plain ints (``num_workers=0`` in a
DataLoader is ``worker=0, num_workers=1`` here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from episodestream.errors import SamplingError
from episodestream.sampling._validate import require_int

__all__ = ["WorkerSlot", "split_budget"]


@dataclass(frozen=True, slots=True)
class WorkerSlot:
    """One reading process: DataLoader ``worker`` of ``num_workers`` on ``rank`` of ``world_size``.

    Attributes:
        rank: this process's rank, in ``[0, world_size)``.
        world_size: number of ranks (>= 1).
        worker: DataLoader worker id, in ``[0, num_workers)``.
        num_workers: DataLoader workers per rank (>= 1; a loader with 0 workers counts as 1).
    """

    rank: int = 0
    world_size: int = 1
    worker: int = 0
    num_workers: int = 1

    def __post_init__(self) -> None:
        world_size = require_int("world_size", self.world_size, minimum=1)
        num_workers = require_int("num_workers", self.num_workers, minimum=1)
        rank = require_int("rank", self.rank, minimum=0)
        worker = require_int("worker", self.worker, minimum=0)
        if rank >= world_size:
            raise SamplingError(f"rank must be < world_size={world_size}, got {rank}")
        if worker >= num_workers:
            raise SamplingError(f"worker must be < num_workers={num_workers}, got {worker}")
        for name, value in (
            ("rank", rank),
            ("world_size", world_size),
            ("worker", worker),
            ("num_workers", num_workers),
        ):
            object.__setattr__(self, name, value)

    @property
    def global_index(self) -> int:
        """Index of this slot among all ``count`` slots (rank-major)."""
        return self.rank * self.num_workers + self.worker

    @property
    def count(self) -> int:
        """Number of slots in the job: ``world_size * num_workers``."""
        return self.world_size * self.num_workers

    def with_worker(self, worker: int, num_workers: int) -> WorkerSlot:
        """The same rank seen from DataLoader worker ``worker`` of ``num_workers``."""
        return WorkerSlot(self.rank, self.world_size, worker, num_workers)


def split_budget(
    total_bytes: int, slot: WorkerSlot, *, across: Literal["workers", "all"] = "workers"
) -> int:
    """This slot's share of a byte budget.

    Args:
        total_bytes: the budget to divide.
        slot: the slot asking.
        across: ``"workers"`` when ``total_bytes`` belongs to this rank and is divided among
            its ``num_workers``; ``"all"`` when it belongs to the whole job and is divided among
            all ``world_size * num_workers`` slots.

    Returns:
        The share in bytes; shares of all slots sum to ``total_bytes`` exactly (the remainder
        goes one byte each to the lowest-indexed slots).

    Raises:
        SamplingError: ``total_bytes`` negative or smaller than the number of shares.
    """
    total = require_int("total_bytes", total_bytes, minimum=0)
    if across == "workers":
        shares, index = slot.num_workers, slot.worker
    elif across == "all":
        shares, index = slot.count, slot.global_index
    else:
        raise SamplingError(f"across must be 'workers' or 'all', got {across!r}")
    if total < shares:
        raise SamplingError(f"total_bytes={total} cannot be split into {shares} shares")
    base, remainder = divmod(total, shares)
    return base + (1 if index < remainder else 0)

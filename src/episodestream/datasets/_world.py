"""Where this iterator runs: rank/world size (torch.distributed or env) and DataLoader worker."""

from __future__ import annotations

import os

import torch.distributed
import torch.utils.data

from episodestream.sampling import WorkerSlot

__all__ = ["detect_rank", "detect_slot"]


def detect_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Explicit values win; then an initialized ``torch.distributed``; then ``RANK`` and
    ``WORLD_SIZE`` (as torchrun sets them); else a single process."""
    if rank is not None and world_size is not None:
        return rank, world_size
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        detected = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        detected = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    return (
        detected[0] if rank is None else rank,
        detected[1] if world_size is None else world_size,
    )


def detect_slot(rank: int | None = None, world_size: int | None = None) -> WorkerSlot:
    """The (rank, worker) slot of the calling process and DataLoader worker."""
    rank, world_size = detect_rank(rank, world_size)
    info = torch.utils.data.get_worker_info()
    worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
    return WorkerSlot(rank=rank, world_size=world_size, worker=worker, num_workers=num_workers)

"""Where this iterator runs: rank/world size (torch.distributed or env) and DataLoader worker."""

from __future__ import annotations

import os

import torch.distributed
import torch.utils.data

from episodestream._checks import shown
from episodestream.errors import ConfigError
from episodestream.sampling import MAX_WORLD_SIZE, WorkerSlot

__all__ = ["detect_rank", "detect_slot"]


def detect_rank(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """Explicit values win; then an initialized ``torch.distributed``; then ``RANK`` and
    ``WORLD_SIZE`` (as torchrun sets them); else a single process."""
    if rank is not None and world_size is not None:
        return rank, world_size
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        detected = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        detected = _from_environment("RANK", 0), _from_environment("WORLD_SIZE", 1)
    return (
        detected[0] if rank is None else rank,
        detected[1] if world_size is None else world_size,
    )


def _from_environment(name: str, default: int) -> int:
    """``RANK`` or ``WORLD_SIZE`` as torchrun sets them: a small non-negative int."""
    text = os.environ.get(name)
    if text is None:
        return default
    value = text.strip()
    # a rank is below the world size, a world size at most MAX_WORLD_SIZE
    largest = MAX_WORLD_SIZE.value - (name == "RANK")
    digits = value.isascii() and value.isdigit() and len(value) <= len(str(largest))
    if not digits or int(value) > largest or (name == "WORLD_SIZE" and int(value) < 1):
        raise ConfigError(
            f"environment variable {name}={shown(text)} is not a {name.lower().replace('_', ' ')}"
            f" (an int {'>= 0' if name == 'RANK' else '>= 1'}, at most {largest}: "
            f"{MAX_WORLD_SIZE.name})"
        )
    return int(value)


def detect_slot(rank: int | None = None, world_size: int | None = None) -> WorkerSlot:
    """The (rank, worker) slot of the calling process and DataLoader worker."""
    rank, world_size = detect_rank(rank, world_size)
    info = torch.utils.data.get_worker_info()
    worker, num_workers = (0, 1) if info is None else (info.id, info.num_workers)
    return WorkerSlot(rank=rank, world_size=world_size, worker=worker, num_workers=num_workers)

"""How many samples each DataLoader worker has delivered after the consumer saw ``n``.

``torch.utils.data.DataLoader`` over an ``IterableDataset`` (``in_order=True``) takes one batch
from each worker in turn, skipping workers that are exhausted; each worker batches its own
stream, so only its last batch may be short (or dropped with ``drop_last``). Knowing this the
main process can rebuild every worker's resume position from a single sample count.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from episodestream.errors import SamplingError
from episodestream.sampling._arguments import MAX_COUNT
from episodestream.sampling._validate import require_int

__all__ = ["loader_consumption"]


def loader_consumption(
    samples_consumed: int,
    *,
    worker_totals: ArrayLike,
    batch_size: int = 1,
    drop_last: bool = False,
) -> np.ndarray:
    """Samples taken from each worker once ``samples_consumed`` samples left the DataLoader.

    Args:
        samples_consumed: samples the consumer received (a whole number of batches).
        worker_totals: samples each worker yields in the epoch, indexed by worker id.
        batch_size: the DataLoader's batch size (1 also models ``batch_size=None``).
        drop_last: the DataLoader's ``drop_last``.

    Returns:
        int64 array, samples consumed per worker (dropped tails are not counted).

    Raises:
        SamplingError: ``samples_consumed`` is not on a batch boundary or exceeds the epoch.
    """
    consumed = require_int("samples_consumed", samples_consumed, minimum=0, maximum=MAX_COUNT)
    batch_size = require_int("batch_size", batch_size, minimum=1, maximum=MAX_COUNT)
    totals = np.asarray(worker_totals)
    if totals.ndim != 1 or totals.size == 0 or not np.issubdtype(totals.dtype, np.integer):
        raise SamplingError(f"worker_totals must be a non-empty list of ints, got {totals!r}")
    if int(totals.min()) < 0:
        raise SamplingError(f"worker_totals must be >= 0, got {totals.tolist()}")
    totals = totals.astype(np.int64)
    batches = totals // batch_size if drop_last else -(-totals // batch_size)
    rounds = int(batches.max()) if batches.size else 0
    # batch sizes laid out round-major: round r holds a batch of worker w when r < batches[w]
    round_index = np.arange(rounds)[:, None]
    present = round_index < batches[None, :]
    sizes = np.where(present, np.minimum(batch_size, totals[None, :] - round_index * batch_size), 0)
    flat = sizes.reshape(-1)
    cumulative = np.cumsum(flat)
    if consumed == 0:
        return np.zeros(totals.size, dtype=np.int64)
    if cumulative.size == 0 or consumed > int(cumulative[-1]):
        available = int(cumulative[-1]) if cumulative.size else 0
        raise SamplingError(
            f"samples_consumed={consumed} exceeds the {available} samples the loader delivers"
        )
    end = int(np.searchsorted(cumulative, consumed, side="left"))
    if int(cumulative[end]) != consumed:
        raise SamplingError(
            f"samples_consumed={consumed} is not on a batch boundary (batch_size={batch_size})"
        )
    taken = np.zeros_like(flat)
    taken[: end + 1] = flat[: end + 1]
    return taken.reshape(sizes.shape).sum(axis=0)

"""loader_consumption models how a real torch DataLoader interleaves IterableDataset workers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from episodestream import SamplingError
from episodestream.sampling import loader_consumption

TOTALS = [7, 2, 5]


class _Numbered(IterableDataset):
    """Worker w yields (w, 0), (w, 1), ... up to TOTALS[w] samples."""

    def __iter__(self):
        info = get_worker_info()
        worker = 0 if info is None else info.id
        for i in range(TOTALS[worker]):
            yield torch.tensor([worker, i])


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
@pytest.mark.parametrize(("batch_size", "drop_last"), [(1, False), (2, False), (2, True)])
def test_matches_a_real_dataloader_with_workers(batch_size, drop_last):
    loader = DataLoader(
        _Numbered(),
        batch_size=batch_size,
        drop_last=drop_last,
        num_workers=len(TOTALS),
        multiprocessing_context="fork",
        timeout=60,
    )
    seen = np.zeros(len(TOTALS), dtype=np.int64)
    consumed = 0
    for batch in loader:
        for worker, position in batch.tolist():
            assert position == seen[worker]
            seen[worker] += 1
        consumed += len(batch)
        predicted = loader_consumption(
            consumed, worker_totals=TOTALS, batch_size=batch_size, drop_last=drop_last
        )
        assert predicted.tolist() == seen.tolist()
    assert consumed > 0


def test_consumption_errors():
    assert loader_consumption(0, worker_totals=[3, 3]).tolist() == [0, 0]
    with pytest.raises(SamplingError, match="batch boundary"):
        loader_consumption(3, worker_totals=[4, 4], batch_size=2)
    with pytest.raises(SamplingError, match="exceeds"):
        loader_consumption(9, worker_totals=[4, 4])
    with pytest.raises(SamplingError, match="worker_totals"):
        loader_consumption(1, worker_totals=[])

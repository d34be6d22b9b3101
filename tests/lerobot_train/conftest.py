"""LeRobot training tests: one intra-op thread for torch.

These machines have 2 cores shared with DataLoader workers and decoding threads; with torch's
default (one thread per core) a small ACT step runs several times slower under that contention
than with one. LeRobot's run and ours use the same setting, so their losses still compare.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

"""EpisodePoolDataset under torchdata's StatefulDataLoader: the loader collects each
DataLoader worker's own state and hands it back on restore, mid-epoch, in a new process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from episodestream import EpisodePoolDataset
from episodestream.errors import SamplingError

REPO_ROOT = Path(__file__).resolve().parents[2]


def _run(root: Path, cache_dir: Path, out: Path, *extra: str) -> list[list[int]]:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.stateful_loader_run",
            str(root),
            str(cache_dir),
            str(out),
            *extra,
        ],
        cwd=REPO_ROOT,
        check=True,
        timeout=600,
    )
    return json.loads(out.read_text())


@pytest.mark.slow
def test_stateful_dataloader_resumes_mid_epoch_in_a_new_process(
    lerobot_fixture_root: Path, datasets_cache_dir: Path, tmp_path: Path
) -> None:
    whole = _run(lerobot_fixture_root, datasets_cache_dir, tmp_path / "whole.json")
    state = tmp_path / "state.pt"
    head = _run(
        lerobot_fixture_root,
        datasets_cache_dir,
        tmp_path / "head.json",
        "--stop-after",
        "7",
        "--save",
        str(state),
    )
    tail = _run(
        lerobot_fixture_root, datasets_cache_dir, tmp_path / "tail.json", "--resume", str(state)
    )
    flat = [i for batch in whole for i in batch]
    assert sorted(flat) == list(range(244))  # every frame once in the epoch
    assert head == whole[:7]
    assert tail == whole[7:]  # the remaining samples, in the uninterrupted run's order


def test_worker_state_round_trip_and_mismatch(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    with EpisodePoolDataset(
        lerobot_fixture_root, pool_size=2, seed=3, cache_dir=datasets_cache_dir
    ) as pool:
        loader = StatefulDataLoader(pool, batch_size=4, num_workers=2)
        iterator = iter(loader)
        for _ in range(3):
            next(iterator)
        state = loader.state_dict()
        del iterator
        worker_states = [
            s["dataset_state"] for s in state["_snapshot"]["_worker_snapshots"].values()
        ]
        assert {s["kind"] for s in worker_states} == {"worker"}
        assert sorted(s["worker"] for s in worker_states) == [0, 1]
        # three batches of four came from the two workers, round-robin: 8 + 4
        assert sorted(s["samples_yielded"] for s in worker_states) == [4, 8]
        # a worker's state handed to another worker is refused, naming both: worker 0's
        # state restored into a plain DataLoader reaches both of its workers
        first = next(s for s in worker_states if s["worker"] == 0)
        pool.load_state_dict(first)
        plain = torch.utils.data.DataLoader(pool, batch_size=4, num_workers=2)
        with pytest.raises(SamplingError, match="was handed to worker 1 of 2"):
            list(plain)
        # a state from another seed is refused at once
        with pytest.raises(SamplingError, match="seed"):
            pool.load_state_dict(dict(worker_states[0], seed=4))
        # in a plain process the restored rank-state comes back unchanged before iterating
        rank_state = pool.state_dict(samples_consumed=8, num_workers=2, batch_size=4)
        pool.load_state_dict(rank_state)
        assert pool.state_dict() == rank_state
        assert torch.utils.data.get_worker_info() is None

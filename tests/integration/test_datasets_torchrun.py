"""EpisodePoolDataset under ``torchrun --nproc_per_node 2`` (gloo, CPU) with 2 DataLoader
workers per rank, through examples/train_pool.py: a run interrupted after k steps then resumed
trains, over the two runs, on exactly the samples of one uninterrupted run (same batches, same
order), every frame exactly once per epoch across the ranks, with a finite falling loss."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import DataLoader

from episodestream import EpisodePoolDataset

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_pool.py"
TOTAL_FRAMES = 104  # synthetic_av1
BATCH = 4
CHECKPOINT_EVERY = 5
STOP_AFTER = 12  # a crash two steps after the checkpoint at step 10
EPOCHS = 2


@dataclass
class Run:
    results: list[dict[str, Any]]  # each rank's final summary, by rank
    logs: list[list[dict[str, Any]]]  # per rank: one record per step
    checkpoint: Path


def _torchrun(root: Path, workdir: Path, name: str, checkpoint: Path, *extra: str) -> Run:
    logs = workdir / f"{name}-indices"
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(EXAMPLE),
        "--root",
        str(root),
        "--steps",
        "1000",
        "--epochs",
        str(EPOCHS),
        "--checkpoint",
        str(checkpoint),
        "--checkpoint-every",
        str(CHECKPOINT_EVERY),
        "--batch-size",
        str(BATCH),
        "--num-workers",
        "2",
        "--pool-size",
        "3",
        "--cache-dir",
        str(workdir / "cache"),
        "--log-indices",
        str(logs),
        *extra,
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO / "src"))
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"torchrun {name} failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    # one file per rank: both ranks print to the same pipe, their lines may interleave
    results = [json.loads((logs / f"result-rank{rank}.json").read_text()) for rank in range(2)]
    assert [r["rank"] for r in results] == [0, 1], done.stdout
    records = []
    for rank in range(2):
        lines = (logs / f"rank{rank}.jsonl").read_text().splitlines()
        records.append([json.loads(line) for line in lines])
    return Run(results, records, checkpoint)


@pytest.fixture(scope="module")
def runs(synthetic_av1: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Two launches: one that crashes after step 12, then its resumption."""
    workdir = tmp_path_factory.mktemp("torchrun")
    crashed = _torchrun(
        synthetic_av1, workdir, "crashed", workdir / "run.pt", "--stop-after", str(STOP_AFTER)
    )
    resumed = _torchrun(synthetic_av1, workdir, "resumed", workdir / "run.pt")
    return {"crashed": crashed, "resumed": resumed}


@pytest.fixture(scope="module")
def uninterrupted(synthetic_av1: Path, datasets_cache_dir: Path) -> list[list[dict[str, Any]]]:
    """The log an uninterrupted run writes, per rank, rebuilt in this process: each rank's
    DataLoader(num_workers=2) over EpisodePoolDataset(rank=r, world_size=2), the ranks in
    lockstep (a rank whose epoch is over logs an empty batch until every rank is done)."""
    batches: list[list[list[list[int]]]] = []  # [rank][epoch][step]
    for rank in range(2):
        with EpisodePoolDataset(
            synthetic_av1,
            rank=rank,
            world_size=2,
            pool_size=3,
            byte_budget="256MiB",
            seed=0,
            decode_threads=1,
            cache_dir=datasets_cache_dir,
        ) as dataset:
            per_epoch = []
            for epoch in range(EPOCHS):
                dataset.set_epoch(epoch)
                loader = DataLoader(dataset, batch_size=BATCH, num_workers=2)
                per_epoch.append([batch["index"].tolist() for batch in loader])
            batches.append(per_epoch)
    logs: list[list[dict[str, Any]]] = [[], []]
    step = 0
    for epoch in range(EPOCHS):
        for k in range(max(len(batches[rank][epoch]) for rank in range(2))):
            step += 1
            for rank in range(2):
                own = batches[rank][epoch]
                index = own[k] if k < len(own) else []
                logs[rank].append({"epoch": epoch, "step": step, "index": index})
    return logs


def _effective(runs: dict[str, Run], rank: int) -> list[dict[str, Any]]:
    """What rank trained on for good: the crashed run up to its checkpoint, then the resumed."""
    last_checkpoint = STOP_AFTER // CHECKPOINT_EVERY * CHECKPOINT_EVERY
    kept = [r for r in runs["crashed"].logs[rank] if r["step"] <= last_checkpoint]
    return kept + runs["resumed"].logs[rank]


def test_two_ranks_two_workers_cover_every_frame_exactly_once(runs: dict[str, Run]) -> None:
    logs = [_effective(runs, rank) for rank in range(2)]
    assert len(logs[0]) == len(logs[1])  # lockstep
    orders = []
    for epoch in range(EPOCHS):
        per_rank = [
            [i for record in records if record["epoch"] == epoch for i in record["index"]]
            for records in logs
        ]
        assert all(per_rank), f"epoch {epoch}: a rank saw nothing"
        # whole episodes per rank: the ranks' frame sets are disjoint
        assert not set(per_rank[0]) & set(per_rank[1])
        union = per_rank[0] + per_rank[1]
        assert len(union) == TOTAL_FRAMES, f"epoch {epoch}: {len(union)} samples"
        assert sorted(union) == list(range(TOTAL_FRAMES)), f"epoch {epoch}"
        orders.append(per_rank)
    assert orders[0] != orders[1]  # set_epoch reshuffles
    assert all(r["epoch"] == EPOCHS and not r["stopped"] for r in runs["resumed"].results)


def test_interrupted_then_resumed_equals_one_uninterrupted_run(
    runs: dict[str, Run], uninterrupted: list[list[dict[str, Any]]]
) -> None:
    crashed, resumed = runs["crashed"], runs["resumed"]
    assert all(r["stopped"] and r["step"] == STOP_AFTER for r in crashed.results)
    last_checkpoint = STOP_AFTER // CHECKPOINT_EVERY * CHECKPOINT_EVERY
    for rank in range(2):
        # torchrun's ranks (rank and world size detected from the environment) draw what
        # explicit rank=/world_size= draw in this process
        assert crashed.logs[rank] == uninterrupted[rank][:STOP_AFTER], f"rank {rank}"
        redone = crashed.logs[rank][last_checkpoint:]
        assert len(redone) == STOP_AFTER - last_checkpoint  # trained on, then lost in the crash
        assert resumed.logs[rank][0]["step"] == last_checkpoint + 1
        # over both runs: the samples, order and batching of one uninterrupted run
        assert _effective(runs, rank) == uninterrupted[rank], f"rank {rank}"
        # what was lost is drawn again right after the resume
        assert resumed.logs[rank][: len(redone)] == redone
    # DDP keeps the ranks' weights identical
    assert resumed.results[0]["weights"] == resumed.results[1]["weights"]


def test_training_completes_with_a_finite_falling_loss(runs: dict[str, Run]) -> None:
    for result in runs["crashed"].results + runs["resumed"].results:
        assert math.isfinite(result["first_loss"]) and math.isfinite(result["last_loss"])
    crashed, resumed = runs["crashed"].results[0], runs["resumed"].results[0]
    assert resumed["last_loss"] < crashed["first_loss"], (crashed, resumed)
    assert runs["resumed"].checkpoint.is_file()

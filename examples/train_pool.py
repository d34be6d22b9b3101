"""Train a tiny policy on CPU, streaming with EpisodePoolDataset under torchrun (DDP, gloo),
checkpointing the model AND the dataset position, and resuming after a crash.

    python -m torch.distributed.run --standalone --nproc_per_node 2 examples/train_pool.py \
        --root tests/data/lerobot_sim5 --steps 40 --checkpoint /tmp/policy.pt

Run the same command again after an interruption: it resumes from ``--checkpoint`` and, over
both runs, trains on exactly the samples of one uninterrupted run, in the same order (batches
after the last checkpoint are drawn again, as they would be after any crash).

What makes that work:

* every rank draws its own episodes (EpisodePoolDataset splits them by rank, then by
  DataLoader worker), every frame exactly once per epoch;
* ranks hold different numbers of frames, so a rank whose epoch is over keeps stepping with an
  empty batch until every rank is done (the loss is normalised by the global batch size, so an
  empty batch contributes nothing and DDP's all-reduce still has a partner);
* a checkpoint stores, per rank, ``dataset.state_dict(samples_consumed=..., num_workers=...,
  batch_size=...)`` where ``samples_consumed`` counts the samples that rank received in the
  current epoch; ``load_state_dict`` makes the next iteration continue from there.

``--stop-after K`` ends the run after step K without a final checkpoint (a simulated crash);
``--log-indices DIR`` appends, per rank, one JSON line per step with the sample indices it
trained on (``rank{r}.jsonl``) and writes the rank's final summary (``result-rank{r}.json``).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from episodestream import EpisodePoolDataset

logger = logging.getLogger("train_pool")


class TinyPolicy(nn.Module):
    """One camera image and the state in, the action out."""

    def __init__(self, state_dim: int, action_dim: int, channels: int = 3) -> None:
        super().__init__()
        self.vision = nn.Sequential(
            nn.Conv2d(channels, 8, kernel_size=5, stride=4),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
        )
        self.head = nn.Sequential(
            nn.Linear(8 * 16 + state_dim, 64), nn.ReLU(), nn.Linear(64, action_dim)
        )

    def forward(self, image: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([self.vision(image), state], dim=1))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="dataset: path, http(s)://, hf://, s3://")
    parser.add_argument("--steps", type=int, default=100, help="optimizer steps in all")
    parser.add_argument("--epochs", type=int, default=None, help="stop after this many epochs")
    parser.add_argument("--checkpoint", type=Path, required=True, help="checkpoint file")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="steps between saves")
    parser.add_argument("--stop-after", type=int, default=None, help="simulate a crash")
    parser.add_argument("--log-indices", type=Path, default=None, help="per-rank sample logs")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2, help="DataLoader workers per rank")
    parser.add_argument("--pool-size", type=int, default=4)
    parser.add_argument("--byte-budget", default="256MiB", help="clip bytes per rank")
    parser.add_argument("--camera", default=None, help="camera key (default: the first)")
    parser.add_argument("--cache-dir", default=None, help="sidecar index cache folder")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def _state_key(meta: Any) -> str:
    return "observation.state" if "observation.state" in meta.data_keys else "state"


def _empty_batch(meta: Any, camera: str, state_key: str) -> dict[str, torch.Tensor]:
    """A zero-sample batch with the right shapes, for a rank whose epoch is over."""
    features = {f.key: f for f in meta.features}
    image = features[camera]
    return {
        camera: torch.zeros((0, image.channels, image.height, image.width)),
        state_key: torch.zeros((0, *features[state_key].shape)),
        "action": torch.zeros((0, *features["action"].shape)),
        "index": torch.zeros(0, dtype=torch.int64),
    }


def _save(path: Path, checkpoint: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    torch.save(checkpoint, partial)
    os.replace(partial, path)  # a crash while saving leaves the previous checkpoint intact


def train(args: argparse.Namespace) -> dict[str, Any]:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    dataset = EpisodePoolDataset(
        args.root,
        pool_size=args.pool_size,
        byte_budget=args.byte_budget,
        seed=args.seed,
        decode_threads=1,
        fetch_workers=2,
        cache_dir=args.cache_dir,
    )
    meta = dataset.dataset.meta
    camera = args.camera or meta.video_keys[0]
    state_key = _state_key(meta)
    features = {f.key: f for f in meta.features}
    model = TinyPolicy(features[state_key].shape[0], features["action"].shape[0])
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    step, epoch, consumed = 0, 0, 0
    if args.checkpoint.is_file():
        saved = torch.load(args.checkpoint, weights_only=False)
        if len(saved["datasets"]) != world_size:
            raise SystemExit(
                f"{args.checkpoint} was written by {len(saved['datasets'])} ranks, this run has "
                f"{world_size}: resume with the same --nproc_per_node"
            )
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        step, epoch = saved["step"], saved["epoch"]
        state = saved["datasets"][rank]
        dataset.load_state_dict(state)
        consumed = state["samples_consumed"]
        if rank == 0:
            logger.info("resumed from %s at step %d (epoch %d)", args.checkpoint, step, epoch)
    ddp = DistributedDataParallel(model)
    log = None
    if args.log_indices is not None:
        args.log_indices.mkdir(parents=True, exist_ok=True)
        log = (args.log_indices / f"rank{rank}.jsonl").open("a")

    losses: list[float] = []
    stopped = False
    while step < args.steps and (args.epochs is None or epoch < args.epochs):
        dataset.set_epoch(epoch)
        loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.num_workers)
        batches = iter(loader)
        epoch_over = False
        while step < args.steps:
            batch = next(batches, None)
            local = 0 if batch is None else len(batch["index"])
            total = torch.tensor([local])
            dist.all_reduce(total)
            if int(total) == 0:
                epoch_over = True
                break
            if batch is None:
                batch = _empty_batch(meta, camera, state_key)
            predicted = ddp(batch[camera], batch[state_key])
            error = (predicted - batch["action"]).pow(2).mean(dim=1).sum()
            # DDP averages gradients over ranks: scale so they are the global batch mean
            loss = error * world_size / int(total)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            global_loss = error.detach().clone()
            dist.all_reduce(global_loss)
            losses.append(float(global_loss) / int(total))
            consumed += local
            step += 1
            if log is not None:
                record = {"epoch": epoch, "step": step, "index": batch["index"].tolist()}
                log.write(json.dumps(record) + "\n")
                log.flush()
            if step % args.checkpoint_every == 0:
                state = dataset.state_dict(
                    samples_consumed=consumed,
                    num_workers=args.num_workers,
                    batch_size=args.batch_size,
                )
                states: list[Any] = [None] * world_size
                dist.all_gather_object(states, state)
                if rank == 0:
                    _save(
                        args.checkpoint,
                        {
                            "step": step,
                            "epoch": epoch,
                            "model": model.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "datasets": states,
                            "loss": losses[-1],
                        },
                    )
                    logger.info("step %d: loss %.5f, checkpoint saved", step, losses[-1])
            if args.stop_after is not None and step >= args.stop_after:
                stopped = True
                break
        del batches  # stops this epoch's DataLoader workers
        if stopped:
            break
        if epoch_over:
            epoch += 1
            consumed = 0

    result = {
        "rank": rank,
        "step": step,
        "epoch": epoch,
        "stopped": stopped,
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        # the exact weights: a resumed run must end where an uninterrupted one ends
        "weights": [float(p.detach().double().sum()) for p in model.parameters()],
    }
    if log is not None:
        log.close()
        (args.log_indices / f"result-rank{rank}.json").write_text(json.dumps(result))
    dataset.close()
    dist.destroy_process_group()
    return result


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    torch.set_num_threads(1)  # several ranks and workers share the CPU
    result = train(parse_args(argv))
    if result["last_loss"] is not None and not math.isfinite(result["last_loss"]):
        print(json.dumps(result), flush=True)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

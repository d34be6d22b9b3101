"""One run of an EpisodePoolDataset through torchdata's StatefulDataLoader, in its own
process (the resume test's "before" and "after" halves).

    python -m tests.support.stateful_loader_run ROOT CACHE_DIR OUT.json \
        [--stop-after N --save STATE.pt] [--resume STATE.pt]

Writes the ``index`` of every sample it received, batch by batch, to OUT.json.
"""

from __future__ import annotations

import argparse
import json

import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from episodestream import EpisodePoolDataset

BATCH_SIZE = 4
NUM_WORKERS = 2


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("cache_dir")
    parser.add_argument("out")
    parser.add_argument("--stop-after", type=int, default=None)
    parser.add_argument("--save", default=None)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--epoch", type=int, default=1)
    args = parser.parse_args()

    pool = EpisodePoolDataset(
        args.root, pool_size=2, seed=7, cache_dir=args.cache_dir, decode_threads=1
    )
    pool.set_epoch(args.epoch)
    loader = StatefulDataLoader(pool, batch_size=BATCH_SIZE, num_workers=NUM_WORKERS)
    if args.resume:
        loader.load_state_dict(torch.load(args.resume, weights_only=False))
    batches: list[list[int]] = []
    for batch in loader:
        batches.append(batch["index"].tolist())
        if args.stop_after is not None and len(batches) == args.stop_after:
            torch.save(loader.state_dict(), args.save)
            break
    with open(args.out, "w") as file:
        json.dump(batches, file)
    pool.close()


if __name__ == "__main__":
    main()

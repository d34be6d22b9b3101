"""LeRobot's own training, unchanged, on a dataset streamed by episodestream.

    python examples/train_lerobot.py --root https://host/datasets/name --repo-id org/name \
        --output-dir outputs/act [--streaming] [--steps 20] [--batch-size 8] [--from-scratch]

``--root`` is any episodestream root: ``https://...``, ``hf://datasets/org/name[@rev]``,
``s3://...`` or a local folder (without it, ``--repo-id`` streams from the Hub). Without
``--streaming`` LeRobot samples the map-style ``EpisodeStreamDataset`` with its own shuffling
sampler; with it, it iterates the exact-coverage ``EpisodePoolDataset`` (LeRobot's
``--dataset.streaming=true`` route). Everything else — policy, normaliser, optimiser,
Accelerate, checkpoints — is LeRobot's ``train()`` as it ships. ``--from-scratch`` skips the
ImageNet backbone weights (which torchvision downloads) and uses a small ACT, for an offline
CPU smoke run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lerobot.configs.default import DatasetConfig
from lerobot.configs.train import TrainPipelineConfig
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.scripts.lerobot_train import train

from episodestream.integrations.lerobot import use_episodestream


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=None, help="where the dataset streams from")
    parser.add_argument("--repo-id", required=True, help="LeRobot's name for it (org/name)")
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--streaming", action="store_true", help="the exact-coverage pool")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--from-scratch", action="store_true", help="small ACT, no downloads")
    args = parser.parse_args()

    policy = ACTConfig(device="cpu", push_to_hub=False)
    if args.from_scratch:
        policy = ACTConfig(
            device="cpu",
            push_to_hub=False,
            pretrained_backbone_weights=None,
            dim_model=64,
            n_heads=4,
            dim_feedforward=128,
            n_encoder_layers=1,
            chunk_size=10,
            n_action_steps=10,
        )
    cfg = TrainPipelineConfig(
        dataset=DatasetConfig(repo_id=args.repo_id, root=args.root, streaming=args.streaming),
        policy=policy,
        output_dir=args.output_dir,
        steps=args.steps,
        batch_size=args.batch_size,
        num_workers=args.num_workers,
    )
    # LeRobot's train() builds its dataset through lerobot_train.make_dataset; inside this
    # block that is episodestream's (byte_budget and other options go to the dataset class)
    with use_episodestream(byte_budget="4GiB"):
        train(cfg)


if __name__ == "__main__":
    main()

"""The cluster plan against a measured epoch: predicted requests and bytes vs nginx's access log.

    .venv/bin/python -m benchmarks.plan_vs_access_log [--num-episodes 36] [--rtt-ms 0]

The demo dataset (``episodestream_tools.synthetic.DEMO_SPEC``: AV1, 320x240, 36 episodes of 60-150
frames) is served by the repo's nginx (through the WAN emulator when ``--rtt-ms`` is set).
For each layout — one process, one rank of two, two DataLoader workers, and ranges split into
parts as a per-connection cap wants — ``plan_cluster`` predicts the epoch's requests and bytes
of the slots that run here, then ``EpisodePoolDataset`` runs that epoch and nginx's access log
counts what it served. Counts, not timings: they are deterministic given the schedule, so one
round suffices. Last, the plan of a small cluster (2 nodes x 2 GPUs x 2 workers at 100
samples/s per rank, 10 Gb/s links) from the same layout, as ``episodestream plan`` prints it.
"""

from __future__ import annotations

import argparse
import tempfile

import torch.utils.data

from episodestream import EpisodePoolDataset
from episodestream.plan import ClusterSpec, PoolSpec, format_plan, plan_cluster, read_plan_layout
from episodestream.sampling import PoolParams
from episodestream.storage import DEFAULT_LIMITS, Limits
from episodestream_tools.serving import NginxServer, WanEmulator, WanSettings, summarize_access
from episodestream_tools.synthetic import DEMO_SPEC, ensure_synthetic_dataset

POOL = 4
PREFETCH = 2
# (name, world_size, rank measured, DataLoader workers, reader limits)
LAYOUTS = (
    ("1 process", 1, 0, 0, DEFAULT_LIMITS),
    ("rank 1 of 2", 2, 1, 0, DEFAULT_LIMITS),
    ("2 DataLoader workers", 1, 0, 2, DEFAULT_LIMITS),
    (
        "1 process, ranges split at 64 KiB",
        1,
        0,
        0,
        Limits(split_threshold_bytes=64 << 10, split_part_bytes=32 << 10),
    ),
)


def _epoch(dataset: EpisodePoolDataset, workers: int) -> int:
    if not workers:
        return sum(1 for _ in dataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=8, num_workers=workers)
    return sum(int(batch["index"].numel()) for batch in loader)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-episodes", type=int, default=DEMO_SPEC.episodes)
    parser.add_argument("--rtt-ms", type=float, default=0.0)
    args = parser.parse_args()
    root = ensure_synthetic_dataset(DEMO_SPEC)
    episodes = list(range(args.num_episodes))
    rows = []
    with tempfile.TemporaryDirectory() as cache, NginxServer() as server:
        url = server.publish(root, "demo")
        emulator = None
        if args.rtt_ms > 0:
            emulator = WanEmulator((server.host, server.port), WanSettings(rtt_ms=args.rtt_ms))
            emulator.start()
            url = emulator.rebase_url(url)
        try:
            for name, world_size, rank, workers, limits in LAYOUTS:
                options = {
                    "cache_dir": cache,
                    "pool_size": POOL,
                    "prefetch_episodes": PREFETCH,
                    "episodes": episodes,
                    "image_dtype": "uint8",
                    "reader_options": {"limits": limits},
                }
                with EpisodePoolDataset(url, **options) as planner:
                    layout = read_plan_layout(planner)
                cluster = ClusterSpec(nodes=1, gpus_per_node=world_size, workers=workers)
                pool = PoolSpec(params=PoolParams(pool_size=POOL), prefetch_episodes=PREFETCH)
                plan = plan_cluster(layout, cluster=cluster, pool=pool, limits=limits)
                with EpisodePoolDataset(
                    url, rank=rank, world_size=world_size, **options
                ) as dataset:
                    mark = server.log_mark()
                    samples = _epoch(dataset, workers)
                    served = summarize_access(server.access_records(since=mark))
                requests = int(plan.slot_requests[rank].sum())
                nbytes = int(plan.slot_bytes[rank].sum())
                rows.append(
                    f"| {name} | {samples} | {requests} | {served.requests} | "
                    f"{requests / served.requests:.3f} | {nbytes} | {served.body_bytes} | "
                    f"{nbytes / served.body_bytes:.3f} |"
                )
                print(rows[-1], flush=True)
        finally:
            if emulator is not None:
                emulator.close()
    print()
    print(
        "| layout | samples | planned requests | nginx requests | ratio | planned bytes | "
        "nginx bytes | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    # the last layout read, planned for a small cluster (what `episodestream plan` prints)
    cluster = ClusterSpec(nodes=2, gpus_per_node=2, workers=2, samples_per_s=100.0, link_gbps=10)
    pool = PoolSpec(params=PoolParams(pool_size=POOL), prefetch_episodes=PREFETCH)
    print(format_plan(plan_cluster(layout, cluster=cluster, pool=pool)))


if __name__ == "__main__":
    main()

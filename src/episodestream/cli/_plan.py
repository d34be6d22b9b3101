"""``episodestream plan ROOT``: what a training cluster's epoch asks of the dataset's storage."""

from __future__ import annotations

import argparse
import json

from episodestream.cli._options import (
    add_batch_size_option,
    add_cache_dir_option,
    add_pool_order_options,
)
from episodestream.cli._types import int_at_least, non_negative_float, positive_float
from episodestream.datasets import MAX_POOL_EPISODES, parse_bytes
from episodestream.errors import ConfigError
from episodestream.plan import (
    DEFAULT_HOST_CEILING_BYTES_PER_S,
    DEFAULT_RTT_S,
    DEFAULT_WINDOW_S,
    HUB_RESOLVER_LIMITS,
    ClusterSpec,
    HubLimits,
    PoolSpec,
    format_plan,
    plan_dataset,
)
from episodestream.sampling import (
    DEFAULT_POOL_SIZE,
    MAX_LOADER_WORKERS,
    MAX_WORLD_SIZE,
    PoolParams,
)

__all__ = ["register"]

_DEFAULT_CEILING_MIBPS = DEFAULT_HOST_CEILING_BYTES_PER_S / (1 << 20)


def _bytes(text: str) -> int:
    try:
        return parse_bytes(text, name="--byte-budget")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="requests, bytes/s and budgets a training cluster's epoch asks of the storage",
        description=(
            "From the dataset's index and the exact pool schedule: requests and bytes per "
            "epoch, bytes/s and requests/s per node and per rate-limit window, time to first "
            "sample, the byte budget for the pool chosen, and which published limit or link "
            "binds first. Limits are assumptions (defaults: the Hub's resolver quotas as "
            "published in September 2025, ~270 MiB/s per host on Hub buckets)."
        ),
    )
    parser.add_argument("root", help="dataset root: a local path, http(s)://, hf:// or s3:// URL")
    parser.add_argument(
        "--nodes", type=int_at_least(1, MAX_WORLD_SIZE), default=1, help="machines (default 1)"
    )
    parser.add_argument(
        "--gpus-per-node",
        type=int_at_least(1, MAX_WORLD_SIZE),
        default=1,
        help="ranks per machine",
    )
    parser.add_argument(
        "--workers",
        type=int_at_least(0, MAX_LOADER_WORKERS),
        default=1,
        help="DataLoader workers per rank (default 1)",
    )
    parser.add_argument(
        "--samples-per-s",
        type=positive_float,
        required=True,
        help="training samples each rank (GPU) consumes per second",
    )
    randomness = parser.add_mutually_exclusive_group()
    randomness.add_argument(
        "--pool-episodes",
        type=int_at_least(1, MAX_POOL_EPISODES),
        default=None,
        help=f"resident episodes per worker (default {DEFAULT_POOL_SIZE})",
    )
    randomness.add_argument(
        "--unique-per-batch",
        type=positive_float,
        default=None,
        help="pick the smallest pool whose batches hold this many distinct episodes on "
        "average (measured on the pool's own schedule)",
    )
    add_batch_size_option(parser)
    add_pool_order_options(parser)
    parser.add_argument(
        "--byte-budget", type=_bytes, default=None, help="byte_budget per rank to check"
    )
    parser.add_argument(
        "--epoch", type=int_at_least(0), default=0, help="epoch planned (default 0)"
    )
    parser.add_argument(
        "--link-gbps", type=positive_float, default=None, help="each node's link, Gbit/s"
    )
    parser.add_argument(
        "--host-ceiling-mibps",
        type=positive_float,
        default=_DEFAULT_CEILING_MIBPS,
        help=f"bytes/s one host gets from the store (default {_DEFAULT_CEILING_MIBPS:g} MiB/s)",
    )
    parser.add_argument(
        "--hub-tier",
        choices=sorted(HUB_RESOLVER_LIMITS),
        default="free",
        help="whose resolver quota applies (default free)",
    )
    parser.add_argument(
        "--resolver-limit",
        type=int_at_least(1),
        default=None,
        help="resolver requests per window (overrides --hub-tier's)",
    )
    parser.add_argument(
        "--window-s",
        type=positive_float,
        default=DEFAULT_WINDOW_S,
        help=f"rate-limit window in seconds (default {DEFAULT_WINDOW_S:g})",
    )
    parser.add_argument(
        "--rtt-ms",
        type=non_negative_float,
        default=DEFAULT_RTT_S * 1000,
        help=f"round trip to the store (default {DEFAULT_RTT_S * 1000:g} ms)",
    )
    add_cache_dir_option(parser)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.nodes * args.gpus_per_node > MAX_WORLD_SIZE.value:
        raise ConfigError(
            f"--nodes x --gpus-per-node = {args.nodes * args.gpus_per_node} ranks, more than "
            f"{MAX_WORLD_SIZE}"
        )
    pool_size = args.pool_episodes or DEFAULT_POOL_SIZE
    cluster = ClusterSpec(
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        workers=args.workers,
        samples_per_s=args.samples_per_s,
        link_gbps=args.link_gbps,
        rtt_s=args.rtt_ms / 1000,
    )
    pool = PoolSpec(
        params=PoolParams(pool_size=pool_size, seed=args.seed),
        prefetch_episodes=args.prefetch_episodes,
        byte_budget=args.byte_budget,
        epoch=args.epoch,
        batch_size=args.batch_size,
        unique_per_batch=args.unique_per_batch,
    )
    hub = HubLimits(
        resolver_requests_per_window=args.resolver_limit or HUB_RESOLVER_LIMITS[args.hub_tier],
        window_s=args.window_s,
        host_ceiling_bytes_per_s=args.host_ceiling_mibps * (1 << 20),
        tier=args.hub_tier if args.resolver_limit is None else "custom",
    )
    plan = plan_dataset(args.root, cluster=cluster, pool=pool, hub=hub, cache_dir=args.cache_dir)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        print(format_plan(plan))
    return 0

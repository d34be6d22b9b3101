"""Options more than one command takes with the same meaning, each defined once.

A command passes the argparse parser or group to add them to, and the defaults it differs in
(``demo`` leaves bench settings unset, so that its mode picks them).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from episodestream.bench._config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_NAIVE_SAMPLES,
    DEFAULT_PREFETCH_EPISODES,
)
from episodestream.cli._types import int_at_least, int_list, non_negative_float, positive_float
from episodestream.datasets._pool import MAX_DECODE_THREADS, MAX_POOL_EPISODES
from episodestream.sampling import MAX_EPISODE_INDEX, MAX_SEED

__all__ = [
    "add_batch_size_option",
    "add_cache_dir_option",
    "add_decoder_options",
    "add_episode_subset_options",
    "add_link_options",
    "add_pool_order_options",
    "add_sample_options",
]

# a parser or one of its argument groups
Options = argparse.ArgumentParser | argparse._ArgumentGroup


def add_sample_options(options: Options, *, samples_default: int | None) -> None:
    """``--samples``, ``--keepup-samples``, ``--naive-samples`` and ``--target-samples-s``: how
    many samples the bench tracks draw, and the keep-up target (``bench``, ``demo``). Without
    ``samples_default`` (``demo``), the sample counts default to what the mode sets."""
    by_mode = samples_default is None

    def default(text: str) -> str:
        return "default: the mode's" if by_mode else f"default: {text}"

    options.add_argument(
        "--samples",
        type=int_at_least(1),
        default=samples_default,
        help=f"samples of the sequence ({default(str(samples_default))}; capped at the "
        "shard's frames)",
    )
    options.add_argument(
        "--keepup-samples",
        type=int_at_least(0),
        default=None,
        help=f"samples consumed at --target-samples-s ({default('--samples')}; 0 skips keep-up)",
    )
    options.add_argument(
        "--naive-samples",
        type=int_at_least(0),
        default=None,
        help=f"cap on NAIVE's samples ({default(str(DEFAULT_NAIVE_SAMPLES))})",
    )
    options.add_argument(
        "--target-samples-s",
        type=positive_float,
        default=None,
        help="keep-up target (default: 0.75 x LOCAL's steady samples/s)",
    )


def add_decoder_options(
    options: Options, *, decoder_default: str | None, threads_default: int | None
) -> None:
    """``--decoder`` and ``--decode-threads`` (``bench``, ``demo``)."""
    options.add_argument(
        "--decoder",
        choices=("auto", "torchcodec", "pyav"),
        default=decoder_default,
        help="decoder backend (auto: torchcodec, else PyAV)",
    )
    options.add_argument(
        "--decode-threads",
        type=int_at_least(0, MAX_DECODE_THREADS),
        default=threads_default,
        help="decode threads per process (each DataLoader worker); 0: decode in the "
        "iterating thread, one core per worker",
    )


def add_pool_order_options(options: Options) -> None:
    """``--prefetch-episodes`` and ``--seed`` of the episode pool (``bench``, ``plan``)."""
    options.add_argument(
        "--prefetch-episodes",
        type=int_at_least(0, MAX_POOL_EPISODES),
        default=DEFAULT_PREFETCH_EPISODES,
        help=f"episodes fetched ahead per worker (default {DEFAULT_PREFETCH_EPISODES})",
    )
    options.add_argument(
        "--seed", type=int_at_least(0, MAX_SEED), default=0, help="pool seed (default 0)"
    )


def add_batch_size_option(options: Options) -> None:
    """``--batch-size`` (``bench``, ``plan``)."""
    options.add_argument(
        "--batch-size",
        type=int_at_least(1),
        default=DEFAULT_BATCH_SIZE,
        help=f"batch size (default {DEFAULT_BATCH_SIZE})",
    )


def add_link_options(
    options: Options, *, rtt_ms: float, bandwidth_mibps: float, zero_is_no_cap: bool
) -> None:
    """``--rtt-ms`` and ``--bandwidth-mibps`` of the emulated WAN link (``serve``, ``demo``);
    with ``zero_is_no_cap``, a bandwidth of 0 lifts the cap."""
    options.add_argument(
        "--rtt-ms",
        type=non_negative_float,
        default=rtt_ms,
        help=f"round-trip time added, ms (default {rtt_ms:g})",
    )
    options.add_argument(
        "--bandwidth-mibps",
        type=non_negative_float if zero_is_no_cap else positive_float,
        default=bandwidth_mibps,
        help=f"per-connection cap, MiB/s{'; 0 = no cap' if zero_is_no_cap else ''} "
        f"(default {bandwidth_mibps:g})",
    )


def add_episode_subset_options(parser: argparse.ArgumentParser, *, verb: str) -> None:
    """``--episodes`` or ``--num-episodes`` (one of them): the episodes a command ``verb``s
    (``bench``: "sample"; ``index``: "index")."""
    subset = parser.add_mutually_exclusive_group()
    subset.add_argument(
        "--episodes",
        type=int_list("episodes", 0, MAX_EPISODE_INDEX),
        default=None,
        help=f"{verb} only these episodes (comma-separated ids)",
    )
    subset.add_argument(
        "--num-episodes",
        type=int_at_least(1),
        default=None,
        help=f"{verb} only the dataset's first N episodes",
    )


def add_cache_dir_option(options: Options) -> None:
    """``--cache-dir``, the cache folder as a ``Path`` (``plan`` and ``index``)."""
    options.add_argument(
        "--cache-dir", type=Path, default=None, help="cache folder (default $EPISODESTREAM_CACHE)"
    )

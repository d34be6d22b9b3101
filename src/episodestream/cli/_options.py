"""Options more than one command takes with the same meaning, each defined once.

A command passes the argparse parser or group to add them to, and the defaults it differs in
(``demo`` leaves bench settings unset, so that its mode picks them).

Public through :mod:`episodestream.cli.arguments`, for commands that other packages register.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from episodestream.cli._types import int_at_least, int_list
from episodestream.datasets import MAX_POOL_EPISODES
from episodestream.plan import DEFAULT_BATCH_SIZE, DEFAULT_PREFETCH_EPISODES
from episodestream.sampling import MAX_EPISODE_INDEX, MAX_SEED

__all__ = [
    "add_batch_size_option",
    "add_cache_dir_option",
    "add_episode_subset_options",
    "add_pool_order_options",
]

# a parser or one of its argument groups
Options = argparse.ArgumentParser | argparse._ArgumentGroup


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

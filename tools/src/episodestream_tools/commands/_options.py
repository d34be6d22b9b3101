"""Options the tools commands share (``bench``, ``demo``, ``serve``), each defined once.

The options the core commands share too (batch size, pool order, episode subset) come from
:mod:`episodestream.cli.arguments`.
"""

from __future__ import annotations

from episodestream.cli.arguments import (
    Options,
    int_at_least,
    non_negative_float,
    positive_float,
)
from episodestream.datasets import MAX_DECODE_THREADS
from episodestream_tools.bench._config import DEFAULT_NAIVE_SAMPLES

__all__ = ["add_decoder_options", "add_link_options", "add_sample_options"]


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

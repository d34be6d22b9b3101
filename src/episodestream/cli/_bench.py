"""``episodestream bench ROOT``: STREAM / LOCAL / NAIVE / DOWNLOAD on one seeded sample order."""

from __future__ import annotations

import argparse
import sys

from episodestream.bench import (
    ALL_TRACKS,
    BenchConfig,
    format_report,
    run_bench,
    write_plot,
)
from episodestream.bench._config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_CONNECTIONS,
    DEFAULT_DECODE_SAMPLES,
    DEFAULT_DECODE_THREADS,
    DEFAULT_FETCH_WORKERS,
    DEFAULT_FFMPEG_THREADS,
    DEFAULT_NAIVE_SAMPLES,
    DEFAULT_POOL_SIZE,
    DEFAULT_PREFETCH_EPISODES,
    DEFAULT_SAMPLES,
)

__all__ = ["add_bench_options", "config_from_args", "register"]


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def _tracks(text: str) -> tuple[str, ...]:
    names = tuple(t.strip().lower() for t in text.split(",") if t.strip())
    unknown = [t for t in names if t not in ALL_TRACKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"tracks are a comma-separated subset of {','.join(ALL_TRACKS)}, got {text!r}"
        )
    return names


def add_bench_options(parser: argparse.ArgumentParser, *, samples_default: int | None) -> None:
    """The options ``bench`` and ``demo`` share (``demo`` picks its own sample defaults)."""
    pool = parser.add_argument_group("pool (STREAM)")
    pool.add_argument("--pool-size", type=_int_at_least(1), default=DEFAULT_POOL_SIZE)
    pool.add_argument(
        "--prefetch-episodes", type=_int_at_least(0), default=DEFAULT_PREFETCH_EPISODES
    )
    pool.add_argument(
        "--fetch-workers",
        type=_int_at_least(1),
        default=DEFAULT_FETCH_WORKERS,
        help="episodes fetched concurrently",
    )
    pool.add_argument(
        "--connections",
        type=_int_at_least(1),
        default=DEFAULT_CONNECTIONS,
        help="HTTP connections (and request threads) per host",
    )
    pool.add_argument("--byte-budget", default="2GiB", help="bytes of clips held (e.g. 2GiB)")
    pool.add_argument("--seed", type=_int_at_least(0), default=0)
    decode = parser.add_argument_group("decoding (every track)")
    decode.add_argument("--decoder", choices=("auto", "torchcodec", "pyav"), default="auto")
    decode.add_argument(
        "--decode-threads",
        type=_int_at_least(0),
        default=DEFAULT_DECODE_THREADS,
        help="samples decoded concurrently",
    )
    decode.add_argument(
        "--ffmpeg-threads",
        type=_int_at_least(0),
        default=DEFAULT_FFMPEG_THREADS,
        help="FFmpeg threads per decoder",
    )
    decode.add_argument(
        "--torch-threads",
        type=_int_at_least(0),
        default=1,
        help="torch intra-op threads during the run (default 1, as in DataLoader workers; "
        "0: torch's default)",
    )
    run = parser.add_argument_group("run")
    run.add_argument(
        "--tracks",
        type=_tracks,
        default=ALL_TRACKS,
        help=f"comma-separated subset of {','.join(ALL_TRACKS)} (STREAM always runs)",
    )
    run.add_argument(
        "--samples",
        type=_int_at_least(1),
        default=samples_default,
        help=f"samples of the sequence (default {samples_default or 'see above'}; capped at "
        "the shard's frames)",
    )
    run.add_argument(
        "--keepup-samples",
        type=_int_at_least(0),
        default=None,
        help="samples consumed at --target-samples-s (default: --samples; 0 skips keep-up)",
    )
    run.add_argument(
        "--naive-samples",
        type=_int_at_least(0),
        default=None,
        help=f"cap on NAIVE's samples (default {DEFAULT_NAIVE_SAMPLES})",
    )
    run.add_argument(
        "--decode-samples",
        type=_int_at_least(0),
        default=None,
        help=f"samples of the resident-pool decode measurement (default {DEFAULT_DECODE_SAMPLES})",
    )
    run.add_argument(
        "--target-samples-s",
        type=_positive_float,
        default=None,
        help="keep-up target (default: 0.75 x LOCAL's steady samples/s)",
    )
    run.add_argument("--batch-size", type=_int_at_least(1), default=DEFAULT_BATCH_SIZE)
    run.add_argument(
        "--rounds",
        type=_int_at_least(1),
        default=1,
        help="STREAM and LOCAL rounds, alternating; each reports its best (noisy machines)",
    )
    run.add_argument("--cache-dir", default=None, help="sidecar index cache folder")
    run.add_argument("--work-dir", default=None, help="folder for downloads (default: temp)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars or lines")
    out = parser.add_argument_group("output")
    out.add_argument(
        "--json",
        dest="json_path",
        default=None,
        help="write the report here ('{rank}' becomes the shard index, e.g. rank{rank}.json)",
    )
    out.add_argument(
        "--plot", dest="plot_path", default=None, help="write a PNG plot here ('{rank}' too)"
    )


def config_from_args(args: argparse.Namespace, root: str, **overrides) -> BenchConfig:
    values = dict(
        root=root,
        local_root=getattr(args, "local_root", None),
        tracks=args.tracks,
        samples=args.samples,
        keepup_samples=args.keepup_samples,
        naive_samples=DEFAULT_NAIVE_SAMPLES if args.naive_samples is None else args.naive_samples,
        decode_samples=DEFAULT_DECODE_SAMPLES
        if args.decode_samples is None
        else args.decode_samples,
        target_samples_s=args.target_samples_s,
        pool_size=args.pool_size,
        prefetch_episodes=args.prefetch_episodes,
        byte_budget=args.byte_budget,
        seed=args.seed,
        fetch_workers=args.fetch_workers,
        connections=args.connections,
        decoder=args.decoder,
        decode_threads=args.decode_threads,
        ffmpeg_threads=args.ffmpeg_threads,
        batch_size=args.batch_size,
        rounds=args.rounds,
        torch_threads=args.torch_threads or None,
        shard_index=getattr(args, "shard_index", None),
        shard_count=getattr(args, "shard_count", None),
        access_log=getattr(args, "access_log", None),
        cache_dir=args.cache_dir,
        work_dir=args.work_dir,
        progress=not args.no_progress,
    )
    values.update(overrides)
    return BenchConfig(**values)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark streaming against local, naive remote and download-first decoding",
        description=(
            "Draw one seeded sample sequence (the episode pool's order for this rank) and run "
            "it through STREAM (EpisodePoolDataset), LOCAL (full local files, the decode "
            "ceiling), NAIVE (a decoder on a remote file object) and DOWNLOAD (whole files "
            "first). Prints Markdown tables; --json keeps everything, --plot draws STREAM's "
            "samples/s and resident bytes. Distributed: run one per rank (torchrun sets "
            "RANK/WORLD_SIZE, or give --shard-index/--shard-count), then bench-summary."
        ),
    )
    parser.add_argument("root", help="dataset root: local path, http(s)://, hf:// or s3:// URL")
    parser.add_argument(
        "--local-root",
        default=None,
        help="a local copy of the dataset for LOCAL (default: download the touched files)",
    )
    parser.add_argument("--shard-index", type=_int_at_least(0), default=None)
    parser.add_argument("--shard-count", type=_int_at_least(1), default=None)
    parser.add_argument(
        "--access-log",
        default=None,
        help="nginx access log of the server in front of ROOT (adds server-side figures)",
    )
    add_bench_options(parser, samples_default=DEFAULT_SAMPLES)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if (args.shard_index is None) != (args.shard_count is None):
        print("episodestream bench: give both --shard-index and --shard-count", file=sys.stderr)
        return 2
    try:
        config = config_from_args(args, args.root)
    except ValueError as error:
        print(f"episodestream bench: {error}", file=sys.stderr)
        return 2
    report = run_bench(config)
    print(format_report(report))
    rank = str(report.host["shard_index"])
    if args.json_path:
        print(f"JSON report: {report.write_json(args.json_path.replace('{rank}', rank))}")
    if args.plot_path:
        print(f"plot: {write_plot(report, args.plot_path.replace('{rank}', rank))}")
    return 0

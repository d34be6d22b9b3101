"""``episodestream bench ROOT``: STREAM / LOCAL / FLOOR / LEROBOT / NAIVE / DOWNLOAD on one seeded
sample order, and STREAM through DataLoader workers (``--num-workers``)."""

from __future__ import annotations

import argparse
import sys

from episodestream.cli.arguments import (
    add_batch_size_option,
    add_episode_subset_options,
    add_pool_order_options,
    int_at_least,
    int_list,
)
from episodestream.datasets import (
    MAX_DECODE_THREADS,
    MAX_FETCH_WORKERS,
    MAX_FFMPEG_THREADS,
    MAX_POOL_EPISODES,
    MAX_WINDOW_FRAMES,
)
from episodestream.decode import parse_device
from episodestream.helpers import MAX_CONNECTIONS
from episodestream.sampling import MAX_LOADER_WORKERS, MAX_WORLD_SIZE
from episodestream_tools.bench import (
    ALL_TRACKS,
    BenchConfig,
    format_report,
    run_bench,
    write_plot,
)
from episodestream_tools.bench._config import (
    DEFAULT_CONNECTIONS,
    DEFAULT_DECODE_SAMPLES,
    DEFAULT_DECODE_THREADS,
    DEFAULT_FETCH_WORKERS,
    DEFAULT_FFMPEG_THREADS,
    DEFAULT_NAIVE_SAMPLES,
    DEFAULT_POOL_SIZE,
    DEFAULT_SAMPLES,
)
from episodestream_tools.bench._scaling import default_worker_counts
from episodestream_tools.commands._options import add_decoder_options, add_sample_options

__all__ = ["add_bench_options", "config_from_args", "register"]


def _tracks(text: str) -> tuple[str, ...]:
    names = tuple(t.strip().lower() for t in text.split(",") if t.strip())
    unknown = [t for t in names if t not in ALL_TRACKS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"tracks are a comma-separated subset of {','.join(ALL_TRACKS)}, got {text!r}"
        )
    return names


def add_bench_options(parser: argparse.ArgumentParser, *, samples_default: int | None) -> None:
    """``bench``'s tuning options (``demo`` takes some of them too: cli/_options.py)."""
    pool = parser.add_argument_group("pool (STREAM)")
    pool.add_argument(
        "--pool-size", type=int_at_least(1, MAX_POOL_EPISODES), default=DEFAULT_POOL_SIZE
    )
    add_pool_order_options(pool)
    pool.add_argument(
        "--fetch-workers",
        type=int_at_least(1, MAX_FETCH_WORKERS),
        default=DEFAULT_FETCH_WORKERS,
        help="episodes fetched concurrently",
    )
    pool.add_argument(
        "--connections",
        type=int_at_least(1, MAX_CONNECTIONS),
        default=DEFAULT_CONNECTIONS,
        help="HTTP connections (and request threads) per host",
    )
    pool.add_argument("--byte-budget", default="2GiB", help="bytes of clips held (e.g. 2GiB)")
    decode = parser.add_argument_group("decoding (every track)")
    add_decoder_options(decode, decoder_default="auto", threads_default=DEFAULT_DECODE_THREADS)
    decode.add_argument(
        "--device",
        default="cpu",
        help="where STREAM, LOCAL and FLOOR decode: cpu (default) or cuda[:N] (NVDEC through "
        "torchcodec; the decode table then compares the frames with the CPU's)",
    )
    decode.add_argument(
        "--ffmpeg-threads",
        type=int_at_least(0, MAX_FFMPEG_THREADS),
        default=DEFAULT_FFMPEG_THREADS,
        help="FFmpeg threads per decoder",
    )
    decode.add_argument(
        "--torch-threads",
        type=int_at_least(0, MAX_DECODE_THREADS),
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
    add_sample_options(run, samples_default=samples_default)
    run.add_argument(
        "--decode-samples",
        type=int_at_least(0),
        default=None,
        help=f"samples of the resident-pool decode measurement (default {DEFAULT_DECODE_SAMPLES})",
    )
    add_batch_size_option(run)
    run.add_argument(
        "--rounds",
        type=int_at_least(1),
        default=1,
        help="rounds of STREAM, LOCAL, FLOOR and LEROBOT, and of each --num-workers count, "
        "interleaved (order rotated each round); each reports its median round (noisy "
        "machines: use 3 or 5)",
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
    """The :class:`BenchConfig` of ``bench``'s parsed arguments (every option its parser
    defines is read as it is: a misspelt name fails here), ``overrides`` on top."""
    values = dict(
        root=root,
        local_root=args.local_root,
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
        shard_index=args.shard_index,
        shard_count=args.shard_count,
        access_log=args.access_log,
        cache_dir=args.cache_dir,
        work_dir=args.work_dir,
        progress=not args.no_progress,
        episodes=args.episodes,
        num_episodes=args.num_episodes,
        range_backend=args.range_backend,
        image_dtype=args.image_dtype,
        num_workers=_worker_counts(args.num_workers),
        scaling_samples=args.scaling_samples,
        device=args.device,
    )
    values.update(overrides)
    return BenchConfig(**values)


def _worker_counts(given: tuple[int, ...] | None) -> tuple[int, ...]:
    """``--num-workers`` as worker counts: absent, none; alone, 1, 2, 4, ... the cores."""
    if given is None:
        return ()
    return given or default_worker_counts()


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark streaming against local, naive remote and download-first decoding",
        description=(
            "Draw one seeded sample sequence (the episode pool's order for this rank) and run "
            "it through STREAM (EpisodePoolDataset), LOCAL (full local files, the decode "
            "ceiling), FLOOR (a bare uint8 decoder loop: every track's CPU per sample is shown "
            "over it), LEROBOT (LeRobotDataset on the same local files, where lerobot imports), "
            "NAIVE (a decoder on a remote file object) and DOWNLOAD (whole files first); "
            "--num-workers adds STREAM through a DataLoader with N workers (scaling table). "
            "Prints Markdown tables; --json keeps everything, --plot draws STREAM's "
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
    parser.add_argument("--shard-index", type=int_at_least(0, MAX_WORLD_SIZE), default=None)
    parser.add_argument("--shard-count", type=int_at_least(1, MAX_WORLD_SIZE), default=None)
    parser.add_argument(
        "--access-log",
        default=None,
        help="nginx access log of the server in front of ROOT (adds server-side figures)",
    )
    add_episode_subset_options(parser, verb="sample")
    parser.add_argument(
        "--range-backend",
        choices=("native", "fsspec"),
        default="native",
        help="reader of an http(s) ROOT: ours (native) or fsspec's HTTP filesystem",
    )
    parser.add_argument(
        "--image-dtype",
        choices=("float32", "uint8"),
        default="float32",
        help="images STREAM, LOCAL, LEROBOT (where it can) and the workers return (FLOOR: uint8)",
    )
    parser.add_argument(
        "--num-workers",
        type=int_list("worker counts", 1, MAX_LOADER_WORKERS),
        nargs="?",
        const=(),
        default=None,
        help="also run STREAM through a DataLoader with N persistent workers for each N of a "
        "comma-separated list (e.g. 1,2,4; alone: 1, 2, 4, ... up to the cores present)",
    )
    parser.add_argument(
        "--scaling-samples",
        type=int_at_least(1),
        default=None,
        help="samples of each --num-workers run (default: --samples)",
    )
    windows = parser.add_argument_group("window-pool track (--unit window)")
    windows.add_argument(
        "--unit",
        choices=("episode", "window"),
        default="episode",
        help="window: instead of the tracks above, compare EpisodePoolDataset(unit='window') "
        "with the episode pool (samples per CPU-s, decoded frames per sample, peak RSS) and "
        "their randomness with uniform sampling; --plot draws episodes-per-batch histograms",
    )
    windows.add_argument("--window-frames", type=int_at_least(1, MAX_WINDOW_FRAMES), default=32)
    windows.add_argument("--decoded-budget", default="4GiB", help="decoded bytes (e.g. 4GiB)")
    add_bench_options(parser, samples_default=DEFAULT_SAMPLES)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.unit == "window":
        return _run_windows(args)
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


def _run_windows(args: argparse.Namespace) -> int:
    if parse_device(args.device).type != "cpu":
        print("episodestream bench: --unit window decodes on the CPU only", file=sys.stderr)
        return 2
    from episodestream_tools.bench._windows_report import (
        WindowBenchConfig,
        format_window_report,
        run_window_bench,
        write_window_plot,
    )

    try:
        config = WindowBenchConfig(
            root=args.root,
            window_frames=args.window_frames,
            decoded_budget=args.decoded_budget,
            byte_budget=args.byte_budget,
            pool_size=args.pool_size,
            rounds=args.rounds,
            samples=args.samples,
            batch_size=args.batch_size,
            decode_threads=args.decode_threads,
            seed=args.seed,
            cache_dir=args.cache_dir,
        )
        report = run_window_bench(config)
    except ValueError as error:
        print(f"episodestream bench: {error}", file=sys.stderr)
        return 2
    print(format_window_report(report))
    if args.plot_path:
        print(f"plot: {write_window_plot(report, args.plot_path.replace('{rank}', '0'))}")
    return 0

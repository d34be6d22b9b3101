"""Lazy open: a few episodes of a dataset of 1,000 video files cost what they cost in one of 10.

Run: ``python -m benchmarks.lazy_open [--rounds 5] [--rtt-ms 50] [--json PATH]``.

Two LeRobot v3.0 datasets from the synthetic writer, one video file per episode (one camera,
64x48 AV1, 4-8 frames) and one data file per episode: LARGE has 1,000 episodes (1,000 video
files), SMALL 10. Both are served by nginx behind the WAN emulator (``--rtt-ms``; 0 for
loopback only), from a child process. Each round opens ``EpisodeStreamDataset(url,
episodes=[1, 3, 5, 7, 9])`` on each dataset (interleaved, order alternating, a fresh sidecar
cache each time, nothing published) and takes its first sample; nginx's access log gives the
requests and the files they touched; after each open, loading the metadata alone is timed
(a reader of its own). Reported: the files the LARGE opens touched outside ``meta/`` (only
those episodes' video and data files), and LARGE / SMALL requests and wall time to the
first sample, whole and beyond the metadata (medians over rounds of each round's own
ratio). For scale, once each: what indexing the whole LARGE dataset costs, with
``build_manifest`` (what every open of a subset paid before the index was per file) and
with ``open_manifest`` into a fresh cache (which writes the whole sidecar).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import ServerProcess, add_json_option, put_out

__all__ = ["main", "run_lazy_open_bench"]

REPO_ROOT = Path(__file__).resolve().parents[1]
EPISODES = (1, 3, 5, 7, 9)
LARGE_FILES = 1000
SMALL_FILES = 10


def _spec(episodes: int) -> Any:
    from episodestream_tools.synthetic import SyntheticSpec

    return SyntheticSpec(
        cameras=("observation.images.cam_high",),
        width=64,
        height=48,
        episodes=episodes,
        min_length=4,
        max_length=8,
        episodes_per_file=1,
        episodes_per_data_file=1,
        codec="av1",
        seed=25,
    )


def _serve(root: str, rtt_ms: float, conn: Any) -> None:
    """Child process: nginx + WAN emulator; send (url, access log path); wait for "stop"."""
    from episodestream_tools.serving import serve_dataset

    with serve_dataset(root, rtt_ms=rtt_ms, workers=2) as served:
        conn.send((served.url, str(served.nginx.access_log_path)))
        conn.recv()


class _Served(ServerProcess):
    def __init__(self, root: Path, rtt_ms: float) -> None:
        super().__init__(_serve, (str(root), rtt_ms), "benchmark server")
        self.url, log = self.hello
        self.log = Path(log)

    def mark(self) -> int:
        return self.log.stat().st_size if self.log.exists() else 0

    def records(self, since: int) -> list[Any]:
        """The log after ``since`` once it stops growing (nginx writes after replying)."""
        from episodestream_tools.serving import read_access_log

        records = read_access_log(self.log, since)[0]
        for _ in range(25):
            time.sleep(0.2)
            again = read_access_log(self.log, since)[0]
            if len(again) == len(records):
                break
            records = again
        return records


def _files_of(records: list[Any], name: str) -> dict[str, int]:
    """Requests per file of dataset ``name`` (relative path)."""
    counts: dict[str, int] = {}
    prefix = f"/{name}/"
    for record in records:
        path = record.uri.split("?", 1)[0]
        if path.startswith(prefix):
            relative = path[len(prefix) :]
            counts[relative] = counts.get(relative, 0) + 1
    return counts


def _open_first_sample(served: _Served, name: str, cache_dir: Path) -> dict[str, Any]:
    from episodestream import EpisodeStreamDataset, StreamOptions

    options = StreamOptions(decoder="pyav", cache_dir=cache_dir)
    mark = served.mark()
    started = time.perf_counter()
    with EpisodeStreamDataset(
        f"{served.url}/{name}", episodes=list(EPISODES), options=options
    ) as dataset:
        dataset[0]
        first_s = time.perf_counter() - started
    files = _files_of(served.records(mark), name)
    outside_meta = sorted(path for path in files if not path.startswith("meta/"))
    return {
        "seconds": first_s,
        "meta_seconds": _meta_seconds(served, name),
        "requests": sum(files.values()),
        "meta_requests": sum(n for path, n in files.items() if path.startswith("meta/")),
        "video_requests": sum(n for path, n in files.items() if path.startswith("videos/")),
        "files_outside_meta": outside_meta,
    }


def _meta_seconds(served: _Served, name: str) -> float:
    """What loading the metadata alone takes (a reader of its own, as the open's)."""
    from episodestream.lerobot import load_dataset_meta
    from episodestream.storage import open_reader

    started = time.perf_counter()
    with open_reader(f"{served.url}/{name}") as reader:
        load_dataset_meta(reader)
    return time.perf_counter() - started


def _whole_index(served: _Served, name: str, cache_dir: Path | None) -> dict[str, Any]:
    """Index every file: into the cache (the whole sidecar and the per-file index), or with
    no cache at all (``build_manifest``: what every open of a subset paid before)."""
    from episodestream.lerobot import load_dataset_meta
    from episodestream.manifest import build_manifest, open_manifest
    from episodestream.storage import open_reader

    with open_reader(f"{served.url}/{name}") as reader:
        meta = load_dataset_meta(reader)
        mark = served.mark()
        started = time.perf_counter()
        if cache_dir is None:
            build_manifest(reader, meta, progress=False)
        else:
            open_manifest(reader, meta, cache_dir=cache_dir, use_published=False, progress=False)
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "requests": sum(_files_of(served.records(mark), name).values())}


def _expected_files(root: Path) -> list[str]:
    from episodestream.lerobot import load_dataset_meta
    from episodestream.storage import LocalRangeReader

    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
    # the first sample is episode 1's: its data file is the only one read
    paths = {meta.episode_data_path(EPISODES[0])}
    paths |= {meta.episode_video_path(e, key) for e in EPISODES for key in meta.video_keys}
    return sorted(paths)


def run_lazy_open_bench(*, rounds: int, rtt_ms: float, workdir: Path) -> dict[str, Any]:
    from episodestream_tools.synthetic import ensure_synthetic_dataset

    served_root = workdir / "served"
    served_root.mkdir(parents=True, exist_ok=True)
    roots = {}
    for name, count in (("large", LARGE_FILES), ("small", SMALL_FILES)):
        roots[name] = ensure_synthetic_dataset(_spec(count), cache_dir=workdir / "datasets")
        link = served_root / name
        if not link.exists():
            link.symlink_to(roots[name], target_is_directory=True)
    expected = {name: _expected_files(root) for name, root in roots.items()}
    served = _Served(served_root, rtt_ms)
    runs: dict[str, list[dict[str, Any]]] = {"large": [], "small": []}
    try:
        with tempfile.TemporaryDirectory(prefix="lazy-open-") as caches:
            _open_first_sample(served, "small", Path(caches) / "warm-up")  # imports, codecs
            for r in range(rounds):
                order = ("large", "small") if r % 2 == 0 else ("small", "large")
                for name in order:
                    runs[name].append(_open_first_sample(served, name, Path(caches) / f"{r}{name}"))
            whole = {
                "build_manifest": _whole_index(served, "large", None),
                "open_manifest": _whole_index(served, "large", Path(caches) / "whole"),
            }
    finally:
        served.close()
    for run in runs["large"] + runs["small"]:
        run["outside_meta_requests"] = run["requests"] - run["meta_requests"]
        run["beyond_meta_seconds"] = run["seconds"] - run["meta_seconds"]
    ratios = {
        figure: statistics.median(
            large[figure] / small[figure]
            for large, small in zip(runs["large"], runs["small"], strict=True)
        )
        for figure in ("requests", "outside_meta_requests", "seconds", "beyond_meta_seconds")
    }
    return {
        "rounds": rounds,
        "rtt_ms": rtt_ms,
        "episodes": list(EPISODES),
        "files": {"large": LARGE_FILES, "small": SMALL_FILES},
        "large_files_touched": runs["large"][0]["files_outside_meta"],
        "only_the_episodes_files": all(
            run["files_outside_meta"] == expected[name]
            for name, named_runs in runs.items()
            for run in named_runs
        ),
        "median": {
            name: {
                figure: statistics.median(run[figure] for run in named_runs)
                for figure in (
                    "requests",
                    "meta_requests",
                    "video_requests",
                    "seconds",
                    "meta_seconds",
                    "beyond_meta_seconds",
                )
            }
            for name, named_runs in runs.items()
        },
        "ratio_large_over_small": ratios,
        "whole_large_index": whole,
        "runs": runs,
    }


def format_report(report: dict[str, Any]) -> str:
    median = report["median"]
    ratio = report["ratio_large_over_small"]
    lines = [
        f"EpisodeStreamDataset(url, episodes={report['episodes']}) to the first sample, "
        f"RTT {report['rtt_ms']:g} ms, {report['rounds']} interleaved rounds (medians):",
        f"files touched outside meta/ in the {report['files']['large']}-file dataset:",
        *(f"  {path}" for path in report["large_files_touched"]),
        f"only those episodes' files, every run: {report['only_the_episodes_files']}",
        "",
        "| dataset | video files | requests | of them meta/, videos/ | wall to first sample "
        "| metadata alone | wall beyond it |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in ("large", "small"):
        m = median[name]
        lines.append(
            f"| {name} | {report['files'][name]} | {m['requests']:g} | {m['meta_requests']:g}, "
            f"{m['video_requests']:g} | {m['seconds'] * 1000:.0f} ms "
            f"| {m['meta_seconds'] * 1000:.0f} ms | {m['beyond_meta_seconds'] * 1000:.0f} ms |"
        )
    lines.append(
        f"| large / small | {report['files']['large'] / report['files']['small']:g}x "
        f"| {ratio['requests']:.3f} | {ratio['outside_meta_requests']:.3f} outside meta/ "
        f"| {ratio['seconds']:.3f} | | {ratio['beyond_meta_seconds']:.3f} |"
    )
    built = report["whole_large_index"]["build_manifest"]
    cached = report["whole_large_index"]["open_manifest"]
    lines.append(
        f"\nfor scale, indexing the whole {report['files']['large']}-file dataset (one run "
        f"each): build_manifest {built['requests']} requests, {built['seconds']:.2f} s; "
        f"open_manifest into a cache (writes the whole sidecar) {cached['requests']} "
        f"requests, {cached['seconds']:.2f} s"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument(
        "--rtt-ms", type=float, default=50.0, help="emulated round trip (default 50; 0: none)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=REPO_ROOT / ".cache" / "benchmarks-lazy-open",
        help="where the datasets are written once and kept",
    )
    add_json_option(parser)
    args = parser.parse_args(argv)
    report = run_lazy_open_bench(rounds=args.rounds, rtt_ms=args.rtt_ms, workdir=args.workdir)
    return put_out(report, args.json, format_report(report))


if __name__ == "__main__":
    raise SystemExit(main())

"""Manifest and sidecar benchmark: sidecar load cost, requests to first video range, build rate.

Run: ``python -m benchmarks.manifest [--quick] [--json PATH]``.

- ``sidecar``: a sidecar synthesized for 32,768 episodes x 3 cameras x 300 frames (tables
  only, no video; 29.5 M samples) is written once, then loaded in a fresh process: load time,
  the process's RSS before and after, span look-up and per-file sample-table cost;
- ``first_range``: requests, bytes and wall time (in RTTs) from "open the dataset" (metadata +
  manifest) to the first episode's video bytes, through the WAN emulator (RTT 50 ms) — with
  the sidecar in the local cache, with only a published copy under the dataset root, and with
  no sidecar (built from the videos);
- ``build``: manifest build throughput (files/s) at RTT 50 ms for 1, 4 and 16 workers, as a
  fraction of the ideal (each worker indexes a file per two round trips: size, then moov).

nginx and the emulator run in a child process so their CPU does not slow the client.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks._common import ServerProcess, add_json_option, put_out
from episodestream.manifest import (
    SPAN_FIELDS,
    DatasetIdentity,
    EpisodeManifest,
    SpanArrays,
    write_sidecar,
)
from episodestream.manifest._manifest import TRACK_FIELD_KINDS

__all__ = ["main", "run_manifest_bench", "synthesize_manifest"]

MIB = 1024 * 1024
RTT_MS = 50.0
EPISODES = 32_768
CAMERAS = 3
FRAMES = 300
EPISODES_PER_FILE = 128  # 256 files per camera, 38,400 samples each
SAMPLE_BYTES = 3_000


# ------------------------------------------------------------------------ synthesized sidecar


def synthesize_manifest(
    episodes: int = EPISODES,
    cameras: int = CAMERAS,
    frames: int = FRAMES,
    episodes_per_file: int = EPISODES_PER_FILE,
) -> EpisodeManifest:
    """A manifest with realistic table sizes (no video behind it): fixed-length episodes,
    AV1-like samples (keyframe every 2), 1/15360 timescale at 30 fps."""
    files_per_camera = -(-episodes // episodes_per_file)
    num_files = files_per_camera * cameras
    per_file = np.full(num_files, episodes_per_file * frames, dtype=np.int64)
    last = episodes - (files_per_camera - 1) * episodes_per_file
    per_file[files_per_camera - 1 :: files_per_camera] = last * frames
    bounds = np.concatenate([[0], np.cumsum(per_file)])
    total = int(bounds[-1])
    local = np.arange(total, dtype=np.int64) - np.repeat(bounds[:-1], per_file)
    ticks = 512
    sizes = np.where(local % 2 == 0, SAMPLE_BYTES * 3 // 2, SAMPLE_BYTES // 2).astype(np.int64)
    offsets = np.empty(total, dtype=np.int64)
    for f in range(num_files):  # 768 cumsums of 38,400: fast enough
        lo, hi = bounds[f], bounds[f + 1]
        offsets[lo:hi] = 1_000_000 + np.concatenate([[0], np.cumsum(sizes[lo : hi - 1])])
    samples = {
        "dts": local * ticks,
        "cts_offset": np.zeros(total, dtype=np.int64),
        "pts": local * ticks,
        "sizes": sizes,
        "offsets": offsets,
        "keyframes": local % 2 == 0,
    }
    scalars: dict[str, Any] = {
        "track_id": 1,
        "timescale": 15_360,
        "width": 640,
        "height": 360,
        "codec": "av01",
        "stsd": b"\x00" * 180,
    }
    files: dict[str, Any] = {
        "path": [
            f"videos/observation.images.cam_{c}/chunk-000/file-{f:03d}.mp4"
            for c in range(cameras)
            for f in range(files_per_camera)
        ],
        "camera": [
            f"observation.images.cam_{c}" for c in range(cameras) for _ in range(files_per_camera)
        ],
        "size": 1_000_000 + per_file * SAMPLE_BYTES,
        "etag": [f'"{f:08x}-{f:04x}"' for f in range(num_files)],
        "last_modified": ["Mon, 01 Dec 2025 00:00:00 GMT"] * num_files,
        "sample_bounds": bounds,
    }
    for name, kind in TRACK_FIELD_KINDS.items():
        if kind == "array":
            continue
        if name == "duration":
            files[name] = [int(n) * ticks for n in per_file]
        else:
            files[name] = [scalars.get(name)] * num_files
    episode = np.arange(episodes, dtype=np.int64)
    in_file = episode % episodes_per_file
    spans: dict[str, np.ndarray] = {}
    for name, dtype in SPAN_FIELDS.items():
        spans[name] = np.zeros((episodes, cameras), dtype=dtype)
    for c in range(cameras):
        file_id = c * files_per_camera + episode // episodes_per_file
        start = bounds[file_id] + in_file * frames
        spans["file_id"][:, c] = file_id
        spans["sample_start"][:, c] = in_file * frames
        spans["sample_end"][:, c] = in_file * frames + frames
        spans["byte_start"][:, c] = offsets[start]
        spans["byte_end"][:, c] = offsets[start + frames - 1] + sizes[start + frames - 1]
        spans["from_timestamp_s"][:, c] = in_file * frames / 30
        spans["to_timestamp_s"][:, c] = (in_file + 1) * frames / 30
        spans["first_pts_s"][:, c] = in_file * frames / 30
        spans["last_pts_s"][:, c] = ((in_file + 1) * frames - 1) / 30
        spans["time_offset_s"][:, c] = in_file * frames / 30
        spans["frame_count"][:, c] = frames
    identity = DatasetIdentity(
        root="https://example.org/datasets/synthetic",
        revision="0" * 40,
        total_episodes=episodes,
        total_frames=episodes * frames,
        fps=30.0,
        cameras=tuple(f"observation.images.cam_{c}" for c in range(cameras)),
        info_sha256="0" * 64,
        episodes_sha256="0" * 64,
    )
    return EpisodeManifest(
        identity=identity,
        cameras=identity.cameras,
        episode_index=episode,
        spans=SpanArrays(**spans),
        files=files,
        samples=samples,
    )


_LOAD_PROBE = r"""
import json, sys, time, random
import psutil
process = psutil.Process()
import numpy as np
from episodestream.manifest import load_sidecar
rss_before = process.memory_info().rss
started = time.perf_counter()
manifest = load_sidecar(sys.argv[1])
load_s = time.perf_counter() - started
rss_loaded = process.memory_info().rss
rng = random.Random(0)
picks = [(rng.randrange(manifest.num_episodes), rng.randrange(len(manifest.cameras)))
         for _ in range(20000)]
started = time.perf_counter()
total = 0
for episode, camera in picks:
    total += manifest.span(episode, camera).byte_length
span_us = (time.perf_counter() - started) / len(picks) * 1e6
started = time.perf_counter()
for episode, camera in picks[:2000]:
    track = manifest.track(manifest.span(episode, camera).file_path)
    total += int(track.sizes[0])
track_us = (time.perf_counter() - started) / 2000 * 1e6
print(json.dumps({"load_s": load_s, "rss_before_mib": rss_before / 2**20,
                  "rss_loaded_mib": rss_loaded / 2**20,
                  "rss_after_lookups_mib": process.memory_info().rss / 2**20,
                  "span_lookup_us": span_us, "span_and_track_us": track_us,
                  "num_samples": manifest.num_samples, "num_files": manifest.num_files}))
"""


def bench_sidecar(workdir: Path, *, episodes: int, runs: int) -> dict[str, Any]:
    """Write the synthesized sidecar, then load it in fresh processes."""
    started = time.perf_counter()
    manifest = synthesize_manifest(episodes=episodes)
    synth_s = time.perf_counter() - started
    path = workdir / "big" / "index.arrow"
    started = time.perf_counter()
    write_sidecar(manifest, path)
    write_s = time.perf_counter() - started
    del manifest
    loads = []
    for _ in range(runs):
        output = subprocess.run(
            [sys.executable, "-c", _LOAD_PROBE, str(path)],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        ).stdout
        loads.append(json.loads(output))
    best = min(loads, key=lambda r: r["load_s"])
    return {
        "episodes": episodes,
        "cameras": CAMERAS,
        "frames": FRAMES,
        "sidecar_mib": path.stat().st_size / MIB,
        "synthesize_s": synth_s,
        "write_s": write_s,
        "load_s_runs": [r["load_s"] for r in loads],
        **best,
        "rss_added_mib": best["rss_loaded_mib"] - best["rss_before_mib"],
    }


# ------------------------------------------------------------------------ served datasets


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
        from episodestream_tools.serving import read_access_log

        time.sleep(0.2)  # nginx writes the log line after the response
        return read_access_log(self.log, since)[0]


def _replicated_dataset(base: Path, target: Path, files_per_camera: int) -> Path:
    """``base`` (one video file per camera) with its video files repeated (hard links)."""
    target.mkdir(parents=True)
    shutil.copytree(base / "meta", target / "meta", copy_function=shutil.copyfile)
    shutil.copytree(base / "data", target / "data", copy_function=shutil.copyfile)
    info = json.loads((base / "meta/info.json").read_text())
    episodes_path = next((base / "meta/episodes").rglob("*.parquet"))
    table = pq.read_table(episodes_path)
    keep = [
        c for c in table.column_names if not c.startswith("stats/") and not c.startswith("meta/")
    ]
    table = table.select(keep)
    rows = table.num_rows
    parts = []
    for f in range(files_per_camera):
        part = table
        part = part.set_column(0, "episode_index", pa.array(np.arange(rows) + f * rows))
        offset = f * int(np.sum(table.column("length").to_numpy()))
        for name in ("dataset_from_index", "dataset_to_index"):
            index = part.column_names.index(name)
            part = part.set_column(index, name, pa.array(table.column(name).to_numpy() + offset))
        for name in part.column_names:
            if name.startswith("videos/") and name.endswith("/file_index"):
                index = part.column_names.index(name)
                part = part.set_column(index, name, pa.array(np.full(rows, f)))
        parts.append(part)
    merged = pa.concat_tables(parts)
    for old in (target / "meta/episodes").rglob("*.parquet"):
        old.unlink()
    pq.write_table(merged, target / "meta/episodes/chunk-000/file-000.parquet")
    info["total_episodes"] = merged.num_rows
    info["total_frames"] = int(np.sum(merged.column("length").to_numpy()))
    (target / "meta/info.json").write_text(json.dumps(info, indent=2))
    for source in (base / "videos").rglob("file-000.mp4"):
        folder = target / source.parent.relative_to(base)
        folder.mkdir(parents=True, exist_ok=True)
        for f in range(files_per_camera):
            destination = folder / f"file-{f:03d}.mp4"
            try:
                os.link(source, destination)
            except OSError:
                shutil.copyfile(source, destination)
    return target


def _base_dataset(workdir: Path) -> Path:
    from episodestream_tools.synthetic import SyntheticSpec, ensure_synthetic_dataset

    spec = SyntheticSpec(
        width=64, height=48, episodes=4, min_length=60, max_length=90, episodes_per_file=4
    )
    return ensure_synthetic_dataset(spec, cache_dir=workdir / "synthetic-cache")


def _open_to_first_range(
    served: _Served, cache_dir: Path, *, use_published: bool
) -> dict[str, Any]:
    from episodestream.lerobot import load_dataset_meta
    from episodestream.manifest import open_manifest
    from episodestream.storage import open_reader

    mark = served.mark()
    started = time.perf_counter()
    with open_reader(served.url) as reader:
        meta = load_dataset_meta(reader, root=served.url)
        meta_s = time.perf_counter() - started
        manifest = open_manifest(
            reader, meta, cache_dir=cache_dir, use_published=use_published, progress=False
        )
        manifest_s = time.perf_counter() - started
        span = manifest.span(int(meta.episodes.episode_index[0]), meta.video_keys[0])
        payload = reader.read(span.file_path, span.byte_start, span.byte_length)
        first_s = time.perf_counter() - started
    records = served.records(mark)
    video = [r for r in records if r.uri.endswith(".mp4")]
    return {
        "origin": manifest.origin,
        "requests": len(records),
        "bytes": sum(r.body_bytes for r in records),
        "video_requests": len(video),
        "first_range_bytes": len(payload),
        "meta_rtts": meta_s / (RTT_MS / 1000),
        "manifest_rtts": manifest_s / (RTT_MS / 1000),
        "first_range_rtts": first_s / (RTT_MS / 1000),
        "seconds": first_s,
    }


def bench_first_range(workdir: Path, base: Path) -> dict[str, Any]:
    from episodestream.lerobot import load_dataset_meta
    from episodestream.manifest import PUBLISHED_SIDECAR_PATH, build_manifest
    from episodestream.storage import LocalRangeReader

    root = _replicated_dataset(base, workdir / "first-range", files_per_camera=8)
    served = _Served(root, RTT_MS)
    try:
        results = {
            "no_sidecar": _open_to_first_range(served, workdir / "cache-none", use_published=False)
        }
        results["local_cache"] = _open_to_first_range(
            served, workdir / "cache-none", use_published=False
        )
        with LocalRangeReader(root) as local:
            meta = load_dataset_meta(local, root=served.url)
            write_sidecar(
                build_manifest(local, meta, progress=False), root / PUBLISHED_SIDECAR_PATH
            )
        results["published"] = _open_to_first_range(
            served, workdir / "cache-published", use_published=True
        )
    finally:
        served.close()
    results["files"] = 8 * 3
    return results


def bench_build(
    workdir: Path, base: Path, *, files_per_camera: int, workers: list[int]
) -> dict[str, Any]:
    from episodestream.lerobot import load_dataset_meta
    from episodestream.manifest import build_manifest
    from episodestream.storage import open_reader

    root = _replicated_dataset(base, workdir / "build", files_per_camera=files_per_camera)
    served = _Served(root, RTT_MS)
    rows = []
    try:
        for count in workers:
            with open_reader(served.url) as reader:
                meta = load_dataset_meta(reader)
                mark = served.mark()
                started = time.perf_counter()
                manifest = build_manifest(reader, meta, workers=count, progress=False)
                seconds = time.perf_counter() - started
            records = served.records(mark)
            files = manifest.num_files
            ideal = count / (2 * RTT_MS / 1000)  # files/s: size, then one moov read each
            rows.append(
                {
                    "workers": count,
                    "files": files,
                    "seconds": seconds,
                    "files_per_s": files / seconds,
                    "fraction_of_ideal": files / seconds / ideal,
                    "requests_per_file": len(records) / files,
                    "kib_per_file": sum(r.body_bytes for r in records) / files / 1024,
                }
            )
    finally:
        served.close()
    return {"rtt_ms": RTT_MS, "rows": rows}


# ------------------------------------------------------------------------------- driver


def run_manifest_bench(*, quick: bool = False, workdir: Path | None = None) -> dict[str, Any]:
    """Run every part; returns a JSON-able dict of figures (see the module docstring)."""
    own = workdir is None
    base_dir = Path(tempfile.mkdtemp(prefix="es-manifest-bench-")) if own else Path(workdir)
    try:
        report: dict[str, Any] = {}
        report["sidecar"] = bench_sidecar(
            base_dir, episodes=4_096 if quick else EPISODES, runs=2 if quick else 3
        )
        base = _base_dataset(base_dir)
        report["first_range"] = bench_first_range(base_dir, base)
        report["build"] = bench_build(
            base_dir,
            base,
            files_per_camera=16 if quick else 64,
            workers=[1, 4] if quick else [1, 4, 16],
        )
        return report
    finally:
        if own:
            shutil.rmtree(base_dir, ignore_errors=True)


def format_report(report: dict[str, Any]) -> str:
    s = report["sidecar"]
    lines = [
        f"sidecar: {s['episodes']} episodes x {s['cameras']} cameras x {s['frames']} frames, "
        f"{s['num_samples']:,} samples in {s['num_files']} files, {s['sidecar_mib']:.0f} MiB "
        f"(written in {s['write_s']:.1f} s)",
        f"  load {s['load_s'] * 1000:.0f} ms (runs {[round(x * 1000) for x in s['load_s_runs']]})"
        f" = {s['load_s'] / 0.5:.2f} of the 0.5 s target; RSS {s['rss_before_mib']:.0f} -> "
        f"{s['rss_loaded_mib']:.0f} MiB (+{s['rss_added_mib']:.1f}) = "
        f"{s['rss_loaded_mib'] / 200:.2f} of the 200 MB target",
        f"  span lookup {s['span_lookup_us']:.1f} us, span + track "
        f"{s['span_and_track_us']:.1f} us, RSS after lookups {s['rss_after_lookups_mib']:.0f} MiB",
        f"open -> first video range at RTT {RTT_MS:.0f} ms "
        f"({report['first_range']['files']} files):",
    ]
    for name in ("local_cache", "published", "no_sidecar"):
        r = report["first_range"][name]
        lines.append(
            f"  {name:12s} origin={r['origin']:9s} requests={r['requests']:3d} "
            f"(video {r['video_requests']}) bytes={r['bytes']:,} meta={r['meta_rtts']:.1f} RTT "
            f"manifest={r['manifest_rtts']:.1f} RTT first range={r['first_range_rtts']:.1f} RTT"
        )
    lines.append(f"build at RTT {report['build']['rtt_ms']:.0f} ms:")
    for row in report["build"]["rows"]:
        lines.append(
            f"  workers={row['workers']:2d} files={row['files']} {row['files_per_s']:.1f} files/s "
            f"= {row['fraction_of_ideal']:.2f} of ideal; {row['requests_per_file']:.2f} "
            f"requests/file, {row['kib_per_file']:.0f} KiB/file"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sidecar, fewer files")
    add_json_option(parser)
    args = parser.parse_args(argv)
    report = run_manifest_bench(quick=args.quick)
    return put_out(report, args.json, format_report(report))


if __name__ == "__main__":
    raise SystemExit(main())

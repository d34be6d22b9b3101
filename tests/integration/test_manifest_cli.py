"""`episodestream index` and `episodestream inspect`, run as real subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from episodestream.lerobot import load_dataset_meta
from episodestream.manifest import (
    PUBLISHED_SIDECAR_PATH,
    EpisodeSubset,
    build_manifest,
    load_sidecar,
    sidecar_cache_path,
)
from episodestream.storage import LocalRangeReader


def run_cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "EPISODESTREAM_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "episodestream.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_index_then_inspect(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before = run_cli("inspect", str(lerobot_fixture_root), cache=cache)
    assert before.returncode == 0, before.stderr
    assert "episodes     5" in before.stdout
    assert "frames       244  at 30 fps" in before.stdout
    assert "sidecar      cache absent" in before.stdout

    indexed = run_cli("index", str(lerobot_fixture_root), "--workers", "2", cache=cache)
    assert indexed.returncode == 0, indexed.stderr
    path = Path(indexed.stdout.strip())
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
        expected = build_manifest(reader, meta, progress=False)
    assert path == sidecar_cache_path(meta, cache)
    loaded = load_sidecar(path)
    assert np.array_equal(loaded.spans.byte_end, expected.spans.byte_end)
    assert "indexed 9 video files, 5 episodes x 3 cameras" in indexed.stderr

    after = run_cli("inspect", str(lerobot_fixture_root), cache=cache)
    assert after.returncode == 0, after.stderr
    assert "sidecar      cache valid" in after.stdout
    assert "cameras      3" in after.stdout
    assert "observation.images.cam_high: 128x96 av1 (sample entry av01), 3 files" in after.stdout
    total = sum(
        (lerobot_fixture_root / p).stat().st_size
        for key in meta.video_keys
        for p in meta.video_files(key)
    )
    assert "in 9 files" in after.stdout and f"{total / 1024 / 1024:.1f} MiB" in after.stdout


def test_index_over_http_to_an_explicit_output(
    lerobot_sim5_url: str, lerobot_fixture_root: Path, tmp_path: Path
) -> None:
    output = tmp_path / "out" / "index.arrow"
    result = run_cli("index", lerobot_sim5_url, "--output", str(output), cache=tmp_path)
    assert result.returncode == 0, result.stderr
    loaded = load_sidecar(output)
    assert loaded.identity.root == lerobot_sim5_url
    assert all(s.etag is not None for s in loaded.sources())
    with LocalRangeReader(lerobot_fixture_root) as reader:
        local = build_manifest(reader, load_dataset_meta(reader), progress=False)
    assert np.array_equal(loaded.spans.sample_end, local.spans.sample_end)


def test_errors_are_reported_not_raised(tmp_path: Path) -> None:
    result = run_cli("index", str(tmp_path), cache=tmp_path)
    assert result.returncode == 2
    assert "meta/info.json: required file is missing" in result.stderr
    assert "Traceback" not in result.stderr


def test_index_episodes_builds_a_subset_sidecar_beside_the_whole_one(
    lerobot_fixture_root: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
        whole = build_manifest(reader, meta, progress=False)

    subset = run_cli("index", str(lerobot_fixture_root), "--episodes", "3,1", cache=cache)
    assert subset.returncode == 0, subset.stderr
    subset_path = Path(subset.stdout.strip())
    assert subset_path == sidecar_cache_path(meta, cache, episodes=[1, 3])
    assert "2 of 5 episodes x 3 cameras" in subset.stderr
    loaded = load_sidecar(subset_path)
    assert loaded.identity.episodes == EpisodeSubset(((1, 2), (3, 4)))
    for camera in meta.video_keys:
        assert loaded.span(3, camera) == whole.span(3, camera)
    kept = subset_path.read_bytes()

    full = run_cli("index", str(lerobot_fixture_root), cache=cache)
    assert full.returncode == 0, full.stderr
    full_path = Path(full.stdout.strip())
    assert full_path == sidecar_cache_path(meta, cache) != subset_path
    assert load_sidecar(full_path).identity.episodes is None
    assert subset_path.read_bytes() == kept  # neither overwrites the other

    inspected = run_cli("inspect", str(lerobot_fixture_root), cache=cache)
    assert inspected.returncode == 0, inspected.stderr
    assert f"sidecar      cache valid ({full_path})" in inspected.stdout
    assert f"sidecar      cache partial ({subset_path}): the sidecar indexes only 2" in (
        inspected.stdout
    )


def test_index_num_episodes_indexes_the_first_n(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    output = tmp_path / "first2.arrow"
    result = run_cli(
        "index", str(lerobot_fixture_root), "--num-episodes", "2", "-o", str(output), cache=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == output
    loaded = load_sidecar(output)
    assert loaded.identity.episodes == EpisodeSubset(((0, 2),))
    assert loaded.episode_index.tolist() == [0, 1]
    # N at least the dataset's size is every episode: the whole dataset's sidecar
    every = run_cli("index", str(lerobot_fixture_root), "--num-episodes", "9", cache=tmp_path)
    assert every.returncode == 0, every.stderr
    assert load_sidecar(Path(every.stdout.strip())).identity.episodes is None
    assert "5 episodes x 3 cameras" in every.stderr


def test_index_subset_errors(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    root = str(lerobot_fixture_root)
    unknown = run_cli("index", root, "--episodes", "1,9,12", cache=tmp_path)
    assert unknown.returncode == 2
    assert "unknown episode(s) 9, 12: the dataset has episodes 0..4" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    assert not (tmp_path / "sidecars").exists()

    both = run_cli("index", root, "--episodes", "1", "--num-episodes", "2", cache=tmp_path)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    for bad, message in (
        (("--episodes", "1,x"), "episodes are comma-separated integers"),
        (("--episodes", "-1"), "episodes must be >= 0"),
        (("--episodes", ","), "episodes: give at least one"),
        (("--num-episodes", "0"), "must be >= 1"),
    ):
        result = run_cli("index", root, *bad, cache=tmp_path)
        assert result.returncode == 2 and message in result.stderr, (bad, result.stderr)

    for publish in ("--publish", "--publish-pr"):
        refused = run_cli("index", root, "--num-episodes", "2", publish, cache=tmp_path)
        assert refused.returncode == 2
        assert "a published sidecar is the dataset's whole index" in refused.stderr
    assert not (lerobot_fixture_root / PUBLISHED_SIDECAR_PATH).exists()
    assert not (tmp_path / "sidecars").exists()  # refused before anything was built


def test_bench_on_indexed_episodes_uses_their_subset_sidecar(
    lerobot_fixture_root: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    root = str(lerobot_fixture_root)
    indexed = run_cli("index", root, "--episodes", "1,3", cache=cache)
    assert indexed.returncode == 0, indexed.stderr
    subset_path = Path(indexed.stdout.strip())
    files_before = sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file())

    report = tmp_path / "bench.json"
    bench = run_cli(
        "bench", root, "--episodes", "3,1", "--tracks", "stream", "--samples", "8",
        "--no-progress", "--json", str(report),
        cache=cache,
    )  # fmt: skip
    assert bench.returncode == 0, bench.stderr
    data = json.loads(report.read_text())
    dataset, fetch = data["dataset"], data["fetch"]
    assert dataset["index_origin"] == "cache"  # found, not built
    # the report says its index (and so its video and byte figures) covers two episodes of
    # the dataset's five, and makes no whole-dataset estimate from those two
    assert dataset["episodes"] == 5
    assert dataset["index_episodes"] == fetch["index_episodes"] == 2
    assert fetch["dataset_episodes"] == 2
    assert fetch["estimated_s_whole_dataset"] is None
    assert fetch["estimated_s_benchmark_episodes"] > 0
    assert "of 2 episodes only (a subset's index" in bench.stdout
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
    assert not sidecar_cache_path(meta, cache).exists()  # the whole index was never built
    assert sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file()) == files_before
    assert subset_path.exists()

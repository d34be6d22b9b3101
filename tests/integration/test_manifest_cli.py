"""`episodestream index` and `episodestream inspect`, run as real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from episodestream.lerobot import load_dataset_meta
from episodestream.manifest import build_manifest, load_sidecar, sidecar_cache_path
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

"""write_synthetic_dataset / ensure_synthetic_dataset / make-dataset: validation, atomic
writes, overwrite rules, determinism and the cache."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torchcodec.decoders import VideoDecoder

from episodestream.cli import main
from episodestream.errors import DatasetFormatError, LocationError
from episodestream_tools.synthetic import (
    DEFAULT_CAMERAS,
    DEMO_SPEC,
    SyntheticSpec,
    default_cache_dir,
    ensure_synthetic_dataset,
    read_frame_identity,
    write_synthetic_dataset,
)

# one camera, 3 short episodes: cheap to write again and again
TINY = SyntheticSpec(
    cameras=("observation.images.front",),
    width=64,
    height=48,
    episodes=3,
    min_length=3,
    max_length=5,
    seed=5,
)


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"codec": "vp9"}, "unknown codec"),
        ({"episodes": 0}, "episodes 0"),
        ({"width": 63}, "even"),
        ({"width": 0}, "positive"),
        ({"width": 32, "height": 32}, "cannot hold"),
        ({"min_length": 10, "max_length": 5}, "length range"),
        ({"min_length": 0}, "length range"),
        ({"fps": 0}, "fps"),
        ({"moov": "middle"}, "moov"),
        ({"cameras": ()}, "camera"),
        ({"cameras": ("a.b", "a.b")}, "repeat"),
        ({"cameras": ("videos/x",)}, "without '/'"),
        ({"tasks": ()}, "tasks"),
        ({"episodes_per_file": 0}, "episodes_per_file"),
        ({"state_size": -1}, "state_size"),
        ({"width": 64.0}, "int"),
    ],
)
def test_bad_specs_are_refused_with_a_clear_error(changes: dict, message: str) -> None:
    with pytest.raises(DatasetFormatError, match=message) as caught:
        dataclasses.replace(TINY, **changes)
    assert isinstance(caught.value, ValueError)


def test_bad_input_leaves_nothing_behind(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    # unwritable destination: its parent is a file
    with pytest.raises(LocationError, match="cannot write"):
        write_synthetic_dataset(blocker / "ds", TINY)
    # destination is a file
    with pytest.raises(LocationError, match="not a folder"):
        write_synthetic_dataset(blocker, TINY)
    # the encoder refuses a width SVT-AV1 cannot do: fails half way, after files were written
    too_wide = dataclasses.replace(TINY, width=16400, episodes=1, min_length=1, max_length=1)
    with pytest.raises(DatasetFormatError, match="could not encode"):
        write_synthetic_dataset(tmp_path / "wide", too_wide)
    assert not (tmp_path / "wide").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_existing_folders_are_kept_unless_overwrite(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert write_synthetic_dataset(empty, TINY) == empty  # an empty folder is fine
    with pytest.raises(LocationError, match="not empty"):
        write_synthetic_dataset(empty, TINY)
    # overwrite replaces a dataset, here with a different one
    other = dataclasses.replace(TINY, episodes=2)
    write_synthetic_dataset(empty, other, overwrite=True)
    assert json.loads((empty / "meta/info.json").read_text())["total_episodes"] == 2
    # but never a folder that is not a dataset
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(LocationError, match="does not look like a LeRobot dataset"):
        write_synthetic_dataset(precious, TINY, overwrite=True)
    assert (precious / "notes.txt").read_text() == "keep me"
    assert _leftovers(tmp_path) == []


def test_same_seed_same_dataset_other_seed_other_dataset(tmp_path: Path) -> None:
    first = write_synthetic_dataset(tmp_path / "one", TINY)
    second = write_synthetic_dataset(tmp_path / "two", TINY)
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for relative in files:
        if relative.suffix in (".parquet", ".json"):
            assert (first / relative).read_bytes() == (second / relative).read_bytes(), relative
        elif relative.suffix == ".mp4":
            a = VideoDecoder(str(first / relative))
            b = VideoDecoder(str(second / relative))
            assert len(a) == len(b)
            assert np.array_equal(
                a.get_frames_in_range(0, len(a)).data, b.get_frames_in_range(0, len(b)).data
            )
    third = write_synthetic_dataset(tmp_path / "three", dataclasses.replace(TINY, seed=6))
    a = pq.read_table(first / "data/chunk-000/file-000.parquet")
    b = pq.read_table(third / "data/chunk-000/file-000.parquet")
    assert not a.equals(b)


def test_ensure_writes_once_and_keys_on_every_parameter(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    root = ensure_synthetic_dataset(TINY, cache_dir=cache)
    info = root / "meta" / "info.json"
    stamp = info.stat().st_mtime_ns
    assert ensure_synthetic_dataset(TINY, cache_dir=cache) == root
    assert info.stat().st_mtime_ns == stamp  # not written again
    assert read_frame_identity(VideoDecoder(str(next((root / "videos").rglob("*.mp4"))))[0]) == (
        0,
        0,
    )
    keys = {TINY.cache_key()}
    for changes in (
        {"seed": 6},
        {"codec": "h264"},
        {"moov": "end"},
        {"fps": 15},
        {"tasks": ("x",)},
        {"image_layout": "chw"},
        {"episodes_per_data_file": 1},
    ):
        keys.add(dataclasses.replace(TINY, **changes).cache_key())
    assert len(keys) == 8
    other = ensure_synthetic_dataset(dataclasses.replace(TINY, seed=6), cache_dir=cache)
    assert other != root and other.parent == root.parent


def test_default_cache_dir_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EPISODESTREAM_CACHE", str(tmp_path / "here"))
    assert default_cache_dir() == tmp_path / "here"
    monkeypatch.delenv("EPISODESTREAM_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "episodestream"


@settings(max_examples=40, deadline=None)
@given(episodes=st.integers(2, 500))
def test_default_file_split_puts_several_episodes_in_at_least_two_files(episodes: int) -> None:
    spec = dataclasses.replace(TINY, episodes=episodes, episodes_per_file=None)
    assert spec.episodes_per_file is not None and spec.episodes_per_file >= 1
    files = -(-episodes // spec.episodes_per_file)
    assert files >= 2
    if episodes >= 12:
        assert spec.episodes_per_file >= 6
    lengths = spec.episode_lengths()
    assert len(lengths) == episodes
    assert lengths.min() >= spec.min_length and lengths.max() <= spec.max_length


def test_demo_spec_is_the_advertised_dataset() -> None:
    assert DEMO_SPEC.cameras == DEFAULT_CAMERAS
    assert DEMO_SPEC.codec == "av1" and DEMO_SPEC.fps == 30 and DEMO_SPEC.moov == "start"
    assert 24 <= DEMO_SPEC.episodes <= 60
    assert DEMO_SPEC.episodes // DEMO_SPEC.episodes_per_file >= 2


def test_make_dataset_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    argv = [
        "make-dataset",
        str(out),
        "--cameras",
        "observation.images.top",
        "observation.images.side",
        "--size",
        "64x48",
        "--fps",
        "15",
        "--episodes",
        "4",
        "--length",
        "3:6",
        "--episodes-per-file",
        "2",
        "--codec",
        "h264",
        "--moov",
        "end",
        "--state-size",
        "3",
        "--action-size",
        "0",
        "--task",
        "stack the cups",
        "--seed",
        "9",
    ]
    assert main(argv) == 0
    assert str(out) in capsys.readouterr().out
    info = json.loads((out / "meta/info.json").read_text())
    assert info["fps"] == 15 and info["total_episodes"] == 4
    assert "action" not in info["features"]
    assert info["features"]["observation.state"]["shape"] == [3]
    assert info["features"]["observation.images.side"]["info"]["video.codec"] == "h264"
    tasks = pq.read_table(out / "meta/tasks.parquet").column("__index_level_0__").to_pylist()
    assert tasks == ["stack the cups"]
    assert len(list((out / "videos/observation.images.top").rglob("*.mp4"))) == 2
    # the same spec through the library gives the same tables
    spec = SyntheticSpec(
        cameras=("observation.images.top", "observation.images.side"),
        width=64,
        height=48,
        fps=15,
        episodes=4,
        min_length=3,
        max_length=6,
        episodes_per_file=2,
        codec="h264",
        moov="end",
        state_size=3,
        action_size=0,
        tasks=("stack the cups",),
        seed=9,
    )
    again = write_synthetic_dataset(tmp_path / "lib", spec)
    for relative in ("data/chunk-000/file-000.parquet", "meta/episodes/chunk-000/file-000.parquet"):
        assert (out / relative).read_bytes() == (again / relative).read_bytes()
    # refusing to overwrite is an error status, with the reason on stderr
    assert main(["make-dataset", str(out), "--size", "64x48"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (
        main(["make-dataset", str(out), "--size", "64x48", "--episodes", "2", "--overwrite"]) == 0
    )
    assert json.loads((out / "meta/info.json").read_text())["total_episodes"] == 2
    with pytest.raises(SystemExit):
        main(["make-dataset", str(out), "--codec", "vp9"])
    with pytest.raises(SystemExit):
        main(["make-dataset", str(out), "--size", "64by48"])
    assert main(["make-dataset", str(tmp_path / "zero"), "--episodes", "0"]) == 2
    assert not (tmp_path / "zero").exists()
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []

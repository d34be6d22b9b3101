"""LeRobot's spelling of our datasets: constructor arguments and the LeRobot-shaped ``meta``,
checked against the fixture's files read the way LeRobot reads them (pandas, pyarrow, json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from episodestream import ConfigError, EpisodeStreamDataset
from episodestream.datasets._compat import decoder_for_backend, resolve_dataset_name


def test_repo_id_and_root_are_read_as_lerobot_reads_them(tmp_path: Path) -> None:
    bare = resolve_dataset_name("org/name", None)
    assert bare.location.url == "hf://datasets/org/name" and bare.repo_id == "org/name"
    bucket = resolve_dataset_name("org/name", None, repo_type="bucket")
    assert bucket.location.url == "hf://buckets/org/name"
    given = resolve_dataset_name("org/name", "https://host/data/name")
    assert given.location.url == "https://host/data/name" and given.repo_id == "org/name"
    ours = resolve_dataset_name(str(tmp_path / "a" / "b"), None)  # our spelling: a root
    assert ours.location.kind == "local" and ours.repo_id == "a/b"
    assert ours.root == tmp_path / "a" / "b"
    hub = resolve_dataset_name("hf://datasets/org/name@v1.0", None)
    assert hub.repo_id == "org/name" and hub.location.revision == "v1.0"
    with pytest.raises(ConfigError, match=r"root .* or a repo_id"):
        resolve_dataset_name(None, None)
    with pytest.raises(ConfigError, match="repo_type"):
        resolve_dataset_name("org/name", None, repo_type="model")


def test_video_backend_maps_to_our_decoder() -> None:
    assert decoder_for_backend(None, "auto") == "auto"
    assert decoder_for_backend("pyav", "auto") == "pyav"
    assert decoder_for_backend("torchcodec", "auto") == "torchcodec"
    assert decoder_for_backend("pyav", "torchcodec") == "torchcodec"  # ours wins when set
    with pytest.raises(ConfigError, match="video_reader"):
        decoder_for_backend("video_reader", "auto")


@pytest.fixture(scope="module")
def streamed(lerobot_fixture_root: Path, tmp_path_factory: pytest.TempPathFactory):
    cache = tmp_path_factory.mktemp("compat-cache")
    with EpisodeStreamDataset(
        "local/sim5",
        root=lerobot_fixture_root,
        cache_dir=cache,
        force_cache_sync=False,  # LeRobot's download switches are accepted, without effect
        download_videos=True,
        video_backend="pyav",
        tolerance_s=1e-4,
    ) as dataset:
        yield dataset


def test_meta_has_lerobots_shapes(streamed, lerobot_fixture_root: Path) -> None:
    meta = streamed.meta
    info = json.loads((lerobot_fixture_root / "meta/info.json").read_text())
    assert bool(meta) and meta.repo_id == streamed.repo_id == "local/sim5"
    assert meta.fps == info["fps"] and type(meta.fps) is type(info["fps"])
    assert list(meta.features) == list(info["features"])
    for key, feature in info["features"].items():
        assert meta.features[key] == {**feature, "shape": tuple(feature["shape"])}
        assert meta.info.features[key] is meta.features[key]  # attribute access (0.6)
    assert (
        meta.video_keys
        == meta.camera_keys
        == [k for k, f in info["features"].items() if f["dtype"] == "video"]
    )
    assert meta.total_frames == info["total_frames"] == streamed.num_frames
    # stats: LeRobot's np.array(value) of every leaf, mutable and our own copy
    stats = json.loads((lerobot_fixture_root / "meta/stats.json").read_text())
    for key, by_stat in stats.items():
        for stat, value in by_stat.items():
            expected = np.array(value)
            assert meta.stats[key][stat].dtype == expected.dtype
            assert np.array_equal(meta.stats[key][stat], expected)
    meta.stats["action"]["mean"] = "replaced"
    assert streamed.meta.stats["action"]["mean"] == "replaced"
    assert streamed.dataset.meta.stats["action"]["mean"] != "replaced"


def test_episodes_and_tasks_as_lerobot_loads_them(streamed, lerobot_fixture_root: Path) -> None:
    table = pq.read_table(lerobot_fixture_root / "meta/episodes/chunk-000/file-000.parquet")
    columns = [c for c in table.column_names if not c.startswith("stats/")]
    episodes = streamed.meta.episodes
    assert episodes.column_names == columns and len(episodes) == table.num_rows
    for column in columns:
        assert episodes[column] == table.column(column).to_pylist()
    assert episodes[2] == {c: table.column(c)[2].as_py() for c in columns}
    assert episodes[-1]["episode_index"] == 4
    assert list(episodes)[1]["length"] == table.column("length")[1].as_py()
    assert episodes.to_pandas()["dataset_to_index"].tolist() == episodes["dataset_to_index"]
    with pytest.raises(IndexError):
        episodes[5]
    tasks = pd.read_parquet(lerobot_fixture_root / "meta/tasks.parquet")
    pd.testing.assert_frame_equal(streamed.meta.tasks, tasks, check_index_type=False)
    first = tasks.index[0]
    assert streamed.meta.get_task_index(first) == int(tasks.loc[first].task_index)
    assert streamed.meta.get_task_index("no such task") is None

"""The synthetic writer's tables and metadata follow LeRobot v3.0 (shared/LEROBOT_V3.md) and
match, column for column and type for type, what LeRobot itself wrote in lerobot_sim5."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torchcodec.decoders import VideoDecoder

from episodestream_tools.synthetic import DEFAULT_CAMERAS, SyntheticSpec
from tests.plugins.synthetic import SYNTHETIC_AV1_SPEC, SYNTHETIC_CHUNKED_SPEC

STATS = ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99")
INFO_KEYS = {
    "codebase_version",
    "robot_type",
    "total_episodes",
    "total_frames",
    "total_tasks",
    "chunks_size",
    "data_files_size_in_mb",
    "video_files_size_in_mb",
    "fps",
    "splits",
    "data_path",
    "video_path",
    "features",
}
# a spec shaped like lerobot_sim5: its three cameras, state and action of 6
SIM5_SHAPED_SPEC = SyntheticSpec(
    cameras=DEFAULT_CAMERAS,
    width=64,
    height=48,
    episodes=3,
    min_length=4,
    max_length=6,
    image_layout="chw",
    seed=3,
)


def _info(root: Path) -> dict:
    return json.loads((root / "meta" / "info.json").read_text())


def _episodes(root: Path) -> list[dict]:
    files = sorted((root / "meta" / "episodes").rglob("*.parquet"))
    return [row for f in files for row in pq.read_table(f).to_pylist()]


def _data(root: Path) -> pa.Table:
    files = sorted((root / "data").rglob("*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files])


def _video_keys(info: dict) -> list[str]:
    return [k for k, v in info["features"].items() if v["dtype"] == "video"]


@pytest.fixture(scope="module")
def sim5_shaped(synthetic_dataset) -> Path:
    return synthetic_dataset(SIM5_SHAPED_SPEC)


def test_info_json_has_every_field_and_true_totals(synthetic_av1: Path) -> None:
    info = _info(synthetic_av1)
    spec = SYNTHETIC_AV1_SPEC
    assert set(info) == INFO_KEYS
    assert info["codebase_version"] == "v3.0"
    assert info["total_episodes"] == spec.episodes
    assert (
        info["total_frames"] == int(spec.episode_lengths().sum()) == _data(synthetic_av1).num_rows
    )
    assert info["total_tasks"] == 3
    assert info["fps"] == spec.fps
    assert info["splits"] == {"train": f"0:{spec.episodes}"}
    assert _video_keys(info) == list(spec.cameras)
    for key in spec.cameras:
        feature = info["features"][key]
        assert feature["shape"] == [spec.height, spec.width, 3]
        assert feature["names"] == ["height", "width", "channels"]
        assert feature["info"]["video.codec"] == "av1"
        assert feature["info"]["video.pix_fmt"] == "yuv420p"
        assert feature["info"]["video.fps"] == spec.fps
        assert (feature["info"]["video.width"], feature["info"]["video.height"]) == (64, 48)
    assert info["features"]["observation.state"]["shape"] == [6]
    assert info["features"]["timestamp"] == {"dtype": "float32", "shape": [1], "names": None}


def test_episode_rows_are_consistent(synthetic_av1: Path) -> None:
    info = _info(synthetic_av1)
    rows = _episodes(synthetic_av1)
    fps = info["fps"]
    assert [r["episode_index"] for r in rows] == list(range(info["total_episodes"]))
    assert list(SYNTHETIC_AV1_SPEC.episode_lengths()) == [r["length"] for r in rows]
    # global frame ranges: contiguous, end exclusive, covering every frame once
    assert rows[0]["dataset_from_index"] == 0
    for before, after in itertools.pairwise(rows):
        assert after["dataset_from_index"] == before["dataset_to_index"]
    assert rows[-1]["dataset_to_index"] == info["total_frames"]
    for row in rows:
        assert row["dataset_to_index"] - row["dataset_from_index"] == row["length"]
        assert len(row["tasks"]) == 1
        assert (row["meta/episodes/chunk_index"], row["meta/episodes/file_index"]) == (0, 0)
    for key in _video_keys(info):
        previous_file, previous_to = None, 0.0
        for row in rows:
            where = (row[f"videos/{key}/chunk_index"], row[f"videos/{key}/file_index"])
            path = synthetic_av1 / info["video_path"].format(
                video_key=key, chunk_index=where[0], file_index=where[1]
            )
            assert path.is_file()
            start = row[f"videos/{key}/from_timestamp"]
            end = row[f"videos/{key}/to_timestamp"]
            # episodes lie back to back in each file, the first at 0
            assert start == (previous_to if where == previous_file else 0.0)
            assert end - start == pytest.approx(row["length"] / fps, abs=1e-9)
            previous_file, previous_to = where, end
    # 3 episodes per file: two files per camera
    files = {(r[f"videos/{DEFAULT_CAMERAS[0]}/file_index"]) for r in rows}
    assert files == {0, 1}


def test_video_durations_match_episode_timestamps(synthetic_av1: Path) -> None:
    info = _info(synthetic_av1)
    rows = _episodes(synthetic_av1)
    key = _video_keys(info)[0]
    for file_index in (0, 1):
        in_file = [r for r in rows if r[f"videos/{key}/file_index"] == file_index]
        decoder = VideoDecoder(
            str(synthetic_av1 / f"videos/{key}/chunk-000/file-{file_index:03d}.mp4")
        )
        assert len(decoder) == sum(r["length"] for r in in_file)
        last = decoder.get_frame_at(len(decoder) - 1)
        # the last frame presents one frame period before the last episode's to_timestamp
        assert last.pts_seconds + 1 / info["fps"] == pytest.approx(
            in_file[-1][f"videos/{key}/to_timestamp"], abs=1e-4
        )


def test_data_rows_match_episodes_and_tasks(synthetic_av1: Path) -> None:
    info = _info(synthetic_av1)
    rows = _episodes(synthetic_av1)
    tasks = pq.read_table(synthetic_av1 / "meta" / "tasks.parquet").to_pylist()
    task_text = {t["task_index"]: t["__index_level_0__"] for t in tasks}
    assert sorted(task_text) == list(range(info["total_tasks"]))
    data = _data(synthetic_av1).to_pydict()
    assert data["index"] == list(range(info["total_frames"]))
    for row in rows:
        sl = slice(row["dataset_from_index"], row["dataset_to_index"])
        assert set(data["episode_index"][sl]) == {row["episode_index"]}
        assert data["frame_index"][sl] == list(range(row["length"]))
        timestamps = np.array(data["timestamp"][sl], dtype=np.float32)
        expected = (np.arange(row["length"]) / info["fps"]).astype(np.float32)
        np.testing.assert_array_equal(timestamps, expected)
        assert {task_text[t] for t in data["task_index"][sl]} == set(row["tasks"])
        # the episode's data file holds all its rows
        path = synthetic_av1 / info["data_path"].format(
            chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
        )
        in_file = pq.read_table(path, columns=["episode_index"]).column(0).to_pylist()
        assert in_file.count(row["episode_index"]) == row["length"]
    # 4 episodes per data file: two files, split elsewhere than the videos
    assert [r["data/file_index"] for r in rows] == [0, 0, 0, 0, 1, 1]


def test_stats_are_the_stats_of_the_written_values(synthetic_av1: Path) -> None:
    info = _info(synthetic_av1)
    rows = _episodes(synthetic_av1)
    data = _data(synthetic_av1)
    state = np.array(data.column("observation.state").to_pylist(), dtype=np.float32)
    stats = json.loads((synthetic_av1 / "meta" / "stats.json").read_text())
    assert set(stats) == set(info["features"])
    for feature in stats:
        assert set(stats[feature]) == set(STATS)
    np.testing.assert_allclose(stats["observation.state"]["mean"], state.mean(0), rtol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["std"], state.std(0), rtol=1e-5)
    np.testing.assert_allclose(
        stats["observation.state"]["q90"], np.quantile(state.astype(np.float64), 0.9, axis=0)
    )
    assert stats["frame_index"]["max"] == [max(r["length"] for r in rows) - 1]
    assert stats["index"]["count"] == [info["total_frames"]]
    for row in rows:
        sl = slice(row["dataset_from_index"], row["dataset_to_index"])
        np.testing.assert_allclose(row["stats/observation.state/min"], state[sl].min(0))
        np.testing.assert_allclose(
            row["stats/action/max"],
            np.array(data.column("action").to_pylist()[sl], dtype=np.float32).max(0),
        )
        assert row["stats/episode_index/mean"] == [float(row["episode_index"])]
        assert row["stats/timestamp/count"] == [row["length"]]
    # image statistics: channel-wise (3, 1, 1) in [0, 1], ordered, near the decoded pixels
    key = _video_keys(info)[0]
    image = {name: np.array(stats[key][name]) for name in STATS if name != "count"}
    for values in image.values():
        assert values.shape == (3, 1, 1)
        assert ((values >= 0) & (values <= 1)).all()
    order = ["min", "q01", "q10", "q50", "q90", "q99", "max"]
    for lower, upper in itertools.pairwise(order):
        assert (image[lower] <= image[upper]).all()
    decoder = VideoDecoder(str(synthetic_av1 / f"videos/{key}/chunk-000/file-000.mp4"))
    frames = decoder.get_frames_in_range(0, len(decoder)).data.numpy() / 255.0
    first_file = [r for r in rows if r[f"videos/{key}/file_index"] == 0]
    file_mean = np.average(
        [np.array(r[f"stats/{key}/mean"]).ravel() for r in first_file],
        axis=0,
        weights=[r["length"] for r in first_file],
    )
    np.testing.assert_allclose(file_mean, frames.mean(axis=(0, 2, 3)), atol=0.02)


def test_columns_and_types_match_lerobot_written_dataset(
    sim5_shaped: Path, lerobot_fixture_root: Path
) -> None:
    for relative in (
        "meta/episodes/chunk-000/file-000.parquet",
        "data/chunk-000/file-000.parquet",
        "meta/tasks.parquet",
    ):
        ours = pq.read_schema(sim5_shaped / relative)
        theirs = pq.read_schema(lerobot_fixture_root / relative)
        assert ours.names == theirs.names, relative
        for field in theirs:
            assert ours.field(field.name).type == field.type, (relative, field.name)
    assert pq.read_schema(sim5_shaped / "meta/tasks.parquet").pandas_metadata["index_columns"] == [
        "__index_level_0__"
    ]
    info, reference = _info(sim5_shaped), _info(lerobot_fixture_root)
    assert set(info) == set(reference)
    assert list(info["features"]) == list(reference["features"])
    for key, feature in reference["features"].items():
        assert set(info["features"][key]) == set(feature)
        assert info["features"][key]["dtype"] == feature["dtype"]
        if feature["dtype"] == "video":
            assert info["features"][key]["names"] == feature["names"]
            assert set(info["features"][key]["info"]) == set(feature["info"])
    stats = json.loads((sim5_shaped / "meta/stats.json").read_text())
    reference_stats = json.loads((lerobot_fixture_root / "meta/stats.json").read_text())
    assert set(stats) == set(reference_stats)
    for feature, values in reference_stats.items():
        for name, value in values.items():
            assert np.shape(stats[feature][name]) == np.shape(value), (feature, name)


def test_files_spill_into_the_next_chunk(synthetic_chunked: Path) -> None:
    info = _info(synthetic_chunked)
    rows = _episodes(synthetic_chunked)
    key = SYNTHETIC_CHUNKED_SPEC.cameras[0]
    assert info["chunks_size"] == 2
    assert info["features"][key]["shape"] == [3, 48, 64]
    places = [(r[f"videos/{key}/chunk_index"], r[f"videos/{key}/file_index"]) for r in rows]
    assert places == [(0, 0), (0, 0), (0, 1), (0, 1), (1, 0), (1, 0)]
    data_places = [(r["data/chunk_index"], r["data/file_index"]) for r in rows]
    assert data_places == places
    assert (synthetic_chunked / f"videos/{key}/chunk-001/file-000.mp4").is_file()
    assert (synthetic_chunked / "data/chunk-001/file-000.parquet").is_file()

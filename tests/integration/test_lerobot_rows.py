"""Per-episode rows equal a full pyarrow read filtered by episode, reading only what is needed."""

from __future__ import annotations

import json
import pickle
import random
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from episodestream.errors import DatasetFormatError
from episodestream.lerobot import EpisodeRowReader, load_dataset_meta
from episodestream.lerobot._rows import column_to_numpy
from episodestream.storage import LocalRangeReader, open_reader

DATA = "data/chunk-000/file-000.parquet"


def write_table_dataset(
    root: Path,
    *,
    lengths: list[int],
    episodes_per_file: int,
    row_group_size: int,
    state_size: int = 32,
    shuffle_file: int | None = None,
) -> Path:
    """A LeRobot v3 dataset without cameras: numeric features only, several data files."""
    rng = np.random.default_rng(7)
    features = {
        "observation.state": {"dtype": "float32", "shape": [state_size], "names": None},
        "action": {"dtype": "float64", "shape": [2, 3], "names": None},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
        "timestamp": {"dtype": "float32", "shape": [1], "names": None},
        "frame_index": {"dtype": "int64", "shape": [1], "names": None},
        "episode_index": {"dtype": "int64", "shape": [1], "names": None},
        "index": {"dtype": "int64", "shape": [1], "names": None},
        "task_index": {"dtype": "int64", "shape": [1], "names": None},
    }
    info = {
        "codebase_version": "v3.0",
        "robot_type": "test",
        "total_episodes": len(lengths),
        "total_frames": sum(lengths),
        "total_tasks": 1,
        "chunks_size": 1000,
        "fps": 10,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": None,
        "features": features,
    }
    (root / "meta/episodes/chunk-000").mkdir(parents=True)
    (root / "data/chunk-000").mkdir(parents=True)
    (root / "meta/info.json").write_text(json.dumps(info))
    pq.write_table(
        pa.table({"task_index": [0], "__index_level_0__": ["do it"]}), root / "meta/tasks.parquet"
    )
    episodes: dict[str, list[Any]] = {
        k: []
        for k in (
            "episode_index",
            "tasks",
            "length",
            "data/chunk_index",
            "data/file_index",
            "dataset_from_index",
            "dataset_to_index",
        )
    }
    start = 0
    for file_index in range((len(lengths) + episodes_per_file - 1) // episodes_per_file):
        columns: dict[str, list[Any]] = {k: [] for k in features}
        for episode in range(
            file_index * episodes_per_file, min(len(lengths), (file_index + 1) * episodes_per_file)
        ):
            n = lengths[episode]
            columns["observation.state"] += list(
                rng.standard_normal((n, state_size), dtype=np.float32)
            )
            columns["action"] += list(rng.standard_normal((n, 2, 3)))
            columns["next.done"] += [i == n - 1 for i in range(n)]
            columns["timestamp"] += list(np.arange(n, dtype=np.float32) / 10)
            columns["frame_index"] += list(range(n))
            columns["episode_index"] += [episode] * n
            columns["index"] += list(range(start, start + n))
            columns["task_index"] += [0] * n
            for key, value in (
                ("episode_index", episode),
                ("tasks", ["do it"]),
                ("length", n),
                ("data/chunk_index", 0),
                ("data/file_index", file_index),
                ("dataset_from_index", start),
                ("dataset_to_index", start + n),
            ):
                episodes[key].append(value)
            start += n
        table = pa.table(
            {
                "observation.state": pa.array(
                    [list(v) for v in columns["observation.state"]],
                    pa.list_(pa.float32(), state_size),
                ),
                "action": pa.array(
                    [[list(r) for r in v] for v in columns["action"]],
                    pa.list_(pa.list_(pa.float64(), 3), 2),
                ),
                "next.done": pa.array(columns["next.done"], pa.bool_()),
                "timestamp": pa.array(columns["timestamp"], pa.float32()),
                "frame_index": pa.array(columns["frame_index"], pa.int64()),
                "episode_index": pa.array(columns["episode_index"], pa.int64()),
                "index": pa.array(columns["index"], pa.int64()),
                "task_index": pa.array(columns["task_index"], pa.int64()),
            }
        )
        if shuffle_file == file_index:
            table = table.take(pa.array(np.random.default_rng(1).permutation(len(table))))
        pq.write_table(
            table,
            root / f"data/chunk-000/file-{file_index:03d}.parquet",
            row_group_size=row_group_size,
        )
    pq.write_table(pa.table(episodes), root / "meta/episodes/chunk-000/file-000.parquet")
    return root


def expected_rows(root: Path, path: str, episode: int, columns: list[str]) -> dict[str, Any]:
    table = pq.read_table(root / path)
    table = table.filter(pc.equal(table["episode_index"], episode))
    return {name: column_to_numpy(table.column(name), what=name) for name in columns}


@pytest.fixture(scope="module")
def table_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lengths = [int(n) for n in np.random.default_rng(3).integers(40, 260, size=24)]
    # row groups of 97 rows cut episodes at arbitrary places
    return write_table_dataset(
        tmp_path_factory.mktemp("tables") / "ds",
        lengths=lengths,
        episodes_per_file=10,
        row_group_size=97,
    )


def test_rows_equal_a_full_read_filtered_by_episode(lerobot_fixture_root: Path) -> None:
    full = pq.read_table(lerobot_fixture_root / DATA)
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
        rows = EpisodeRowReader(reader, meta)
        for episode in range(meta.total_episodes):
            got = rows.rows(episode)
            want = full.filter(pc.equal(full["episode_index"], episode))
            assert set(got) == set(full.column_names)
            for name in full.column_names:
                expected = column_to_numpy(want.column(name), what=name)
                assert got[name].dtype == expected.dtype
                assert np.array_equal(got[name], expected), (episode, name)
            assert got["observation.state"].shape == (int(meta.episodes.length[episode]), 6)


def test_rows_across_row_groups_and_files(table_dataset: Path) -> None:
    with LocalRangeReader(table_dataset) as reader:
        meta = load_dataset_meta(reader)
        rows = EpisodeRowReader(reader, meta)
        for episode in range(meta.total_episodes):
            path = meta.episode_data_path(episode)
            columns = ["observation.state", "action", "next.done", "index"]
            got = rows.rows(episode, columns)
            want = expected_rows(table_dataset, path, episode, columns)
            assert list(got) == columns
            for name in columns:
                assert np.array_equal(got[name], want[name]), (episode, name)
            assert got["action"].shape == (int(meta.episodes.length[episode]), 2, 3)
            assert got["next.done"].dtype == np.bool_ and got["next.done"][-1]
            assert np.array_equal(
                got["index"],
                np.arange(
                    meta.episodes.dataset_from_index[episode],
                    meta.episodes.dataset_to_index[episode],
                ),
            )


def test_reads_only_the_episode_row_groups_and_columns(table_dataset: Path) -> None:
    with LocalRangeReader(table_dataset) as reader:
        meta = load_dataset_meta(reader)
        rows = EpisodeRowReader(reader, meta, byte_budget=0)
        path = meta.episode_data_path(5)
        file_size = reader.size(path)
        rows.columns(5)  # the footer, once per file
        before = reader.metrics()
        got = rows.rows(5, ["action"])
        after = reader.metrics()
    read = after["bytes"] - before["bytes"]
    requests = after["requests"] - before["requests"]
    # action (48 B/row) + the two check columns, for the episode's 2-4 row groups of 97 rows
    assert read < 0.2 * file_size, (read, file_size)
    assert 1 <= requests <= 4
    assert len(got["action"]) == meta.episodes.length[5]


def test_cache_serves_repeats_within_the_budget(table_dataset: Path) -> None:
    with LocalRangeReader(table_dataset) as reader:
        meta = load_dataset_meta(reader)
        rows = EpisodeRowReader(reader, meta, byte_budget=4 << 20)
        first = rows.rows(7, ["observation.state"])
        before = reader.metrics()["requests"]
        again = rows.rows(7, ["observation.state"])
        assert reader.metrics()["requests"] == before
        assert np.array_equal(first["observation.state"], again["observation.state"])
        # results are copies: changing one does not change the cache
        again["observation.state"][:] = 0
        assert np.array_equal(
            rows.rows(7, ["observation.state"])["observation.state"], first["observation.state"]
        )
        assert rows.cache_stats()["hits"] > 0

        small = EpisodeRowReader(reader, meta, byte_budget=20_000)
        for episode in range(meta.total_episodes):
            small.rows(episode, ["observation.state"])
            assert small.cache_stats()["bytes"] <= 20_000


def test_concurrent_readers_agree(table_dataset: Path) -> None:
    with LocalRangeReader(table_dataset) as reader:
        meta = load_dataset_meta(reader)
        shared = EpisodeRowReader(reader, meta, byte_budget=1 << 20)
        expected = {
            e: expected_rows(table_dataset, meta.episode_data_path(e), e, ["observation.state"])
            for e in range(meta.total_episodes)
        }
        failures: list[BaseException] = []

        def work(seed: int) -> None:
            rng = random.Random(seed)
            try:
                for _ in range(30):
                    episode = rng.randrange(meta.total_episodes)
                    got = shared.rows(episode, ["observation.state"])["observation.state"]
                    assert np.array_equal(got, expected[episode]["observation.state"])
            except BaseException as error:  # reported below, in the test's thread
                failures.append(error)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert not failures, failures


def test_pickled_reader_works(table_dataset: Path) -> None:
    with LocalRangeReader(table_dataset) as reader:
        meta = load_dataset_meta(reader)
        rows = EpisodeRowReader(reader, meta)
        rows.rows(1)
        clone = pickle.loads(pickle.dumps(rows))
        assert clone.cache_stats()["entries"] == 0
        assert np.array_equal(clone.rows(1)["index"], rows.rows(1)["index"])


def test_rows_over_http_equal_local(lerobot_fixture_root: Path, lerobot_sim5_url: str) -> None:
    with LocalRangeReader(lerobot_fixture_root) as local, open_reader(lerobot_sim5_url) as remote:
        meta = load_dataset_meta(local)
        here = EpisodeRowReader(local, meta)
        there = EpisodeRowReader(remote, load_dataset_meta(remote))
        for episode in (0, 3):
            a, b = here.rows(episode), there.rows(episode)
            assert a.keys() == b.keys()
            for name in a:
                assert np.array_equal(a[name], b[name])


def test_frame_index_is_returned_as_written(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    # LeRobot's reader never checks frame_index (rows are found by position and
    # episode_index): an odd one is the sample's value, not an error
    root = tmp_path / "ds"
    shutil.copytree(lerobot_fixture_root, root, copy_function=shutil.copyfile)
    path = root / DATA
    table = pq.read_table(path)
    frames = table.column("frame_index").to_numpy().copy()
    frames[40] = 99  # inside episode 1 (rows 33..93)
    table = table.set_column(
        table.column_names.index("frame_index"), "frame_index", pa.array(frames)
    )
    pq.write_table(table, path, row_group_size=61)
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
        rows = EpisodeRowReader(reader, meta)
        assert len(rows.rows(0)["index"]) == 33
        frame_index = rows.rows(1)["frame_index"]
        assert frame_index[40 - 33] == 99
        assert np.array_equal(np.delete(frame_index, 40 - 33), np.delete(np.arange(61), 7))


def test_rows_out_of_order_are_an_error(tmp_path: Path) -> None:
    root = write_table_dataset(
        tmp_path / "ds",
        lengths=[20, 30, 25],
        episodes_per_file=3,
        row_group_size=50,
        shuffle_file=0,
    )
    with LocalRangeReader(root) as reader:
        rows = EpisodeRowReader(reader, load_dataset_meta(reader))
        with pytest.raises(DatasetFormatError, match="holds episode_index"):
            rows.rows(1)


def test_missing_column_and_short_file_are_errors(
    lerobot_fixture_root: Path, tmp_path: Path
) -> None:
    root = tmp_path / "ds"
    shutil.copytree(lerobot_fixture_root, root, copy_function=shutil.copyfile)
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
        rows = EpisodeRowReader(reader, meta)
        with pytest.raises(DatasetFormatError, match=r"file-000\.parquet: missing column"):
            rows.rows(0, ["observation.velocity"])
        pq.write_table(pq.read_table(root / DATA).slice(0, 200), root / DATA)
        rows = EpisodeRowReader(reader, meta)
        with pytest.raises(DatasetFormatError, match=r"needs rows 197\.\.243 but the file has 200"):
            rows.rows(4)
        with pytest.raises(KeyError):
            rows.rows(5)

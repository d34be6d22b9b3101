"""LeRobot v2.1 and v2.0 datasets, streamed as published.

The synthetic writer's ``layout="v2.1"`` / ``"v2.0"`` writes a dataset as LeRobot 0.3.x does
(one Parquet and one MP4 per episode, JSON Lines tables); the same spec with ``layout="v3.0"``
and one episode per file is its *twin*: the same MP4 and Parquet bytes under v3 names and v3
metadata, read by the v3 path (tested bit for bit against LeRobot elsewhere). Every sample of a
v2.x root, map-style and from the pool, local, over HTTP (nginx), ``hf://`` (the Hub stand-in)
and S3 (moto), equals the twin's; the metadata is v3-shaped. LeRobot's own reader and
converter are the oracle in tests/lerobot_train/test_lerobot_v2.py.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from episodestream import (
    DatasetFormatError,
    EpisodePoolDataset,
    EpisodeStreamDataset,
    EpisodeStreamError,
)
from episodestream.lerobot import load_dataset_meta
from episodestream.lerobot._paths import V2_FIELDS, check_template, resolve_template
from episodestream.storage import LocalRangeReader, open_reader
from episodestream_tools.synthetic import SyntheticSpec, read_frame_identity
from tests.plugins.storage import HubStandIn, S3Stand
from tests.support.lerobot_v2 import (
    CAMERAS,
    DELTA_TIMESTAMPS,
    FPS,
    TWIN_SPEC,
    V20_SPEC,
    V21_SPEC,
)
from tests.support.samples import assert_samples_equal

# the columns of meta/episodes in the order LeRobot 0.4's v2.1 -> v3.0 converter writes them
CONVERTED_EPISODE_COLUMNS = [
    "episode_index",
    "data/chunk_index",
    "data/file_index",
    "dataset_from_index",
    "dataset_to_index",
    *(
        f"videos/{camera}/{name}"
        for camera in sorted(CAMERAS)
        for name in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
    ),
    "tasks",
    "length",
    "meta/episodes/chunk_index",
    "meta/episodes/file_index",
]


@pytest.fixture(scope="module")
def v21_root(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    return synthetic_dataset(V21_SPEC)


@pytest.fixture(scope="module")
def v20_root(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    return synthetic_dataset(V20_SPEC)


@pytest.fixture(scope="module")
def twin_root(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    return synthetic_dataset(TWIN_SPEC)


@pytest.fixture(scope="module")
def twin_samples(twin_root: Path, datasets_cache_dir: Path) -> dict[int, dict[str, Any]]:
    """Every sample of the twin, with :data:`DELTA_TIMESTAMPS`, by global index."""
    with EpisodeStreamDataset(
        twin_root, delta_timestamps=DELTA_TIMESTAMPS, cache_dir=datasets_cache_dir
    ) as twin:
        return {i: twin[i] for i in range(len(twin))}


def _copy(root: Path, target: Path) -> Path:
    return Path(shutil.copytree(root, target))


def _assert_all_equal(
    dataset: EpisodeStreamDataset, twin_samples: dict[int, dict[str, Any]], where: str
) -> None:
    assert len(dataset) == len(twin_samples)
    for index, expected in twin_samples.items():
        assert_samples_equal(dataset[index], expected, f"{where} [{index}]")


# --------------------------------------------------------------------------------------------
# the writer


def test_writer_lays_out_lerobot_03_files_with_the_twins_bytes(
    v21_root: Path, v20_root: Path, twin_root: Path
) -> None:
    lengths = V21_SPEC.episode_lengths().tolist()
    for root, version in ((v21_root, "v2.1"), (v20_root, "v2.0")):
        info = json.loads((root / "meta/info.json").read_text())
        assert info["codebase_version"] == version
        assert info["total_chunks"] == 2 and info["total_videos"] == 12
        assert info["total_frames"] == sum(lengths)
        assert not (root / "meta/episodes").exists() and not (root / "meta/tasks.parquet").exists()
        lines = [json.loads(x) for x in (root / "meta/episodes.jsonl").read_text().splitlines()]
        assert [(x["episode_index"], x["length"]) for x in lines] == list(enumerate(lengths))
        for episode in range(6):
            chunk, twin_chunk, twin_file = episode // 4, *divmod(episode, 4)
            data = root / f"data/chunk-{chunk:03d}/episode_{episode:06d}.parquet"
            twin = twin_root / f"data/chunk-{twin_chunk:03d}/file-{twin_file:03d}.parquet"
            assert data.read_bytes() == twin.read_bytes()
            for camera in CAMERAS:
                video = root / f"videos/chunk-{chunk:03d}/{camera}/episode_{episode:06d}.mp4"
                assert video.is_file()
    # v2.1: per-episode statistics as LeRobot 0.3.x wrote them (no quantiles); v2.0: stats.json
    first = json.loads((v21_root / "meta/episodes_stats.jsonl").read_text().splitlines()[0])
    assert set(first["stats"]["action"]) == {"min", "max", "mean", "std", "count"}
    assert np.array(first["stats"][CAMERAS[0]]["mean"]).shape == (3, 1, 1)
    assert not (v21_root / "meta/stats.json").exists()
    assert (v20_root / "meta/stats.json").is_file()
    assert not (v20_root / "meta/episodes_stats.jsonl").exists()
    info20 = json.loads((v20_root / "meta/info.json").read_text())
    assert "video_info" in info20["features"][CAMERAS[0]]  # as v1 -> v2.0 conversions wrote it
    # the moov at the tail of the v2.1 files, at the front of the v2.0 ones
    video = f"videos/chunk-000/{CAMERAS[0]}/episode_000000.mp4"
    tail, front = (v21_root / video).read_bytes(), (v20_root / video).read_bytes()
    assert tail.index(b"mdat") < tail.index(b"moov")
    assert front.index(b"moov") < front.index(b"mdat")


def test_v2_layouts_hold_one_episode_per_file() -> None:
    with pytest.raises(DatasetFormatError, match="episodes_per_file"):
        replace(V21_SPEC, episodes_per_file=2)
    with pytest.raises(DatasetFormatError, match="layout"):
        replace(V21_SPEC, layout="v1.6")
    # the v3 layout's cache keys stay what they were before layouts existed
    assert replace(TWIN_SPEC, layout="v2.0").cache_key() != TWIN_SPEC.cache_key()
    assert V21_SPEC.cache_key() != TWIN_SPEC.cache_key()


# --------------------------------------------------------------------------------------------
# templates


def test_v2_templates_resolve_from_chunk_and_file_and_stay_inside() -> None:
    data = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
    video = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
    check_template(data, file="f", field="data_path", required=frozenset(), allowed=V2_FIELDS)
    assert resolve_template(data, what="w", chunk_index=2, file_index=2345) == (
        "data/chunk-002/episode_002345.parquet"
    )
    assert resolve_template(video, what="w", video_key="cam", chunk_index=0, file_index=7) == (
        "videos/chunk-000/cam/episode_000007.mp4"
    )
    # v2's fields are not v3's, and v3's not v2's
    with pytest.raises(DatasetFormatError, match="episode_index"):
        check_template(data, file="f", field="data_path", required=frozenset())
    with pytest.raises(DatasetFormatError, match="chunk_index"):
        check_template(
            "data/{chunk_index}/{file_index}.parquet",
            file="f",
            field="data_path",
            required=frozenset(),
            allowed=V2_FIELDS,
        )
    with pytest.raises(DatasetFormatError, match="outside the dataset root"):
        resolve_template(video, what="w", video_key="../../..", chunk_index=0, file_index=0)


# --------------------------------------------------------------------------------------------
# metadata


@pytest.mark.parametrize("version", ["v2.1", "v2.0"])
def test_metadata_is_the_twins_in_v3_shape(
    version: str, v21_root: Path, v20_root: Path, twin_root: Path
) -> None:
    root = v21_root if version == "v2.1" else v20_root
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
    with LocalRangeReader(twin_root) as reader:
        twin = load_dataset_meta(reader)
    assert meta.codebase_version == version  # as published
    assert meta.info["codebase_version"] == "v3.0"  # what LeRobot sees after converting
    assert "total_chunks" not in meta.info and "total_videos" not in meta.info
    assert meta.info["data_path"] == json.loads((root / "meta/info.json").read_text())["data_path"]
    assert meta.features == twin.features
    assert meta.tasks == twin.tasks
    assert (meta.total_episodes, meta.total_frames, meta.total_tasks) == (
        twin.total_episodes,
        twin.total_frames,
        twin.total_tasks,
    )
    for name in ("episode_index", "length", "dataset_from_index", "dataset_to_index"):
        assert np.array_equal(getattr(meta.episodes, name), getattr(twin.episodes, name)), name
    assert meta.episodes.tasks == twin.episodes.tasks
    lengths = meta.episodes.length
    for camera in CAMERAS:
        columns = meta.episodes.video(camera)
        assert not columns.from_timestamp.any()
        assert np.array_equal(columns.to_timestamp, lengths / FPS)
    assert meta.episode_data_path(5) == "data/chunk-001/episode_000005.parquet"
    assert meta.episode_video_path(4, CAMERAS[1]) == (
        f"videos/chunk-001/{CAMERAS[1]}/episode_000004.mp4"
    )
    assert len(meta.video_files(CAMERAS[0])) == len(meta.data_files()) == 6
    assert meta.episode_columns is not None
    assert meta.episode_columns.column_names == CONVERTED_EPISODE_COLUMNS
    assert meta.episode_columns.column("tasks").to_pylist() == [
        list(t) for t in twin.episodes.tasks
    ]


def test_v21_stats_aggregate_the_episode_stats(v21_root: Path, twin_root: Path) -> None:
    with LocalRangeReader(v21_root) as reader:
        meta = load_dataset_meta(reader)
    # the twin's stats.json holds the statistics of all frames at once; pooling the episodes'
    # gives the same up to rounding, min/max and counts exactly, and no quantiles
    twin = json.loads((twin_root / "meta/stats.json").read_text())
    assert meta.stats is not None and set(meta.stats) == set(twin)
    for feature, stats in meta.stats.items():
        assert set(stats) == {"min", "max", "mean", "std", "count"}, feature
        assert stats["count"] == twin[feature]["count"], feature
        for name in ("min", "max"):
            assert np.array_equal(np.array(stats[name]), np.array(twin[feature][name])), feature
        for name in ("mean", "std"):
            assert np.allclose(stats[name], twin[feature][name], rtol=1e-9, atol=1e-12), feature
    # the integer features keep integer minima, as JSON read back gives them
    assert isinstance(meta.stats["index"]["min"][0], int)
    # without stats: episodes_stats.jsonl is not even read
    with LocalRangeReader(v21_root) as reader:
        assert load_dataset_meta(reader, load_stats=False).stats is None


def test_v20_stats_are_its_stats_json(v20_root: Path) -> None:
    with LocalRangeReader(v20_root) as reader:
        meta = load_dataset_meta(reader)
    assert meta.stats == json.loads((v20_root / "meta/stats.json").read_text())


def test_plain_http_reads_the_metadata_by_name(v21_root: Path, http_publish, http_server) -> None:
    url = http_publish(v21_root)
    mark = http_server.log_mark()
    with open_reader(url) as reader:
        meta = load_dataset_meta(reader)
    with LocalRangeReader(v21_root) as reader:
        local = load_dataset_meta(reader)
    assert meta.stats == local.stats and meta.info_sha256 == local.info_sha256
    uris = sorted(r.uri.split("/meta/", 1)[1] for r in http_server.access_records(since=mark))
    assert uris == ["episodes.jsonl", "episodes_stats.jsonl", "info.json", "tasks.jsonl"]


# --------------------------------------------------------------------------------------------
# samples


@pytest.mark.parametrize("case", ["v2.1-http", "v2.0-local"])
def test_map_style_samples_equal_the_twins(
    case: str,
    v21_root: Path,
    v20_root: Path,
    twin_samples: dict[int, dict[str, Any]],
    http_publish,
    datasets_cache_dir: Path,
) -> None:
    root: str | Path = http_publish(v21_root) if case == "v2.1-http" else v20_root
    with EpisodeStreamDataset(
        root, delta_timestamps=DELTA_TIMESTAMPS, cache_dir=datasets_cache_dir
    ) as dataset:
        _assert_all_equal(dataset, twin_samples, case)
        # and the pixels carry the frame asked for, clamped at the episode's edges
        sample = dataset[0]
        for image, k in zip(sample[CAMERAS[0]], (0, 0, 2), strict=True):
            assert read_frame_identity((image * 255).round().to(torch.uint8)) == (0, k)


def test_pool_covers_every_frame_once_with_the_twins_samples(
    v21_root: Path,
    twin_samples: dict[int, dict[str, Any]],
    http_publish,
    datasets_cache_dir: Path,
) -> None:
    with EpisodePoolDataset(
        http_publish(v21_root),
        delta_timestamps=DELTA_TIMESTAMPS,
        pool_size=2,
        seed=3,
        cache_dir=datasets_cache_dir,
    ) as pool:
        drawn = [int(sample["index"]) for sample in _checked(pool, twin_samples)]
    assert sorted(drawn) == list(range(len(twin_samples)))


def _checked(
    pool: EpisodePoolDataset, twin_samples: dict[int, dict[str, Any]]
) -> Iterator[dict[str, Any]]:
    for sample in pool:
        index = int(sample["index"])
        assert_samples_equal(sample, twin_samples[index], f"pool [{index}]")
        yield sample


def test_an_episode_subset_over_the_hub(
    v21_root: Path,
    hub_standin: HubStandIn,
    twin_samples: dict[int, dict[str, Any]],
    tmp_path: Path,
) -> None:
    files = {
        str(p.relative_to(v21_root)): p.read_bytes() for p in v21_root.rglob("*") if p.is_file()
    }
    hub_standin.commit("org/v21", files)
    with EpisodeStreamDataset(
        "hf://datasets/org/v21",
        episodes=[1, 4],
        delta_timestamps=DELTA_TIMESTAMPS,
        cache_dir=tmp_path,
        reader_options={"endpoint": hub_standin.endpoint, "token": hub_standin.token},
    ) as dataset:
        assert dataset.meta.dataset_meta.codebase_version == "v2.1"
        starts = dataset.meta.dataset_meta.episodes.dataset_from_index
        lengths = dataset.meta.dataset_meta.episodes.length
        expected = [i for e in (1, 4) for i in range(starts[e], starts[e] + lengths[e])]
        assert len(dataset) == len(expected)
        for position, index in enumerate(expected):
            assert_samples_equal(dataset[position], twin_samples[index], f"hub [{index}]")
    # the rows came only from the two episodes' Parquet files
    data = {
        r.path.split("/resolve/", 1)[1]
        for r in hub_standin.hub_requests
        if "/resolve/" in r.path and ".parquet" in r.path
    }
    assert {path.split("/", 1)[1] for path in data} == {
        "data/chunk-000/episode_000001.parquet",
        "data/chunk-001/episode_000004.parquet",
    }


def test_s3(
    v20_root: Path,
    s3_server: S3Stand,
    twin_samples: dict[int, dict[str, Any]],
    tmp_path: Path,
) -> None:
    client = s3_server.client()
    client.create_bucket(Bucket="v20")
    for path in v20_root.rglob("*"):
        if path.is_file():
            client.put_object(
                Bucket="v20", Key=f"ds/{path.relative_to(v20_root)}", Body=path.read_bytes()
            )
    with EpisodeStreamDataset(
        "s3://v20/ds",
        delta_timestamps=DELTA_TIMESTAMPS,
        cache_dir=tmp_path,
        reader_options={"storage_options": s3_server.storage_options},
    ) as dataset:
        for index in (0, 13, len(twin_samples) - 1):
            assert_samples_equal(dataset[index], twin_samples[index], f"s3 [{index}]")


# --------------------------------------------------------------------------------------------
# what the field writes, and what is broken


def _edit_lines(path: Path, edit: Callable[[list[str]], list[str]]) -> None:
    path.write_text("".join(line + "\n" for line in edit(path.read_text().splitlines())))


def test_blank_lines_repeats_and_extra_fields_are_read(v21_root: Path, tmp_path: Path) -> None:
    root = _copy(v21_root, tmp_path / "ds")

    def edit(lines: list[str]) -> list[str]:
        rows = [json.loads(line) for line in lines]
        rows[2]["success"] = True  # a field of the recorder's own
        text = [json.dumps(row) for row in rows]
        return ["", *text[:3], text[2], "   ", *text[3:], ""]  # blank lines, line 3 twice

    _edit_lines(root / "meta/episodes.jsonl", edit)
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
    assert meta.total_episodes == 6
    assert meta.episode_columns is not None
    assert meta.episode_columns.column("success").to_pylist() == [None, None, True, *[None] * 3]


# (case, file under meta/, edit of its lines, what the message says)
MALFORMED: list[tuple[str, str, Callable[[list[str]], list[str]], str]] = [
    (
        "json",
        "episodes.jsonl",
        lambda x: [*x[:2], "{not json", *x[3:]],
        "episodes.jsonl line 3",
    ),
    ("object", "episodes.jsonl", lambda x: [*x[:4], "[1, 2]", *x[5:]], "line 5: must hold"),
    (
        "length",
        "episodes.jsonl",
        lambda x: [*x[:1], json.dumps({"episode_index": 1, "tasks": []}), *x[2:]],
        "line 2: field 'length'",
    ),
    (
        "twice",
        "episodes.jsonl",
        lambda x: [*x, x[0].replace('"length": ', '"length": 1')],
        "lines 1 and 7 both describe episode_index 0",
    ),
    (
        "tasks",
        "episodes.jsonl",
        lambda x: [x[0].replace('"tasks": [', '"tasks": 7, "t": ['), *x[1:]],
        "line 1: field 'tasks'",
    ),
    ("task_gap", "tasks.jsonl", lambda x: x[1:], "task_index must run 0..1"),
    (
        "stats",
        "episodes_stats.jsonl",
        lambda x: [x[0].replace('"count"', '"n"'), *x[1:]],
        "lack ['count']",
    ),
]


@pytest.mark.parametrize(
    ("case", "file", "edit", "expected"), MALFORMED, ids=[c[0] for c in MALFORMED]
)
def test_malformed_tables_name_file_and_line(
    case: str,
    file: str,
    edit: Callable[[list[str]], list[str]],
    expected: str,
    v21_root: Path,
    tmp_path: Path,
) -> None:
    root = _copy(v21_root, tmp_path / case)
    _edit_lines(root / "meta" / file, edit)
    with LocalRangeReader(root) as reader, pytest.raises(DatasetFormatError) as error:
        load_dataset_meta(reader)
    assert expected in str(error.value)


def test_missing_tables_and_unknown_versions(v21_root: Path, tmp_path: Path) -> None:
    root = _copy(v21_root, tmp_path / "ds")
    (root / "meta/tasks.jsonl").unlink()
    with LocalRangeReader(root) as reader, pytest.raises(DatasetFormatError) as error:
        load_dataset_meta(reader)
    assert "meta/tasks.jsonl: required file is missing" in str(error.value)
    assert "'v2.1'" in str(error.value)
    info = json.loads((root / "meta/info.json").read_text())
    for version in ("v1.6", "v2.2"):
        (root / "meta/info.json").write_text(json.dumps({**info, "codebase_version": version}))
        with LocalRangeReader(root) as reader, pytest.raises(DatasetFormatError, match=version):
            load_dataset_meta(reader)
    shutil.copy(v21_root / "meta/tasks.jsonl", root / "meta/tasks.jsonl")
    info["data_path"] = "../{episode_chunk}/{episode_index}.parquet"
    info["codebase_version"] = "v2.1"
    (root / "meta/info.json").write_text(json.dumps(info))
    with LocalRangeReader(root) as reader, pytest.raises(DatasetFormatError, match="outside"):
        load_dataset_meta(reader)


def test_totals_that_disagree_with_the_tables_are_a_warning(
    v21_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _copy(v21_root, tmp_path / "ds")
    _edit_lines(root / "meta/episodes.jsonl", lambda lines: lines[:5])  # episode 5 taken out
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
    assert meta.total_episodes == meta.info["total_episodes"] == 5
    assert meta.total_frames == int(meta.episodes.length.sum()) == meta.info["total_frames"]
    assert "total_episodes is 6" in caplog.text


def test_a_missing_parquet_fails_at_its_episode(
    v21_root: Path, tmp_path: Path, twin_samples: dict[int, dict[str, Any]]
) -> None:
    root = _copy(v21_root, tmp_path / "ds")
    (root / "data/chunk-000/episode_000003.parquet").unlink()
    with EpisodeStreamDataset(
        root, delta_timestamps=DELTA_TIMESTAMPS, cache_dir=tmp_path / "cache"
    ) as dataset:
        assert_samples_equal(dataset[0], twin_samples[0], "episode 0")
        start = int(dataset.meta.dataset_meta.episodes.dataset_from_index[3])
        with pytest.raises(
            DatasetFormatError, match=r"episode_000003\.parquet: data file is missing"
        ):
            dataset[start]


def test_a_missing_mp4_is_a_typed_error_naming_it(v21_root: Path, tmp_path: Path) -> None:
    root = _copy(v21_root, tmp_path / "ds")
    missing = f"videos/chunk-000/{CAMERAS[1]}/episode_000002.mp4"
    (root / missing).unlink()
    # raised at open while the index covers every file, at the episode once it is per file
    with (
        pytest.raises(EpisodeStreamError) as error,
        EpisodeStreamDataset(root, cache_dir=tmp_path / "cache") as dataset,
    ):
        for index in range(len(dataset)):
            dataset[index]
    assert missing in str(error.value)


def test_make_dataset_writes_the_v2_layouts(tmp_path: Path) -> None:
    from episodestream.cli import main

    for layout in ("v2.1", "v2.0"):
        out = tmp_path / layout
        args = ["make-dataset", "--layout", layout, "--episodes", "2", "--length", "8:9"]
        assert main([*args, "--size", "64x48", str(out)]) == 0
        info = json.loads((out / "meta/info.json").read_text())
        assert info["codebase_version"] == layout
        assert sorted(p.name for p in (out / "data/chunk-000").iterdir()) == [
            "episode_000000.parquet",
            "episode_000001.parquet",
        ]
        lines = (out / "meta/episodes.jsonl").read_text().splitlines()
        lengths = [json.loads(line)["length"] for line in lines]
        with EpisodeStreamDataset(out, cache_dir=tmp_path / "cache") as dataset:
            assert len(dataset) == sum(lengths)
            assert int(dataset[len(dataset) - 1]["episode_index"]) == 1

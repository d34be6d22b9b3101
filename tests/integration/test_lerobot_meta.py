"""LeRobot v3 metadata: read a LeRobot-written dataset, locally and over nginx; reject bad ones."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from episodestream.errors import ConfigTypeError, DatasetFormatError
from episodestream.lerobot import (
    DatasetMeta,
    EpisodeRowLookup,
    load_dataset_meta,
    to_timestamp_convention,
)
from episodestream.manifest import build_manifest
from episodestream.storage import ListableReader, LocalRangeReader, open_reader
from tests.support.variants import add_unused_task, copy_dataset, edit_info, swap_task_rows

EPISODES = "meta/episodes/chunk-000/file-000.parquet"
CAM = "observation.images.cam_high"


def edit_episodes(root: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    path = root / EPISODES
    pq.write_table(change(pq.read_table(path)), path)


def set_column(table: pa.Table, name: str, values: list[Any]) -> pa.Table:
    index = table.column_names.index(name)
    return table.set_column(index, name, pa.array(values, type=table.schema.field(name).type))


def load(root: Path) -> DatasetMeta:
    with LocalRangeReader(root) as reader:
        return load_dataset_meta(reader)


def refusal(root: Path) -> str:
    """The message of the DatasetFormatError that loading ``root`` raises."""
    with pytest.raises(DatasetFormatError) as raised:
        load(root)
    return str(raised.value)


def test_reads_the_lerobot_written_dataset(lerobot_fixture_root: Path) -> None:
    meta = load(lerobot_fixture_root)
    info = json.loads((lerobot_fixture_root / "meta/info.json").read_text())
    episodes = pq.read_table(lerobot_fixture_root / EPISODES).to_pydict()
    assert meta.codebase_version == "v3.0"
    assert meta.fps == 30.0
    assert (meta.total_episodes, meta.total_frames, meta.total_tasks) == (5, 244, 3)
    assert meta.video_keys == tuple(k for k, f in info["features"].items() if f["dtype"] == "video")
    assert len(meta.video_keys) == 3
    camera = meta.feature(CAM)
    assert (camera.kind, camera.channels_first) == ("video", True)
    assert (camera.channels, camera.height, camera.width) == (3, 96, 128)
    assert (camera.codec, camera.pix_fmt, camera.fps_from_info) == ("av1", "yuv420p", 30.0)
    state = meta.feature("observation.state")
    assert (state.kind, state.dtype, state.shape) == ("numeric", "float32", (6,))
    assert state.names is not None and state.names[0] == "waist"

    table = meta.episodes
    assert table.episode_index.tolist() == episodes["episode_index"]
    assert table.length.tolist() == episodes["length"]
    assert table.dataset_from_index.tolist() == episodes["dataset_from_index"]
    assert table.dataset_to_index.tolist() == episodes["dataset_to_index"]
    for key in meta.video_keys:
        video = table.video(key)
        assert video.file_index.tolist() == episodes[f"videos/{key}/file_index"]
        assert video.from_timestamp.tolist() == episodes[f"videos/{key}/from_timestamp"]
        assert video.to_timestamp.tolist() == episodes[f"videos/{key}/to_timestamp"]
    assert [list(t) for t in table.tasks] == episodes["tasks"]
    assert not table.length.flags.writeable

    tasks = pq.read_table(lerobot_fixture_root / "meta/tasks.parquet").to_pydict()
    for index, text in zip(tasks["task_index"], tasks["__index_level_0__"], strict=True):
        assert meta.tasks[index] == text
    assert meta.stats is not None and "observation.state" in meta.stats
    assert meta.episode_files == (EPISODES,)
    assert meta.video_files(CAM) == tuple(
        f"videos/{CAM}/chunk-000/file-{i:03d}.mp4" for i in range(3)
    )
    assert meta.data_files() == ("data/chunk-000/file-000.parquet",)
    assert meta.episode_video_path(3, CAM) == f"videos/{CAM}/chunk-000/file-001.mp4"
    assert table.row(4) == 4
    with pytest.raises(KeyError):
        table.row(5)


def test_over_plain_http_walks_indices_without_listing(
    lerobot_fixture_root: Path, lerobot_sim5_url: str, http_server: Any
) -> None:
    local = load(lerobot_fixture_root)
    mark = http_server.log_mark()
    with open_reader(lerobot_sim5_url) as reader:
        assert not isinstance(reader, ListableReader)
        remote = load_dataset_meta(reader)
    assert remote.episode_files == local.episode_files
    assert remote.info_sha256 == local.info_sha256
    assert remote.tasks == local.tasks
    for name in ("episode_index", "length", "dataset_from_index", "data_file_index"):
        assert np.array_equal(getattr(remote.episodes, name), getattr(local.episodes, name))
    for mine, theirs in zip(remote.episodes.videos, local.episodes.videos, strict=True):
        assert np.array_equal(mine.to_timestamp, theirs.to_timestamp)
    # total_episodes rows were found in file-000, so no probe for a missing file-001
    uris = [r.uri for r in http_server.access_records(since=mark)]
    assert any(u.endswith("meta/episodes/chunk-000/file-000.parquet") for u in uris), uris
    assert not any("file-001.parquet" in u for u in uris), uris


def test_walk_spans_several_files_and_chunks(
    lerobot_fixture_root: Path, tmp_path: Path, http_publish: Any
) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")
    table = pq.read_table(root / EPISODES)
    (root / EPISODES).unlink()
    parts = [(0, 0, 0, 2), (0, 1, 2, 3), (1, 0, 3, 5)]  # (chunk, file, first row, end row)
    for chunk, file, lo, hi in parts:
        path = root / f"meta/episodes/chunk-{chunk:03d}/file-{file:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.slice(lo, hi - lo), path)
    expected = load(lerobot_fixture_root)
    for reader in (LocalRangeReader(root), open_reader(http_publish(root))):
        with reader:
            meta = load_dataset_meta(reader)
        assert meta.episode_files == (
            "meta/episodes/chunk-000/file-000.parquet",
            "meta/episodes/chunk-000/file-001.parquet",
            "meta/episodes/chunk-001/file-000.parquet",
        )
        assert np.array_equal(meta.episodes.length, expected.episodes.length)
        assert meta.episodes.tasks == expected.episodes.tasks


def test_channels_last_and_image_features(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")

    def change(info: dict[str, Any]) -> None:
        feature = info["features"][CAM]
        feature["shape"] = [96, 128, 3]
        feature["names"] = ["height", "width", "channels"]
        info["features"]["observation.image.still"] = {
            "dtype": "image",
            "shape": [48, 64, 3],
            "names": ["height", "width", "channel"],
        }

    edit_info(root, change)
    meta = load(root)
    camera = meta.feature(CAM)
    assert (camera.channels_first, camera.height, camera.width, camera.channels) == (
        False,
        96,
        128,
        3,
    )
    still = meta.feature("observation.image.still")
    assert (still.kind, still.height, still.width, still.channels) == ("image", 48, 64, 3)
    assert meta.image_keys == ("observation.image.still",)
    assert "observation.image.still" not in meta.video_keys


def test_tasks_string_column_may_be_named_task(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")
    path = root / "meta/tasks.parquet"
    table = pq.read_table(path)
    pq.write_table(table.rename_columns(["task_index", "task"]).replace_schema_metadata(), path)
    assert load(root).tasks == load(lerobot_fixture_root).tasks


INFO_CASES: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("v2", lambda i: i.update(codebase_version="v2.1"), "codebase_version"),
    ("fps", lambda i: i.pop("fps"), "'fps'"),
    ("fps0", lambda i: i.update(fps=0), "'fps'"),
    ("total", lambda i: i.update(total_episodes="five"), "total_episodes"),
    ("shape", lambda i: i["features"][CAM].update(shape=[3, 96]), f"features.{CAM}.shape"),
    ("dtype", lambda i: i["features"]["action"].update(dtype="complex64"), "features.action"),
    ("features", lambda i: i.update(features=[]), "'features'"),
    ("data_path", lambda i: i.pop("data_path"), "'data_path'"),
    (
        "field",
        lambda i: i.update(data_path="data/{chunk_index}/{file_index}/{episode_index}.pq"),
        "episode_index",
    ),
]


@pytest.mark.parametrize(("case", "change", "field"), INFO_CASES, ids=[c[0] for c in INFO_CASES])
def test_malformed_info_json_names_the_field(
    lerobot_fixture_root: Path,
    tmp_path: Path,
    case: str,
    change: Callable[[dict[str, Any]], None],
    field: str,
) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / case)
    edit_info(root, change)
    message = refusal(root)
    assert field in message and "meta/" in message


def test_info_json_that_is_not_json(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")
    (root / "meta/info.json").write_text('{"codebase_version": "v3.0",')
    with pytest.raises(DatasetFormatError, match=r"meta/info\.json: invalid JSON"):
        load(root)


def test_missing_files(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")
    (root / "meta/tasks.parquet").unlink()
    with pytest.raises(DatasetFormatError, match=r"meta/tasks\.parquet: required file"):
        load(root)
    (root / "meta/info.json").unlink()
    with pytest.raises(DatasetFormatError, match=r"meta/info\.json: required file"):
        load(root)


def test_stats_are_optional(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")
    (root / "meta/stats.json").unlink()
    assert load(root).stats is None


@pytest.mark.parametrize(
    "column",
    ["length", "dataset_to_index", "data/file_index", f"videos/{CAM}/to_timestamp"],
)
def test_missing_episode_column(lerobot_fixture_root: Path, tmp_path: Path, column: str) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")
    edit_episodes(root, lambda t: t.drop_columns([column]))
    message = refusal(root)
    assert EPISODES in message and repr(column) in message


def _shift(table: pa.Table, name: str, row: int, delta: float) -> pa.Table:
    values = table.column(name).to_pylist()
    values[row] += delta
    return set_column(table, name, values)


EPISODE_CASES: list[tuple[str, Callable[[pa.Table], pa.Table], str]] = [
    (
        "negative",
        lambda t: _shift(
            _shift(t, f"videos/{CAM}/from_timestamp", 0, -0.5),
            f"videos/{CAM}/to_timestamp",
            0,
            -0.5,
        ),
        "non-negative",
    ),
    ("length", lambda t: _shift(t, "length", 3, 1), "episode 3: dataset_to_index"),
    (
        "index_overlap",
        lambda t: _shift(_shift(t, "dataset_from_index", 1, -2), "dataset_to_index", 1, -2),
        "overlap in dataset_from_index",
    ),
    (
        "duplicate",
        lambda t: set_column(t, "episode_index", [0, 1, 2, 2, 4]),
        "appears twice",
    ),
    ("null", lambda t: set_column(t, "length", [33, None, 56, 47, 47]), "null"),
]


# what LeRobot's reader does not check either: read, with a warning naming the field, and
# left to the samples (a frame that is not there raises at that sample)
TOLERATED_CASES: list[tuple[str, Callable[[Path], None], str]] = [
    (
        "to_timestamp",
        lambda root: edit_episodes(root, lambda t: _shift(t, f"videos/{CAM}/to_timestamp", 2, 0.1)),
        "",  # a hint only: not even a warning
    ),
    (
        "overlap",
        lambda root: edit_episodes(
            root,
            lambda t: _shift(
                _shift(t, f"videos/{CAM}/from_timestamp", 1, -0.2),
                f"videos/{CAM}/to_timestamp",
                1,
                -0.2,
            ),
        ),
        "episodes 0 and 1 overlap in time",
    ),
    ("rows", lambda root: edit_episodes(root, lambda t: t.slice(0, 4)), "4 episode rows"),
    ("frames", lambda root: edit_info(root, lambda i: i.update(total_frames=245)), "total_frames"),
    ("tasks", lambda root: edit_info(root, lambda i: i.update(total_tasks=4)), "total_tasks"),
    ("task gap", add_unused_task, "by row position"),
    ("tasks swapped", swap_task_rows, "by row position"),
    (
        "names",
        lambda root: edit_info(
            root, lambda i: i["features"][CAM].update(names=["width", "height", "channels"])
        ),
        "",  # LeRobot never reads names: the channel axis comes from the shape
    ),
    (
        "nested names",
        lambda root: edit_info(
            root, lambda i: i["features"]["action"].update(names=[[f"m{k}" for k in range(14)]])
        ),
        "",
    ),
    (
        "height",
        lambda root: edit_info(
            root, lambda i: i["features"][CAM]["info"].update({"video.height": 100})
        ),
        "video.height",
    ),
    (
        "dtype spelling",
        lambda root: edit_info(root, lambda i: i["features"]["action"].update(dtype="float")),
        "",
    ),
]


@pytest.mark.parametrize(
    ("case", "change", "warning"), TOLERATED_CASES, ids=[c[0] for c in TOLERATED_CASES]
)
def test_what_lerobot_does_not_check_is_read_with_a_warning(
    lerobot_fixture_root: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    case: str,
    change: Callable[[Path], None],
    warning: str,
) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / case)
    change(root)
    with caplog.at_level("WARNING", logger="episodestream"):
        meta = load(root)
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    if warning:
        assert any(warning in message for message in warned), warned
    else:
        assert warned == []
    original = load(lerobot_fixture_root)
    if case.startswith("task"):  # read by row position, as LeRobot's tasks.iloc[task_index]
        texts = pq.read_table(root / "meta/tasks.parquet").column("__index_level_0__")
        assert list(meta.tasks) == texts.to_pylist()
    rows = len(meta.episodes)
    assert np.array_equal(meta.episodes.length, original.episodes.length[:rows])


@pytest.mark.parametrize("convention", ["end", "last frame"])
def test_to_timestamp_either_convention_reads_the_same_spans(
    lerobot_fixture_root: Path, tmp_path: Path, convention: str
) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")
    fps = load(root).fps
    if convention == "last frame":  # (length - 1) / fps after from_timestamp, as converters do
        edit_episodes(
            root,
            lambda t: set_column(
                t,
                f"videos/{CAM}/to_timestamp",
                (
                    np.asarray(t.column(f"videos/{CAM}/from_timestamp"))
                    + (np.asarray(t.column("length")) - 1) / fps
                ).tolist(),
            ),
        )
    meta = load(root)
    assert to_timestamp_convention(meta.episodes.video(CAM), meta.episodes.length, fps) == (
        convention
    )
    with LocalRangeReader(root) as reader:
        ours = build_manifest(reader, meta, progress=False)
    with LocalRangeReader(lerobot_fixture_root) as reader:
        theirs = build_manifest(reader, load(lerobot_fixture_root), progress=False)
    for name in ("sample_start", "sample_end", "byte_start", "byte_end", "frame_count"):
        assert np.array_equal(getattr(ours.spans, name), getattr(theirs.spans, name)), name


@pytest.mark.parametrize(
    ("case", "change", "message"), EPISODE_CASES, ids=[c[0] for c in EPISODE_CASES]
)
def test_inconsistent_episodes_table(
    lerobot_fixture_root: Path,
    tmp_path: Path,
    case: str,
    change: Callable[[pa.Table], pa.Table],
    message: str,
) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / case)
    edit_episodes(root, change)
    refused = refusal(root)
    assert message in refused and "meta/episodes" in refused


@pytest.mark.parametrize(
    ("field", "template"),
    [
        ("data_path", "../../outside/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"),
        ("data_path", "/etc/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"),
        ("data_path", "data/{chunk_index.__class__}/file-{file_index:03d}.parquet"),
        ("data_path", "data/{chunk_index!r}/file-{file_index:03d}.parquet"),
        ("video_path", "videos/../../{video_key}/{chunk_index}/{file_index}.mp4"),
        ("video_path", "{video_key}/../../../x/{chunk_index}/{file_index}.mp4"),
    ],
)
def test_traversal_templates_are_rejected(
    lerobot_fixture_root: Path, tmp_path: Path, field: str, template: str
) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")
    edit_info(root, lambda info: info.update({field: template}))
    assert field in refusal(root)


def test_video_key_that_climbs_out_is_rejected(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")
    evil = "../../../../etc"

    def rename(info: dict[str, Any]) -> None:
        info["features"][evil] = info["features"].pop(CAM)

    edit_info(root, rename)
    edit_episodes(
        root,
        lambda t: t.rename_columns(
            [c.replace(f"videos/{CAM}/", f"videos/{evil}/") for c in t.column_names]
        ),
    )
    with pytest.raises(DatasetFormatError, match="outside the dataset root"):
        load(root)


def test_negative_file_index_is_rejected(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    root = copy_dataset(lerobot_fixture_root, tmp_path / "ds")
    edit_episodes(root, lambda t: set_column(t, "data/file_index", [0, 0, -1, 0, 0]))
    with pytest.raises(DatasetFormatError, match="'data_file_index' is negative for episode 2"):
        load(root)


@pytest.mark.parametrize("ids", [[0, 1, 2, 3], [2, 5, 9]], ids=["dense", "sparse"])
def test_episode_rows_take_integers_only(ids: list[int]) -> None:
    lookup = EpisodeRowLookup(np.asarray(ids, dtype=np.int64), "the dataset")
    last = len(ids) - 1
    assert lookup.row(ids[-1]) == lookup.row(np.int64(ids[-1])) == last
    assert lookup.rows(np.asarray(ids[::-1], dtype=np.int32)).tolist() == list(range(last, -1, -1))
    assert lookup.rows([]).tolist() == []
    for bad in (float(ids[1]) + 0.5, float(ids[1]), True, str(ids[1])):
        with pytest.raises(ConfigTypeError, match="episode index must be an int"):
            lookup.row(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigTypeError, match="must be integers, got dtype float64"):
        lookup.rows([float(ids[1]) + 0.5])
    with pytest.raises(KeyError, match=f"no episode {ids[-1] + 1} in the dataset"):
        lookup.row(ids[-1] + 1)


def test_the_manifest_looks_rows_up_like_the_episodes_table(lerobot_fixture_root: Path) -> None:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        manifest = build_manifest(reader, load_dataset_meta(reader), progress=False)
    assert manifest.row(np.int64(4)) == 4
    with pytest.raises(ConfigTypeError, match=r"episode index must be an int, got float 1\.5"):
        manifest.row(1.5)  # type: ignore[arg-type]  # was row 1
    with pytest.raises(KeyError, match="no episode 5 in the manifest"):
        manifest.row(5)

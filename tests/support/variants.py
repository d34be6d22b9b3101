"""Variants of a LeRobot v3 dataset as other writers leave them: each function edits a copy
in place (``copy_dataset`` first), the way a converter, an older writer or a hand edit does.

Shared by the corpus of conventions (tests/lerobot_train/test_corpus.py, against LeRobot's
own reader) and the main suite. Videos are rewritten with PyAV, never hand-patched.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "add_unknown_fields",
    "add_unused_task",
    "copy_dataset",
    "drop_last_video_frame",
    "edit_episodes",
    "edit_info",
    "episode_data_rows",
    "episode_video_file",
    "episodes_files",
    "nest_names",
    "reencode_video",
    "relabel_codec",
    "remove_video_file",
    "remux_moov",
    "repeat_last_video_frame",
    "set_data_value",
    "set_to_timestamp_last_frame",
    "shift_timestamp",
    "swap_task_rows",
    "video_files",
]


def copy_dataset(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    return target


def edit_info(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    change(info)
    path.write_text(json.dumps(info, indent=4))


def episodes_files(root: Path) -> list[Path]:
    return sorted((root / "meta/episodes").glob("chunk-*/file-*.parquet"))


def edit_episodes(root: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    """Rewrite every ``meta/episodes`` file through ``change``."""
    for path in episodes_files(root):
        pq.write_table(change(pq.read_table(path)), path)


def _episode_row(root: Path, episode: int) -> dict[str, Any]:
    """The episodes-table row of ``episode`` (every column, ``stats/*`` included)."""
    for path in episodes_files(root):
        table = pq.read_table(path)
        found = np.flatnonzero(np.asarray(table.column("episode_index")) == episode)
        if found.size:
            return table.slice(int(found[0]), 1).to_pylist()[0]
    raise KeyError(f"no episode {episode} in {root}")


def episode_video_file(root: Path, episode: int, camera: str) -> Path:
    """The MP4 file holding ``episode`` for ``camera`` (``info.json``'s ``video_path``)."""
    info = json.loads((root / "meta/info.json").read_text())
    row = _episode_row(root, episode)
    return root / info["video_path"].format(
        video_key=camera,
        chunk_index=row[f"videos/{camera}/chunk_index"],
        file_index=row[f"videos/{camera}/file_index"],
    )


def episode_data_rows(root: Path, episode: int) -> tuple[Path, int, int]:
    """``(data file, first row in it, length)`` of ``episode``: a data file holds its
    episodes' rows in ``dataset_from_index`` order, from the smallest of them."""
    info = json.loads((root / "meta/info.json").read_text())
    row = _episode_row(root, episode)
    place = (row["data/chunk_index"], row["data/file_index"])
    path = root / info["data_path"].format(chunk_index=place[0], file_index=place[1])
    columns = ["data/chunk_index", "data/file_index", "dataset_from_index"]
    starts = [
        start
        for table in (pq.read_table(p, columns=columns) for p in episodes_files(root))
        for chunk, file, start in zip(*(table.column(c).to_pylist() for c in columns), strict=True)
        if (chunk, file) == place
    ]
    return path, int(row["dataset_from_index"]) - min(starts), int(row["length"])


def set_data_value(root: Path, episode: int, row: int, column: str, value: Any) -> None:
    """Row ``row`` (0-based in ``episode``) of data column ``column`` holds ``value``."""
    path, first, length = episode_data_rows(root, episode)
    if not 0 <= row < length:
        raise IndexError(f"episode {episode} has {length} rows, not row {row}")
    table = pq.read_table(path)
    values = table.column(column).to_pylist()
    values[first + row] = value
    pq.write_table(_replace(table, column, values), path)


def shift_timestamp(root: Path, episode: int, row: int, by_s: float) -> None:
    """Row ``row`` of ``episode`` says its frame is ``by_s`` seconds later than it is (a
    clock glitch in the recording): past LeRobot's tolerance, that sample has no frame."""
    path, first, _ = episode_data_rows(root, episode)
    old = pq.read_table(path, columns=["timestamp"]).column("timestamp")[first + row].as_py()
    set_data_value(root, episode, row, "timestamp", old + by_s)


def video_files(root: Path, camera: str | None = None) -> list[Path]:
    pattern = f"videos/{camera}/**/*.mp4" if camera else "videos/**/*.mp4"
    return sorted(root.glob(pattern))


def _replace(table: pa.Table, name: str, values: Any) -> pa.Table:
    index = table.column_names.index(name)
    return table.set_column(index, name, pa.array(values, type=table.schema.field(name).type))


def set_to_timestamp_last_frame(root: Path) -> None:
    """``to_timestamp`` as the last frame's time, ``from + (length - 1) / fps`` (converters)."""
    fps = json.loads((root / "meta/info.json").read_text())["fps"]

    def change(table: pa.Table) -> pa.Table:
        length = np.asarray(table.column("length"), dtype=np.float64)
        for name in table.column_names:
            if name.startswith("videos/") and name.endswith("/to_timestamp"):
                start = np.asarray(table.column(name.replace("/to_", "/from_")))
                table = _replace(table, name, (start + (length - 1) / fps).tolist())
        return table

    edit_episodes(root, change)


def _rewrite_video(
    path: Path,
    frames_of: Callable[[list[np.ndarray]], list[np.ndarray]],
    *,
    encoder: str | None = None,
) -> None:
    """Decode every frame of ``path``, pass them through ``frames_of`` and encode them again
    with ``encoder`` (default: the same codec), the same size and frame rate (timestamps
    k / fps from 0)."""
    with av.open(str(path)) as source:
        stream = source.streams.video[0]
        codec = stream.codec_context.name
        rate = stream.average_rate or Fraction(30)
        frames = [frame.to_ndarray(format="rgb24") for frame in source.decode(stream)]
    encoders = {"libdav1d": "libsvtav1", "av1": "libsvtav1", "h264": "libx264", "hevc": "libx265"}
    frames = frames_of(frames)
    temporary = path.with_suffix(".rewrite.mp4")
    with av.open(str(temporary), "w") as target:
        out = target.add_stream(encoder or encoders.get(codec, codec), rate=rate)
        out.width, out.height = frames[0].shape[1], frames[0].shape[0]
        out.pix_fmt = "yuv420p"
        out.options = {"g": "2"} if out.codec_context.name == "libsvtav1" else {}
        for array in frames:
            for packet in out.encode(av.VideoFrame.from_ndarray(array, format="rgb24")):
                target.mux(packet)
        for packet in out.encode():
            target.mux(packet)
    temporary.replace(path)


def drop_last_video_frame(path: Path) -> None:
    """The video one frame short: its last episode's last row has no frame."""
    _rewrite_video(path, lambda frames: frames[:-1])


def reencode_video(path: Path, encoder: str) -> None:
    """The same frames in another codec (``mpeg4``: MPEG-4 Part 2, ``libvpx-vp9``,
    ``libx264`` with its default B-frames, ``libx265``); info.json keeps its label."""
    _rewrite_video(path, lambda frames: frames, encoder=encoder)


def repeat_last_video_frame(path: Path) -> None:
    """The video one frame longer than its rows (a frame nobody asks for)."""
    _rewrite_video(path, lambda frames: [*frames, frames[-1]])


def remux_moov(path: Path, *, faststart: bool) -> None:
    """The same packets, the ``moov`` before (faststart) or after the ``mdat`` (FFmpeg's
    own muxer, stream copy: PyAV cannot remux a stream its decoder, dav1d, names)."""
    temporary = path.with_suffix(".remux.mp4")
    flags = ["-movflags", "+faststart"] if faststart else []
    subprocess.run(
        [
            "ffmpeg",
            "-v",
            "error",
            "-y",
            "-i",
            str(path),
            "-c",
            "copy",
            "-map",
            "0",
            *flags,
            str(temporary),
        ],
        check=True,
        timeout=120,
    )
    temporary.replace(path)


def relabel_codec(root: Path, codec: str) -> None:
    """``info.json`` says ``codec`` for every camera, whatever the files hold."""

    def change(info: dict[str, Any]) -> None:
        for feature in info["features"].values():
            if feature.get("dtype") == "video":
                feature.setdefault("info", {})["video.codec"] = codec

    edit_info(root, change)


def nest_names(root: Path) -> None:
    """``names`` in the shapes the field writes: a nested list, a dict of lists, null."""

    def change(info: dict[str, Any]) -> None:
        styles = [
            lambda names: [names] if isinstance(names, list) else names,
            lambda names: {"motors": names} if isinstance(names, list) else names,
            lambda names: None,
        ]
        numeric = [f for f in info["features"].values() if f.get("dtype") not in ("video",)]
        for k, feature in enumerate(numeric):
            feature["names"] = styles[k % len(styles)](feature.get("names"))

    edit_info(root, change)


def add_unknown_fields(root: Path) -> None:
    """Fields and columns no reader knows, in info.json and the episodes table."""
    edit_info(root, lambda info: info.update(x_writer="other", x_settings={"crf": 30}))
    edit_episodes(
        root,
        lambda table: table.append_column("x_operator", pa.array(["a"] * table.num_rows)),
    )


def swap_task_rows(root: Path) -> None:
    """``meta/tasks.parquet`` with its first two rows swapped, ``task_index`` moved with them
    (LeRobot looks a task up by row position, ``tasks.iloc[task_index]``)."""
    path = root / "meta/tasks.parquet"
    table = pq.read_table(path)
    order = [1, 0, *range(2, table.num_rows)]
    pq.write_table(table.take(pa.array(order)), path)


def add_unused_task(root: Path, task_index: int = 7) -> None:
    """One more row in ``meta/tasks.parquet``, a task no frame uses, at a ``task_index``
    past a gap."""
    path = root / "meta/tasks.parquet"
    table = pq.read_table(path)
    extra = {
        name: pa.array(
            [task_index if name == "task_index" else "an unused task"],
            type=table.schema.field(name).type,
        )
        for name in table.column_names
    }
    merged = pa.concat_tables([table, pa.table(extra, schema=table.schema)])
    pq.write_table(merged, path)


def remove_video_file(root: Path, relative: str) -> None:
    (root / relative).unlink()

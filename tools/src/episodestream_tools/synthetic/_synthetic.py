"""Synthetic LeRobot v3.0 datasets: real MP4s (AV1/H.264/HEVC) and Parquet, deterministic for a
seed, every frame stamped with its (episode, frame) identity. ``layout="v2.1"`` / ``"v2.0"``
writes the same episodes in LeRobot 0.3.x's layout instead (see :class:`SyntheticSpec`).

Videos hold several episodes back to back per file, encoded in one continuous pass, so (as in
converted datasets) an episode may start mid-GOP; with ``codec="h264"``/``"hevc"`` frames are
reordered (B-frames) and GOPs may be open. Episode ``e`` of a file starts at the presentation
time of its first frame, ``from_timestamp = sum(previous lengths) / fps`` (accumulated in float
as LeRobot does), and ``to_timestamp = from_timestamp + length / fps``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from episodestream.errors import DatasetFormatError, LocationError
from episodestream_tools.synthetic import _synthetic_tables as tables
from episodestream_tools.synthetic._identity import (
    MAX_CAMERAS,
    MAX_EPISODES,
    MAX_FRAMES_PER_EPISODE,
    identity_layout,
)
from episodestream_tools.synthetic._synthetic_video import CODECS, CONTENTS, encode_camera_file

__all__ = [
    "DEFAULT_CAMERAS",
    "DEFAULT_TASKS",
    "DEMO_SPEC",
    "PRESETS",
    "WRITER_FORMAT_VERSION",
    "Codec",
    "Layout",
    "MoovPosition",
    "SyntheticSpec",
    "default_cache_dir",
    "ensure_synthetic_dataset",
    "write_synthetic_dataset",
]

logger = logging.getLogger(__name__)

# bump whenever the bytes written for a given spec change, so caches regenerate
WRITER_FORMAT_VERSION = 1

Codec = Literal["av1", "h264", "hevc"]
MoovPosition = Literal["start", "end"]
ImageLayout = Literal["chw", "hwc"]
Layout = Literal["v3.0", "v2.1", "v2.0"]

DEFAULT_CAMERAS: tuple[str, ...] = (
    "observation.images.cam_high",
    "observation.images.cam_left_wrist",
    "observation.images.cam_right_wrist",
)
DEFAULT_TASKS: tuple[str, ...] = (
    "pick up the red cube and place it in the bowl",
    "push the blue block to the left",
    "open the top drawer",
)
# LeRobot's defaults, recorded in info.json (we split files by episode count instead)
_DATA_FILES_SIZE_IN_MB = 100
_VIDEO_FILES_SIZE_IN_MB = 200
_DEFAULT_EPISODES_PER_FILE = 6
_MAX_FPS = 240
_CACHE_ENV = "EPISODESTREAM_CACHE"
_CACHE_LOCK_TIMEOUT_S = 900.0
_SPEC_FILE = "synthetic_spec.json"
# LeRobot 0.3.x's path templates (v2.0 and v2.1): one Parquet and one MP4 per episode
V2_DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
V2_VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
# statistics LeRobot 0.3.x wrote per episode (v2.1) and for the dataset (v2.0: no count)
_V21_STAT_NAMES = ("min", "max", "mean", "std", "count")
_V20_STAT_NAMES = ("mean", "std", "min", "max")


def _fail(message: str) -> DatasetFormatError:
    return DatasetFormatError(f"invalid SyntheticSpec: {message}")


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """Everything that determines a synthetic dataset; equal specs give identical datasets.

    Args:
        cameras: video feature keys, one MP4 series per key (at most 16).
        width, height: frame size in pixels; even, and at least 64x48 (the identity cells must fit).
        fps: frames per second (integer, as LeRobot's ``info.json``).
        episodes: number of episodes (1 .. 16384).
        min_length, max_length: episode length range in frames, both inclusive; lengths are drawn
            uniformly with the seed.
        episodes_per_file: episodes concatenated per video file. ``None`` picks several per file
            (up to 6) and at least two files per camera when there are two or more episodes.
            The choice is stored in the spec, so ``dataclasses.replace(spec, episodes=n)`` keeps
            it unless ``episodes_per_file=None`` is passed again.
        episodes_per_data_file: episodes per data Parquet file; ``None`` puts all in one file (as
            LeRobot does below its 100 MB threshold).
        chunks_size: files per ``chunk-NNN`` folder (LeRobot's default 1000).
        codec: ``"av1"`` (libsvtav1, g=2, crf 30, preset 12: LeRobot's default), ``"h264"``
            (libx264, 3 B-frames, GOP 30, open GOPs) or ``"hevc"`` (libx265, 3 B-frames, GOP 30).
        moov: ``"start"`` (faststart: moov before mdat, LeRobot's default) or ``"end"``.
        state_size, action_size: lengths of ``observation.state`` / ``action``; 0 leaves it out.
        tasks: task strings; episode ``e`` gets ``tasks[e % len(tasks)]``.
        seed: drives episode lengths and the state/action trajectories.
        image_layout: video feature ``shape`` order in info.json, ``"hwc"`` ([H, W, 3], LeRobot's
            usual) or ``"chw"`` ([3, H, W]); both occur in published datasets.
        robot_type: ``info.json`` ``robot_type``.
        content: what the cameras show: ``"wave"`` (smooth, cheap to decode) or ``"texture"``
            (a detailed panning scene with a moving object and sensor noise: realistic decode
            cost, for benchmarks at LeRobot's frame sizes).
        layout: ``"v3.0"`` (LeRobot 0.4+), or LeRobot 0.3.x's ``"v2.1"`` / ``"v2.0"``: one
            Parquet and one MP4 per episode (each MP4 starting at time 0, so
            ``episodes_per_file`` and ``episodes_per_data_file`` must be 1 or None),
            ``meta/episodes.jsonl`` and ``meta/tasks.jsonl``, per-episode statistics in
            ``meta/episodes_stats.jsonl`` (v2.1) or the dataset's in ``meta/stats.json``
            (v2.0, whose video features carry ``video_info`` as v1 conversions wrote it).
            Frames, rows and file bytes equal those of the v3.0 layout with one episode per
            file.

    Raises:
        DatasetFormatError: any invalid value (also a ``ValueError``).
    """

    cameras: tuple[str, ...] = DEFAULT_CAMERAS
    width: int = 128
    height: int = 96
    fps: int = 30
    episodes: int = 12
    min_length: int = 30
    max_length: int = 90
    episodes_per_file: int | None = None
    episodes_per_data_file: int | None = None
    chunks_size: int = 1000
    codec: Codec = "av1"
    moov: MoovPosition = "start"
    state_size: int = 6
    action_size: int = 6
    tasks: tuple[str, ...] = field(default=DEFAULT_TASKS)
    seed: int = 0
    image_layout: ImageLayout = "hwc"
    robot_type: str = "synthetic"
    content: str = "wave"
    layout: Layout = "v3.0"

    def __post_init__(self) -> None:
        # accept lists for convenience; store tuples so the spec stays hashable
        object.__setattr__(self, "cameras", tuple(self.cameras))
        object.__setattr__(self, "tasks", tuple(self.tasks))
        self._validate()
        if self.layout != "v3.0":
            object.__setattr__(self, "episodes_per_file", 1)
            object.__setattr__(self, "episodes_per_data_file", 1)
        if self.episodes_per_file is None:
            object.__setattr__(
                self,
                "episodes_per_file",
                max(1, min(_DEFAULT_EPISODES_PER_FILE, self.episodes // 2)),
            )
        if self.episodes_per_data_file is None:
            object.__setattr__(self, "episodes_per_data_file", self.episodes)

    def _validate(self) -> None:
        for name in (
            "width",
            "height",
            "fps",
            "episodes",
            "min_length",
            "max_length",
            "chunks_size",
            "state_size",
            "action_size",
            "seed",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise _fail(f"{name} must be an int, got {value!r}")
        if not self.cameras:
            raise _fail("at least one camera is needed")
        if len(self.cameras) > MAX_CAMERAS:
            raise _fail(f"at most {MAX_CAMERAS} cameras, got {len(self.cameras)}")
        if len(set(self.cameras)) != len(self.cameras):
            raise _fail(f"camera keys repeat: {self.cameras}")
        for key in self.cameras:
            if not isinstance(key, str) or not key or "/" in key or key.strip() != key:
                raise _fail(f"camera key {key!r} must be a non-empty string without '/'")
            if key in ("observation.state", "action", "timestamp", "frame_index"):
                raise _fail(f"camera key {key!r} collides with a numeric feature")
        if self.width <= 0 or self.height <= 0 or self.width % 2 or self.height % 2:
            raise _fail(f"size {self.width}x{self.height} must be positive and even (yuv420p)")
        try:
            identity_layout(self.width, self.height)
        except ValueError as error:
            raise _fail(str(error)) from None
        if not 1 <= self.fps <= _MAX_FPS:
            raise _fail(f"fps {self.fps} outside [1, {_MAX_FPS}]")
        if not 1 <= self.episodes <= MAX_EPISODES:
            raise _fail(f"episodes {self.episodes} outside [1, {MAX_EPISODES}]")
        if not 1 <= self.min_length <= self.max_length <= MAX_FRAMES_PER_EPISODE:
            raise _fail(
                f"episode length range {self.min_length}:{self.max_length} must satisfy "
                f"1 <= min <= max <= {MAX_FRAMES_PER_EPISODE}"
            )
        for name in ("episodes_per_file", "episodes_per_data_file"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int) or isinstance(value, bool) or value < 1
            ):
                raise _fail(f"{name} must be a positive int or None, got {value!r}")
        if self.chunks_size < 1:
            raise _fail(f"chunks_size {self.chunks_size} must be >= 1")
        if self.codec not in CODECS:
            raise _fail(f"unknown codec {self.codec!r}; choose one of {sorted(CODECS)}")
        if self.moov not in get_args(MoovPosition):
            raise _fail(f"moov must be 'start' or 'end', got {self.moov!r}")
        if self.image_layout not in get_args(ImageLayout):
            raise _fail(f"image_layout must be 'hwc' or 'chw', got {self.image_layout!r}")
        if self.state_size < 0 or self.action_size < 0:
            raise _fail("state_size and action_size must be >= 0")
        if not self.tasks or not all(isinstance(t, str) and t for t in self.tasks):
            raise _fail("tasks must be one or more non-empty strings")
        if len(set(self.tasks)) != len(self.tasks):
            raise _fail(f"task strings repeat: {self.tasks}")
        if not isinstance(self.robot_type, str):
            raise _fail(f"robot_type must be a string, got {self.robot_type!r}")
        if self.content not in CONTENTS:
            raise _fail(f"content must be one of {list(CONTENTS)}, got {self.content!r}")
        if self.layout not in get_args(Layout):
            raise _fail(f"layout must be one of {list(get_args(Layout))}, got {self.layout!r}")
        if self.layout != "v3.0":
            for name in ("episodes_per_file", "episodes_per_data_file"):
                if getattr(self, name) not in (None, 1):
                    raise _fail(f"layout {self.layout!r} holds one episode per file: {name} 1")

    def episode_lengths(self) -> np.ndarray:
        """Length in frames of every episode (int64), drawn from the seed."""
        rng = np.random.default_rng([self.seed, 0])
        return rng.integers(self.min_length, self.max_length + 1, size=self.episodes)

    def cache_key(self) -> str:
        """Hex digest of every parameter plus :data:`WRITER_FORMAT_VERSION`."""
        fields = asdict(self)
        if fields["content"] == "wave":
            del fields["content"]  # datasets written before texture content keep their key
        if fields["layout"] == "v3.0":
            del fields["layout"]  # and those written before the v2.x layouts
        payload = json.dumps(
            {"writer_format_version": WRITER_FORMAT_VERSION, **fields}, sort_keys=True
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        """The spec as plain JSON values (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


# The embedded demo dataset: 3 cameras, AV1, 30 fps, 36 episodes of 2-5 s.
DEMO_SPEC = SyntheticSpec(
    width=320,
    height=240,
    fps=30,
    episodes=36,
    min_length=60,
    max_length=150,
    episodes_per_file=6,
    codec="av1",
    seed=2024,
)


def _cameras(*names: str) -> tuple[str, ...]:
    return tuple(f"observation.images.{name}" for name in names)


# LeRobot-sized datasets for benchmarks: the camera counts, sizes and rates of published robot
# datasets, LeRobot's default encoding, episodes of 10-20 s (override --episodes / --length),
# several episodes per MP4 file, and textured moving content so decoding costs what it does on
# real footage.
PRESETS: dict[str, SyntheticSpec] = {
    # ALOHA-style bimanual: 4 cameras at 640x480, 50 fps, 14-dof state and action
    "aloha": SyntheticSpec(
        cameras=_cameras("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist"),
        width=640,
        height=480,
        fps=50,
        episodes=6,
        min_length=500,
        max_length=1000,
        episodes_per_file=3,
        state_size=14,
        action_size=14,
        robot_type="aloha",
        content="texture",
        seed=11,
    ),
    # SO-100-style arm: 2 cameras at 640x480, 30 fps
    "so100": SyntheticSpec(
        cameras=_cameras("laptop", "phone"),
        width=640,
        height=480,
        fps=30,
        episodes=8,
        min_length=300,
        max_length=600,
        episodes_per_file=4,
        robot_type="so100",
        content="texture",
        seed=12,
    ),
    # DROID-style: 3 small cameras (320x180), 15 fps
    "droid": SyntheticSpec(
        cameras=_cameras("exterior_1_left", "exterior_2_left", "wrist_left"),
        width=320,
        height=180,
        fps=15,
        episodes=10,
        min_length=150,
        max_length=300,
        episodes_per_file=5,
        state_size=8,
        action_size=7,
        robot_type="droid",
        content="texture",
        seed=13,
    ),
}
# an older-style H.264 dataset: GOP 30 with B-frames (random access decodes up to 29 extra)
PRESETS["so100-h264"] = replace(PRESETS["so100"], codec="h264", seed=14)


def _chunk_file(number: int, chunks_size: int) -> tuple[int, int]:
    """(chunk_index, file_index) of the ``number``-th file of a series."""
    return divmod(number, chunks_size)


def _video_file(spec: SyntheticSpec, key: str, number: int) -> str:
    """Relative path of camera ``key``'s ``number``-th MP4 (v2.x: episode ``number``'s)."""
    chunk, file = _chunk_file(number, spec.chunks_size)
    if spec.layout == "v3.0":
        return f"videos/{key}/chunk-{chunk:03d}/file-{file:03d}.mp4"
    return V2_VIDEO_PATH.format(episode_chunk=chunk, video_key=key, episode_index=number)


def _data_file(spec: SyntheticSpec, number: int) -> str:
    """Relative path of the ``number``-th data Parquet file (v2.x: episode ``number``'s)."""
    chunk, file = _chunk_file(number, spec.chunks_size)
    if spec.layout == "v3.0":
        return f"data/chunk-{chunk:03d}/file-{file:03d}.parquet"
    return V2_DATA_PATH.format(episode_chunk=chunk, episode_index=number)


def _trajectories(spec: SyntheticSpec, episode: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """Smooth seeded joint trajectories ``(state, action)``, float32; action leads state by one
    frame plus a little noise, like a teleoperated arm."""
    rng = np.random.default_rng([spec.seed, 1, episode])
    size = max(spec.state_size, spec.action_size)
    t = np.arange(length + 1, dtype=np.float64)[:, None] / spec.fps
    amplitude = rng.uniform(0.2, 1.0, size)
    frequency = rng.uniform(0.1, 0.8, size)
    phase = rng.uniform(0, 2 * np.pi, size)
    offset = rng.uniform(-0.3, 0.3, size)
    path = amplitude * np.sin(2 * np.pi * frequency * t + phase) + offset
    state = path[:length, : spec.state_size].astype(np.float32)
    noise = rng.normal(0.0, 0.01, (length, spec.action_size))
    action = (path[1:, : spec.action_size] + noise).astype(np.float32)
    return state, action


_INDEX_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def _vector_features(spec: SyntheticSpec) -> tuple[tuple[str, int], ...]:
    return (("observation.state", spec.state_size), ("action", spec.action_size))


def _features(spec: SyntheticSpec, codec_name: str) -> dict[str, Any]:
    features: dict[str, Any] = {}
    for key, size in _vector_features(spec):
        if size:
            names = [f"motor_{i}" for i in range(size)]
            features[key] = {"dtype": "float32", "shape": [size], "names": names}
    if spec.image_layout == "chw":
        shape, names = [3, spec.height, spec.width], ["channels", "height", "width"]
    else:
        shape, names = [spec.height, spec.width, 3], ["height", "width", "channels"]
    for key in spec.cameras:
        features[key] = {
            "dtype": "video",
            "shape": shape,
            "names": names,
            "info": {
                "video.height": spec.height,
                "video.width": spec.width,
                "video.codec": codec_name,
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": spec.fps,
                "video.channels": 3,
                "has_audio": False,
            },
        }
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for key in ("frame_index", "episode_index", "index", "task_index"):
        features[key] = {"dtype": "int64", "shape": [1], "names": None}
    return features


def _file_groups(episodes: int, per_file: int) -> list[range]:
    """Consecutive episode ranges, ``per_file`` each (the last may be shorter)."""
    return [range(first, min(first + per_file, episodes)) for first in range(0, episodes, per_file)]


def _write_videos(
    root: Path, spec: SyntheticSpec, lengths: list[int], rows: list[dict[str, Any]]
) -> dict[str, list[np.ndarray]]:
    """Encode every camera's files, fill the ``videos/...`` columns of ``rows``, and return
    camera -> per-episode RGB histograms of the source frames."""
    assert spec.episodes_per_file is not None
    histograms: dict[str, list[np.ndarray]] = {}
    for camera_number, key in enumerate(spec.cameras):
        per_episode: dict[int, np.ndarray] = {}
        for number, group in enumerate(_file_groups(spec.episodes, spec.episodes_per_file)):
            chunk, file = _chunk_file(number, spec.chunks_size)
            path = root / _video_file(spec, key, number)
            path.parent.mkdir(parents=True, exist_ok=True)
            per_episode.update(
                encode_camera_file(
                    path,
                    codec=spec.codec,
                    moov=spec.moov,
                    width=spec.width,
                    height=spec.height,
                    fps=spec.fps,
                    camera=camera_number,
                    episodes=[(e, lengths[e]) for e in group],
                    label=str(path.relative_to(root)),
                    content=spec.content,
                    seed=spec.seed,
                )
            )
            from_timestamp = 0.0
            for e in group:
                # accumulated in float like LeRobot, so values match its files bit for bit
                to_timestamp = from_timestamp + lengths[e] / spec.fps
                rows[e][f"videos/{key}/chunk_index"] = chunk
                rows[e][f"videos/{key}/file_index"] = file
                rows[e][f"videos/{key}/from_timestamp"] = from_timestamp
                rows[e][f"videos/{key}/to_timestamp"] = to_timestamp
                from_timestamp = to_timestamp
            logger.info("wrote %s (%d episodes)", path.relative_to(root), len(group))
        histograms[key] = [per_episode[e] for e in range(spec.episodes)]
    return histograms


def _episode_columns(
    spec: SyntheticSpec, lengths: list[int], starts: np.ndarray, task_of: list[int]
) -> list[dict[str, np.ndarray]]:
    """Per episode, every data column (numeric features and indices) as numpy arrays."""
    columns: list[dict[str, np.ndarray]] = []
    for e, length in enumerate(lengths):
        state, action = _trajectories(spec, e, length)
        frame_index = np.arange(length, dtype=np.int64)
        columns.append(
            {
                "observation.state": state,
                "action": action,
                "timestamp": (frame_index / spec.fps).astype(np.float32),
                "frame_index": frame_index,
                "episode_index": np.full(length, e, dtype=np.int64),
                "index": np.arange(starts[e], starts[e + 1], dtype=np.int64),
                "task_index": np.full(length, task_of[e], dtype=np.int64),
            }
        )
    return columns


def _write_data(
    root: Path,
    spec: SyntheticSpec,
    columns: list[dict[str, np.ndarray]],
    rows: list[dict[str, Any]],
) -> None:
    """Write the data Parquet files and fill the ``data/...`` columns of ``rows``."""
    assert spec.episodes_per_data_file is not None
    schema = tables.data_schema(spec.state_size, spec.action_size)
    for number, group in enumerate(_file_groups(spec.episodes, spec.episodes_per_data_file)):
        chunk, file = _chunk_file(number, spec.chunks_size)
        path = root / _data_file(spec, number)
        path.parent.mkdir(parents=True, exist_ok=True)
        tables.write_data_file(path, schema, [columns[e] for e in group])
        for e in group:
            rows[e]["data/chunk_index"] = chunk
            rows[e]["data/file_index"] = file


def _statistics(
    spec: SyntheticSpec,
    columns: list[dict[str, np.ndarray]],
    histograms: dict[str, list[np.ndarray]],
    lengths: list[int],
) -> tuple[list[dict[str, tables.Stats]], dict[str, tables.Stats]]:
    """Per-episode and global statistics, features in info.json order."""
    vector_keys = [k for k, size in _vector_features(spec) if size]
    per_episode: list[dict[str, tables.Stats]] = []
    for e, length in enumerate(lengths):
        stats: dict[str, tables.Stats] = {}
        for key in vector_keys:
            stats[key] = tables.numeric_stats(columns[e][key])
        for key in spec.cameras:
            stats[key] = tables.histogram_stats(histograms[key][e], length)
        for key in _INDEX_FEATURES:
            stats[key] = tables.numeric_stats(columns[e][key])
        per_episode.append(stats)
    overall: dict[str, tables.Stats] = {}
    for key in per_episode[0]:
        if key in histograms:
            overall[key] = tables.merge_histogram_stats(histograms[key], sum(lengths))
        else:
            overall[key] = tables.numeric_stats(np.concatenate([c[key] for c in columns]))
    return per_episode, overall


def _build(root: Path, spec: SyntheticSpec) -> None:
    """Write the whole dataset under ``root`` (an empty folder). info.json comes last, so a
    folder without it was never finished."""
    lengths = [int(n) for n in spec.episode_lengths()]
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    used_tasks = spec.tasks[: min(len(spec.tasks), spec.episodes)]
    task_of = [e % len(spec.tasks) for e in range(spec.episodes)]
    rows: list[dict[str, Any]] = [
        {
            "episode_index": e,
            "tasks": [spec.tasks[task_of[e]]],
            "length": lengths[e],
            "data/chunk_index": 0,
            "data/file_index": 0,
            "dataset_from_index": int(starts[e]),
            "dataset_to_index": int(starts[e + 1]),
        }
        for e in range(spec.episodes)
    ]
    histograms = _write_videos(root, spec, lengths, rows)
    columns = _episode_columns(spec, lengths, starts, task_of)
    _write_data(root, spec, columns, rows)
    per_episode, overall = _statistics(spec, columns, histograms, lengths)
    tables.write_json(
        root / _SPEC_FILE, {"writer_format_version": WRITER_FORMAT_VERSION, **spec.to_json()}
    )
    if spec.layout != "v3.0":
        _write_v2_meta(root, spec, rows, per_episode, overall, used_tasks)
        return
    for row in rows:
        row["meta/episodes/chunk_index"] = 0
        row["meta/episodes/file_index"] = 0
    meta = root / "meta"
    (meta / "episodes" / "chunk-000").mkdir(parents=True, exist_ok=True)
    tables.write_episodes_file(
        meta / "episodes" / "chunk-000" / "file-000.parquet", rows, per_episode
    )
    tables.write_tasks_file(meta / "tasks.parquet", used_tasks)
    tables.write_json(meta / "stats.json", tables.stats_json(overall))
    info = {
        "codebase_version": "v3.0",
        "robot_type": spec.robot_type,
        "total_episodes": spec.episodes,
        "total_frames": int(starts[-1]),
        "total_tasks": len(used_tasks),
        "chunks_size": spec.chunks_size,
        "data_files_size_in_mb": _DATA_FILES_SIZE_IN_MB,
        "video_files_size_in_mb": _VIDEO_FILES_SIZE_IN_MB,
        "fps": spec.fps,
        "splits": {"train": f"0:{spec.episodes}"},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": _features(spec, CODECS[spec.codec].name),
    }
    tables.write_json(meta / "info.json", info)


def _write_v2_meta(
    root: Path,
    spec: SyntheticSpec,
    rows: list[dict[str, Any]],
    per_episode: list[dict[str, tables.Stats]],
    overall: dict[str, tables.Stats],
    used_tasks: tuple[str, ...],
) -> None:
    """``meta/`` as LeRobot 0.3.x writes it for ``spec.layout`` (v2.1 or v2.0); info.json last."""
    meta = root / "meta"
    meta.mkdir(parents=True, exist_ok=True)
    tables.write_jsonl(
        meta / "episodes.jsonl",
        [
            {"episode_index": r["episode_index"], "tasks": r["tasks"], "length": r["length"]}
            for r in rows
        ],
    )
    tables.write_jsonl(
        meta / "tasks.jsonl", [{"task_index": i, "task": t} for i, t in enumerate(used_tasks)]
    )
    features = _features(spec, CODECS[spec.codec].name)
    if spec.layout == "v2.1":
        tables.write_jsonl(
            meta / "episodes_stats.jsonl",
            [
                {"episode_index": e, "stats": tables.stats_json(stats, _V21_STAT_NAMES)}
                for e, stats in enumerate(per_episode)
            ],
        )
    else:
        tables.write_json(meta / "stats.json", tables.stats_json(overall, _V20_STAT_NAMES))
        for key in spec.cameras:  # v1 -> v2.0 conversions wrote ``video_info``
            features[key]["video_info"] = features[key].pop("info")
    total_frames = sum(r["length"] for r in rows)
    info = {
        "codebase_version": spec.layout,
        "robot_type": spec.robot_type,
        "total_episodes": spec.episodes,
        "total_frames": total_frames,
        "total_tasks": len(used_tasks),
        "total_videos": spec.episodes * len(spec.cameras),
        "total_chunks": -(-spec.episodes // spec.chunks_size),
        "chunks_size": spec.chunks_size,
        "fps": spec.fps,
        "splits": {"train": f"0:{spec.episodes}"},
        "data_path": V2_DATA_PATH,
        "video_path": V2_VIDEO_PATH,
        "features": features,
    }
    tables.write_json(meta / "info.json", info)


def _is_nonempty_dir(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


def write_synthetic_dataset(
    out_dir: str | os.PathLike[str],
    spec: SyntheticSpec | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write a synthetic LeRobot dataset (v3.0, or ``spec.layout``) to ``out_dir`` and return
    its absolute path.

    The dataset is built in a hidden temporary sibling folder and renamed into place, so
    ``out_dir`` either holds a complete dataset or is left as it was.

    Args:
        out_dir: destination folder; must not exist, or be empty, unless ``overwrite``.
        spec: what to write; ``SyntheticSpec()`` when omitted.
        overwrite: replace an existing dataset at ``out_dir`` (only a folder holding
            ``meta/info.json`` is ever replaced).

    Raises:
        LocationError: ``out_dir`` exists and is not empty (without ``overwrite``), is not a
            folder, or cannot be written.
        DatasetFormatError: the encoder failed.
    """
    spec = SyntheticSpec() if spec is None else spec
    out = Path(out_dir).expanduser().absolute()
    if out.exists() and not out.is_dir():
        raise LocationError(f"cannot write dataset to {out}: it exists and is not a folder")
    if _is_nonempty_dir(out):
        if not overwrite:
            raise LocationError(
                f"cannot write dataset to {out}: folder exists and is not empty "
                "(pass overwrite=True / --overwrite to replace a dataset there)"
            )
        if not (out / "meta" / "info.json").is_file():
            raise LocationError(
                f"refusing to overwrite {out}: it does not look like a LeRobot dataset "
                "(no meta/info.json)"
            )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    except OSError as error:
        raise LocationError(f"cannot write dataset to {out}: {error}") from error
    try:
        _build(staging, spec)
        _commit(staging, out)
    except DatasetFormatError as error:
        raise DatasetFormatError(f"cannot write dataset to {out}: {error}") from error
    except OSError as error:
        raise LocationError(f"cannot write dataset to {out}: {error}") from error
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    logger.info(
        "synthetic dataset %s: %d episodes, %d cameras, %s %dx%d",
        out,
        spec.episodes,
        len(spec.cameras),
        spec.codec,
        spec.width,
        spec.height,
    )
    return out


def _commit(staging: Path, out: Path) -> None:
    """Move the finished ``staging`` folder to ``out``, replacing an empty folder or an old
    dataset there; the old one is renamed aside first, then removed."""
    if not _is_nonempty_dir(out):
        if out.is_dir():
            out.rmdir()
        os.rename(staging, out)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
    os.rename(out, aside / "dataset")
    os.rename(staging, out)
    shutil.rmtree(aside, ignore_errors=True)


def default_cache_dir() -> Path:
    """``$EPISODESTREAM_CACHE`` if set, else ``~/.cache/episodestream``."""
    configured = os.environ.get(_CACHE_ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "episodestream"


def ensure_synthetic_dataset(
    spec: SyntheticSpec | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """The cached dataset for ``spec``, written on first use.

    It lives at ``{cache_dir}/synthetic/{codec}-{spec.cache_key()}``; a file lock makes
    concurrent callers (processes or threads) wait for one writer instead of writing twice.
    Later calls only check that ``meta/info.json`` exists.

    Args:
        spec: what to write; ``SyntheticSpec()`` when omitted.
        cache_dir: cache root; :func:`default_cache_dir` when omitted.

    Raises:
        LocationError: the cache folder cannot be written, or the lock is not granted in time.
        DatasetFormatError: the encoder failed.
    """
    from filelock import FileLock, Timeout

    spec = SyntheticSpec() if spec is None else spec
    base = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = (base / "synthetic" / f"{spec.codec}-{spec.cache_key()}").absolute()
    if (target / "meta" / "info.json").is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise LocationError(f"cannot create cache folder {target.parent}: {error}") from error
    try:
        with FileLock(str(target) + ".lock", timeout=_CACHE_LOCK_TIMEOUT_S):
            if not (target / "meta" / "info.json").is_file():
                write_synthetic_dataset(target, spec)
    except Timeout as error:
        raise LocationError(
            f"gave up after {_CACHE_LOCK_TIMEOUT_S:.0f} s waiting for the lock on {target}"
        ) from error
    except OSError as error:
        raise LocationError(f"cannot lock cache entry {target}: {error}") from error
    return target

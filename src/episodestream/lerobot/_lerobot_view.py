"""LeRobot-shaped views of our metadata: what LeRobot's own training code reads from
``dataset.meta`` (``LeRobotDatasetMetadata`` in LeRobot 0.4.x and 0.6.x), built only from our
typed :class:`DatasetMeta`, so LeRobot's ``make_policy``, processors and samplers accept our
datasets unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from episodestream.lerobot._meta import DatasetMeta

__all__ = ["LeRobotEpisodes", "LeRobotInfo", "LeRobotMetadata", "lerobot_stats"]

# info.json fields LeRobot 0.6's typed DatasetInfo defaults when a dataset omits them
_INFO_DEFAULTS: dict[str, Any] = {"splits": {}, "tools": None}
# dataset columns LeRobot 0.6 treats as language annotations (collate and render steps)
_LANGUAGE_COLUMNS = ("language_persistent", "language_events")


class LeRobotInfo(dict):  # type: ignore[type-arg]
    """``meta/info.json`` as LeRobot holds it: a dict (LeRobot 0.4.x) whose keys also read as
    attributes (LeRobot 0.6.x's typed ``DatasetInfo``); feature shapes are tuples."""

    def __getattr__(self, name: str) -> Any:
        if name in self:
            return self[name]
        if name in _INFO_DEFAULTS:
            return copy.copy(_INFO_DEFAULTS[name])
        raise AttributeError(f"info.json has no field {name!r}")

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(dict(self))


class LeRobotEpisodes:
    """``meta/episodes`` as LeRobot's metadata exposes it (a Hugging Face ``datasets.Dataset``
    there): ``len()``, ``[i]`` is the row of the i-th episode as a dict, ``["column"]`` a
    column as a list, iteration over row dicts, ``to_pandas()``. Stats columns are left out, as
    LeRobot leaves them out. Read-only."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table
        self._columns: dict[str, list[Any]] = {}

    @property
    def column_names(self) -> list[str]:
        return list(self._table.column_names)

    @property
    def num_rows(self) -> int:
        return self._table.num_rows

    def __len__(self) -> int:
        return self._table.num_rows

    def _column(self, name: str) -> list[Any]:
        values = self._columns.get(name)
        if values is None:
            if name not in self._table.column_names:
                raise KeyError(f"meta/episodes has no column {name!r}; have {self.column_names}")
            values = self._table.column(name).to_pylist()
            self._columns[name] = values
        return values

    def __getitem__(self, key: int | str | slice | list[int] | np.ndarray) -> Any:
        if isinstance(key, str):
            return list(self._column(key))
        if isinstance(key, int | np.integer) and not isinstance(key, bool):
            n = len(self)
            position = int(key) + n if key < 0 else int(key)
            if not 0 <= position < n:
                raise IndexError(f"episode row {key} out of range for {n} episodes")
            return {name: self._column(name)[position] for name in self._table.column_names}
        if isinstance(key, slice):
            positions = range(*key.indices(len(self)))
        else:
            positions = [int(p) for p in key]
        return {name: [self._column(name)[p] for p in positions] for name in self.column_names}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for position in range(len(self)):
            yield self[position]

    def to_pylist(self) -> list[dict[str, Any]]:
        return list(self)

    def to_pandas(self) -> Any:
        """A pandas DataFrame of the columns (pandas is imported here, on demand)."""
        return self._table.to_pandas()

    def __repr__(self) -> str:
        return f"LeRobotEpisodes(num_rows={len(self)}, columns={len(self.column_names)})"


def lerobot_stats(stats: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``meta/stats.json`` as LeRobot loads it: nested dicts whose leaves are numpy arrays
    (``np.array(value)``, so ints stay int64 and floats float64), fresh and mutable."""
    if stats is None:
        return None

    def cast(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {key: cast(inner) for key, inner in value.items()}
        return np.array(value)

    return cast(stats)


class LeRobotMetadata:
    """``LeRobotDatasetMetadata``'s read surface over our :class:`DatasetMeta`.

    Attributes that LeRobot's training mutates (``stats``, ``info``) are this view's own
    copies; our typed metadata stays untouched and is available as :attr:`dataset_meta`.

    Args:
        meta: our metadata.
        repo_id: the name LeRobot knows the dataset by (``org/name``).
        root: where the dataset lives: a local ``Path``, or the URL it streams from.
        revision: the revision asked for; LeRobot reports its codebase version when none was.
    """

    def __init__(
        self,
        meta: DatasetMeta,
        *,
        repo_id: str,
        root: str | Path,
        revision: str | None = None,
    ) -> None:
        self.dataset_meta = meta
        self.repo_id = repo_id
        self.root = root
        # the version LeRobot would see: a v2.x source is presented as its v3.0 conversion
        self.revision = revision or meta.revision or meta.info.get("codebase_version")
        info = LeRobotInfo(copy.deepcopy(meta.info))
        for feature in info.get("features", {}).values():
            if isinstance(feature, dict) and isinstance(feature.get("shape"), list):
                feature["shape"] = tuple(feature["shape"])
        self.info = info
        self.stats = lerobot_stats(meta.stats)
        self.subtasks = None
        self._episodes: LeRobotEpisodes | None = None
        self._tasks: Any = None

    # -- what info.json says ---------------------------------------------------------------------

    @property
    def features(self) -> dict[str, dict[str, Any]]:
        return self.info["features"]

    @property
    def fps(self) -> int | float:
        """As ``info.json`` writes it (an int in LeRobot's datasets)."""
        return self.info["fps"]

    @property
    def robot_type(self) -> str | None:
        return self.info.get("robot_type")

    @property
    def total_episodes(self) -> int:
        return self.info["total_episodes"]

    @property
    def total_frames(self) -> int:
        return self.info["total_frames"]

    @property
    def total_tasks(self) -> int:
        return self.info["total_tasks"]

    @property
    def chunks_size(self) -> int:
        return self.info.get("chunks_size", self.dataset_meta.chunks_size)

    @property
    def data_files_size_in_mb(self) -> Any:
        return self.info.get("data_files_size_in_mb")

    @property
    def video_files_size_in_mb(self) -> Any:
        return self.info.get("video_files_size_in_mb")

    @property
    def data_path(self) -> str:
        return self.info["data_path"]

    @property
    def video_path(self) -> str | None:
        return self.info.get("video_path")

    @property
    def url_root(self) -> str:
        return f"hf://datasets/{self.repo_id}"

    @property
    def image_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] == "image"]

    @property
    def video_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] == "video"]

    @property
    def camera_keys(self) -> list[str]:
        return [key for key, ft in self.features.items() if ft["dtype"] in ("video", "image")]

    @property
    def depth_keys(self) -> list[str]:
        """Camera keys whose feature info marks them as depth maps (LeRobot 0.6)."""

        def is_depth(ft: dict[str, Any]) -> bool:
            info = ft.get("info") or {}
            video_info = ft.get("video_info") or {}
            return bool(
                info.get("is_depth_map", False)
                or info.get("video.is_depth_map", False)
                or video_info.get("video.is_depth_map", False)
            )

        return [key for key, ft in self.features.items() if is_depth(ft)]

    @property
    def has_language_columns(self) -> bool:
        """Whether the dataset declares language annotation columns (LeRobot 0.6)."""
        return any(column in self.features for column in _LANGUAGE_COLUMNS)

    @property
    def names(self) -> dict[str, Any]:
        return {key: ft.get("names") for key, ft in self.features.items()}

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {key: tuple(ft["shape"]) for key, ft in self.features.items()}

    # -- episodes and tasks ----------------------------------------------------------------------

    @property
    def episodes(self) -> LeRobotEpisodes:
        if self._episodes is None:
            table = self.dataset_meta.episode_columns
            if table is None:
                table = pa.table({})
            self._episodes = LeRobotEpisodes(table)
        return self._episodes

    @property
    def tasks(self) -> Any:
        """A pandas DataFrame indexed by task text with a ``task_index`` column, as LeRobot
        reads ``meta/tasks.parquet`` (pandas is imported here, on demand)."""
        if self._tasks is None:
            import pandas as pd

            texts = list(self.dataset_meta.tasks)
            self._tasks = pd.DataFrame(
                {"task_index": np.arange(len(texts), dtype=np.int64)}, index=pd.Index(texts)
            )
        return self._tasks

    def get_task_index(self, task: str) -> int | None:
        try:
            return self.dataset_meta.tasks.index(task)
        except ValueError:
            return None

    def get_data_file_path(self, ep_index: int) -> Path:
        return Path(self.dataset_meta.episode_data_path(int(ep_index)))

    def get_video_file_path(self, ep_index: int, vid_key: str) -> Path:
        return Path(self.dataset_meta.episode_video_path(int(ep_index), vid_key))

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_tasks"] = None  # rebuilt on demand; keeps pandas out of pickles
        return state

    def __repr__(self) -> str:
        return (
            f"LeRobotMetadata(repo_id={self.repo_id!r}, total_episodes={self.total_episodes}, "
            f"total_frames={self.total_frames}, fps={self.fps}, cameras={self.camera_keys})"
        )

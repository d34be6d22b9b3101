"""Turning (episode, frame) into the sample LeRobot's ``LeRobotDataset`` returns."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

import numpy as np
import torch

from episodestream.datasets._groups import ImageDtype
from episodestream.datasets._waits import result_within
from episodestream.decode import to_float
from episodestream.errors import DatasetFormatError, SamplingError, StorageTimeout
from episodestream.lerobot import DatasetMeta, EpisodeRowReader
from episodestream.sampling import delta_frame_offsets, delta_query

__all__ = ["EpisodeRows", "SampleBuilder"]

ImageTransform = Callable[[torch.Tensor], torch.Tensor]
_T = TypeVar("_T")


class Submitter(Protocol):
    """What :class:`EpisodeRows` needs of an executor (``ThreadPoolExecutor``,
    ``DecodeExecutor``): ``submit`` returning a Future."""

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> Future[_T]: ...


_TORCH_DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "float32": torch.float32,
    "float64": torch.float64,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
#: the numpy twin of each: a row already of it is copied, not converted
_NUMPY_TWINS: dict[torch.dtype, np.dtype] = {
    dtype: np.dtype(name) for name, dtype in _TORCH_DTYPES.items()
}
DEFAULT_ROWS_EPISODES = 32
#: bound on waiting for rows another thread is reading (the reader has its own timeouts)
_ROWS_WAIT_TIMEOUT_S = 300.0


class EpisodeRows:
    """Decoded Parquet rows of recently used episodes (an LRU by episode count).

    With an ``executor``, :meth:`prefetch` reads an episode's rows in the background, so the
    decode thread that first needs them (over a WAN: one or two round trips) does not wait.
    """

    def __init__(
        self,
        reader: EpisodeRowReader,
        columns: Sequence[str],
        capacity: int = DEFAULT_ROWS_EPISODES,
        executor: Submitter | None = None,
    ) -> None:
        self._reader = reader
        self._columns = list(columns)
        self._capacity = capacity
        self._executor = executor
        self._rows: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self._loading: dict[int, Future[dict[str, np.ndarray]]] = {}
        self._lock = threading.Lock()

    def prefetch(self, episode: int) -> None:
        """Start reading ``episode``'s rows in the background (no-op without an executor)."""
        if self._executor is None:
            return
        with self._lock:
            if episode in self._rows or episode in self._loading:
                return
            self._loading[episode] = self._executor.submit(
                self._reader.rows, episode, self._columns
            )

    def get(self, episode: int) -> dict[str, np.ndarray]:
        with self._lock:
            rows = self._rows.get(episode)
            if rows is not None:
                self._rows.move_to_end(episode)
                return rows
            loading = self._loading.get(episode)
        if loading is None:
            rows = self._reader.rows(episode, self._columns)
        else:
            try:  # a failed background read raises its own (typed) error here
                rows = result_within(
                    loading,
                    _ROWS_WAIT_TIMEOUT_S,
                    lambda: StorageTimeout(
                        f"episode {episode}: its Parquet rows were not read within "
                        f"{_ROWS_WAIT_TIMEOUT_S:g} s"
                    ),
                )
            finally:
                with self._lock:
                    if self._loading.get(episode) is loading:
                        del self._loading[episode]
        with self._lock:
            self._rows[episode] = rows
            while len(self._rows) > self._capacity:
                self._rows.popitem(last=False)
        return rows


class SampleBuilder:
    """Assembles samples: every info.json feature, ``task``, and ``{key}_is_pad`` for deltas.

    Numeric features come from the episode's Parquet rows as tensors of their declared dtype;
    cameras are decoded at ``from_timestamp + timestamp`` of the (clamped) frames, exactly as
    LeRobot queries them, as float32 in [0, 1] (``x / 255``) or uint8.
    """

    def __init__(
        self,
        meta: DatasetMeta,
        *,
        delta_timestamps: Mapping[str, Sequence[float]] | None,
        image_dtype: ImageDtype,
        image_transforms: ImageTransform | None = None,
    ) -> None:
        self.meta = meta
        self.image_dtype = image_dtype
        self.image_transforms = image_transforms
        self.video_keys = meta.video_keys
        self.data_keys = meta.data_keys
        if "timestamp" not in self.data_keys and self.video_keys:
            raise DatasetFormatError(
                "meta/info.json: features lack 'timestamp', needed to find frames"
            )
        features = {f.key: f for f in meta.features}
        self.offsets = delta_frame_offsets(delta_timestamps or {}, meta.fps)
        unknown = sorted(set(self.offsets) - set(features))
        if unknown:
            raise SamplingError(
                f"delta_timestamps keys {unknown} are not features of the dataset "
                f"(have {sorted(features)})"
            )
        self._dtypes = {
            key: _TORCH_DTYPES.get(features[key].dtype)
            for key in self.data_keys
            if features[key].kind == "numeric"
        }
        table = meta.episodes
        self._from_ts = {key: table.video(key).from_timestamp for key in self.video_keys}
        self._tasks = meta.tasks

    def build(
        self,
        episode: int,
        frame: int,
        rows: Mapping[str, np.ndarray],
        resident: Any,
        decode: Callable[[Any, str, np.ndarray], torch.Tensor],
    ) -> dict[str, Any]:
        """The sample of ``frame`` (0-based, within ``episode``).

        ``decode(resident, camera, source_times_s)`` returns the uint8 frames of ``camera``
        shown at those source-file times; ``resident`` is whatever it reads them from (the
        episode's clips, or a window decoded from them).
        """
        length = len(rows["frame_index"])
        queries = delta_query(frame, length, self.offsets) if self.offsets else {}
        sample: dict[str, Any] = {}
        for key in self.data_keys:
            column = rows[key]
            query = queries.get(key)
            value = column[frame] if query is None else column[query.frame_indices]
            sample[key] = self._tensor(key, value)
            if query is not None:
                sample[f"{key}_is_pad"] = torch.from_numpy(query.is_pad.copy())
        row = self.meta.episodes.row(episode)
        timestamps = rows.get("timestamp")
        for key in self.video_keys:
            if resident is None:
                raise ValueError("camera frames need the episode's clips")
            query = queries.get(key)
            indices = np.array([frame]) if query is None else query.frame_indices
            assert timestamps is not None
            source_times = float(self._from_ts[key][row]) + timestamps[indices].astype(np.float64)
            frames = decode(resident, key, source_times)
            images = to_float(frames) if self.image_dtype == "float32" else frames
            if self.image_transforms is not None:
                images = self.image_transforms(images)
            sample[key] = images[0] if query is None else images
            if query is not None:
                sample[f"{key}_is_pad"] = torch.from_numpy(query.is_pad.copy())
        if "task_index" in rows:
            sample["task"] = self._task(episode, frame, rows["task_index"][frame])
        return sample

    def _task(self, episode: int, frame: int, task_index: Any) -> str:
        """The task string of a row; LeRobot raises on an index past its tasks (and would
        wrap a negative one around to the last task: a wrong value, refused here too)."""
        index = int(task_index)
        if not 0 <= index < len(self._tasks):
            raise DatasetFormatError(
                f"episode {episode} frame {frame}: task_index {index} names no task "
                f"(meta/tasks has {len(self._tasks)})"
            )
        return self._tasks[index]

    def _tensor(self, key: str, value: Any) -> Any:
        dtype = self._dtypes.get(key)
        if dtype is None:  # string features stay Python strings
            return value.tolist() if isinstance(value, np.ndarray) else value
        return row_tensor(value, dtype)


def row_tensor(value: Any, dtype: torch.dtype) -> torch.Tensor:
    """A Parquet row's ``value`` as a tensor of ``dtype`` that owns its memory (a training step
    may edit it in place; the cached rows must not change)."""
    array = np.asarray(value)
    if array.dtype == _NUMPY_TWINS.get(dtype):
        # the same values and dtype as the conversion below, at a fifth of its cost
        return torch.from_numpy(array.copy())
    return torch.as_tensor(array).to(dtype).clone()

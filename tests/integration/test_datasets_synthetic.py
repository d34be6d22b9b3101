"""EpisodeStreamDataset on synthetic datasets (AV1, and H.264 with B-frames and open GOPs):
over HTTP == over local disk == a straightforward reference (full-file torchcodec decode of the
frame at ``from_timestamp + timestamp`` and a pyarrow read of the data Parquet), with and without
delta_timestamps (padding at both episode edges); every image carries the (episode, frame) it
was asked for."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torchcodec.decoders import VideoDecoder

from episodestream import EpisodeStreamDataset
from episodestream_tools.synthetic import read_frame_identity

FPS = 30
# frame offsets chosen to pad at both edges of 8..20-frame episodes
DELTA_FRAMES = {
    "observation.images.cam_high": [-3, -1, 0, 2],
    "observation.state": [-2, 0],
    "action": [0, 1, 5],
}
DELTA_TIMESTAMPS = {key: [k / FPS for k in frames] for key, frames in DELTA_FRAMES.items()}

_TORCH_TO_NUMPY = {torch.float32: np.float32, torch.int64: np.int64, torch.bool: np.bool_}


class DirectReference:
    """What a plain reader of the files returns: no manifest, no clips, no cache.

    Rows come from ``pyarrow.parquet`` over every data file; frames from torchcodec's
    ``VideoDecoder`` opened on the whole source MP4 (exact seek mode), at the frame index
    ``round((from_timestamp + timestamp) * average_fps)`` as LeRobot computes it.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.info = json.loads((root / "meta/info.json").read_text())
        self.features = self.info["features"]
        self.cameras = [k for k, f in self.features.items() if f["dtype"] == "video"]
        episodes = pa.concat_tables(
            [pq.read_table(p) for p in sorted((root / "meta/episodes").rglob("*.parquet"))]
        )
        self.episodes = {row["episode_index"]: row for row in episodes.to_pylist()}
        data = pa.concat_tables(
            [pq.read_table(p) for p in sorted((root / "data").rglob("*.parquet"))]
        )
        self.columns = {
            name: data.column(name).to_numpy(zero_copy_only=False) for name in data.column_names
        }
        tasks = pq.read_table(root / "meta/tasks.parquet").to_pylist()
        self.tasks = {t["task_index"]: t["__index_level_0__"] for t in tasks}
        self._decoders: dict[str, VideoDecoder] = {}

    @property
    def lengths(self) -> dict[int, int]:
        return {e: int(row["length"]) for e, row in sorted(self.episodes.items())}

    def _episode_rows(self, episode: int) -> np.ndarray:
        rows = np.flatnonzero(self.columns["episode_index"] == episode)
        return rows[np.argsort(self.columns["frame_index"][rows])]

    def _value(self, key: str, rows: np.ndarray) -> np.ndarray:
        column = self.columns[key][rows]
        if column.dtype == object:  # list<float> columns
            return np.stack(column).astype(self.features[key]["dtype"])
        return column.astype(self.features[key]["dtype"])

    def frames(self, camera: str, episode: int, timestamps: np.ndarray) -> np.ndarray:
        row = self.episodes[episode]
        chunk = row[f"videos/{camera}/chunk_index"]
        file = row[f"videos/{camera}/file_index"]
        path = str(
            self.root
            / self.info["video_path"].format(video_key=camera, chunk_index=chunk, file_index=file)
        )
        if path not in self._decoders:
            self._decoders[path] = VideoDecoder(path, seek_mode="exact")
        decoder = self._decoders[path]
        start = float(row[f"videos/{camera}/from_timestamp"])
        # LeRobot's query: the frame nearest to from_timestamp + timestamp, by index at the
        # file's average fps (a float32 timestamp may fall a hair before its frame's pts)
        fps = decoder.metadata.average_fps
        indices = [round((start + float(t)) * fps) for t in timestamps]
        return decoder.get_frames_at(indices).data.numpy()

    def sample(
        self, episode: int, frame: int, delta_frames: Mapping[str, Sequence[int]]
    ) -> dict[str, Any]:
        """uint8 images; every other feature in its declared dtype; ``task``; ``*_is_pad``."""
        rows = self._episode_rows(episode)
        length = rows.size
        sample: dict[str, Any] = {}
        for key, feature in self.features.items():
            if key in delta_frames:
                wanted = frame + np.asarray(delta_frames[key])
                frames = np.clip(wanted, 0, length - 1)
                sample[f"{key}_is_pad"] = (wanted < 0) | (wanted >= length)
            else:
                frames = np.array([frame])
            if feature["dtype"] == "video":
                images = self.frames(key, episode, self._value("timestamp", rows[frames]))
            else:
                images = self._value(key, rows[frames])
            sample[key] = images if key in delta_frames else images[0]
        sample["task"] = self.tasks[int(self.columns["task_index"][rows[frame]])]
        return sample


def _as_numpy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.numpy()
    return value


def assert_samples_equal(ours: Mapping[str, Any], expected: Mapping[str, Any], where: str) -> None:
    assert set(ours) == set(expected), f"{where}: keys {sorted(set(ours) ^ set(expected))}"
    for key in expected:
        a, b = _as_numpy(ours[key]), _as_numpy(expected[key])
        if isinstance(b, str):
            assert a == b, f"{where} {key!r}"
            continue
        b = np.asarray(b)
        assert a.dtype == b.dtype, f"{where} {key!r}: dtype {a.dtype} != {b.dtype}"
        assert a.shape == b.shape, f"{where} {key!r}: shape {a.shape} != {b.shape}"
        assert np.array_equal(a, b), f"{where} {key!r}: values differ"


def _test_positions(lengths: dict[int, int], count: int, seed: int) -> list[int]:
    """Random positions plus the first and last frame of every episode."""
    starts = np.cumsum([0, *lengths.values()])
    edges = [int(s) for s in starts[:-1]] + [int(s) - 1 for s in starts[1:]]
    rng = np.random.default_rng(seed)
    drawn = rng.choice(int(starts[-1]), size=count, replace=False).tolist()
    return sorted(set(edges) | set(drawn))


@pytest.fixture(scope="module", params=["synthetic_av1", "synthetic_h264"])
def synthetic_case(
    request: pytest.FixtureRequest, http_publish: Callable[..., str]
) -> tuple[Path, str, DirectReference]:
    root: Path = request.getfixturevalue(request.param)
    return root, http_publish(root), DirectReference(root)


@pytest.mark.parametrize("decoder", ["auto", "pyav"])
@pytest.mark.parametrize("with_deltas", [False, True], ids=["plain", "deltas"])
def test_http_equals_local_equals_reference(
    synthetic_case: tuple[Path, str, DirectReference],
    with_deltas: bool,
    decoder: str,
    datasets_cache_dir: Path,
) -> None:
    root, url, reference = synthetic_case
    deltas = DELTA_TIMESTAMPS if with_deltas else None
    delta_frames = DELTA_FRAMES if with_deltas else {}
    lengths = reference.lengths
    positions = _test_positions(lengths, count=10, seed=3)
    starts = np.cumsum([0, *lengths.values()])
    episode_ids = list(lengths)
    common = dict(delta_timestamps=deltas, decoder=decoder, cache_dir=datasets_cache_dir)
    pads = {"before": 0, "after": 0}
    with (
        EpisodeStreamDataset(root, image_dtype="uint8", **common) as local,
        EpisodeStreamDataset(url, image_dtype="uint8", **common) as remote,
        EpisodeStreamDataset(url, image_dtype="float32", **common) as remote_float,
    ):
        assert len(local) == len(remote) == int(starts[-1])
        for position in positions:
            episode_row = int(np.searchsorted(starts, position, side="right")) - 1
            episode, frame = episode_ids[episode_row], position - int(starts[episode_row])
            where = f"position {position} (episode {episode}, frame {frame})"
            expected = reference.sample(episode, frame, delta_frames)
            ours = local[position]
            assert_samples_equal(ours, expected, f"local {where}")
            assert_samples_equal(remote[position], expected, f"http {where}")
            as_float = remote_float[position]
            for camera in reference.cameras:
                assert as_float[camera].dtype == torch.float32
                assert torch.equal(as_float[camera], ours[camera].float() / 255), where
                # the pixels carry the frame that was asked for (clamped at the edges)
                images = ours[camera] if camera in delta_frames else ours[camera][None]
                wanted = frame + np.asarray(delta_frames.get(camera, [0]))
                clamped = np.clip(wanted, 0, lengths[episode] - 1)
                for image, k in zip(images, clamped.tolist(), strict=True):
                    assert read_frame_identity(image) == (episode, k), where
            for key in delta_frames:
                pad = ours[f"{key}_is_pad"].numpy()
                pads["before"] += int(pad[: len(pad) // 2].any())
                pads["after"] += int(pad[len(pad) // 2 :].any() and frame > 0)
    if with_deltas:
        assert pads["before"] > 0 and pads["after"] > 0, pads

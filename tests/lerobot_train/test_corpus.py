"""The corpus of conventions: datasets as LeRobot's own writer left them, and as other writers
and converters leave them, each read by LeRobot's ``LeRobotDataset`` and by ours, sample by
sample. The rule: where LeRobot returns a sample we return the same one, bit for bit; where it
raises, we raise an ``EpisodeStreamError`` at that sample; the pool covers every sample LeRobot
reads exactly once an epoch.

Runs in LeRobot's environment (``make test-lerobot``). The datasets are written here by
LeRobot's own writer (``LeRobotDataset.create``), then varied by tests/support/variants.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from lerobot.datasets import video_utils as lerobot_video_utils
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from episodestream import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.errors import EpisodeStreamError
from tests.support import variants
from tests.support.samples import assert_samples_equal

REPO_ID = "local/corpus"
TOP = "observation.images.top"
WRIST = "observation.images.wrist cam"  # a key with a space: paths and URLs must carry it
HEIGHT, WIDTH = 96, 128
LENGTHS = (40, 55, 47, 33)
DELTAS = {TOP: [-2 / 30, 0.0], "action": [0.0, 1 / 30, 2 / 30]}


def _write(root: Path) -> Path:
    """Four episodes in two video files per camera, as LeRobot 0.4's writer records them."""
    features = {
        TOP: {
            "dtype": "video",
            "shape": (HEIGHT, WIDTH, 3),
            "names": ["height", "width", "channels"],
        },
        WRIST: {
            "dtype": "video",
            "shape": (HEIGHT, WIDTH, 3),
            "names": ["height", "width", "channels"],
        },
        "observation.state": {"dtype": "float32", "shape": (4,), "names": ["a", "b", "c", "d"]},
        "action": {"dtype": "float32", "shape": (4,), "names": ["a", "b", "c", "d"]},
    }
    dataset = LeRobotDataset.create(REPO_ID, fps=30, features=features, root=root, use_videos=True)
    # noise frames, so 1 MB files hold two episodes each: files of unused episodes exist
    dataset.meta.update_chunk_settings(video_files_size_in_mb=1)
    rng = np.random.default_rng(0)
    for episode, length in enumerate(LENGTHS):
        for k in range(length):
            image = rng.integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)
            dataset.add_frame(
                {
                    TOP: image,
                    WRIST: np.ascontiguousarray(image[::-1]),
                    "observation.state": np.full(4, episode + k / 100, np.float32),
                    "action": np.full(4, k, np.float32),
                    "task": f"task {episode % 2}",
                }
            )
        dataset.save_episode()
    dataset.finalize()
    return root


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write(tmp_path_factory.mktemp("corpus") / "written")


def _episode_files(root: Path, camera: str) -> dict[int, str]:
    table = pq.read_table(variants.episodes_files(root)[0])
    chunks = table.column(f"videos/{camera}/chunk_index").to_pylist()
    files = table.column(f"videos/{camera}/file_index").to_pylist()
    return {
        episode: f"videos/{camera}/chunk-{chunk:03d}/file-{file:03d}.mp4"
        for episode, (chunk, file) in enumerate(zip(chunks, files, strict=True))
    }


def _last_file(root: Path, camera: str) -> Path:
    return root / _episode_files(root, camera)[len(LENGTHS) - 1]


def _reencoded(encoder: str) -> Callable[[Path], None]:
    def edit(root: Path) -> None:  # every camera's files, the codec label left at AV1
        for path in variants.video_files(root):
            variants.reencode_video(path, encoder)

    return edit


def _rows_past_the_frames(root: Path) -> None:
    # the last episode's video one frame longer, and its last row timed at that extra frame:
    # LeRobot decodes it there (anywhere in the file); our span runs to the file's end
    for camera in (TOP, WRIST):
        variants.repeat_last_video_frame(_last_file(root, camera))
    last = len(LENGTHS) - 1
    variants.shift_timestamp(root, last, LENGTHS[last] - 1, 1 / 30)


def _moov_at_end(root: Path) -> None:
    for path in variants.video_files(root):
        variants.remux_moov(path, faststart=False)


# name -> (edit of a copy of the written dataset, episodes read: None for all)
VARIANTS: dict[str, tuple[Callable[[Path], None], list[int] | None]] = {
    "as written": (lambda root: None, None),
    "to_timestamp at the last frame": (variants.set_to_timestamp_last_frame, None),
    "video a frame short": (
        lambda root: variants.drop_last_video_frame(_last_file(root, TOP)),
        None,
    ),
    "video a frame long": (
        lambda root: variants.repeat_last_video_frame(_last_file(root, WRIST)),
        None,
    ),
    "codec label disagrees": (lambda root: variants.relabel_codec(root, "h264"), None),
    "last row timed past its episode's frames": (_rows_past_the_frames, None),
    "moov at the end": (_moov_at_end, None),
    "MPEG-4 Part 2 labelled AV1": (_reencoded("mpeg4"), None),
    "VP9 labelled AV1": (_reencoded("libvpx-vp9"), None),
    "H.264 with B-frames labelled AV1": (_reencoded("libx264"), None),
    "names nested, dict, null": (variants.nest_names, None),
    "unknown fields": (variants.add_unknown_fields, None),
    "stats absent": (lambda root: (root / "meta/stats.json").unlink(), None),
    "tasks rows swapped": (variants.swap_task_rows, None),
    "an unused task past a gap": (variants.add_unused_task, None),
    "unused episode's file absent": (
        lambda root: variants.remove_video_file(root, _episode_files(root, TOP)[3]),
        [0, 1],
    ),
}


@pytest.fixture(scope="module")
def corpus(written: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    made: dict[str, Path] = {}
    for name, (edit, _) in VARIANTS.items():
        root = variants.copy_dataset(written, tmp_path_factory.mktemp("variant") / "ds")
        edit(root)
        made[name] = root
    return made


def _lerobot(root: Path, episodes: list[int] | None, deltas: dict[str, list[float]] | None):
    # LeRobot caches open decoders by path: a variant's rewritten file must be opened afresh
    lerobot_video_utils._default_decoder_cache.clear()
    return LeRobotDataset(
        REPO_ID,
        root=root,
        episodes=episodes,
        delta_timestamps=deltas,
        video_backend="torchcodec",
    )


def _lerobot_samples(dataset: LeRobotDataset) -> Iterator[tuple[int, dict[str, Any] | Exception]]:
    for i in range(len(dataset)):
        try:
            yield i, dataset[i]
        except Exception as error:  # what LeRobot raises is the expectation
            yield i, error


@pytest.fixture(scope="module", params=["local", "http"])
def over(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.mark.parametrize("deltas", [None, DELTAS], ids=["frames", "deltas"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_sample_is_lerobots(
    variant: str,
    deltas: dict[str, list[float]] | None,
    over: str,
    corpus: dict[str, Path],
    http_publish: Callable[..., str],
    tmp_path: Path,
) -> None:
    root = corpus[variant]
    episodes = VARIANTS[variant][1]
    target = str(root) if over == "local" else http_publish(root)
    theirs = _lerobot(root, episodes, deltas)
    raised = 0
    with EpisodeStreamDataset(
        target, episodes=episodes, delta_timestamps=deltas, cache_dir=tmp_path / "cache"
    ) as ours:
        assert len(ours) == len(theirs)
        for i, expected in _lerobot_samples(theirs):
            where = f"{variant} over {over}, sample {i}"
            if isinstance(expected, Exception):
                raised += 1
                with pytest.raises(EpisodeStreamError):
                    ours[i]
                continue
            assert_samples_equal(ours[i], expected, where)
    # the one variant LeRobot cannot read all of: the last row of the short video
    assert raised == (1 if variant == "video a frame short" else 0), raised


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_pool_covers_what_lerobot_reads(
    variant: str,
    over: str,
    corpus: dict[str, Path],
    http_publish: Callable[..., str],
    tmp_path: Path,
) -> None:
    root = corpus[variant]
    episodes = VARIANTS[variant][1]
    theirs = _lerobot(root, episodes, None)
    expected = {
        int(sample["index"]): sample
        for _, sample in _lerobot_samples(theirs)
        if not isinstance(sample, Exception)
    }
    target = str(root) if over == "local" else http_publish(root)
    pool = EpisodePoolDataset(
        target, episodes=episodes, pool_size=2, seed=3, cache_dir=tmp_path / "cache"
    )
    seen: list[int] = []
    with pool:
        if len(expected) < len(theirs):  # a sample LeRobot cannot read: the epoch stops there
            with pytest.raises(EpisodeStreamError):
                for sample in pool:
                    seen.append(int(sample["index"]))
                    assert_samples_equal(sample, expected[seen[-1]], f"{variant}: pool")
            return
        for sample in pool:
            seen.append(int(sample["index"]))
            assert_samples_equal(sample, expected[seen[-1]], f"{variant}: pool sample {seen[-1]}")
    assert sorted(seen) == sorted(expected)


def test_the_written_dataset_is_what_the_corpus_needs(written: Path) -> None:
    # two episodes per video file, moov at the start: the variants then change one thing each
    info = json.loads((written / "meta/info.json").read_text())
    assert info["codebase_version"].startswith("v3")
    assert len(set(_episode_files(written, TOP).values())) == 2
    with open(variants.video_files(written, TOP)[0], "rb") as handle:
        assert b"moov" in handle.read(4096)

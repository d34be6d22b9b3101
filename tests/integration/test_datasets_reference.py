"""EpisodeStreamDataset returns, bit for bit, what LeRobot's own LeRobotDataset returned for
lerobot_sim5 (tests/data/lerobot_sim5_reference): every key, dtype, shape and value, from local
disk and over HTTP, with torchcodec and with PyAV, float32 and uint8 images, with and without
delta_timestamps."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from episodestream import EpisodeStreamDataset
from tests.plugins.datasets import LeRobotReference

IMAGE_PREFIX = "observation.images."


def _bits(array: np.ndarray) -> np.ndarray:
    """The raw bits of an array (float equality would accept -0.0 == 0.0)."""
    if array.dtype.kind == "f":
        return array.view(np.dtype(f"u{array.dtype.itemsize}"))
    return array


def assert_matches_reference(
    dataset: EpisodeStreamDataset, reference: dict[str, np.ndarray], *, image_dtype: str
) -> int:
    """Compare every reference sample with ours; returns the number of values compared."""
    keys = LeRobotReference.keys(reference)
    compared = 0
    for row, index in enumerate(reference["request_index"].tolist()):
        sample: dict[str, Any] = dataset[index]
        assert set(sample) == keys, f"index {index}: keys differ"
        for key in sorted(keys):
            expected = reference[key][row]
            ours = sample[key]
            where = f"index {index}, {key!r}"
            if key == "task":
                assert isinstance(ours, str) and ours == str(expected), where
                continue
            assert isinstance(ours, torch.Tensor), where
            is_image = key.startswith(IMAGE_PREFIX) and not key.endswith("_is_pad")
            if is_image and image_dtype == "float32":
                # LeRobot hands out uint8 / 255 as float32; the reference stores the uint8
                expected = expected.astype(np.float32) / np.float32(255)
            got = ours.numpy()
            assert got.dtype == expected.dtype, f"{where}: dtype {got.dtype} != {expected.dtype}"
            assert got.shape == expected.shape, f"{where}: shape {got.shape} != {expected.shape}"
            assert np.array_equal(_bits(got), _bits(np.array(expected))), where
            compared += expected.size
    return compared


@pytest.fixture(scope="module", params=["local", "http"])
def sim5_root(request: pytest.FixtureRequest, lerobot_fixture_root: Path) -> str:
    if request.param == "local":
        return str(lerobot_fixture_root)
    return request.getfixturevalue("lerobot_sim5_url")


@pytest.fixture(params=["float32", "uint8"])
def image_dtype(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=["torchcodec", "pyav"])
def open_sim5(
    request: pytest.FixtureRequest, sim5_root: str, image_dtype: str, datasets_cache_dir: Path
) -> Callable[..., EpisodeStreamDataset]:
    """``open_sim5(**options)``: lerobot_sim5 (local and over HTTP) with each decoder, in
    ``image_dtype``."""

    def open_dataset(**options: Any) -> EpisodeStreamDataset:
        return EpisodeStreamDataset(
            sim5_root,
            decoder=request.param,
            image_dtype=image_dtype,
            cache_dir=datasets_cache_dir,
            **options,
        )

    return open_dataset


def test_samples_equal_lerobot(
    open_sim5: Callable[..., EpisodeStreamDataset],
    image_dtype: str,
    lerobot_reference: LeRobotReference,
) -> None:
    with open_sim5() as dataset:
        assert len(dataset) == 244
        compared = assert_matches_reference(
            dataset, lerobot_reference.samples, image_dtype=image_dtype
        )
    assert compared > 24 * 3 * 3 * 96 * 128  # every image pixel and every scalar


def test_delta_samples_equal_lerobot(
    open_sim5: Callable[..., EpisodeStreamDataset],
    image_dtype: str,
    lerobot_reference: LeRobotReference,
) -> None:
    reference = lerobot_reference.samples_delta
    # the reference covers padding on both sides, or this test would prove less than it says
    assert reference["observation.state_is_pad"][:, 0].any()
    assert reference["action_is_pad"][:, -1].any()
    with open_sim5(delta_timestamps=lerobot_reference.delta_timestamps) as dataset:
        assert_matches_reference(dataset, reference, image_dtype=image_dtype)


def test_selected_episodes_reindex_but_keep_the_sample(
    lerobot_fixture_root: Path, lerobot_reference: LeRobotReference, datasets_cache_dir: Path
) -> None:
    """With ``episodes=[...]`` position i is the i-th frame of those episodes, in that order;
    the sample itself (global ``index`` included) is unchanged."""
    reference = lerobot_reference.samples
    with EpisodeStreamDataset(lerobot_fixture_root, cache_dir=datasets_cache_dir) as full:
        lengths = {e: int(full.meta.episodes[e]["length"]) for e in range(5)}
    with EpisodeStreamDataset(
        lerobot_fixture_root, episodes=[3, 1], image_dtype="uint8", cache_dir=datasets_cache_dir
    ) as dataset:
        assert len(dataset) == lengths[3] + lengths[1]
        assert dataset.episodes == [3, 1]
        checked = 0
        for row, episode in enumerate(reference["episode_index"].tolist()):
            if episode not in (1, 3):
                continue
            frame = int(reference["frame_index"][row])
            position = frame if episode == 3 else lengths[3] + frame
            assert dataset.locate(position) == (episode, frame)
            sample = dataset[position]
            assert int(sample["index"]) == int(reference["index"][row])
            for camera in [k for k in reference if k.startswith(IMAGE_PREFIX)]:
                assert np.array_equal(sample[camera].numpy(), reference[camera][row])
            checked += 1
        assert checked >= 4


@pytest.mark.parametrize("deltas", [False, True], ids=["plain", "delta_timestamps"])
def test_a_sample_changed_in_place_leaves_the_next_one_alone(
    lerobot_fixture_root: Path,
    lerobot_reference: LeRobotReference,
    datasets_cache_dir: Path,
    deltas: bool,
) -> None:
    """Numeric values are copies of the cached Parquet rows: a training step that edits a
    sample's tensors in place (normalisation, noise) must not change later samples. The plain
    case is the one that can alias (a row of a 2-D column is a view; delta queries gather)."""
    reference = lerobot_reference.samples_delta if deltas else lerobot_reference.samples
    with EpisodeStreamDataset(
        lerobot_fixture_root,
        delta_timestamps=lerobot_reference.delta_timestamps if deltas else None,
        image_dtype="uint8",
        cache_dir=datasets_cache_dir,
    ) as dataset:
        index = int(reference["request_index"][0])
        numeric = [k for k, v in dataset[index].items() if isinstance(v, torch.Tensor)]
        numeric = [k for k in numeric if not k.startswith(IMAGE_PREFIX)]
        assert {"action", "observation.state", "timestamp", "index"} <= set(numeric)
        for _ in range(2):
            sample = dataset[index]
            for key in numeric:
                value = sample[key]
                value.logical_not_() if value.dtype == torch.bool else value.add_(1)
        assert_matches_reference(dataset, reference, image_dtype="uint8")

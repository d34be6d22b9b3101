"""uint8 transport: uint8 frames through DataLoader workers, float32 after the loader,
exactly LeRobot's values (x / 255)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from episodestream import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.datasets import images_to_float


def test_uint8_samples_are_lerobots_frames_and_convert_exactly(
    lerobot_fixture_root: Path, lerobot_reference, datasets_cache_dir: Path
) -> None:
    reference = lerobot_reference.samples
    cameras = [k for k in reference if k.startswith("observation.images.")]
    with (
        EpisodeStreamDataset(
            lerobot_fixture_root, image_dtype="uint8", cache_dir=datasets_cache_dir
        ) as raw,
        EpisodeStreamDataset(lerobot_fixture_root, cache_dir=datasets_cache_dir) as floats,
    ):
        for row, index in enumerate(reference["request_index"][:8].tolist()):
            sample = raw[index]
            for key in cameras:
                assert sample[key].dtype == torch.uint8
                assert np.array_equal(sample[key].numpy(), reference[key][row])
            converted = images_to_float(dict(sample))
            expected = floats[index]
            for key in cameras:
                assert converted[key].dtype == torch.float32
                assert torch.equal(converted[key], expected[key])
            # everything else is left as it was
            assert torch.equal(converted["action"], sample["action"])


def test_uint8_pool_through_workers_equals_float_pool(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    def batches(image_dtype: str) -> list[dict]:
        pool = EpisodePoolDataset(
            lerobot_fixture_root,
            image_dtype=image_dtype,
            pool_size=2,
            seed=5,
            cache_dir=datasets_cache_dir,
        )
        loader = torch.utils.data.DataLoader(pool, batch_size=16, num_workers=2)
        with pool:
            return [batch for _, batch in zip(range(4), loader, strict=False)]

    raw, floats = batches("uint8"), batches("float32")
    camera = "observation.images.cam_high"
    for mine, theirs in zip(raw, floats, strict=True):
        assert mine[camera].dtype == torch.uint8
        assert torch.equal(mine["index"], theirs["index"])
        # a quarter of the bytes crossed the worker boundary
        assert mine[camera].nbytes * 4 == theirs[camera].nbytes
        converted = images_to_float(mine, keys=[camera], device="cpu")
        assert torch.equal(converted[camera], theirs[camera])


def test_conversion_is_true_division_for_every_byte_value() -> None:
    """images_to_float divides (as LeRobot's x / 255 on the CPU), never multiplies by 1/255
    (what CUDA does for a scalar divisor: 1 ulp off for 126 of the 256 values)."""
    values = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16)
    converted = images_to_float({"image": values.clone()})["image"]
    expected = torch.from_numpy(np.arange(256, dtype=np.float32).reshape(1, 1, 16, 16) / 255)
    assert torch.equal(converted, expected)
    by_reciprocal = values.to(torch.float32) * np.float32(1 / 255)
    assert not torch.equal(by_reciprocal, expected)  # the difference this guards against

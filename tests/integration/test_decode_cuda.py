"""GPU decoding (NVDEC through torchcodec) where a GPU exists: samples equal the CPU path's
within the decoder's tolerance. Deselected by default (pyproject's ``-m 'not needs_cuda'``);
`make test-cuda` selects them, and there they fail, not skip, without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from episodestream import EpisodeStreamDataset

pytestmark = [pytest.mark.needs_cuda, pytest.mark.timeout(600)]

IMAGE_PREFIX = "observation.images."
# NVDEC and FFmpeg's software decoder may round YUV->RGB differently: a few levels per pixel
MAX_MEAN_ABS_LEVELS = 2.0
MAX_ABS_LEVELS = 40


@pytest.mark.parametrize("dataset", ["synthetic_h264", "synthetic_hevc"])
def test_cuda_samples_equal_the_cpu_path(
    dataset: str, request: pytest.FixtureRequest, datasets_cache_dir: Path
) -> None:
    root = request.getfixturevalue(dataset)
    with (
        EpisodeStreamDataset(root, image_dtype="uint8", cache_dir=datasets_cache_dir) as cpu,
        EpisodeStreamDataset(
            root,
            image_dtype="uint8",
            decoder="torchcodec",
            device="cuda",
            cache_dir=datasets_cache_dir,
        ) as gpu,
    ):
        assert len(cpu) == len(gpu)
        step = max(1, len(cpu) // 40)
        for index in range(0, len(cpu), step):
            ours, theirs = gpu[index], cpu[index]
            for key in (k for k in theirs if k.startswith(IMAGE_PREFIX)):
                assert ours[key].device.type == "cuda", key
                diff = (ours[key].cpu().int() - theirs[key].int()).abs()
                assert ours[key].shape == theirs[key].shape, key
                assert diff.float().mean() <= MAX_MEAN_ABS_LEVELS, (index, key)
                assert diff.max() <= MAX_ABS_LEVELS, (index, key)
            for key in (k for k in theirs if not k.startswith(IMAGE_PREFIX)):
                if isinstance(theirs[key], torch.Tensor):
                    assert torch.equal(ours[key].cpu(), theirs[key]), key

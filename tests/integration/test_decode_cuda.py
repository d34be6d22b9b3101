"""GPU decoding (NVDEC through torchcodec) where a GPU exists: samples equal the CPU path's
within the decoder's tolerance. Deselected by default (pyproject's ``-m 'not needs_cuda'``);
`make test-cuda` selects them, and there they fail, not skip, without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from episodestream import EpisodeStreamDataset
from episodestream.decode import TorchcodecDecoder, open_decoder, to_float
from episodestream.decode._torchcodec import _warn_cpu_fallback_once
from episodestream_tools.bench import BenchConfig, format_report, run_bench

pytestmark = [pytest.mark.needs_cuda, pytest.mark.timeout(600)]

IMAGE_PREFIX = "observation.images."
# NVDEC and FFmpeg's software decoder may round YUV->RGB differently: a few levels per pixel
MAX_MEAN_ABS_LEVELS = 2.0
MAX_ABS_LEVELS = 40


@pytest.mark.parametrize("dataset", ["synthetic_h264_nvdec", "synthetic_hevc_nvdec"])
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


def test_bench_decodes_on_cuda_and_compares_with_the_cpu(
    synthetic_hevc_nvdec: Path, datasets_cache_dir: Path
) -> None:
    samples = 60
    report = run_bench(
        BenchConfig(
            root=str(synthetic_hevc_nvdec),
            tracks=("stream", "local", "floor"),
            samples=samples,
            keepup_samples=0,
            decode_samples=12,
            decoder="torchcodec",
            device="cuda",
            cache_dir=str(datasets_cache_dir),
            progress=False,
        )
    )
    for name in ("stream", "local", "floor"):
        assert report.tracks[name]["samples"] == samples, name
    assert report.tracks["stream"]["sequence_matches"]
    assert report.tracks["floor"]["device"] == report.decode["device"] == "cuda"
    agreement = report.decode["device_vs_cpu"]
    assert agreement["frames"] == 12 * len(report.dataset["cameras"])
    assert agreement["mean_abs_levels"] <= MAX_MEAN_ABS_LEVELS
    assert agreement["max_abs_levels"] <= MAX_ABS_LEVELS
    assert report.decode["cpu_fallback"] is None  # NVDEC decoded them, not torchcodec's CPU
    assert "on cuda (LEROBOT and NAIVE on the CPU)" in format_report(report)


@pytest.mark.parametrize("dataset", ["synthetic_h264_nvdec", "synthetic_hevc_nvdec"])
def test_nvdec_decodes_without_a_cpu_fallback(dataset: str, request: pytest.FixtureRequest) -> None:
    root: Path = request.getfixturevalue(dataset)
    path = sorted(root.glob("videos/**/*.mp4"))[0]
    with open_decoder(path, backend="torchcodec", device="cuda") as decoder:
        assert isinstance(decoder, TorchcodecDecoder)
        frames = decoder.frames_at(decoder.frame_times()[:2])
        assert frames.device.type == "cuda"
        assert decoder.cpu_fallback is None, decoder.cpu_fallback


def test_to_float_on_the_gpu_is_lerobots_division_exactly() -> None:
    values = torch.arange(256, dtype=torch.uint8).reshape(1, 1, 16, 16)
    on_gpu = to_float(values.cuda()).cpu()
    assert torch.equal(on_gpu, to_float(values))  # x / 255 in IEEE float32, every value
    assert torch.equal(on_gpu, values.to(torch.float32) / 255)


def test_a_frame_below_nvdecs_minimum_falls_back_visibly(synthetic_hevc: Path) -> None:
    # 64x48 HEVC is below NVDEC's smallest HEVC frame (144x144): torchcodec decodes it on the
    # CPU instead, and that must be reported, never silent
    path = sorted(synthetic_hevc.glob("videos/**/*.mp4"))[0]
    with (
        open_decoder(path, backend="torchcodec", device="cuda") as gpu,
        open_decoder(path, backend="torchcodec") as cpu,
    ):
        times = gpu.frame_times()[:2]
        frames = gpu.frames_at(times)
        assert gpu.cpu_fallback is not None
        diff = (frames.cpu().int() - cpu.frames_at(times).int()).abs()
        assert diff.float().mean() <= MAX_MEAN_ABS_LEVELS
        assert diff.max() <= MAX_ABS_LEVELS


def test_an_h264_clip_nvdec_cannot_start_is_decoded_on_the_cpu_visibly(
    synthetic_h264_nvdec: Path, datasets_cache_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # x264's open GOPs: clips that start at an I frame that is no IDR came back empty from
    # NVDEC on a lent H200; the decoder reopens them on the CPU and says so (once a reason
    # per process: an earlier test may have said it already)
    _warn_cpu_fallback_once.cache_clear()
    with (
        EpisodeStreamDataset(
            synthetic_h264_nvdec, image_dtype="uint8", cache_dir=datasets_cache_dir
        ) as cpu,
        EpisodeStreamDataset(
            synthetic_h264_nvdec,
            image_dtype="uint8",
            decoder="torchcodec",
            device="cuda",
            cache_dir=datasets_cache_dir,
        ) as gpu,
    ):
        for index in range(len(cpu)):
            ours, theirs = gpu[index], cpu[index]
            for key in (k for k in theirs if k.startswith(IMAGE_PREFIX)):
                assert ours[key].device.type == "cuda", key
                diff = (ours[key].cpu().int() - theirs[key].int()).abs()
                assert diff.float().mean() <= MAX_MEAN_ABS_LEVELS, (index, key)
    assert any("NVDEC could not decode" in record.getMessage() for record in caplog.records)

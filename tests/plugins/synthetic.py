"""pytest fixtures: small synthetic LeRobot v3.0 datasets, generated once and cached.

Each fixture returns the dataset root (a ``Path``); the specs are importable from here
(``from tests.plugins.synthetic import SYNTHETIC_AV1_SPEC``) for tests that need the numbers.

The cache lives in ``<repo>/.cache/tests-synthetic-<hash>/`` (git-ignored), where the hash
covers the writer's source files and PyAV's version, so a fresh clone or any change to the
writer regenerates the data. Treat the datasets as read-only: they are shared by every test.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import av
import pytest

import episodestream_tools.synthetic
from episodestream_tools.synthetic import SyntheticSpec, ensure_synthetic_dataset

REPO_ROOT = Path(__file__).resolve().parents[2]

_TWO_CAMERAS = ("observation.images.cam_high", "observation.images.cam_left_wrist")

# 2 cameras, 64x48, 6 episodes of 8-20 frames, 3 episodes per video file (2 files per camera),
# 4 episodes per data file (2 data files, split elsewhere than the videos), AV1 like LeRobot
SYNTHETIC_AV1_SPEC = SyntheticSpec(
    cameras=_TWO_CAMERAS,
    width=64,
    height=48,
    fps=30,
    episodes=6,
    min_length=8,
    max_length=20,
    episodes_per_file=3,
    episodes_per_data_file=4,
    codec="av1",
    moov="start",
    seed=7,
)
# the same with H.264: 3 B-frames, GOP 30, open GOPs; most episodes start mid-GOP
SYNTHETIC_H264_SPEC = replace(SYNTHETIC_AV1_SPEC, codec="h264")
# the same with HEVC (libx265, B-frames)
SYNTHETIC_HEVC_SPEC = replace(SYNTHETIC_AV1_SPEC, codec="hevc")
# the H.264 and HEVC ones at a size NVDEC decodes (its smallest HEVC frame is 144x144; below
# it torchcodec falls back to the CPU): for the GPU-decode tests
SYNTHETIC_H264_NVDEC_SPEC = replace(SYNTHETIC_H264_SPEC, width=192, height=144)
SYNTHETIC_HEVC_NVDEC_SPEC = replace(SYNTHETIC_HEVC_SPEC, width=192, height=144)
# AV1 with the moov box after mdat
SYNTHETIC_MOOV_END_SPEC = replace(SYNTHETIC_AV1_SPEC, moov="end")
# AV1, 1 camera, chunks of 2 files: 6 episodes, 2 per video and data file, so files spill
# into chunk-001 (chunk-000/file-000, chunk-000/file-001, chunk-001/file-000)
SYNTHETIC_CHUNKED_SPEC = SyntheticSpec(
    cameras=("observation.images.cam_high",),
    width=64,
    height=48,
    episodes=6,
    min_length=8,
    max_length=12,
    episodes_per_file=2,
    episodes_per_data_file=2,
    chunks_size=2,
    codec="av1",
    image_layout="chw",
    seed=11,
)


def _writer_fingerprint() -> str:
    digest = hashlib.sha256(av.__version__.encode())
    package = Path(episodestream_tools.synthetic.__file__).parent
    for source in sorted(package.glob("_*.py")):
        digest.update(source.name.encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


@pytest.fixture(scope="session")
def synthetic_cache_dir() -> Path:
    """Repo-local cache folder for synthetic test datasets (keyed by the writer's sources)."""
    return REPO_ROOT / ".cache" / f"tests-synthetic-{_writer_fingerprint()}"


@pytest.fixture(scope="session")
def synthetic_dataset(synthetic_cache_dir: Path) -> Callable[[SyntheticSpec], Path]:
    """Factory: ``synthetic_dataset(spec) -> Path`` of the cached dataset for any spec."""

    def make(spec: SyntheticSpec) -> Path:
        return ensure_synthetic_dataset(spec, cache_dir=synthetic_cache_dir)

    return make


@pytest.fixture(scope="session")
def synthetic_av1(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    """:data:`SYNTHETIC_AV1_SPEC`: AV1, 2 cameras 64x48, 6 episodes, 2 video files/camera."""
    return synthetic_dataset(SYNTHETIC_AV1_SPEC)


@pytest.fixture(scope="session")
def synthetic_h264(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    """:data:`SYNTHETIC_H264_SPEC`: as synthetic_av1 but H.264 with B-frames and open GOPs."""
    return synthetic_dataset(SYNTHETIC_H264_SPEC)


@pytest.fixture(scope="session")
def synthetic_hevc(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    """:data:`SYNTHETIC_HEVC_SPEC`: as synthetic_av1 but HEVC with B-frames."""
    return synthetic_dataset(SYNTHETIC_HEVC_SPEC)


@pytest.fixture(scope="session")
def synthetic_h264_nvdec(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    """:data:`SYNTHETIC_H264_NVDEC_SPEC`: synthetic_h264 at 192x144 (a size NVDEC decodes)."""
    return synthetic_dataset(SYNTHETIC_H264_NVDEC_SPEC)


@pytest.fixture(scope="session")
def synthetic_hevc_nvdec(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    """:data:`SYNTHETIC_HEVC_NVDEC_SPEC`: synthetic_hevc at 192x144 (a size NVDEC decodes)."""
    return synthetic_dataset(SYNTHETIC_HEVC_NVDEC_SPEC)


@pytest.fixture(scope="session")
def synthetic_moov_end(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    """:data:`SYNTHETIC_MOOV_END_SPEC`: as synthetic_av1 but moov after mdat."""
    return synthetic_dataset(SYNTHETIC_MOOV_END_SPEC)


@pytest.fixture(scope="session")
def synthetic_chunked(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    """:data:`SYNTHETIC_CHUNKED_SPEC`: 1 camera, files spread over chunk-000 and chunk-001,
    video shape written channels-first ([3, H, W])."""
    return synthetic_dataset(SYNTHETIC_CHUNKED_SPEC)

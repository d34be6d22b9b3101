"""Frames decoded from cached clips equal a full-file decode, for every synthetic variant."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from torchcodec.decoders import VideoDecoder

from episodestream.cache import EpisodeByteCache, ManifestClipSource
from episodestream.decode import open_decoder
from episodestream.lerobot import load_dataset_meta
from episodestream.manifest import open_manifest
from episodestream.storage import LocalRangeReader, open_reader
from episodestream_tools.synthetic import read_frame_identity

VARIANTS = ["synthetic_av1", "synthetic_h264", "synthetic_hevc", "synthetic_moov_end"]


def _full_file_frames(root: Path, path: str, backend: str) -> tuple[np.ndarray, np.ndarray]:
    """(pts seconds, frames) of every frame of a whole source file."""
    with open_decoder(str(root / path), backend=backend) as decoder:
        times = decoder.frame_times()
        return times, decoder.frames_at(times).numpy()


@pytest.mark.parametrize("backend", ["torchcodec", "pyav"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_cached_clip_frames_equal_full_file_decode(variant, backend, request, tmp_path):
    root: Path = request.getfixturevalue(variant)
    reader = LocalRangeReader(root)
    meta = load_dataset_meta(reader)
    manifest = open_manifest(reader, meta, cache_dir=tmp_path, progress=False)
    source = ManifestClipSource(manifest, reader)
    full: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    with EpisodeByteCache(source, reader, byte_budget=64 * 2**20) as cache:
        for episode in meta.episodes.episode_index.tolist():
            resident = cache.wait_ready(episode, timeout=60)
            length = int(meta.episodes.length[meta.episodes.row(episode)])
            for camera, clip in resident.clips.items():
                span = manifest.span(episode, camera)
                if span.file_path not in full:
                    full[span.file_path] = _full_file_frames(root, span.file_path, backend)
                times, frames = full[span.file_path]
                # the episode's frames in the full file: LeRobot's from_timestamp + k / fps
                wanted = span.from_timestamp_s + np.arange(length) / meta.fps
                positions = np.abs(times[None, :] - wanted[:, None]).argmin(axis=1)
                assert np.abs(times[positions] - wanted).max() < 1e-4
                with open_decoder(clip.data, backend=backend) as decoder:
                    got = decoder.frames_at(times[positions] - clip.time_offset_s).numpy()
                np.testing.assert_array_equal(got, frames[positions])
                for k in (0, length // 2, length - 1):
                    assert read_frame_identity(got[k]) == (episode, k)
    assert len(full) == len(
        {manifest.span(e, c).file_path for e in range(6) for c in manifest.cameras}
    )


def test_cached_clips_over_http_equal_local_ones(synthetic_h264, http_publish, tmp_path):
    url = http_publish(synthetic_h264, "cache-h264")
    local = LocalRangeReader(synthetic_h264)
    remote = open_reader(url)
    try:
        meta = load_dataset_meta(remote)
        manifest = open_manifest(remote, meta, cache_dir=tmp_path, progress=False)
        source = ManifestClipSource(manifest, remote, root=url)
        local_source = ManifestClipSource(manifest, local, root=str(synthetic_h264))
        with (
            EpisodeByteCache(source, remote, byte_budget=2**25) as cache,
            EpisodeByteCache(local_source, local, byte_budget=2**25) as local_cache,
        ):
            for episode in range(meta.total_episodes):
                a = cache.wait_ready(episode, timeout=30)
                b = local_cache.wait_ready(episode, timeout=30)
                assert {c: x.data for c, x in a.clips.items()} == {
                    c: x.data for c, x in b.clips.items()
                }
            m = cache.metrics()
            # one range read per episode-camera, exactly the manifest's bytes
            spans = manifest.spans
            assert m.bytes_fetched == int(spans.byte_length.sum())
        http = remote.metrics()
        assert http["bytes"] >= m.bytes_fetched
    finally:
        remote.close()


def test_reference_lerobot_frames_from_cached_clips(
    lerobot_fixture_root, lerobot_reference_dir, tmp_path
):
    """The LeRobot fixture's reference images, decoded from our clips instead of whole files."""
    reference = np.load(lerobot_reference_dir / "samples.npz", allow_pickle=False)
    reader = LocalRangeReader(lerobot_fixture_root)
    meta = load_dataset_meta(reader)
    manifest = open_manifest(reader, meta, cache_dir=tmp_path, progress=False)
    with EpisodeByteCache(ManifestClipSource(manifest, reader), reader, byte_budget=2**26) as cache:
        for i in range(len(reference["index"])):
            episode = int(reference["episode_index"][i])
            timestamp = float(reference["timestamp"][i])
            resident = cache.wait_ready(episode, timeout=30)
            for camera in meta.video_keys:
                clip = resident.clips[camera]
                span = manifest.span(episode, camera)
                clip_time = span.from_timestamp_s + timestamp - clip.time_offset_s
                with open_decoder(clip.data) as decoder:
                    frame = decoder.frames_at([clip_time]).numpy()[0]
                np.testing.assert_array_equal(frame, reference[camera][i])


def test_torchcodec_agrees_with_itself_on_whole_file(lerobot_fixture_root):
    # guard for the oracle: torchcodec's own VideoDecoder on a path equals our wrapper
    path = lerobot_fixture_root / "videos/observation.images.cam_high/chunk-000/file-000.mp4"
    direct = VideoDecoder(str(path))
    times, frames = _full_file_frames(
        lerobot_fixture_root, str(path.relative_to(lerobot_fixture_root)), "torchcodec"
    )
    assert len(times) == direct.metadata.num_frames
    np.testing.assert_array_equal(frames[5], direct[5].numpy())

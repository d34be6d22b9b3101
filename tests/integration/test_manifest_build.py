"""Manifest building: spans agree with FFmpeg's own packet table and decode to the episode."""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from episodestream import EpisodeStreamDataset
from episodestream.errors import FrameNotFoundError, ManifestError
from episodestream.lerobot import DatasetMeta, load_dataset_meta
from episodestream.manifest import EpisodeManifest, build_manifest
from episodestream.mp4 import write_clip
from episodestream.storage import LocalRangeReader, open_reader
from episodestream_tools.synthetic import read_frame_identity

TOLERANCE_S = 1e-4
CAM = "observation.images.cam_high"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"


def packets(path: Path) -> dict[str, np.ndarray]:
    """FFmpeg's view of a file's video packets, in file (= decode) order."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        rows = [
            (p.pts, p.pos, p.size, p.is_keyframe) for p in container.demux(stream) if p.size > 0
        ]
        time_base = float(stream.time_base)
    pts, pos, size, key = (np.array(column) for column in zip(*rows, strict=True))
    return {"pts_s": pts * time_base, "pos": pos, "size": size, "key": key.astype(bool)}


def open_local(root: Path) -> tuple[DatasetMeta, EpisodeManifest]:
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
        return meta, build_manifest(reader, meta, workers=3, progress=False)


def check_against_ffmpeg(root: Path, meta: DatasetMeta, manifest: EpisodeManifest) -> None:
    by_file: dict[str, dict[str, np.ndarray]] = {}
    for camera in meta.video_keys:
        columns = meta.episodes.video(camera)
        for row, episode in enumerate(meta.episodes.episode_index.tolist()):
            span = manifest.span(episode, camera)
            assert span.file_path == meta.episode_video_path(episode, camera)
            table = by_file.setdefault(span.file_path, packets(root / span.file_path))
            t0 = float(columns.from_timestamp[row])
            t1 = float(columns.to_timestamp[row])
            shown = np.flatnonzero(
                (table["pts_s"] >= t0 - TOLERANCE_S) & (table["pts_s"] < t1 - TOLERANCE_S)
            )
            length = int(meta.episodes.length[row])
            assert len(shown) == length == span.frame_count, (episode, camera)
            assert span.first_pts_s == pytest.approx(table["pts_s"][shown].min(), abs=1e-9)
            assert span.last_pts_s == pytest.approx(table["pts_s"][shown].max(), abs=1e-9)
            # decode order: starts at a keyframe, holds every sample shown in the span
            assert table["key"][span.sample_start], (episode, camera)
            assert span.sample_start <= shown.min() and shown.max() < span.sample_end
            chosen = slice(span.sample_start, span.sample_end)
            assert span.byte_start == table["pos"][chosen].min()
            assert span.byte_end == (table["pos"][chosen] + table["size"][chosen]).max()
            assert (span.from_timestamp_s, span.to_timestamp_s) == (t0, t1)
            track = manifest.track(span.file_path)
            assert track.num_samples == len(table["pos"])
            assert np.array_equal(track.offsets, table["pos"])
            assert np.array_equal(track.sizes, table["size"])


def decoded_identities(
    root: Path, manifest: EpisodeManifest, episode: int, camera: str
) -> list[Any]:
    """Decode the span's clip; return the frames shown inside the episode's time range."""
    span = manifest.span(episode, camera)
    with (root / span.file_path).open("rb") as handle:
        handle.seek(span.byte_start)
        payload = handle.read(span.byte_length)
    clip = write_clip(manifest.track(span.file_path), span.to_plan(), payload)
    frames = []
    with av.open(io.BytesIO(clip)) as container:
        for frame in container.decode(video=0):
            source_s = float(frame.time) + span.time_offset_s
            if span.from_timestamp_s - TOLERANCE_S <= source_s < span.to_timestamp_s - TOLERANCE_S:
                frames.append(frame.to_ndarray(format="rgb24"))
    return frames


def sim5_index(image: np.ndarray) -> int:
    """The global frame index lerobot_sim5 paints as 16 8x8 blocks along the top edge."""
    grey = image[:8, : 16 * 8].mean(axis=2)
    bits = [int(grey[2:6, 8 * b + 2 : 8 * b + 6].mean() > 127) for b in range(16)]
    return int("".join(map(str, bits)), 2)


def test_lerobot_written_dataset_agrees_with_ffmpeg(lerobot_fixture_root: Path) -> None:
    meta, manifest = open_local(lerobot_fixture_root)
    assert manifest.cameras == meta.video_keys
    assert manifest.num_files == 9 and manifest.num_episodes == 5
    check_against_ffmpeg(lerobot_fixture_root, meta, manifest)
    for camera in meta.video_keys:
        for episode in range(meta.total_episodes):
            frames = decoded_identities(lerobot_fixture_root, manifest, episode, camera)
            lo, hi = (
                meta.episodes.dataset_from_index[episode],
                meta.episodes.dataset_to_index[episode],
            )
            assert [sim5_index(f) for f in frames] == list(range(lo, hi)), (episode, camera)


@pytest.mark.parametrize(
    "fixture",
    [
        "synthetic_av1",
        "synthetic_h264",
        "synthetic_hevc",
        "synthetic_moov_end",
        "synthetic_chunked",
    ],
)
def test_synthetic_datasets_agree_with_ffmpeg(fixture: str, request: pytest.FixtureRequest) -> None:
    root: Path = request.getfixturevalue(fixture)
    meta, manifest = open_local(root)
    check_against_ffmpeg(root, meta, manifest)
    for camera in meta.video_keys:
        for episode in meta.episodes.episode_index.tolist():
            frames = decoded_identities(root, manifest, episode, camera)
            length = int(meta.episodes.length[meta.episodes.row(episode)])
            assert [read_frame_identity(f) for f in frames] == [
                (episode, i) for i in range(length)
            ], (fixture, episode, camera)


def test_codecs_and_sources(synthetic_h264: Path) -> None:
    meta, manifest = open_local(synthetic_h264)
    assert set(manifest.codecs()) == set(meta.video_keys)
    assert all(codecs == ("avc1",) for codecs in manifest.codecs().values())
    track = manifest.track(0)
    assert (track.cts_offset != 0).any()  # B-frames: decode order differs from display order
    for source in manifest.sources():
        assert source.size == (synthetic_h264 / source.path).stat().st_size
        assert source.last_modified is not None


def test_build_over_http_reads_each_faststart_moov_in_one_request(
    synthetic_av1: Path, http_publish: Any, http_server: Any
) -> None:
    with LocalRangeReader(synthetic_av1) as local:
        meta = load_dataset_meta(local)
        expected = build_manifest(local, meta, progress=False)
    with open_reader(http_publish(synthetic_av1)) as reader:
        remote_meta = load_dataset_meta(reader)
        mark = http_server.log_mark()
        manifest = build_manifest(reader, remote_meta, workers=4, progress=False)
        records = http_server.access_records(since=mark)
    per_file: dict[str, int] = {}
    for record in records:
        if record.uri.endswith(".mp4"):
            per_file[record.uri] = per_file.get(record.uri, 0) + 1
    assert len(per_file) == manifest.num_files == 4
    # one size probe plus one read holding the whole moov
    assert all(count <= 2 for count in per_file.values()), per_file
    for name in (
        "sample_start",
        "sample_end",
        "byte_start",
        "byte_end",
        "frame_count",
        "time_offset_s",
        "first_pts_s",
        "last_pts_s",
        "file_id",
    ):
        assert np.array_equal(getattr(manifest.spans, name), getattr(expected.spans, name))
    for f in range(manifest.num_files):
        assert np.array_equal(manifest.track(f).pts, expected.track(f).pts)
        assert manifest.source(f).etag is not None  # nginx sends ETags


def test_moov_at_end_costs_a_bounded_number_of_requests(synthetic_moov_end: Path) -> None:
    with LocalRangeReader(synthetic_moov_end) as reader:
        meta = load_dataset_meta(reader)
        manifest = build_manifest(reader, meta, progress=False)
    assert manifest.build_stats is not None
    assert manifest.build_stats.requests <= 3 * manifest.num_files


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    return target


def test_a_video_frame_short_of_its_rows_raises_at_that_sample_only(
    lerobot_fixture_root: Path, tmp_path: Path
) -> None:
    root = _copy(lerobot_fixture_root, tmp_path / "ds")
    table = pq.read_table(root / EPISODES)
    # episode 1 shifted one frame later in cam_high's file: its last row asks for a frame
    # past the end of the file (LeRobot raises there too); every other row reads the frame
    # one later than before, as LeRobot's from_timestamp + timestamp finds it
    for suffix in ("from_timestamp", "to_timestamp"):
        name = f"videos/{CAM}/{suffix}"
        values = table.column(name).to_pylist()
        values[1] += 1 / 30
        table = table.set_column(table.column_names.index(name), name, pa.array(values))
    pq.write_table(table, root / EPISODES)
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
        manifest = build_manifest(reader, meta, progress=False)
    assert manifest.span(1, CAM).frame_count == int(meta.episodes.length[1]) - 1
    start = int(meta.episodes.dataset_from_index[1])
    stop = int(meta.episodes.dataset_to_index[1])
    cache = tmp_path / "cache"
    with (
        EpisodeStreamDataset(root, image_dtype="uint8", cache_dir=cache) as shifted,
        EpisodeStreamDataset(lerobot_fixture_root, image_dtype="uint8", cache_dir=cache) as plain,
    ):
        for index in (start, start + 1, stop - 2):
            assert torch.equal(shifted[index][CAM], plain[index + 1][CAM]), index
            other = "observation.images.cam_left_wrist"
            if other in meta.video_keys:
                assert torch.equal(shifted[index][other], plain[index][other]), index
        with pytest.raises(FrameNotFoundError) as raised:
            shifted[stop - 1]
        assert "episode 1" in str(raised.value) and CAM in str(raised.value)
        # the next episode reads on
        assert torch.equal(shifted[stop][CAM], plain[stop][CAM])


def test_episodes_sharing_time_in_a_file_read_each_others_frames_as_lerobot_does(
    lerobot_fixture_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = _copy(lerobot_fixture_root, tmp_path / "ds")
    table = pq.read_table(root / EPISODES)
    # episode 1 made to start 6 frames into episode 0 (same file): LeRobot decodes it at
    # from_timestamp + each row's timestamp, so its first rows are episode 0's frames 6...
    name = f"videos/{CAM}/from_timestamp"
    values = table.column(name).to_pylist()
    values[1] = values[0] + 6 / 30
    table = table.set_column(table.column_names.index(name), name, pa.array(values))
    pq.write_table(table, root / EPISODES)
    cache = tmp_path / "cache"
    with caplog.at_level("WARNING", logger="episodestream"):
        shifted = EpisodeStreamDataset(root, image_dtype="uint8", cache_dir=cache)
    assert any("episodes 0 and 1 overlap in time" in r.getMessage() for r in caplog.records)
    with (
        shifted,
        EpisodeStreamDataset(lerobot_fixture_root, image_dtype="uint8", cache_dir=cache) as plain,
    ):
        start0, start1 = table.column("dataset_from_index").to_pylist()[:2]
        for k in (0, 5, 26):
            assert torch.equal(shifted[start1 + k][CAM], plain[start0 + 6 + k][CAM]), k
        # ...and past episode 0's end, the frames episode 1 had (now 6 frames earlier)
        assert torch.equal(shifted[start1 + 27][CAM], plain[start1][CAM])


def test_missing_and_corrupt_videos_name_the_file(
    lerobot_fixture_root: Path, tmp_path: Path
) -> None:
    root = _copy(lerobot_fixture_root, tmp_path / "ds")
    victim = f"videos/{CAM}/chunk-000/file-001.mp4"
    (root / victim).unlink()
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
        with pytest.raises(ManifestError, match=f"{victim}: video file is missing"):
            build_manifest(reader, meta, progress=False)
        data = (lerobot_fixture_root / victim).read_bytes()
        (root / victim).write_bytes(data[:32] + b"\x00\x00\x00\x10moov" + data[40:])
        with pytest.raises(ManifestError, match=f"{victim}: cannot index"):
            build_manifest(reader, meta, progress=False)

"""The synthetic writer's MP4s: what ffprobe and torchcodec see, where the moov box sits, and
that every decoded frame reads back as the (episode, frame) the metadata promises."""

from __future__ import annotations

import dataclasses
import json
import logging
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
from torchcodec.decoders import VideoDecoder

from episodestream.errors import DatasetFormatError
from episodestream_tools.synthetic import (
    DEMO_SPEC,
    SyntheticSpec,
    read_frame_camera,
    read_frame_identity,
)
from episodestream_tools.synthetic import _synthetic_video as synthetic_video
from episodestream_tools.synthetic._synthetic_video import encode_camera_file
from tests.plugins.synthetic import (
    SYNTHETIC_AV1_SPEC,
    SYNTHETIC_H264_SPEC,
    SYNTHETIC_HEVC_SPEC,
    SYNTHETIC_MOOV_END_SPEC,
)

# the demo's frame size, cameras and codec (16-pixel identity cells), with 2 short episodes
DEMO_SHAPED_SPEC = dataclasses.replace(DEMO_SPEC, episodes=2, min_length=5, max_length=7)

FIXTURES = {
    "synthetic_av1": SYNTHETIC_AV1_SPEC,
    "synthetic_h264": SYNTHETIC_H264_SPEC,
    "synthetic_hevc": SYNTHETIC_HEVC_SPEC,
    "synthetic_moov_end": SYNTHETIC_MOOV_END_SPEC,
    "demo_shaped": DEMO_SHAPED_SPEC,
}


@pytest.fixture(scope="module")
def demo_shaped(synthetic_dataset) -> Path:
    return synthetic_dataset(DEMO_SHAPED_SPEC)


def _episodes(root: Path) -> list[dict]:
    return pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()


def _video_files(root: Path, key: str) -> dict[Path, list[dict]]:
    """Each video file of camera ``key`` -> its episode rows, in file order."""
    files: dict[Path, list[dict]] = {}
    for row in _episodes(root):
        chunk, file = row[f"videos/{key}/chunk_index"], row[f"videos/{key}/file_index"]
        path = root / f"videos/{key}/chunk-{chunk:03d}/file-{file:03d}.mp4"
        files.setdefault(path, []).append(row)
    return files


def _each_video_file(
    root: Path, spec: SyntheticSpec
) -> Iterator[tuple[int, str, Path, list[dict]]]:
    """(camera number, camera key, path, episode rows) of every video file, camera by camera."""
    for camera, key in enumerate(spec.cameras):
        for path, rows in _video_files(root, key).items():
            yield camera, key, path, rows


def _top_level_boxes(path: Path) -> list[str]:
    data = path.read_bytes()
    boxes, offset = [], 0
    while offset < len(data):
        size, kind = struct.unpack(">I4s", data[offset : offset + 8])
        if size == 1:
            size = struct.unpack(">Q", data[offset + 8 : offset + 16])[0]
        assert size >= 8, f"bad box size at {offset} in {path}"
        boxes.append(kind.decode("latin-1"))
        offset += size
    assert offset == len(data)
    return boxes


def _ffprobe(path: Path) -> dict:
    result = subprocess.run(
        [
            "ffprobe",
            "-v",
            "error",
            "-count_packets",
            "-show_streams",
            "-show_packets",
            "-show_entries",
            "packet=pts,dts",
            "-of",
            "json",
            str(path),
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(result.stdout)


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_ffprobe_sees_the_requested_stream(fixture: str, request: pytest.FixtureRequest) -> None:
    root: Path = request.getfixturevalue(fixture)
    spec = FIXTURES[fixture]
    for _, _, path, rows in _each_video_file(root, spec):
        probe = _ffprobe(path)
        (stream,) = probe["streams"]
        assert stream["codec_name"] == spec.codec
        assert (stream["width"], stream["height"]) == (spec.width, spec.height)
        assert stream["pix_fmt"] == "yuv420p"
        assert Fraction(stream["r_frame_rate"]) == spec.fps
        # LeRobot's files use a 1/15360 track timescale at 30 fps; FFmpeg picks the same
        assert stream["time_base"] == "1/15360"
        assert int(stream["nb_read_packets"]) == sum(r["length"] for r in rows)
        reordered = any(p["pts"] != p["dts"] for p in probe["packets"])
        # H.264/HEVC carry B-frames (decode order differs from presentation order)
        assert reordered == (spec.codec in ("h264", "hevc")), path
        boxes = _top_level_boxes(path)
        moov, mdat = boxes.index("moov"), boxes.index("mdat")
        assert (moov < mdat) == (spec.moov == "start"), boxes


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_torchcodec_opens_every_file(fixture: str, request: pytest.FixtureRequest) -> None:
    root: Path = request.getfixturevalue(fixture)
    spec = FIXTURES[fixture]
    for _, _, path, rows in _each_video_file(root, spec):
        decoder = VideoDecoder(str(path))
        meta = decoder.metadata
        assert meta.codec == spec.codec
        assert (meta.width, meta.height) == (spec.width, spec.height)
        assert meta.average_fps == pytest.approx(spec.fps)
        assert len(decoder) == sum(r["length"] for r in rows)


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_every_frame_carries_its_identity(fixture: str, request: pytest.FixtureRequest) -> None:
    """Decode whole files and find each (episode, frame) at from_timestamp + frame / fps."""
    root: Path = request.getfixturevalue(fixture)
    spec = FIXTURES[fixture]
    checked = 0
    for camera, key, path, rows in _each_video_file(root, spec):
        decoder = VideoDecoder(str(path))
        batch = decoder.get_frames_in_range(0, len(decoder))
        pts = batch.pts_seconds.numpy()
        for row in rows:
            start = row[f"videos/{key}/from_timestamp"]
            for frame in range(row["length"]):
                wanted = start + frame / spec.fps
                position = int(np.argmin(np.abs(pts - wanted)))
                assert abs(pts[position] - wanted) < 1e-4, (path, row["episode_index"], frame)
                image = batch.data[position]
                assert read_frame_identity(image) == (row["episode_index"], frame)
                assert read_frame_camera(image) == camera
                checked += 1
    assert checked == len(spec.cameras) * int(spec.episode_lengths().sum())


class _HookedContainer:
    """A real output container that calls ``on_encode(frame)`` before each frame (None: the
    flush) reaches the encoder and ``on_mux(flushing)`` before each packet reaches the muxer."""

    def __init__(
        self,
        container: Any,
        on_encode: Callable[[Any], None] = lambda frame: None,
        on_mux: Callable[[bool], None] = lambda flushing: None,
    ) -> None:
        self._container = container
        self._on_encode = on_encode
        self._on_mux = on_mux
        self._flushing = False

    def __enter__(self) -> _HookedContainer:
        self._container.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._container.__exit__(*exc)

    def add_stream(self, *args: Any, **kwargs: Any) -> Any:
        stream = self._container.add_stream(*args, **kwargs)
        outer = self

        class _Stream:
            def __getattr__(self, name: str) -> Any:
                return getattr(stream, name)

            def __setattr__(self, name: str, value: Any) -> None:
                setattr(stream, name, value)

            def encode(self, frame: Any = None) -> Any:
                outer._flushing = frame is None
                outer._on_encode(frame)
                return stream.encode(frame)

        return _Stream()

    def mux(self, packet: Any) -> None:
        self._on_mux(self._flushing)
        self._container.mux(packet)


def _refusing(container: Any, refusals: list[int]) -> _HookedContainer:
    """The muxer refuses the third packet the encoder's flush gives, while ``refusals[0]``
    allows, with the EINVAL seen once in CI."""
    flushed = [0]

    def on_mux(flushing: bool) -> None:
        flushed[0] += flushing
        if flushed[0] == 3 and refusals[0] > 0:
            refusals[0] -= 1
            raise av.error.ArgumentError(22, "Invalid argument", "test.mp4")

    return _HookedContainer(container, on_mux=on_mux)


def _assert_written_again_whole(path: Path, caplog: pytest.LogCaptureFixture, reason: str) -> None:
    """One warning says why the file was written again, and the second writing is whole:
    every one of the 9 + 7 frames decodes and carries its identity."""
    warnings = [r.getMessage() for r in caplog.records if "writing it again" in r.getMessage()]
    assert len(warnings) == 1 and reason in warnings[0]
    _assert_whole(path)


def _assert_whole(path: Path) -> None:
    decoder = VideoDecoder(str(path))
    assert len(decoder) == 16
    assert [read_frame_identity(decoder[k].numpy()) for k in (0, 8, 9, 15)] == [
        (0, 0),
        (0, 8),
        (1, 0),
        (1, 6),
    ]


@pytest.mark.parametrize("refusals", [1, 2])
def test_a_refused_packet_rewrites_the_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, refusals: int
) -> None:
    real_open = av.open
    left = [refusals]
    monkeypatch.setattr(av, "open", lambda *a, **k: _refusing(real_open(*a, **k), left))
    path = tmp_path / "file-000.mp4"
    episodes = [(0, 9), (1, 7)]
    arguments = dict(
        codec="av1", moov="end", width=64, height=48, fps=30, camera=0, episodes=episodes
    )
    if refusals == 2:  # refused again on the second writing: a typed error naming the packet
        with pytest.raises(DatasetFormatError, match=r"file-000\.mp4 with libsvtav1: .*refused"):
            encode_camera_file(path, **arguments)
        return
    with caplog.at_level(logging.WARNING, logger="episodestream_tools.synthetic"):
        histograms = encode_camera_file(path, **arguments)
    assert left == [0] and sorted(histograms) == [0, 1]
    _assert_written_again_whole(path, caplog, "refused after pts")


@pytest.mark.parametrize("stalls", [1, 2])
def test_an_encoder_that_stops_making_progress_is_given_up_and_the_file_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, stalls: int
) -> None:
    """SVT-AV1 once blocked for good inside svt_av1_enc_send_picture: a try that takes no step
    for the stall timeout is left behind and the file written again; twice is a typed error."""
    real_open = av.open
    release = threading.Event()  # a stalled try's encoder blocks until the test ends
    tries: list[int] = []  # frames each try handed to the encoder (the flush counts one)

    def stalling(*args: Any, **kwargs: Any) -> _HookedContainer:
        tries.append(0)
        number = len(tries) - 1
        stalled = number < stalls

        def on_encode(frame: Any) -> None:
            tries[number] += 1
            if stalled and tries[number] == 5:  # the fifth frame never returns, as in the hang
                release.wait(timeout=60)

        return _HookedContainer(real_open(*args, **kwargs), on_encode=on_encode)

    monkeypatch.setattr(av, "open", stalling)
    # long enough that a healthy try on a loaded machine never looks stalled
    monkeypatch.setattr(synthetic_video, "_ENCODE_STALL_S", 3.0)
    monkeypatch.setattr(synthetic_video, "_WATCH_POLL_S", 0.05)
    path = tmp_path / "file-000.mp4"
    arguments = dict(
        codec="av1", moov="start", width=64, height=48, fps=30, camera=0, episodes=[(0, 9), (1, 7)]
    )
    try:
        if stalls == 2:
            with pytest.raises(
                DatasetFormatError,
                match=r"file-000\.mp4 with libsvtav1: no frame encoded or packet written for "
                r"3 s after \d+ steps",
            ):
                encode_camera_file(path, **arguments)
            assert len(tries) == 2
            return
        with caplog.at_level(logging.WARNING, logger="episodestream_tools.synthetic"):
            histograms = encode_camera_file(path, **arguments)
        assert len(tries) == 2 and sorted(histograms) == [0, 1]
        _assert_written_again_whole(path, caplog, "no frame encoded")
        assert tries == [5, 17]
        # the given-up try wakes into its stop: no frame more reaches its encoder, and what it
        # closes (its trailer, the faststart rewrite by file name) is not the file written
        release.set()
        for thread in threading.enumerate():
            if thread.name.startswith("episodestream-encode"):
                thread.join(timeout=30)
                assert not thread.is_alive()
        assert tries == [5, 17]
        _assert_whole(path)
        assert [p.name for p in tmp_path.iterdir()] == ["file-000.mp4"]  # no try's file left
    finally:
        release.set()

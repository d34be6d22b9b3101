"""pytest fixtures: media — small real MP4s for the mp4 layer, encoded once per session.

Every frame shows its index as 16 black/white 12x12 blocks in two rows at the top (most
significant bit first), over a moving colour texture that gives the encoders real motion
(so x264/x265 choose B-frames). ``frame_identity`` reads the index back from a decoded RGB
frame. Files are 96x64, 30 fps, 100 frames unless said otherwise:

- ``av1``: libsvtav1 g=2 crf 30 yuv420p with faststart, like LeRobot writes.
- ``h264``: libx264, 3 B-frames, open GOP (keyint 30), moov after mdat; its sync samples
  after the first are non-IDR recovery points whose leading B-frames use the previous GOP.
- ``h264_faststart``: the same stream muxed with moov first.
- ``hevc``: libx265, 3 B-frames, keyint 30 (open GOP: CRA sync samples with RASL frames).
- ``h264_empty_edit``: timestamps starting at frame 10, so the edit list starts with an
  empty edit (333 ms in the 1/1000 movie timescale: FFmpeg rounds it to 5115 ticks).
- ``h264_negative_cts``: ``movflags=negative_cts_offsets``: signed ``ctts`` version 1.
- ``h264_mid_gop_edit``: ``h264`` remuxed 8 frames earlier, so the edit list's media start
  lies mid-GOP and FFmpeg decodes but never shows the first frames.
- ``co64``: ``h264_faststart`` with its ``stco`` rewritten as ``co64`` (offsets moved by
  the growth of the moov that precedes them).
- ``multi_track``: an AAC track, an H.264 track (id 2) and an AV1 track (id 3), chunks of
  all three interleaved.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import pytest

WIDTH = 96
HEIGHT = 64
FPS = 30
FRAMES = 100
BLOCK = 12
# every case the mp4_cases fixture builds, in the order it builds them
CASE_NAMES = (
    "av1",
    "h264",
    "h264_faststart",
    "hevc",
    "h264_empty_edit",
    "h264_negative_cts",
    "h264_mid_gop_edit",
    "co64",
    "multi_track",
)

_CONTAINERS = frozenset({"moov", "trak", "mdia", "minf", "stbl", "edts", "dinf"})


def frame_image(i: int, width: int = WIDTH, height: int = HEIGHT) -> np.ndarray:
    """RGB frame ``i``: its index in blocks over a texture that moves every frame."""
    x = np.arange(width)[None, :]
    y = np.arange(height)[:, None]
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[..., 0] = (x * 4 + i * 6) % 256
    img[..., 1] = (y * 5 + i * 3) % 256
    img[..., 2] = ((x + y) * 3 + i * 9) % 256
    for bit in range(16):
        row, col = divmod(bit, 8)
        on = (i >> (15 - bit)) & 1
        img[row * BLOCK : (row + 1) * BLOCK, col * BLOCK : (col + 1) * BLOCK] = 255 * on
    return img


def frame_identity(rgb: np.ndarray) -> int:
    """The index ``frame_image`` drew into a decoded (H, W, 3) or (3, H, W) uint8 frame."""
    if rgb.shape[0] == 3 and rgb.shape[-1] != 3:
        rgb = np.moveaxis(rgb, 0, -1)
    value = 0
    for bit in range(16):
        row, col = divmod(bit, 8)
        inner = rgb[
            row * BLOCK + 3 : (row + 1) * BLOCK - 3, col * BLOCK + 3 : (col + 1) * BLOCK - 3
        ]
        value = (value << 1) | int(inner.astype(np.float64).mean() > 128)
    return value


def encode_mp4(
    path: Path,
    codec: str,
    *,
    frames: int = FRAMES,
    codec_options: dict[str, str] | None = None,
    mux_options: dict[str, str] | None = None,
    first_pts: int = 0,
) -> Path:
    """Encode ``frames`` identity frames with PyAV; pts count frames from ``first_pts``."""
    with av.open(str(path), "w", options=mux_options or {}) as out:
        stream = out.add_stream(codec, rate=FPS, options=codec_options or {})
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(frame_image(i), format="rgb24")
            frame.pts = first_pts + i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def remux_shifted(src: Path, dst: Path, shift_ticks: int) -> Path:
    """Copy the video stream of ``src`` with every timestamp ``shift_ticks`` earlier."""
    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        in_stream = inp.streams.video[0]
        out_stream = out.add_stream_from_template(in_stream)
        for packet in inp.demux(in_stream):
            if packet.size == 0:
                continue
            packet.pts -= shift_ticks
            packet.dts -= shift_ticks
            packet.stream = out_stream
            out.mux(packet)
    return dst


def encode_multi_track(path: Path, frames: int = 60) -> Path:
    """AAC (track 1) + H.264 (track 2) + AV1 (track 3), chunks interleaved by the muxer."""
    with av.open(str(path), "w") as out:
        audio = out.add_stream("aac", rate=16000)
        h264 = out.add_stream("libx264", rate=FPS, options={"x264-params": "keyint=10:bframes=2"})
        av1 = out.add_stream("libsvtav1", rate=FPS, options={"g": "4", "preset": "12"})
        for s in (h264, av1):
            s.width, s.height, s.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        audio_pts = 0
        for i in range(frames):
            for s in (h264, av1):
                frame = av.VideoFrame.from_ndarray(frame_image(i), format="rgb24")
                frame.pts = i
                for packet in s.encode(frame):
                    out.mux(packet)
            while audio_pts < (i + 1) * 16000 // FPS:
                samples = np.zeros((1, 1024), np.float32)
                aframe = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
                aframe.sample_rate = 16000
                aframe.pts = audio_pts
                audio_pts += 1024
                for packet in audio.encode(aframe):
                    out.mux(packet)
        for s in (h264, av1, audio):
            for packet in s.encode():
                out.mux(packet)
    return path


# --- box surgery for fixtures and tests ------------------------------------------------


def _boxes(data: bytes, start: int, end: int) -> list[tuple[str, int, int, int]]:
    """(type, start, header size, end) of the boxes in data[start:end] (32/64-bit sizes)."""
    out = []
    pos = start
    while pos + 8 <= end:
        size, raw = struct.unpack_from(">I4s", data, pos)
        header = 8
        if size == 1:
            size = struct.unpack_from(">Q", data, pos + 8)[0]
            header = 16
        elif size == 0:
            size = end - pos
        out.append((raw.decode("latin-1"), pos, header, pos + size))
        pos += size
    return out


def rewrite_boxes(data: bytes, edit: Callable[[str, bytes], bytes | None]) -> bytes:
    """Rebuild ``data`` (a run of boxes) with ``edit(path, box_bytes)`` applied to every leaf.

    ``edit`` returns replacement bytes for the whole box, or None to keep it; container
    sizes are recomputed (always with 32-bit headers).
    """

    def walk(start: int, end: int, parent: str) -> bytes:
        parts = []
        for box_type, bstart, header, bend in _boxes(data, start, end):
            path = f"{parent}/{box_type}" if parent else box_type
            if box_type in _CONTAINERS:
                body = walk(bstart + header, bend, path)
                parts.append(struct.pack(">I4s", 8 + len(body), box_type.encode("latin-1")))
                parts.append(body)
            else:
                original = data[bstart:bend]
                replaced = edit(path, original)
                parts.append(original if replaced is None else replaced)
        return b"".join(parts)

    return walk(0, len(data), "")


def stco_as_co64(data: bytes) -> bytes:
    """A whole MP4 with every ``stco`` rewritten as ``co64``, offsets fixed for the growth.

    When moov precedes mdat, every chunk offset moves by the bytes the moov grew.
    """
    top = _boxes(data, 0, len(data))
    moov = next(b for b in top if b[0] == "moov")
    mdat = next(b for b in top if b[0] == "mdat")
    count_chunks = 0

    def count(path: str, box: bytes) -> None:
        nonlocal count_chunks
        if path.endswith("/stco"):
            count_chunks += struct.unpack_from(">I", box, 12)[0]
        return None

    rewrite_boxes(data[moov[1] : moov[3]], count)
    shift = 4 * count_chunks if moov[1] < mdat[1] else 0

    def to_co64(path: str, box: bytes) -> bytes | None:
        if not path.endswith("/stco"):
            return None
        n = struct.unpack_from(">I", box, 12)[0]
        offsets = np.frombuffer(box, ">u4", count=n, offset=16).astype(np.int64) + shift
        body = box[8:16] + offsets.astype(">u8").tobytes()
        return struct.pack(">I4s", 8 + len(body), b"co64") + body

    new_moov = rewrite_boxes(data[moov[1] : moov[3]], to_co64)
    return data[: moov[1]] + new_moov + data[moov[3] :]


def stsz_as_stz2(moov: bytes, field_size: int) -> bytes:
    """A moov whose ``stsz`` tables are rewritten as ``stz2`` with 4-, 8- or 16-bit fields."""

    def edit(path: str, box: bytes) -> bytes | None:
        if not path.endswith("/stsz"):
            return None
        uniform, n = struct.unpack_from(">II", box, 12)
        sizes = (
            np.full(n, uniform, np.int64)
            if uniform
            else np.frombuffer(box, ">u4", count=n, offset=20).astype(np.int64)
        )
        if int(sizes.max()) >= 1 << field_size:
            raise ValueError(f"sample sizes do not fit in {field_size} bits")
        if field_size == 4:
            padded = np.append(sizes, 0) if n % 2 else sizes
            table = ((padded[0::2] << 4) | padded[1::2]).astype("u1").tobytes()
        else:
            table = sizes.astype({8: "u1", 16: ">u2"}[field_size]).tobytes()
        body = bytes(4) + bytes(3) + bytes([field_size]) + struct.pack(">I", n) + table
        return struct.pack(">I4s", 8 + len(body), b"stz2") + body

    return rewrite_boxes(moov, edit)


# --- fixtures --------------------------------------------------------------------------


@dataclass(frozen=True)
class MediaCase:
    """One encoded test file and what is known about it."""

    name: str
    path: Path
    codec: str  # sample entry fourcc of the indexed track
    faststart: bool
    frames: int = FRAMES
    track_id: int | None = None  # the video track to index (None: the first)
    stream_index: int | None = None  # the same track as FFmpeg numbers streams
    first_frame_pts: int = 0  # pts of frame_image(0), in frames: identity = pts*fps - this

    def read(self) -> bytes:
        return self.path.read_bytes()


_X264_OPEN_GOP = {"x264-params": "open-gop=1:keyint=30:bframes=3"}


def _build_cases(root: Path) -> dict[str, MediaCase]:
    cases = {}

    def add(case: MediaCase) -> None:
        cases[case.name] = case

    faststart = {"movflags": "faststart"}
    add(
        MediaCase(
            "av1",
            encode_mp4(
                root / "av1.mp4",
                "libsvtav1",
                codec_options={"g": "2", "crf": "30", "preset": "12"},
                mux_options=faststart,
            ),
            "av01",
            True,
        )
    )
    add(
        MediaCase(
            "h264",
            encode_mp4(root / "h264.mp4", "libx264", codec_options=_X264_OPEN_GOP),
            "avc1",
            False,
        )
    )
    add(
        MediaCase(
            "h264_faststart",
            encode_mp4(
                root / "h264_faststart.mp4",
                "libx264",
                codec_options=_X264_OPEN_GOP,
                mux_options=faststart,
            ),
            "avc1",
            True,
        )
    )
    add(
        MediaCase(
            "hevc",
            encode_mp4(
                root / "hevc.mp4",
                "libx265",
                codec_options={"x265-params": "bframes=3:keyint=30:log-level=error"},
            ),
            "hev1",
            False,
        )
    )
    add(
        MediaCase(
            "h264_empty_edit",
            encode_mp4(
                root / "h264_empty_edit.mp4", "libx264", codec_options=_X264_OPEN_GOP, first_pts=10
            ),
            "avc1",
            False,
            first_frame_pts=10,
        )
    )
    add(
        MediaCase(
            "h264_negative_cts",
            encode_mp4(
                root / "h264_negative_cts.mp4",
                "libx264",
                codec_options={"x264-params": "keyint=30:bframes=3"},
                mux_options={"movflags": "negative_cts_offsets"},
            ),
            "avc1",
            False,
        )
    )
    add(
        MediaCase(
            "h264_mid_gop_edit",
            remux_shifted(cases["h264"].path, root / "h264_mid_gop_edit.mp4", 8 * 512),
            "avc1",
            False,
            first_frame_pts=-8,
        )
    )
    co64 = root / "co64.mp4"
    co64.write_bytes(stco_as_co64(cases["h264_faststart"].read()))
    add(MediaCase("co64", co64, "avc1", True))
    add(
        MediaCase(
            "multi_track",
            encode_multi_track(root / "multi_track.mp4"),
            "av01",
            False,
            frames=60,
            track_id=3,
            stream_index=2,
        )
    )
    assert tuple(cases) == CASE_NAMES
    return cases


@pytest.fixture(scope="session")
def mp4_cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, MediaCase]:
    """Every encoded test MP4 by name (see the module docstring)."""
    return _build_cases(tmp_path_factory.mktemp("mp4_media"))


@dataclass(frozen=True)
class DecodedFrames:
    """A full decode: presentation times (seconds, as the decoder reports) and RGB frames."""

    pts_s: np.ndarray  # float64 [n]
    frames: np.ndarray  # uint8 [n, H, W, 3]


def decode_torchcodec(source: Path | bytes, stream_index: int | None = None) -> DecodedFrames:
    """Every frame torchcodec returns, in presentation order."""
    from torchcodec.decoders import VideoDecoder

    src = str(source) if isinstance(source, Path) else source
    decoder = VideoDecoder(src, stream_index=stream_index, dimension_order="NHWC")
    batch = decoder.get_frames_in_range(0, len(decoder))
    return DecodedFrames(batch.pts_seconds.numpy().astype(np.float64), batch.data.numpy())


def decode_pyav(source: Path | bytes, stream_index: int | None = None) -> DecodedFrames:
    """Every frame PyAV (FFmpeg) returns, in output order."""
    src = str(source) if isinstance(source, Path) else io.BytesIO(source)
    with av.open(src) as container:
        stream = (
            container.streams.video[0] if stream_index is None else container.streams[stream_index]
        )
        pts, frames = [], []
        for frame in container.decode(stream):
            pts.append(float(frame.pts * frame.time_base))
            frames.append(frame.to_ndarray(format="rgb24"))
    return DecodedFrames(np.array(pts, dtype=np.float64), np.stack(frames))


DECODERS: dict[str, Callable[..., DecodedFrames]] = {
    "torchcodec": decode_torchcodec,
    "pyav": decode_pyav,
}


@pytest.fixture(scope="session")
def full_decode() -> Callable[[Path, str, int | None], DecodedFrames]:
    """``full_decode(path, decoder_name, stream_index)``: a whole-file decode, cached."""
    cache: dict[tuple[Path, str, int | None], DecodedFrames] = {}

    def get(path: Path, decoder: str, stream_index: int | None = None) -> DecodedFrames:
        key = (path, decoder, stream_index)
        if key not in cache:
            cache[key] = DECODERS[decoder](path, stream_index)
        return cache[key]

    return get


# --- the exactness oracle ----------------------------------------------------------------


def played_in(
    pts_s: np.ndarray,
    t0_s: float,
    t1_s: float,
    *,
    tolerance_s: float = 1e-4,
    last_end_s: float = np.inf,
) -> np.ndarray:
    """Indices of the frames (``pts_s`` in presentation order) played in ``[t0_s, t1_s]``.

    The played-at rule written out directly: frame k is shown during
    ``[pts_s[k], pts_s[k + 1])`` (the last one until ``last_end_s``), and is in the span when
    that interval meets ``[t0_s, t1_s]`` with both ends counted ``tolerance_s`` later.
    """
    ends = np.append(pts_s[1:], last_end_s)
    return np.flatnonzero((pts_s <= t1_s + tolerance_s) & (ends > t0_s + tolerance_s))


def assert_clip_matches_source(
    index,  # episodestream.mp4.TrackIndex
    plan,  # episodestream.mp4.SpanPlan
    t0_s: float,
    t1_s: float,
    source: DecodedFrames,
    clip: DecodedFrames,
    *,
    tolerance_s: float = 1e-4,
    identity: Callable[[float], int] | None = None,
) -> None:
    """The clip shows every source frame played in [t0, t1], identically, and nothing else.

    - each source frame presented in the span comes out of the clip with identical pixels
      at clip time + ``plan.time_offset_s`` == its source time (within 1e-6 s);
    - the plan counts exactly those frames and names their first and last times;
    - every frame of the clip is a frame of the planned sample range, identical to the full
      decode's frame at that time, or one the source never presents (it precedes the edit
      list's start), which must then show the identity ``identity(source_time)``.
    """
    from episodestream.mp4 import clip_samples

    ts = index.timescale
    src_ticks = np.round(source.pts_s * ts).astype(np.int64)
    by_tick = {int(t): k for k, t in enumerate(src_ticks)}
    clip_src_s = clip.pts_s + plan.time_offset_s
    clip_ticks = np.round(clip_src_s * ts).astype(np.int64)
    assert np.all(np.abs(clip_src_s - clip_ticks / ts) < 1e-6), "clip times off the tick grid"
    assert len(set(clip_ticks.tolist())) == clip_ticks.shape[0], "clip repeats a time"

    wanted = played_in(source.pts_s, t0_s, t1_s, tolerance_s=tolerance_s)
    assert plan.frame_count == wanted.shape[0], (plan.frame_count, wanted.shape[0])
    assert abs(plan.first_pts_s - source.pts_s[wanted[0]]) < 1e-9
    assert abs(plan.last_pts_s - source.pts_s[wanted[-1]]) < 1e-9
    got = {int(t): k for k, t in enumerate(clip_ticks)}
    for k in wanted:
        tick = int(src_ticks[k])
        assert tick in got, f"source frame at {source.pts_s[k]} s missing from the clip"
        c = got[tick]
        assert abs(clip_src_s[c] - source.pts_s[k]) < 1e-6
        assert np.array_equal(clip.frames[c], source.frames[k]), (
            f"pixels differ at source time {source.pts_s[k]} s"
        )

    planned = set(index.pts[clip_samples(index, plan.sample_start, plan.sample_end)].tolist())
    for c, tick in enumerate(clip_ticks.tolist()):
        assert tick in planned, f"clip frame at source tick {tick} is outside the plan"
        k = by_tick.get(tick)
        if k is not None:
            assert np.array_equal(clip.frames[c], source.frames[k]), f"tick {tick} differs"
        else:
            start = index.presentation_start
            assert start is not None and tick < start, f"tick {tick} unknown to the source"
            if identity is not None:
                assert frame_identity(clip.frames[c]) == identity(tick / ts)

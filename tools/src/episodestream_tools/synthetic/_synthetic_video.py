"""Synthetic camera frames and their encoding into concatenated-episode MP4 files (PyAV)."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from episodestream.errors import DatasetFormatError
from episodestream_tools.synthetic._identity import identity_cells, identity_layout

__all__ = ["CODECS", "CONTENTS", "CodecSettings", "encode_camera_file"]

#: What the synthetic cameras show: "wave" (a smooth colour wave, cheap to encode and decode)
#: or "texture" (a detailed scene panning past the camera with a moving object and sensor
#: noise: motion, detail and residuals like real footage, so decode cost is realistic).
CONTENTS = ("wave", "texture")

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CodecSettings:
    """How one ``SyntheticSpec.codec`` value is encoded."""

    name: str  # the value written to info.json "video.codec" (ffprobe's codec_name)
    encoder: str  # the FFmpeg encoder PyAV opens
    options: tuple[tuple[str, str], ...]


CODECS: dict[str, CodecSettings] = {
    # LeRobot's default is libsvtav1, g=2, crf 30, preset 12. SVT-AV1 4.x maps preset 12 to
    # M11, whose inter frames leave small high-contrast changes (the identity cells) uncoded:
    # about half the frames would show the previous frame's cells. Preset 10 codes them and is
    # as fast here; codec, keyframe interval, crf and pixel format stay LeRobot's.
    "av1": CodecSettings("av1", "libsvtav1", (("g", "2"), ("crf", "30"), ("preset", "10"))),
    # B-frames (reordering, ctts) and open GOPs: what span planning must cope with
    "h264": CodecSettings(
        "h264",
        "libx264",
        (
            ("g", "30"),
            ("bf", "3"),
            ("crf", "23"),
            ("preset", "veryfast"),
            ("x264-params", "open-gop=1"),
        ),
    ),
    "hevc": CodecSettings(
        "hevc",
        "libx265",
        (
            ("g", "30"),
            ("bf", "3"),
            ("crf", "28"),
            ("preset", "ultrafast"),
            ("x265-params", "log-level=error:open-gop=1"),
        ),
    ),
}

# limited-range ("tv") luma levels for the identity cells
_Y_BLACK = 16
_Y_WHITE = 235
# sample every 4th pixel (on even coordinates, so chroma lines up) for image statistics
_STATS_STRIDE = 4


class _FramePainter:
    """Draws the YUV 4:2:0 planes of one camera: a moving colour wave plus the identity cells."""

    def __init__(self, width: int, height: int, camera: int) -> None:
        self.width, self.height, self.camera = width, height, camera
        self.layout = identity_layout(width, height)
        ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
        # each camera gets its own wave direction and colour, so cameras differ at a glance
        kx = 1.0 + 0.5 * camera
        ky = 0.5 + 0.25 * ((camera * 3) % 4)
        self._luma_phase = 2 * np.pi * (xs / width * kx + ys / height * ky)
        cys, cxs = np.mgrid[0 : height // 2, 0 : width // 2].astype(np.float32)
        self._u_phase = 2 * np.pi * (cxs / (width / 2)) * 0.5 + camera
        self._v_phase = 2 * np.pi * (cys / (height / 2)) * 0.5 + 2.0 * camera

    def planes(self, episode: int, frame: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(Y, U, V)`` uint8 planes for one frame."""
        t = np.float32(0.21 * frame + 0.37 * episode)
        y = (128 + 80 * np.sin(self._luma_phase + t)).astype(np.uint8)
        u = (128 + 50 * np.cos(self._u_phase + 0.5 * t)).astype(np.uint8)
        v = (128 + 50 * np.sin(self._v_phase - 0.3 * t)).astype(np.uint8)
        return self._paint_identity(y, u, v, episode, frame)

    def _paint_identity(
        self, y: np.ndarray, u: np.ndarray, v: np.ndarray, episode: int, frame: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The planes with the identity cells of (episode, frame) painted over them (in place):
        black and white luma, neutral chroma."""
        covered, white = identity_cells(self.layout, episode, frame, self.camera)
        y[covered] = _Y_BLACK
        y[white] = _Y_WHITE
        # cells are multiples of 8 pixels from the origin, so 2x2 chroma blocks never straddle them
        chroma_covered = covered[::2, ::2]
        u[chroma_covered] = 128
        v[chroma_covered] = 128
        return y, u, v


class _TexturePainter(_FramePainter):
    """A seeded, detailed scene (several octaves of smoothed noise) larger than the frame,
    panned along a per-episode path, with a bright object crossing it and per-frame sensor
    noise; the identity cells on top as for the wave."""

    _NOISE_LEVEL = 1  # luma steps of sensor noise

    def __init__(self, width: int, height: int, camera: int, seed: int) -> None:
        super().__init__(width, height, camera)
        rng = np.random.default_rng([seed, 7, camera])
        self._margin_x, self._margin_y = width // 2, height // 2
        big_h, big_w = height + 2 * self._margin_y, width + 2 * self._margin_x
        scene = np.zeros((big_h, big_w), dtype=np.float32)
        for octave, weight in ((32, 60.0), (8, 30.0), (2, 12.0)):
            coarse = rng.standard_normal((big_h // octave + 2, big_w // octave + 2))
            fine = np.kron(coarse, np.ones((octave, octave), dtype=np.float32))
            scene += weight * fine[:big_h, :big_w].astype(np.float32)
        # smooth the blocky octaves (separable box blur) so edges are natural, not 8x8 steps
        for axis in (0, 1):
            scene = (scene + np.roll(scene, 1, axis) + np.roll(scene, -1, axis)) / 3.0
        self._scene_y = np.clip(128 + scene, 20, 235).astype(np.uint8)
        half = scene[::2, ::2]
        self._scene_u = np.clip(128 + 0.4 * half + 8 * (camera - 1), 16, 240).astype(np.uint8)
        self._scene_v = np.clip(128 - 0.3 * half + 6 * camera, 16, 240).astype(np.uint8)
        self._noise = np.random.default_rng([seed, 8, camera])
        self._yy, self._xx = np.mgrid[0:height, 0:width]

    def planes(self, episode: int, frame: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        t = 0.05 * frame + 1.3 * episode
        # pan (even offsets keep chroma aligned) along a smooth per-episode path
        dx = 2 * int(self._margin_x / 2 * (1 + np.sin(t + self.camera)) / 2)
        dy = 2 * int(self._margin_y / 2 * (1 + np.cos(0.7 * t)) / 2)
        h, w = self.height, self.width
        y = self._scene_y[dy : dy + h, dx : dx + w].copy()
        u = self._scene_u[dy // 2 : (dy + h) // 2, dx // 2 : (dx + w) // 2].copy()
        v = self._scene_v[dy // 2 : (dy + h) // 2, dx // 2 : (dx + w) // 2].copy()
        # a gripper-like bright object sweeping across the view
        cx = (0.5 + 0.4 * np.sin(2.1 * t)) * w
        cy = (0.5 + 0.3 * np.cos(1.7 * t)) * h
        radius = 0.08 * min(w, h)
        inside = (self._xx - cx) ** 2 + (self._yy - cy) ** 2 < radius**2
        y[inside] = 210
        noise = self._noise.integers(-self._NOISE_LEVEL, self._NOISE_LEVEL + 1, y.shape)
        y = np.clip(y.astype(np.int16) + noise, 16, 235).astype(np.uint8)
        return self._paint_identity(y, u, v, episode, frame)


def _rgb_histogram(y: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Per-channel 256-bin histogram ``(3, 256)`` of the RGB values (BT.601, limited range) that
    a decoder shows for these planes, on a strided pixel grid."""
    s = _STATS_STRIDE
    luma = 1.164 * (y[::s, ::s].astype(np.float32) - 16)
    cb = u[:: s // 2, :: s // 2][: luma.shape[0], : luma.shape[1]].astype(np.float32) - 128
    cr = v[:: s // 2, :: s // 2][: luma.shape[0], : luma.shape[1]].astype(np.float32) - 128
    rgb = (
        luma + 1.596 * cr,
        luma - 0.392 * cb - 0.813 * cr,
        luma + 2.017 * cb,
    )
    hist = np.empty((3, 256), dtype=np.int64)
    for channel, values in enumerate(rgb):
        clipped = np.clip(np.rint(values), 0, 255).astype(np.int64).ravel()
        hist[channel] = np.bincount(clipped, minlength=256)
    return hist


def _write_planes(frame: object, planes: Sequence[np.ndarray]) -> None:
    for plane, data in zip(frame.planes, planes, strict=True):  # type: ignore[attr-defined]
        rows, width = data.shape
        if plane.line_size != width:  # FFmpeg pads lines for alignment
            padded = np.zeros((rows, plane.line_size), dtype=np.uint8)
            padded[:, :width] = data
            data = padded
        plane.update(np.ascontiguousarray(data))


#: tries at writing one file: the muxer has, rarely, refused a packet under load, and the
#: encoder has, rarely, stopped making progress
_ENCODE_ATTEMPTS = 2
#: how long one try may go without a frame encoded or a packet written before it is given up:
#: SVT-AV1 4.1 has, once here under heavy load, blocked for good inside
#: svt_av1_enc_send_picture with every one of its threads idle; a frame takes well under a
#: second even on a loaded 2-core machine
_ENCODE_STALL_S = 120.0
#: how long a try stopped for another reason (Ctrl-C) is given to stop before the error goes on
_STOP_WAIT_S = 5.0
#: how often the watching thread looks at a try's progress
_WATCH_POLL_S = 1.0


class _MuxRefused(Exception):
    """The muxer refused a packet; the message says which, after which."""


class _Stalled(Exception):
    """A try made no progress for the stall timeout; the message says after how much."""


class _Abandoned(Exception):
    """Raised inside a try that was given up, should its encoder ever return."""


class _Watch:
    """Progress of one encoding try, shared by the thread that encodes and the one that
    watches it: a step is a frame the encoder took or a packet the muxer wrote."""

    def __init__(self) -> None:
        self.steps = 0
        self.abandoned = threading.Event()

    def step(self) -> None:
        if self.abandoned.is_set():  # the try was given up: stop writing at once
            raise _Abandoned
        self.steps += 1


def _run_watched(work: Callable[[_Watch], T], *, stall_s: float, name: str) -> T:
    """``work(watch)`` on a thread of its own, its result or exception; :class:`_Stalled` when
    ``watch`` takes no step for ``stall_s`` seconds.

    A thread blocked inside native encoder code cannot be stopped or joined: a stalled try's
    thread (a daemon) is left behind, told to stop at its next step should it ever wake. Only
    a block in a call that releases the GIL is seen this way (PyAV encodes and muxes without
    it; opening and freeing an encoder hold it): a subprocess would be needed to bound every
    native hang.
    """
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, work(watch)))
        except BaseException as error:  # handed to the watching thread
            outcome.append((False, error))

    watch = _Watch()
    thread = threading.Thread(target=run, name=name, daemon=True)
    try:
        thread.start()
    except RuntimeError as error:  # no thread to be had: the caller's typed error names the file
        raise OSError(f"could not start an encoding thread: {error}") from error
    try:
        seen, since = -1, time.monotonic()
        while True:
            thread.join(timeout=min(_WATCH_POLL_S, stall_s))
            if not thread.is_alive():
                break
            if watch.steps != seen:
                seen, since = watch.steps, time.monotonic()
            elif time.monotonic() - since >= stall_s:
                raise _Stalled(
                    f"no frame encoded or packet written for {stall_s:g} s after {seen} steps"
                )
    except _Stalled:
        watch.abandoned.set()  # stop at the next step, should the encoder ever return
        raise
    except BaseException:
        # interrupted (Ctrl-C): the try stops at its next step; let it, briefly, so that it
        # does not write on while the caller cleans up
        watch.abandoned.set()
        thread.join(timeout=_STOP_WAIT_S)
        raise
    done, value = outcome[0]
    if done:
        return value
    raise value


def _discard(target: Path) -> None:
    """Remove a given-up try's file; one its stalled thread still holds open (a file system
    that refuses to remove such a file) stays, under its own name, never under ``path``."""
    try:
        target.unlink(missing_ok=True)
    except OSError as error:
        logger.debug("could not remove %s: %s", target, error)


def encode_camera_file(
    path: Path,
    *,
    codec: str,
    moov: str,
    width: int,
    height: int,
    fps: int,
    camera: int,
    episodes: Sequence[tuple[int, int]],
    label: str | None = None,
    content: str = "wave",
    seed: int = 0,
) -> dict[int, np.ndarray]:
    """Encode the frames of ``episodes`` (``(episode_index, length)`` pairs, in order) back to
    back into one MP4 at ``path``; the first frame of the file presents at time 0 and frame ``k``
    of the file at ``k / fps``.

    ``label`` names the file in error messages (default: ``path``); ``content`` is one of
    :data:`CONTENTS` (``seed`` draws the texture).

    Each try writes a file of its own next to ``path`` and renames it onto ``path`` once whole.
    A try whose muxer refuses a packet, or whose encoder encodes no frame and writes no packet
    for two minutes, is given up and the file written once more from the start.

    Returns:
        episode_index -> ``(3, 256)`` RGB histogram of that episode's source frames (sampled).

    Raises:
        DatasetFormatError: the muxer refused a packet or the encoder stalled in both tries, or
            the encoder or the file system failed (message names the file).
    """
    import av  # PyAV is heavy; only writers need it

    # SVT-AV1 prints its banner to stderr unless told otherwise; keep errors only
    os.environ.setdefault("SVT_LOG", "1")
    settings = CODECS[codec]
    container_options = {"movflags": "faststart"} if moov == "start" else {}
    time_base = Fraction(1, fps)
    name = label or path

    def write(watch: _Watch, target: Path) -> tuple[dict[int, np.ndarray], int]:
        # a painter per try: the texture's noise is drawn from a generator, and a second try
        # must paint what the first would have (the same seed, the same file)
        painter = (
            _TexturePainter(width, height, camera, seed)
            if content == "texture"
            else _FramePainter(width, height, camera)
        )
        # (pts, dts) of the last packet muxed: a refused packet is reported with the one before
        muxed: list[tuple[int | None, int | None]] = []

        def mux(container: av.container.OutputContainer, packet: av.Packet) -> None:
            try:
                container.mux(packet)
            except av.FFmpegError as error:
                before = "pts {} dts {}".format(*muxed[-1]) if muxed else "none"
                raise _MuxRefused(
                    f"{error}; packet pts {packet.pts} dts {packet.dts} ({packet.size} bytes) "
                    f"refused after {before}"
                ) from error
            muxed[:] = [(packet.pts, packet.dts)]
            watch.step()

        histograms: dict[int, np.ndarray] = {}
        pts = 0
        watch.step()  # given up before it began (Ctrl-C): open nothing
        with av.open(str(target), mode="w", format="mp4", options=container_options) as container:
            stream = container.add_stream(
                settings.encoder, rate=fps, options=dict(settings.options)
            )
            stream.width = width
            stream.height = height
            stream.pix_fmt = "yuv420p"
            stream.codec_context.color_range = 1  # limited ("tv"), as LeRobot's files say
            for episode, length in episodes:
                hist = np.zeros((3, 256), dtype=np.int64)
                for frame_index in range(length):
                    y, u, v = painter.planes(episode, frame_index)
                    hist += _rgb_histogram(y, u, v)
                    frame = av.VideoFrame(width, height, "yuv420p")
                    _write_planes(frame, (y, u, v))
                    frame.color_range = 1
                    frame.pts = pts
                    frame.time_base = time_base
                    pts += 1
                    packets = stream.encode(frame)
                    watch.step()
                    for packet in packets:
                        mux(container, packet)
                histograms[episode] = hist
            for packet in stream.encode(None):
                mux(container, packet)
        return histograms, pts

    for attempt in range(1, _ENCODE_ATTEMPTS + 1):
        # a given-up try may wake and finish its own file (its trailer, a faststart rewrite
        # that reopens the file by name): never the one the next try writes or ``path``
        target = path.with_name(f".{path.name}.try{attempt}")
        try:
            histograms, frames = _run_watched(
                lambda watch, target=target: write(watch, target),
                stall_s=_ENCODE_STALL_S,
                name=f"episodestream-encode-{path.name}",
            )
            os.replace(target, path)
            break
        except (av.FFmpegError, _MuxRefused, _Stalled) as error:
            # Under load the muxer has refused one of SVT-AV1's packets (EINVAL, once in
            # about ten CI runs) and SVT-AV1 has stopped for good (once, beside a CI run):
            # the file is written again from the start, and a second failure is an error
            _discard(target)
            if attempt == _ENCODE_ATTEMPTS:
                raise DatasetFormatError(
                    f"could not encode {name} with {settings.encoder}: {error}"
                ) from error
            logger.warning(
                "encoding %s with %s failed (%s); writing it again", name, settings.encoder, error
            )
        except OSError as error:
            _discard(target)
            raise DatasetFormatError(
                f"could not encode {name} with {settings.encoder}: {error}"
            ) from error
    logger.debug("encoded %s: %d frames, %s", path, frames, settings.encoder)
    return histograms

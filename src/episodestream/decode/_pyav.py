"""PyAV backend: the fallback decoder, and the demuxer that lists a clip's frame times."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from episodestream._checks import check_int
from episodestream.decode._base import (
    DEFAULT_FFMPEG_THREADS,
    ClipDecoderBase,
    ClipSource,
    UseGuard,
    check_source,
    estimate_decoder_bytes,
    log_open,
    source_label,
    source_nbytes,
    validate_frame_times,
)
from episodestream.errors import DecodeError, EpisodeStreamError

if TYPE_CHECKING:
    import av

__all__ = ["PyAVDecoder", "demux_frame_times"]

_LOG = logging.getLogger(__name__)

# relative slack when comparing a frame's time with the time it was asked for
_PTS_SLACK_S = 1e-6


def _open_container(source: ClipSource) -> av.container.InputContainer:
    import av

    if isinstance(source, str | os.PathLike):
        return av.open(os.fspath(source), mode="r")
    if isinstance(source, torch.Tensor):
        raw: bytes | bytearray | memoryview = source.numpy().tobytes()
    else:
        raw = source
    # BytesIO shares an immutable bytes object without copying it
    return av.open(io.BytesIO(raw), mode="r")


def _ffmpeg_errors() -> tuple[type[BaseException], ...]:
    import av

    return (av.error.FFmpegError, OSError, ValueError, IndexError, RuntimeError)


def demux_frame_times(source: ClipSource, *, name: str | None = None) -> np.ndarray:
    """Presentation times (float64 seconds, ascending) of every frame of the clip's first video
    stream, read from packet headers without decoding.

    Raises:
        DecodeError: the clip is empty, not a readable container, or has no video stream.
    """
    label = source_label(source, name)
    check_source(source, label)
    try:
        with _open_container(source) as container:
            stream = _video_stream(container, label)
            # packets flagged discard (before an edit list's start) are decoded, never shown
            pts = [p.pts for p in container.demux(stream) if p.pts is not None and not p.is_discard]
            time_base = float(stream.time_base)
    except EpisodeStreamError:
        raise
    except _ffmpeg_errors() as exc:
        raise DecodeError(f"{label}: cannot read the clip's frame times: {exc}") from exc
    if not pts:
        raise DecodeError(f"{label}: the clip's video stream has no frames")
    return validate_frame_times(np.sort(np.asarray(pts, dtype=np.int64)) * time_base, label)


def _video_stream(container: Any, label: str) -> Any:
    if not container.streams.video:
        raise DecodeError(f"{label}: the clip has no video stream")
    return container.streams.video[0]


class PyAVDecoder(ClipDecoderBase):
    """Decodes a clip with PyAV (FFmpeg through Cython), converting to RGB with ``rgb24``.

    The clip is demuxed once when opened; its packets stay in memory, so a frame is decoded by
    feeding packets from the nearest usable keyframe, without seeking in the container. Its
    RGB frames equal torchcodec's bit for bit on every clip measured (AV1 128x96 and 640x360,
    H.264, HEVC; docs/BENCHMARKS.md, "Decoding").

    Args:
        source: the clip's encoded bytes (or a local path).
        threads: FFmpeg decode threads (0 lets FFmpeg choose).
        name: label used in error messages.
        frame_times_s: expected frame times, if the caller knows them (checked against the
            clip's own; a mismatch is a DecodeError).
    """

    backend = "pyav"

    def __init__(
        self,
        source: ClipSource,
        *,
        threads: int = DEFAULT_FFMPEG_THREADS,
        name: str | None = None,
        frame_times_s: Sequence[float] | np.ndarray | None = None,
    ) -> None:
        self._name = source_label(source, name)
        check_source(source, self._name)
        threads = check_int("threads", threads, minimum=0)
        self._guard = UseGuard(self._name)
        self._closed = False
        self._container: Any = None
        try:
            self._open(source, threads)
        except EpisodeStreamError:
            self._release()
            raise
        except _ffmpeg_errors() as exc:
            self._release()
            raise DecodeError(f"{self._name}: cannot open the clip with PyAV: {exc}") from exc
        if frame_times_s is not None:
            expected = validate_frame_times(frame_times_s, self._name)
            if expected.shape != self._times.shape or not np.allclose(
                expected, self._times, rtol=0, atol=_PTS_SLACK_S
            ):
                self._release()
                raise DecodeError(
                    f"{self._name}: the frame times given ({len(expected)}) do not match the "
                    f"clip's own ({len(self._times)} frames)"
                )
        # the packets hold a copy of the payload; a bytes clip is also held by the reader
        held = source_nbytes(source) * (1 if isinstance(source, str | os.PathLike) else 2)
        self._nbytes = estimate_decoder_bytes(held, self._width, self._height, threads)
        log_open(self.backend, self._name, len(self._times), self._width, self._height)

    def _open(self, source: ClipSource, threads: int) -> None:
        self._container = _open_container(source)
        stream = _video_stream(self._container, self._name)
        ctx = stream.codec_context
        ctx.thread_count = threads
        ctx.thread_type = "SLICE" if threads == 1 else "AUTO"
        self._ctx = ctx
        self._time_base = float(stream.time_base)
        packets = [p for p in self._container.demux(stream) if p.pts is not None and p.size > 0]
        if not packets:
            raise DecodeError(f"{self._name}: the clip's video stream has no frames")
        self._packets = packets  # decode order
        pts = np.asarray([p.pts for p in packets], dtype=np.int64)
        keyframe = np.asarray([p.is_keyframe for p in packets], dtype=bool)
        # packets flagged discard (before an edit list's start) are decoded, never shown
        shown = np.flatnonzero([not p.is_discard for p in packets])
        if shown.size == 0:
            raise DecodeError(f"{self._name}: the clip's video stream shows no frames")
        order = shown[np.argsort(pts[shown], kind="stable")]  # presentation -> decode position
        self._pts = pts[order]
        self._decode_pos = order
        self._times = validate_frame_times(self._pts * self._time_base, self._name)
        # For each frame: the decode position to start from. The last keyframe at or before the
        # frame in decode order that is not presented after it (an open GOP's leading frames
        # need the previous GOP).
        key_positions = np.flatnonzero(keyframe)
        if key_positions.size == 0 or key_positions[0] != 0:
            raise DecodeError(f"{self._name}: the clip does not start with a keyframe")
        start = key_positions[np.searchsorted(key_positions, order, side="right") - 1]
        for j in np.flatnonzero(pts[start] > pts[order]):  # leading frames of open GOPs only
            candidates = key_positions[key_positions <= order[j]]
            usable = candidates[pts[candidates] <= pts[order[j]]]
            start[j] = usable[-1] if usable.size else candidates[0]
        self._start_pos = start
        self._width = int(ctx.width)
        self._height = int(ctx.height)
        # decoding state: packets [run_start, next_pos) have been sent since the last flush
        self._run_start = -1
        self._next_pos = 0
        self._last_pts: int | None = None
        self._drained = False

    # -- Decoder protocol -------------------------------------------------------------------

    def _fetch_frames(self, unique: np.ndarray) -> torch.Tensor:
        """The frames at presentation indices ``unique`` (ascending) as ``(n, 3, H, W)``; the
        decoder resets itself on a failure so the next call starts clean."""
        try:
            images = self._decode_sorted(unique)
        except EpisodeStreamError:
            self._reset()
            raise
        except _ffmpeg_errors() as exc:
            self._reset()
            raise DecodeError(
                f"{self._name}: PyAV failed to decode frames at "
                f"{self._times[unique[:5]].round(6).tolist()} s: {exc}"
            ) from exc
        if len(unique) == 1:  # no copy into a batch
            return torch.from_numpy(images[int(unique[0])]).unsqueeze(0).permute(0, 3, 1, 2)
        stacked = torch.from_numpy(np.stack([images[int(i)] for i in unique]))
        return stacked.permute(0, 3, 1, 2)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._times)} frames"
        return f"PyAVDecoder({self._name!r}, {state})"

    # -- internals --------------------------------------------------------------------------

    def _release(self) -> None:
        self._closed = True
        self._packets = []
        if self._container is not None:
            try:
                self._container.close()
            except _ffmpeg_errors():  # closing a broken container must not mask the real error
                _LOG.debug("%s: error closing PyAV container", self._name, exc_info=True)
            self._container = None
        self._ctx = None

    def _reset(self) -> None:
        if self._ctx is not None:
            self._ctx.flush_buffers()
        self._run_start = -1
        self._next_pos = 0
        self._last_pts = None
        self._drained = False

    def _decode_sorted(self, frames: np.ndarray) -> dict[int, np.ndarray]:
        """RGB HWC arrays of the frames at presentation indices ``frames`` (ascending)."""
        out: dict[int, np.ndarray] = {}
        wanted = {int(self._pts[j]): int(j) for j in frames}
        for j in frames:
            j = int(j)
            if j in out:
                continue
            target = int(self._pts[j])
            start = int(self._start_pos[j])
            # continue the current run when it began at or before the keyframe this frame
            # needs, has reached that keyframe, and has not emitted this frame yet (frames
            # leave the decoder in presentation order)
            continuing = (
                not self._drained
                and 0 <= self._run_start <= start <= self._next_pos
                and (self._last_pts is None or self._last_pts < target)
            )
            if not continuing:
                self._reset()
                self._run_start = start
                self._next_pos = start
            self._run_until(target, wanted, out)
            if j not in out:
                raise DecodeError(
                    f"{self._name}: PyAV did not produce the frame at {self._times[j]:.6f} s"
                )
        return out

    def _run_until(self, target: int, wanted: dict[int, int], out: dict[int, np.ndarray]) -> None:
        ctx = self._ctx
        while True:
            if self._next_pos < len(self._packets):
                frames = ctx.decode(self._packets[self._next_pos])
                self._next_pos += 1
            elif not self._drained:
                frames = ctx.decode(None)  # end of clip: drain the frames still buffered
                self._drained = True
            else:
                return
            for frame in frames:
                self._last_pts = frame.pts
                j = wanted.get(frame.pts)
                if j is not None and j not in out:
                    out[j] = frame.to_ndarray(format="rgb24")
            if self._last_pts is not None and self._last_pts >= target:
                return

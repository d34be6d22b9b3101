"""torchcodec backend: the default decoder (CPU, or CUDA when asked and available)."""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from episodestream._checks import check_choice, check_int
from episodestream.decode._base import (
    DEFAULT_FFMPEG_THREADS,
    DEFAULT_SEEK_MODE,
    ClipDecoderBase,
    ClipSource,
    SeekMode,
    UseGuard,
    check_source,
    estimate_decoder_bytes,
    log_open,
    parse_device,
    probe_points,
    source_label,
    source_nbytes,
    validate_frame_times,
)
from episodestream.decode._pyav import demux_frame_times
from episodestream.errors import ConfigError, DecodeError

__all__ = ["TorchcodecDecoder", "torchcodec_unavailable_reason"]

_LOG = logging.getLogger(__name__)

# a returned frame's pts may differ from the one asked for by float rounding only
_PTS_SLACK_S = 1e-6
_SEEK_MODES = ("exact", "approximate")
# last-resort runs (see _fetch) start this many frames before the first frame asked for
_FALLBACK_RUN_BACK = (4, 16, 64)


@functools.cache
def torchcodec_unavailable_reason() -> str | None:
    """Why torchcodec cannot be used here (import failure, missing FFmpeg), or None."""
    try:
        import torchcodec.decoders  # noqa: F401
    except (ImportError, OSError, RuntimeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@functools.cache
def _warn_cpu_fallback_once(reason: str) -> None:
    # a GPU asked for and the CPU decoding: worth one line per reason, not one per clip
    _LOG.warning("torchcodec decodes on the CPU although a GPU was asked for: %s", reason)


def _resolve_device(device: str | torch.device, name: str) -> torch.device:
    dev = parse_device(device)
    if dev.type == "cpu":
        return dev
    if dev.type != "cuda":
        raise ConfigError(f"{name}: device must be 'cpu' or 'cuda[:N]', got {device!r}")
    if not torch.cuda.is_available():
        raise DecodeError(
            f"{name}: device={str(device)!r} asked for, but CUDA is not available to torch "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False); use device='cpu'"
        )
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise DecodeError(
            f"{name}: {dev} asked for, but only {torch.cuda.device_count()} CUDA device(s) exist"
        )
    return dev


def _as_tensor(source: bytes | bytearray | memoryview | torch.Tensor) -> torch.Tensor:
    if isinstance(source, torch.Tensor):
        return source
    with warnings.catch_warnings():
        # torch warns that a bytes object is not writable; the decoder only reads it
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(source, dtype=torch.uint8)


def _fallback_run_starts(first: int) -> list[int]:
    """Where the last-resort runs start: 4, 16, then 64 frames before ``first``, then frame 0."""
    return sorted({max(0, first - back) for back in _FALLBACK_RUN_BACK} | {0}, reverse=True)


class _Frames:
    """The part of torchcodec's FrameBatch that ``frames_at`` reads."""

    __slots__ = ("data",)

    def __init__(self, data: torch.Tensor) -> None:
        self.data = data


class TorchcodecDecoder(ClipDecoderBase):
    """Decodes a clip with torchcodec's ``VideoDecoder``, opened on the bytes without copying.

    Frames are addressed by their own presentation times: the clip's frame times are read from
    its packet headers when it opens (or taken from ``frame_times_s`` when the caller knows
    them), timestamps are matched to them within tolerance, and every frame torchcodec returns
    is checked to carry the expected time.

    Args:
        source: the clip's encoded bytes (bytes, bytearray, memoryview, 1-D uint8 CPU tensor)
            or a local path.
        device: "cpu" or "cuda[:N]" (NVDEC through torchcodec; DecodeError if unavailable).
        threads: FFmpeg decode threads for CPU decoding (0 lets FFmpeg choose).
        seek_mode: "approximate" (default) opens without torchcodec's scan and asks for each
            frame by a time inside its display interval; if that fails or returns another
            frame (an open GOP's leading frames), the decoder reopens itself in "exact" mode,
            which scans the clip and asks by frame index. Exact mode mis-indexes clips whose
            first packets an edit list discards (torchcodec 0.13), which approximate handles.
        name: label used in error messages.
        frame_times_s: the clip's frame times if already known (e.g. from the manifest),
            skipping the header read; must be the clip's true presentation times.
    """

    backend = "torchcodec"

    def __init__(
        self,
        source: ClipSource,
        *,
        device: str | torch.device = "cpu",
        threads: int = DEFAULT_FFMPEG_THREADS,
        seek_mode: SeekMode = DEFAULT_SEEK_MODE,
        name: str | None = None,
        frame_times_s: Sequence[float] | np.ndarray | None = None,
    ) -> None:
        self._name = source_label(source, name)
        self._closed = True
        self._decoder: Any = None
        self._source: Any = None
        check_source(source, self._name)
        check_choice("seek_mode", seek_mode, _SEEK_MODES)
        threads = check_int("threads", threads, minimum=0)
        reason = torchcodec_unavailable_reason()
        if reason is not None:
            raise DecodeError(f"{self._name}: torchcodec cannot be loaded ({reason})")
        self._device = _resolve_device(device, self._name)
        self._frames_device = self._device
        self._seek_mode = seek_mode
        self._switched = False  # reopened once in the other seek mode (see _fetch)
        # why this clip is decoded on the CPU although a GPU was asked for, when NVDEC could
        # not decode it (see _decode_on_the_cpu_instead)
        self._nvdec_failure: str | None = None
        if frame_times_s is not None:
            self._times = validate_frame_times(frame_times_s, self._name)
        else:
            self._times = demux_frame_times(source, name=self._name)
        if isinstance(source, str | os.PathLike):
            self._source = os.fspath(source)
        else:
            self._source = _as_tensor(source)  # keeps the bytes alive while torchcodec reads them
        self._threads = threads
        try:
            self._decoder = self._open_video_decoder(seek_mode)
        except DecodeError:
            self._source = None
            raise
        meta = self._decoder.metadata
        self._width = int(meta.width)
        self._height = int(meta.height)
        self._probe = probe_points(self._times, end_s=meta.end_stream_seconds)
        # torchcodec reads a bytes clip in place; a path is read through FFmpeg's small buffer
        held = 0 if isinstance(source, str | os.PathLike) else source_nbytes(source)
        self._nbytes = estimate_decoder_bytes(held, self._width, self._height, threads)
        self._guard = UseGuard(self._name)
        self._closed = False
        log_open(self.backend, self._name, len(self._times), self._width, self._height)
        fallback = self.cpu_fallback  # torchcodec's NVDEC backend knows at once
        if fallback is not None:
            _warn_cpu_fallback_once(fallback)

    def _open_video_decoder(self, seek_mode: SeekMode) -> Any:
        from torchcodec.decoders import VideoDecoder

        device = "cpu" if self._nvdec_failure is not None else str(self._device)
        try:
            decoder = VideoDecoder(
                self._source,
                device=device,
                num_ffmpeg_threads=self._threads,
                seek_mode=seek_mode,
                dimension_order="NCHW",
            )
        except (RuntimeError, ValueError, OSError) as exc:
            raise DecodeError(f"{self._name}: torchcodec cannot open the clip: {exc}") from exc
        if seek_mode == "exact" and decoder.metadata.num_frames != len(self._times):
            raise DecodeError(
                f"{self._name}: torchcodec counts {decoder.metadata.num_frames} frames but the "
                f"clip's packets list {len(self._times)}"
            )
        return decoder

    # -- Decoder protocol -------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def seek_mode(self) -> SeekMode:
        return self._seek_mode

    @property
    def cpu_fallback(self) -> str | None:
        """Why torchcodec decodes this clip on the CPU although a GPU was asked for (its own
        words; the frames then reach the GPU as copies), or None: decoding on the GPU, on the
        CPU as asked, or not known yet (torchcodec's FFmpeg CUDA backend knows after the first
        frame). Asked of the decoder: by the thread using it."""
        if self._nvdec_failure is not None:
            return self._nvdec_failure
        if self._device.type == "cpu" or self._decoder is None:
            return None
        status = getattr(self._decoder, "cpu_fallback", None)  # absent from older torchcodecs
        return str(status) if status else None

    def _fetch_frames(self, unique: np.ndarray) -> torch.Tensor:
        data = self._fetch(unique).data
        return data if self._nvdec_failure is None else data.to(self._device)

    def _fetch(self, unique: np.ndarray) -> Any:
        """The frames at presentation indices ``unique`` (ascending), each checked to carry
        its expected time.

        Approximate mode asks by a time inside each frame's display interval; exact mode by
        torchcodec's frame index. Each mode has clips it gets wrong: a seek by time can land
        on an open GOP's keyframe whose leading frames the decoder then drops, and exact mode
        mis-indexes clips whose first packets an edit list discards. On a failure or a wrong
        frame the decoder reopens itself once in the other mode and asks again.
        """
        batch, reason, error = self._ask(unique)
        if batch is not None:
            return batch
        if not self._switched:
            self._switched = True
            other: SeekMode = "exact" if self._seek_mode == "approximate" else "approximate"
            _LOG.info("%s: %s; reopening in %s seek mode", self._name, reason, other)
            try:
                self._decoder = self._open_video_decoder(other)
            except DecodeError as exc:
                raise DecodeError(
                    f"{self._name}: {reason}; reopening in {other} seek mode failed: {exc}"
                ) from error
            self._seek_mode = other
            batch, reason, error = self._ask(unique)
            if batch is not None:
                return batch
        # Last resort: FFmpeg 5.1's H.264 decoder with one thread can fail a fresh seek to a
        # frame still in the reorder buffer at end of stream, while decoding a run of frames
        # up to it works. A run that starts a few GOPs earlier is enough and costs a few GOPs;
        # the whole clip (at most one episode) is the bound. Each run's frames are allocated,
        # so the shortest that works wins.
        last = int(unique[-1])
        for start in _fallback_run_starts(int(unique[0])):
            run = np.arange(start, last + 1)
            batch, _, _ = self._ask(run)
            if batch is not None:
                _LOG.debug("%s: %s; decoded frames %d..%d instead", self._name, reason, start, last)
                picked = torch.from_numpy(unique - start).to(batch.data.device)
                return _Frames(batch.data[picked])
        if self._device.type == "cuda" and self._nvdec_failure is None:
            return self._decode_on_the_cpu_instead(unique, reason)
        raise DecodeError(
            f"{self._name}: torchcodec could not decode the frames at "
            f"{self._times[unique[:5]].round(6).tolist()} s: {reason}"
        ) from error

    def _decode_on_the_cpu_instead(self, unique: np.ndarray, reason: str) -> Any:
        """NVDEC returned no frame where FFmpeg's own decoder does (seen on a lent H200:
        H.264 clips that start at an open-GOP I frame, no IDR): reopen the clip on the CPU,
        say so once (``cpu_fallback``), and hand the frames to the GPU as copies."""
        self._nvdec_failure = (
            f"NVDEC could not decode this clip ({reason}); torchcodec decodes it on the CPU"
        )
        _warn_cpu_fallback_once(self._nvdec_failure)
        self._switched = False
        try:
            self._decoder = self._open_video_decoder(self._seek_mode)
        except DecodeError as exc:
            raise DecodeError(f"{self._name}: {reason}; on the CPU: {exc}") from exc
        return self._fetch(unique)

    def _ask(self, unique: np.ndarray) -> tuple[Any, str, BaseException | None]:
        """(batch, "", None) when torchcodec returned the right frames, else
        (None, why, the exception if one was raised)."""
        try:
            if self._seek_mode == "exact":
                batch = self._decoder.get_frames_at(indices=unique.tolist())
            else:
                batch = self._decoder.get_frames_played_at(seconds=self._probe[unique].tolist())
        except (RuntimeError, ValueError, IndexError) as exc:
            return None, f"{type(exc).__name__}: {exc}", exc
        # plain floats: most asks are one frame, where array operations cost more than the
        # comparison (a NaN time compares False, so it fails the check)
        got = batch.pts_seconds.tolist()
        expected = self._times[unique].tolist()
        if len(got) == len(expected) and all(
            abs(g - e) <= _PTS_SLACK_S for g, e in zip(got, expected, strict=True)
        ):
            return batch, "", None
        return (
            None,
            f"torchcodec returned frames at {[round(g, 6) for g in got[:5]]} s instead of "
            f"{[round(e, 6) for e in expected[:5]]} s ({self._seek_mode} seek mode)",
            None,
        )

    def _release(self) -> None:
        # torchcodec frees FFmpeg state when its decoder object is collected
        self._decoder = None
        self._source = None

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._times)} frames"
        return f"TorchcodecDecoder({self._name!r}, {state}, {self._seek_mode}, {self._device})"

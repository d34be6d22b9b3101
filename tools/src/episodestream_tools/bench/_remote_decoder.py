"""NAIVE's decoder: torchcodec (or PyAV) opened on a generic remote file object (fsspec), as a
user would open a remote MP4 without episodestream."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from episodestream.errors import DecodeError
from episodestream.helpers import Closing

__all__ = ["RemoteFileDecoder"]

# a returned frame must lie this close to the asked time (LeRobot's tolerance is 1e-4 s)
_MATCH_TOLERANCE_S = 1e-3


class RemoteFileDecoder(Closing):
    """Frames at source-file times from ``url`` read through ``fsspec.open``.

    ``backend`` is a concrete backend ("torchcodec" or "pyav"); torchcodec opens in
    approximate seek mode (no full scan of the remote file) and seeks by time, PyAV seeks to
    the preceding keyframe and decodes forward. One thread at a time (the DecoderPool leases it).
    """

    def __init__(self, url: str, *, backend: str, threads: int, fps: float) -> None:
        import fsspec

        self._name = url
        self._half_frame_s = 0.5 / float(fps)
        self._lock = threading.Lock()
        self._file: Any = fsspec.open(url, "rb").open()
        self._backend = backend
        self._container: Any = None
        self._decoder: Any = None
        try:
            if backend == "torchcodec":
                from torchcodec.decoders import VideoDecoder

                self._decoder = VideoDecoder(
                    self._file,
                    seek_mode="approximate",
                    num_ffmpeg_threads=threads,
                    dimension_order="NCHW",
                )
            else:
                import av

                self._container = av.open(self._file, mode="r")
                self._stream = self._container.streams.video[0]
                self._stream.thread_count = max(threads, 1)
        except Exception as error:
            self.close()
            raise DecodeError(f"{url}: cannot open the remote video: {error}") from error

    @property
    def name(self) -> str:
        return self._name

    @property
    def nbytes(self) -> int:
        return 0  # the bytes live on the server (fsspec keeps a small read-ahead block)

    def frames_at(self, source_times_s: Sequence[float] | np.ndarray) -> torch.Tensor:
        times = np.asarray(source_times_s, dtype=np.float64)
        with self._lock:
            if self._backend == "torchcodec":
                batch = self._decoder.get_frames_played_at(
                    seconds=(times + self._half_frame_s).tolist()
                )
                got = batch.pts_seconds.numpy()
                frames = batch.data
            else:
                got, frames = self._pyav_frames(times)
        if got.shape != times.shape or not np.allclose(got, times, rtol=0, atol=_MATCH_TOLERANCE_S):
            raise DecodeError(
                f"{self._name}: frames at {got[:5].round(6).tolist()} s instead of "
                f"{times[:5].round(6).tolist()} s"
            )
        return frames

    def _pyav_frames(self, times: np.ndarray) -> tuple[np.ndarray, torch.Tensor]:
        stream = self._stream
        base = float(stream.time_base)
        got: list[float] = []
        images: list[torch.Tensor] = []
        for t in times.tolist():
            self._container.seek(int(t / base), stream=stream, backward=True, any_frame=False)
            for frame in self._container.decode(stream):
                if frame.pts is None or frame.pts * base < t - _MATCH_TOLERANCE_S:
                    continue
                got.append(frame.pts * base)
                rgb = frame.to_ndarray(format="rgb24")
                images.append(torch.from_numpy(rgb).permute(2, 0, 1).contiguous())
                break
        if len(images) != times.size:
            raise DecodeError(f"{self._name}: no frame at some of {times[:5].tolist()} s")
        return np.asarray(got, dtype=np.float64), torch.stack(images)

    def close(self) -> None:
        self._decoder = None
        if self._container is not None:
            try:
                self._container.close()
            finally:
                self._container = None
        if self._file is not None:
            try:
                self._file.close()
            finally:
                self._file = None

"""open_decoder: pick a backend and open a clip."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

import numpy as np
import torch

from episodestream._checks import check_choice
from episodestream.decode._base import (
    DEFAULT_FFMPEG_THREADS,
    DEFAULT_SEEK_MODE,
    BackendName,
    ClipSource,
    Decoder,
    SeekMode,
    parse_device,
)
from episodestream.decode._pyav import PyAVDecoder
from episodestream.decode._torchcodec import TorchcodecDecoder, torchcodec_unavailable_reason
from episodestream.errors import ConfigError, DecodeError

__all__ = ["available_backends", "open_decoder", "resolve_backend"]

_LOG = logging.getLogger(__name__)
_BACKENDS = ("auto", "torchcodec", "pyav")


def available_backends() -> tuple[str, ...]:
    """The concrete backends usable in this process, preferred first."""
    names = [] if torchcodec_unavailable_reason() is not None else ["torchcodec"]
    return (*names, "pyav")


def resolve_backend(backend: BackendName, device: str | torch.device = "cpu") -> str:
    """The concrete backend ``backend`` means here: "auto" is torchcodec when it loads (and
    always for CUDA), else PyAV.

    Raises:
        ConfigError: an unknown backend or device, or PyAV asked to decode on a GPU.
        DecodeError: torchcodec asked for (or needed for CUDA) but it cannot be loaded.
    """
    check_choice("backend", backend, _BACKENDS)
    on_cpu = parse_device(device).type == "cpu"
    if backend == "pyav":
        if not on_cpu:
            raise ConfigError(
                f"the PyAV backend decodes on the CPU only (device={str(device)!r}); use "
                "backend='torchcodec' for GPU decoding"
            )
        return "pyav"
    reason = torchcodec_unavailable_reason()
    if reason is None:
        return "torchcodec"
    if backend == "torchcodec" or not on_cpu:
        raise DecodeError(f"torchcodec cannot be loaded ({reason}); backend='pyav' decodes on CPU")
    _warn_fallback_once(reason)
    return "pyav"


@functools.cache
def _warn_fallback_once(reason: str) -> None:
    # PyAV decodes the same pixels at several times the CPU: say so once, with the fix
    _LOG.warning(
        "torchcodec cannot be loaded with torch %s (%s); decoding with PyAV, which costs "
        "several times the CPU per frame: install the torchcodec release built for this torch",
        torch.__version__,
        reason,
    )


def open_decoder(
    source: ClipSource,
    *,
    backend: BackendName = "auto",
    device: str | torch.device = "cpu",
    threads: int = DEFAULT_FFMPEG_THREADS,
    seek_mode: SeekMode = DEFAULT_SEEK_MODE,
    name: str | None = None,
    frame_times_s: Sequence[float] | np.ndarray | None = None,
) -> Decoder:
    """Open a decoder on one clip.

    Args:
        source: the clip's encoded bytes (bytes, bytearray, memoryview or 1-D uint8 CPU
            tensor; not copied by torchcodec, so do not mutate them while the decoder is open)
            or a local file path.
        backend: "torchcodec", "pyav", or "auto" (torchcodec when it loads, else PyAV).
        device: "cpu", or "cuda[:N]" for torchcodec GPU decoding (DecodeError if unavailable).
        threads: FFmpeg threads per decoder (0: FFmpeg chooses). See DEFAULT_FFMPEG_THREADS.
        seek_mode: torchcodec seek mode (ignored by PyAV). See DEFAULT_SEEK_MODE.
        name: label for error messages, e.g. ``"episode 12 / observation.images.cam_high"``.
        frame_times_s: the clip's frame presentation times if already known (skips reading
            them from the clip's packets with torchcodec; checked by PyAV).

    Raises:
        DecodeError: the clip is empty, corrupt, not a video, or the backend is unavailable.
        ValueError, TypeError: bad arguments.
    """
    concrete = resolve_backend(backend, device)
    if concrete == "torchcodec":
        return TorchcodecDecoder(
            source,
            device=device,
            threads=threads,
            seek_mode=seek_mode,
            name=name,
            frame_times_s=frame_times_s,
        )
    return PyAVDecoder(source, threads=threads, name=name, frame_times_s=frame_times_s)

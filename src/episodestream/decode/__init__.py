"""Decode layer: frames at timestamps from clips held in memory.

- :func:`open_decoder` opens a :class:`Decoder` on one clip's bytes (torchcodec by default,
  PyAV as fallback); ``decoder.frames_at(timestamps_s)`` returns uint8 N x C x H x W RGB
  frames, :func:`to_float` turns them into LeRobot's float32 in [0, 1].
- :class:`DecoderPool` keeps open decoders for reuse (bounded by count and bytes) and leases
  each to one thread at a time; :class:`DecodeExecutor` decodes on a few threads.
- :func:`heap_trimmer` hands glibc's free heap pages back when decoders close (rate-limited).
"""

from episodestream.decode._base import (
    DEFAULT_FFMPEG_THREADS,
    DEFAULT_TOLERANCE_S,
    BackendName,
    ClipSource,
    Decoder,
    SeekMode,
    nearest_frame_indices,
    parse_device,
    to_float,
)
from episodestream.decode._executor import DEFAULT_DECODE_THREADS, DecodeExecutor
from episodestream.decode._heap import HeapTrimmer, HeapTrimStats, heap_trimmer
from episodestream.decode._open import available_backends, open_decoder, resolve_backend
from episodestream.decode._pool import (
    DecoderLease,
    DecoderPool,
    DecoderPoolStats,
)
from episodestream.decode._pyav import PyAVDecoder, demux_frame_times
from episodestream.decode._torchcodec import TorchcodecDecoder

__all__ = [
    "DEFAULT_DECODE_THREADS",
    "DEFAULT_FFMPEG_THREADS",
    "DEFAULT_TOLERANCE_S",
    "BackendName",
    "ClipSource",
    "DecodeExecutor",
    "Decoder",
    "DecoderLease",
    "DecoderPool",
    "DecoderPoolStats",
    "HeapTrimStats",
    "HeapTrimmer",
    "PyAVDecoder",
    "SeekMode",
    "TorchcodecDecoder",
    "available_backends",
    "demux_frame_times",
    "heap_trimmer",
    "nearest_frame_indices",
    "open_decoder",
    "parse_device",
    "resolve_backend",
    "to_float",
]

"""Which H.264 / AV1 inputs NVDEC decodes through torchcodec: whole source files against
clips cut with ``episodestream.mp4.clip_file`` (from the file's first frame, and from mid-file),
in both seek modes, and PyAV's own ``*_cuvid`` decoders on the same clip. Prints one line per
attempt: what was asked, and the frames' device or the error. Run by check.sh's DIAGNOSE step.

    python benchmarks/gpu/diagnose_clips.py DATASET_ROOT [DATASET_ROOT ...]
"""

from __future__ import annotations

import io
import sys
import tempfile
from pathlib import Path

import av
import torch
from torchcodec.decoders import VideoDecoder

from episodestream.mp4 import clip_file


def _attempt(label: str, source: str | bytes, seek_mode: str, count: int) -> None:
    try:
        decoder = VideoDecoder(source, device="cuda", seek_mode=seek_mode)
        frames = decoder.get_frames_at(indices=list(range(count)))
        status = getattr(decoder, "cpu_fallback", None)
        print(
            f"{label} [{seek_mode}]: {tuple(frames.data.shape)} on {frames.data.device}; "
            f"fallback: {status}"
        )
    except Exception as error:  # a diagnostic: report every failure
        print(f"{label} [{seek_mode}]: {type(error).__name__}: {str(error)[:200]}")


def _pyav_cuvid(label: str, data: bytes, codec: str) -> None:
    name = {"h264": "h264_cuvid", "av1": "av1_cuvid", "hevc": "hevc_cuvid"}.get(codec)
    if name is None:
        return
    try:
        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.video[0]
            context = av.CodecContext.create(name, "r")
            context.extradata = stream.codec_context.extradata
            frames = 0
            for packet in container.demux(stream):
                frames += len(context.decode(packet))
            frames += len(context.decode(None))
        print(f"{label} [PyAV {name}]: {frames} frames")
    except Exception as error:
        print(f"{label} [PyAV {name}]: {type(error).__name__}: {str(error)[:200]}")


def main(roots: list[str]) -> None:
    print("torch", torch.__version__, "cuda", torch.cuda.is_available())
    for root in roots:
        path = sorted(Path(root).glob("videos/**/*.mp4"))[0]
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            codec = stream.codec_context.name
            duration = float(stream.frames) / float(stream.average_rate)
            size = (stream.codec_context.width, stream.codec_context.height)
        print(f"== {path} ({codec}, {size[0]}x{size[1]}, {duration:.2f} s)")
        for seek_mode in ("exact", "approximate"):
            _attempt("whole file", str(path), seek_mode, 4)
        for start in (0.0, duration / 2):
            clip = clip_file(path, start, start + 0.5)
            label = f"clip [{start:.2f}, {start + 0.5:.2f}] s ({len(clip.data)} bytes)"
            with tempfile.NamedTemporaryFile(suffix=".mp4") as handle:
                handle.write(clip.data)
                handle.flush()
                for seek_mode in ("exact", "approximate"):
                    _attempt(label + " from a file", handle.name, seek_mode, 4)
            _attempt(label + " from bytes", clip.data, "approximate", 4)
            _pyav_cuvid(label, clip.data, codec)


if __name__ == "__main__":
    main(sys.argv[1:])

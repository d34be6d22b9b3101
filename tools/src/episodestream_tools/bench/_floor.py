"""FLOOR: a bare decoder loop over the sequence — the least CPU a sample's frames can cost.

Decoders are opened on the whole local files (one per file, cached for the run, as LOCAL opens
them), each sample's camera frames are decoded as uint8 on one thread, and nothing else is done:
no Parquet rows, no float conversion, no sample dict, no threads. Every other track's CPU per
sample over FLOOR's is what its pipeline costs beyond decoding.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from episodestream.decode import Decoder, open_decoder
from episodestream_tools.bench._config import BenchConfig
from episodestream_tools.bench._measure import Progress, Sampler, synchronized_end, timing_figures
from episodestream_tools.bench._sequence import BenchDataset

__all__ = ["run_floor"]


def run_floor(config: BenchConfig, ds: BenchDataset, count: int, root: Path) -> dict[str, Any]:
    """Decode the first ``count`` samples of the sequence from ``root``'s files, bare."""
    sequence = ds.sequence
    cameras = ds.cameras
    # the file of every (sample, camera), resolved before the clock starts
    paths = [
        [ds.meta.episode_video_path(int(e), camera) for camera in cameras]
        for e in sequence.episodes[:count].tolist()
    ]
    times = sequence.source_times_s[:count]
    decoders: dict[str, Decoder] = {}
    opens: list[float] = []
    arrivals = np.zeros(count, dtype=np.float64)
    frames = 0
    pixels = 0
    try:
        with (
            Sampler() as sampler,
            Progress(count, "FLOOR", enabled=config.progress, unit="samples") as bar,
        ):
            started = time.perf_counter()
            cpu_started = time.process_time()
            for i in range(count):
                for c, path in enumerate(paths[i]):
                    decoder = decoders.get(path)
                    if decoder is None:
                        opened = time.perf_counter()
                        decoder = open_decoder(
                            root / path,
                            backend=config.decoder,
                            device=config.device,
                            threads=config.ffmpeg_threads,
                            name=path,
                        )
                        opens.append(time.perf_counter() - opened)
                        decoders[path] = decoder
                    batch = decoder.frames_at(times[i, c : c + 1])
                    frames += int(batch.shape[0])
                    pixels += int(batch.numel())
                arrivals[i] = time.perf_counter() - started
                bar.update()
            synchronized_end(config.device, arrivals, started)  # as STREAM and LOCAL do
            cpu_s = time.process_time() - cpu_started
    finally:
        for decoder in decoders.values():
            decoder.close()
    return {
        **timing_figures(arrivals, count, cpu_s),
        "decoded_frames": frames,
        "decoded_bytes": pixels,  # uint8: one byte per channel value
        "image_dtype": "uint8",
        "device": config.device,
        "files": len(decoders),
        "decoder_opens": len(opens),
        "open_ms_mean": 1000.0 * float(np.mean(opens)) if opens else None,
        "memory": sampler.memory(),
    }

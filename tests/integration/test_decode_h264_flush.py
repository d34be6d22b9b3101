"""A fresh torchcodec decoder asked first for an H.264 clip's last frames still returns them."""

from __future__ import annotations

import logging
import re

import numpy as np

from episodestream.cache import EpisodeByteCache, ManifestClipSource
from episodestream.decode import open_decoder
from episodestream.decode._torchcodec import _fallback_run_starts
from episodestream.lerobot import load_dataset_meta
from episodestream.manifest import open_manifest
from episodestream.storage import LocalRangeReader
from episodestream_tools.synthetic import read_frame_identity


def test_each_frame_alone_from_a_fresh_decoder(synthetic_h264, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="episodestream.decode")
    reader = LocalRangeReader(synthetic_h264)
    meta = load_dataset_meta(reader)
    manifest = open_manifest(reader, meta, cache_dir=tmp_path, progress=False)
    with EpisodeByteCache(ManifestClipSource(manifest, reader), reader, byte_budget=2**26) as cache:
        for episode in range(meta.total_episodes):
            resident = cache.wait_ready(episode, timeout=30)
            length = int(meta.episodes.length[meta.episodes.row(episode)])
            for camera, clip in resident.clips.items():
                span = manifest.span(episode, camera)
                times = span.from_timestamp_s + np.arange(length) / meta.fps - clip.time_offset_s
                for frame in (length - 1, length - 2, 0):
                    with open_decoder(clip.data, backend="torchcodec", threads=1) as decoder:
                        image = decoder.frames_at([times[frame]]).numpy()[0]
                    assert read_frame_identity(image) == (episode, frame)
    # where the last resort was needed, it decoded a short run up to the frame, not the clip
    runs = [
        re.search(r"decoded frames (\d+)\.\.(\d+) instead", r.getMessage()) for r in caplog.records
    ]
    for start, last in [(int(m[1]), int(m[2])) for m in runs if m]:
        assert last - start <= 64, (start, last)


def test_the_fallback_runs_start_further_back_each_time_and_end_at_frame_0():
    # 4, 16, then 64 frames before the first wanted frame, then the clip's start
    assert _fallback_run_starts(70) == [66, 54, 6, 0]
    assert _fallback_run_starts(64) == [60, 48, 0]  # 64 back is frame 0: asked once
    assert _fallback_run_starts(10) == [6, 0]  # 16 and 64 back are cut to frame 0
    assert _fallback_run_starts(2) == [0]
    assert _fallback_run_starts(0) == [0]

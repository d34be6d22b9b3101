"""The LeRobot v2.x datasets the v2 tests share (main suite and LeRobot's environment).

``V21_SPEC`` / ``V20_SPEC`` write LeRobot 0.3.x's layouts; ``TWIN_SPEC`` is the same episodes in
the v3.0 layout at one episode per file: the same MP4 and Parquet bytes under v3 names.
"""

from __future__ import annotations

from dataclasses import replace

from episodestream_tools.synthetic import SyntheticSpec

__all__ = [
    "CAMERAS",
    "DELTA_FRAMES",
    "DELTA_TIMESTAMPS",
    "FPS",
    "TWIN_SPEC",
    "V20_SPEC",
    "V21_SPEC",
]

FPS = 30
CAMERAS = ("observation.images.cam_high", "observation.images.cam_left_wrist")
# 6 episodes of 8-20 frames, 4 per chunk (episodes 4 and 5 in chunk-001); published v2.x
# files often keep the moov at the tail, so v2.1 does here
V21_SPEC = SyntheticSpec(
    cameras=CAMERAS,
    width=64,
    height=48,
    fps=FPS,
    episodes=6,
    min_length=8,
    max_length=20,
    chunks_size=4,
    codec="av1",
    moov="end",
    seed=7,
    layout="v2.1",
)
V20_SPEC = replace(V21_SPEC, layout="v2.0", moov="start")
TWIN_SPEC = replace(V21_SPEC, layout="v3.0", moov="start")
# offsets that pad at both edges of 8..20-frame episodes
DELTA_FRAMES = {CAMERAS[0]: [-3, 0, 2], "observation.state": [-2, 0], "action": [0, 1, 5]}
DELTA_TIMESTAMPS = {key: [k / FPS for k in frames] for key, frames in DELTA_FRAMES.items()}

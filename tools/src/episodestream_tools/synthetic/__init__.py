"""Synthetic LeRobot v3 datasets (for the demo, benchmarks and tests): `make-dataset`'s presets.

Every synthetic frame carries its (episode, frame) identity as black/white cells;
:func:`read_frame_identity` reads it back from a decoded image.
"""

from __future__ import annotations

from episodestream_tools.synthetic._identity import (
    MAX_CAMERAS,
    MAX_EPISODES,
    MAX_FRAMES_PER_EPISODE,
    read_frame_camera,
    read_frame_identity,
)
from episodestream_tools.synthetic._synthetic import (
    DEFAULT_CAMERAS,
    DEMO_SPEC,
    PRESETS,
    WRITER_FORMAT_VERSION,
    SyntheticSpec,
    default_cache_dir,
    ensure_synthetic_dataset,
    write_synthetic_dataset,
)

__all__ = [
    "DEFAULT_CAMERAS",
    "DEMO_SPEC",
    "MAX_CAMERAS",
    "MAX_EPISODES",
    "MAX_FRAMES_PER_EPISODE",
    "PRESETS",
    "WRITER_FORMAT_VERSION",
    "SyntheticSpec",
    "default_cache_dir",
    "ensure_synthetic_dataset",
    "read_frame_camera",
    "read_frame_identity",
    "write_synthetic_dataset",
]

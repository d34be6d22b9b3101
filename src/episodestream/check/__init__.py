"""Pre-flight check: which episodes read as LeRobot's reader reads them, without decoding.

Sits above the manifest and lerobot layers (and uses the pure sampling layer's
``delta_timestamps`` rules); nothing here decodes video.
"""

from episodestream.check._check import MAX_CHECK_WORKERS, check_dataset, has_frame, samples_querying
from episodestream.check._report import (
    CheckFinding,
    DatasetCheck,
    EpisodeCheck,
    EpisodeOutcome,
    FindingKind,
    FindingOutcome,
    format_check,
)

__all__ = [
    "MAX_CHECK_WORKERS",
    "CheckFinding",
    "DatasetCheck",
    "EpisodeCheck",
    "EpisodeOutcome",
    "FindingKind",
    "FindingOutcome",
    "check_dataset",
    "format_check",
    "has_frame",
    "samples_querying",
]

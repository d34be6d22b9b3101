"""``check_dataset`` against LeRobot's own reader: on every variant of the corpus of conventions
(and a few defects of the rows), the samples the check says raise are exactly those
``LeRobotDataset`` raises on, with and without delta_timestamps.

Runs in LeRobot's environment (``make test-lerobot``), on the corpus's LeRobot-written dataset.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from lerobot.datasets import video_utils as lerobot_video_utils
from lerobot.datasets.lerobot_dataset import LeRobotDataset

from episodestream import DatasetCheck, check_dataset
from tests.lerobot_train.test_corpus import DELTAS, LENGTHS, REPO_ID, VARIANTS, _write
from tests.support import variants

FPS = 30
# defects of the rows, beside the corpus's conventions: name -> (edit, episodes read)
DEFECTS: dict[str, tuple[Callable[[Path], None], list[int] | None]] = {
    "a timestamp half a frame off": (
        lambda root: variants.shift_timestamp(root, 1, 7, 0.5 / FPS),
        None,
    ),
    # the next episode's first frame: LeRobot reads it (episodestream's span ends before it)
    "the last timestamp a frame late": (
        lambda root: variants.shift_timestamp(root, 0, LENGTHS[0] - 1, 1 / FPS),
        None,
    ),
    "a task_index out of range": (
        lambda root: variants.set_data_value(root, 2, 0, "task_index", 9),
        None,
    ),
}
CASES = {**VARIANTS, **DEFECTS}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``made(case) -> root``: the LeRobot-written dataset edited by ``case``, made once."""
    written = _write(tmp_path_factory.mktemp("oracle") / "written")
    roots: dict[str, Path] = {}

    def make(case: str) -> Path:
        if case not in roots:
            root = variants.copy_dataset(written, tmp_path_factory.mktemp("case") / "ds")
            CASES[case][0](root)
            roots[case] = root
        return roots[case]

    return make


def _lerobot_raises(
    root: Path, episodes: list[int] | None, deltas: dict[str, list[float]] | None
) -> list[int]:
    lerobot_video_utils._default_decoder_cache.clear()  # rewritten files open afresh
    dataset = LeRobotDataset(
        REPO_ID, root=root, episodes=episodes, delta_timestamps=deltas, video_backend="torchcodec"
    )
    raised = []
    for i in range(len(dataset)):
        try:
            dataset[i]
        except Exception:  # whatever LeRobot raises
            raised.append(i)
    return raised


def _predicted(report: DatasetCheck, outcome: str) -> list[int]:
    """Positions in LeRobot's dataset (episodes in order, rows in order) of the samples the
    check's findings of ``outcome`` name."""
    positions, start = set(), 0
    for entry in report.episodes:
        for finding in entry.findings:
            if finding.outcome == outcome:
                rows = range(entry.length) if finding.whole_episode else finding.rows
                positions.update(start + row for row in rows)
        start += entry.length
    return sorted(positions)


@pytest.mark.parametrize("deltas", [None, DELTAS], ids=["frames", "deltas"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_check_predicts_what_lerobot_raises_on(
    case: str, deltas: dict[str, list[float]] | None, made: Callable[[str], Path], tmp_path: Path
) -> None:
    root, episodes = made(case), CASES[case][1]
    report = check_dataset(
        root, episodes=episodes, delta_timestamps=deltas, cache_dir=tmp_path / "cache"
    )
    raised = _lerobot_raises(root, episodes, deltas)
    assert _predicted(report, "raises") == raised
    assert report.ok == (not raised and case != "the last timestamp a frame late")
    if case == "the last timestamp a frame late":
        # LeRobot reads it; the check says episodestream raises there (a difference to mend)
        assert _predicted(report, "differs") == [LENGTHS[0] - 1]
        assert report.differing == (0,)

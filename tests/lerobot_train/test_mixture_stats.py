"""A mixture's statistics against LeRobot's own ``aggregate_stats``.

Three real sources that differ (lerobot_sim5: 3 cameras 96x128, state and action of 6;
synthetic_av1: 2 cameras 64x48; a synthetic source with one wrist camera, a state of 4 and
an action of 8), each source's ``meta/stats.json`` loaded by LeRobot's own loader, mapped
onto one inferred schema (renamed camera, padded state and action). LeRobot's
``aggregate_stats`` on those mapped statistics is the oracle: ours must be equal, array for
array, bit for bit and dtype for dtype, and LeRobot must accept the mapped statistics
(its type and shape checks run first).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lerobot.datasets.compute_stats import aggregate_stats

from episodestream.datasets._mixture_schema import (
    KeySpec,
    aggregate_mapped_stats,
    infer_schema,
    map_source_features,
    map_stats,
)
from episodestream.lerobot import load_dataset_meta
from episodestream.storage import open_reader
from episodestream_tools.synthetic import SyntheticSpec

try:  # LeRobot 0.4's loader: np.array of each leaf of meta/stats.json
    from lerobot.datasets.utils import load_stats as _lerobot_load_stats
except ImportError:  # pragma: no cover - a LeRobot that moved it: the same cast, by hand
    _lerobot_load_stats = None

WRIST = "observation.images.wrist"
LEFT = "observation.images.cam_left_wrist"
# one camera, a shorter state and a longer action than the other two sources
ARM_SPEC = SyntheticSpec(
    cameras=(WRIST,),
    width=64,
    height=64,
    episodes=3,
    min_length=5,
    max_length=9,
    episodes_per_file=3,
    state_size=4,
    action_size=8,
    codec="h264",
    seed=28,
)


def _load_stats(root: Path) -> dict[str, dict[str, np.ndarray]]:
    if _lerobot_load_stats is not None:
        stats = _lerobot_load_stats(root)
    else:  # pragma: no cover
        raw = json.loads((root / "meta" / "stats.json").read_text())
        stats = {
            key: {name: np.array(v) for name, v in entry.items()} for key, entry in raw.items()
        }
    assert stats is not None, root
    return stats


@pytest.fixture(scope="module")
def sources(
    lerobot_fixture_root: Path,
    synthetic_av1: Path,
    synthetic_dataset: Callable[[SyntheticSpec], Path],
) -> list[tuple[str, Path, dict[str, Any] | None]]:
    """(id, root, key map) of each source."""
    return [
        ("sim5", lerobot_fixture_root, None),
        ("av1", synthetic_av1, None),
        ("arm", synthetic_dataset(ARM_SPEC), {WRIST: LEFT}),
    ]


def _assert_stats_equal(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    assert ours.keys() == theirs.keys()
    for key in theirs:
        assert ours[key].keys() == theirs[key].keys(), key
        for name, expected in theirs[key].items():
            got = ours[key][name]
            assert got.dtype == expected.dtype, (key, name)
            assert got.shape == expected.shape, (key, name)
            assert np.array_equal(got, expected), (key, name)


def test_mixture_stats_equal_lerobot_aggregate_stats(sources):
    metas = [load_dataset_meta(open_reader(str(root))) for _, root, _ in sources]
    key_maps = [key_map for _, _, key_map in sources]
    schema = infer_schema(metas, key_maps, source_ids=[sid for sid, _, _ in sources])
    # the inferred schema pads: state to 6 (arm has 4), action to 8 (sim5 and av1 have 6)
    assert schema.keys["observation.state"] == KeySpec.vector(6)
    assert schema.keys["action"] == KeySpec.vector(8)
    assert schema.keys[LEFT].shape == (3, 96, 128)
    mapped = []
    for index, ((source_id, root, key_map), meta) in enumerate(zip(sources, metas, strict=True)):
        mapper = map_source_features(meta, key_map, schema, source_id=source_id, source_index=index)
        stats = mapper.map_stats(_load_stats(root))
        _assert_stats_equal(stats, map_stats(_load_stats(root), key_map, schema))
        mapped.append(stats)
    # the renamed camera carries the arm's wrist statistics; cameras a source lacks add none
    assert LEFT in mapped[2] and WRIST not in mapped[2]
    assert "observation.images.cam_high" not in mapped[2]
    assert mapped[0]["action"]["mean"].shape == (8,)
    assert not mapped[0]["action"]["std"][6:].any()
    theirs = aggregate_stats([_copy(stats) for stats in mapped])
    ours = aggregate_mapped_stats(mapped)
    _assert_stats_equal(ours, theirs)
    # a padded entry pools the zeros: action entry 7 is the arm's alone, diluted by the rest
    arm, total = mapped[2]["action"]["count"][0], ours["action"]["count"][0]
    assert ours["action"]["mean"][7] == pytest.approx(mapped[2]["action"]["mean"][7] * arm / total)
    # a camera only some sources have is pooled over those: cam_right_wrist is sim5's alone
    right = "observation.images.cam_right_wrist"
    assert np.array_equal(ours[right]["mean"], mapped[0][right]["mean"])


def _copy(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, np.ndarray]]:
    """A deep copy, so neither implementation can see the other's edits."""
    return {
        key: {name: value.copy() for name, value in entry.items()} for key, entry in stats.items()
    }

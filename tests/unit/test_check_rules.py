"""The check's frame rule and delta reach, against LeRobot's rules written out plainly."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from episodestream.check import has_frame, samples_querying

TOLERANCE_S = 1e-4


def test_a_frame_matches_strictly_within_tolerance_on_either_side():
    times = np.array([0.0, 1 / 30, 2 / 30])
    queries = np.array(
        [0.0, 1 / 30 + 0.99e-4, 1 / 30 - 0.99e-4, 2 / 30 + 1e-4, -1e-4, 0.5 / 30, np.nan, 3 / 30]
    )
    assert has_frame(times, queries, TOLERANCE_S).tolist() == [
        True,
        True,
        True,
        False,  # exactly the tolerance away: LeRobot's `min_ < tolerance_s` refuses it
        False,
        False,  # between two frames
        False,  # NaN finds nothing
        False,  # past the last frame
    ]
    assert has_frame(np.zeros(0), np.array([0.0]), TOLERANCE_S).tolist() == [False]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0, 10, allow_nan=False), min_size=1, max_size=30, unique=True),
    st.lists(st.floats(-1, 11, allow_nan=False), min_size=1, max_size=30),
    st.floats(1e-6, 0.5),
)
def test_has_frame_is_the_nearest_frame_rule(frames, queries, tolerance):
    times = np.sort(np.array(frames))
    expected = [min(abs(t - q) for t in frames) < tolerance for q in queries]
    assert has_frame(times, np.array(queries), tolerance).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40),
    st.lists(st.integers(-5, 5), min_size=1, max_size=4),
    st.data(),
)
def test_samples_querying_clamps_as_lerobot(length, offsets, data):
    bad = data.draw(st.lists(st.integers(0, length - 1), max_size=3, unique=True))
    rows = np.array(sorted(bad), dtype=np.int64)
    # LeRobot: sample k queries max(0, min(length - 1, k + d)) for each delta d
    expected = [
        k for k in range(length) if any(max(0, min(length - 1, k + d)) in bad for d in offsets)
    ]
    got = samples_querying(rows, length, np.array(offsets, dtype=np.int64))
    assert got.tolist() == expected
    assert samples_querying(rows, length, None).tolist() == sorted(bad)

"""delta_timestamps arithmetic, checked against LeRobot's rules written out plainly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from episodestream import SamplingError
from episodestream.sampling import delta_frame_offsets, delta_query


def reference(frame: int, length: int, offsets: list[int]) -> tuple[list[int], list[bool]]:
    # LeRobot: query = max(start, min(end - 1, idx + delta)); pad = outside [start, end)
    indices = [max(0, min(length - 1, frame + d)) for d in offsets]
    pads = [frame + d < 0 or frame + d >= length for d in offsets]
    return indices, pads


def test_offsets_in_seconds_become_whole_frames():
    offsets = delta_frame_offsets(
        {"action": [0.0, 0.1, 0.2, 1.5], "observation.images.top": [-1 / 30, 0, 1 / 30]}, 30
    )
    assert offsets["action"].tolist() == [0, 3, 6, 45]
    assert offsets["observation.images.top"].tolist() == [-1, 0, 1]
    assert offsets["action"].dtype == np.int64
    # within LeRobot's 1e-4 s tolerance: 0.0333 s is 0.999 frames at 30 fps
    assert delta_frame_offsets({"a": [-0.0333]}, 30)["a"].tolist() == [-1]


def test_non_multiples_are_errors_naming_key_and_offset():
    with pytest.raises(SamplingError, match=r"'action'.*0\.05") as raised:
        delta_frame_offsets({"state": [0.1], "action": [0.0, 0.05]}, 30)
    assert isinstance(raised.value, ValueError)
    with pytest.raises(SamplingError, match=r"0\.0335"):
        delta_frame_offsets({"a": [0.0335]}, 30)
    assert delta_frame_offsets({"a": [0.0335]}, 30, tolerance_s=1e-3)["a"].tolist() == [1]
    for bad, match in [
        ({"a": []}, "empty"),
        ({"a": [float("nan")]}, "finite"),
        ({"a": ["0.1"]}, "finite"),
        ({"a": 0.1}, "list"),
        ([0.1], "map"),
    ]:
        with pytest.raises(SamplingError, match=match):
            delta_frame_offsets(bad, 30)  # type: ignore[arg-type]
    with pytest.raises(SamplingError, match="fps"):
        delta_frame_offsets({"a": [0.0]}, 0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=20),
    st.lists(st.integers(-50, 50), min_size=1, max_size=6),
    st.data(),
)
def test_query_matches_lerobot_clamping_and_padding(lengths, offsets, data):
    lengths = np.asarray(lengths)
    frames = np.asarray([data.draw(st.integers(0, int(n) - 1)) for n in lengths])
    query = delta_query(frames, lengths, {"k": offsets})["k"]
    assert query.frame_indices.shape == (lengths.size, len(offsets))
    for i, (frame, length) in enumerate(zip(frames, lengths, strict=True)):
        indices, pads = reference(int(frame), int(length), offsets)
        assert query.frame_indices[i].tolist() == indices
        assert query.is_pad[i].tolist() == pads


def test_scalar_sample_pads_both_edges():
    offsets = delta_frame_offsets({"obs": [-0.2, -0.1, 0.0], "action": [0.0, 0.1, 0.2]}, 10)
    start = delta_query(0, 3, offsets)
    assert start["obs"].frame_indices.tolist() == [0, 0, 0]
    assert start["obs"].is_pad.tolist() == [True, True, False]
    end = delta_query(2, 3, offsets)
    assert end["action"].frame_indices.tolist() == [2, 2, 2]
    assert end["action"].is_pad.tolist() == [False, True, True]


def test_query_errors():
    with pytest.raises(SamplingError, match="outside"):
        delta_query([0, 5], [3, 5], {"k": [0]})
    with pytest.raises(SamplingError, match="episode_lengths"):
        delta_query([0], [0], {"k": [0]})
    with pytest.raises(SamplingError, match="frame_indices"):
        delta_query([0.5], [3], {"k": [0]})
    with pytest.raises(SamplingError, match="broadcast"):
        delta_query([0, 1], [3, 3, 3], {"k": [0]})

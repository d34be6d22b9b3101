"""The weighted mixture's order: exact quotas, passes without replacement, determinism, prefix
proportions, the split across ranks and workers, resume and lazy-open look-ahead."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from episodestream import ConfigError, SamplingError
from episodestream.errors import ConfigTypeError
from episodestream.sampling import (
    MAX_COUNT,
    MixtureSchedule,
    MixtureState,
    MixtureWeight,
    WorkerSlot,
    mixture_quotas,
    pass_seeds,
    pass_segments,
    slot_span,
)
from episodestream.sampling._rng import generator
from tests.support.sampling import SETTINGS

W = MixtureWeight

weights_strategy = st.one_of(
    st.floats(0.01, 10.0).map(lambda p: W(proportion=p)),
    st.floats(0.05, 3.0).map(lambda r: W(repeat=r)),
    st.integers(0, 60).map(lambda c: W(choose=c)),
)


@st.composite
def mixtures(draw: Any, max_sources: int = 6, max_size: int = 40) -> tuple[list, list, Any]:
    """(sizes, weights, epoch_size): any mix of forms, with an epoch size when it is valid."""
    count = draw(st.integers(1, max_sources))
    sizes = draw(st.lists(st.integers(1, max_size), min_size=count, max_size=count))
    weights = draw(st.lists(weights_strategy, min_size=count, max_size=count))
    epoch_size = None
    if any(w.kind == "proportion" for w in weights) and draw(st.booleans()):
        fixed = sum(mixture_quotas(sizes, [w for w in weights], None)) - sum(
            s for s, w in zip(sizes, weights, strict=True) if w.kind == "proportion"
        )
        epoch_size = fixed + draw(st.integers(1, 150))
    return sizes, weights, epoch_size


def whole(schedule: MixtureSchedule) -> tuple[np.ndarray, np.ndarray]:
    """The rest of a schedule's part: (sources, stream positions)."""
    batch = schedule.take(schedule.remaining)
    assert len(schedule.take(3)) == 0
    return batch.sources, batch.stream_positions


# ---- weights -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of proportion, repeat or choose, got none"),
        ({"proportion": 0.5, "choose": 3}, "got proportion=0.5, choose=3"),
        ({"proportion": 0.0}, "MixtureWeight.proportion must be > 0"),
        ({"proportion": -1.0}, "MixtureWeight.proportion must be > 0"),
        ({"proportion": float("nan")}, "MixtureWeight.proportion must be a finite number"),
        ({"repeat": float("inf")}, "MixtureWeight.repeat must be a finite number"),
        ({"repeat": 0}, "MixtureWeight.repeat must be > 0"),
        ({"choose": -1}, "MixtureWeight.choose must be >= 0"),
        ({"choose": 2**63}, "MixtureWeight.choose must be <= "),
    ],
)
def test_bad_weights_are_config_errors_naming_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        W(**kwargs)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "kwargs", [{"proportion": True}, {"repeat": "2"}, {"choose": 2.0}, {"choose": None, "x": 1}]
)
def test_weights_of_the_wrong_type_are_config_type_errors(kwargs: dict) -> None:
    with pytest.raises((ConfigTypeError, TypeError)):
        W(**kwargs)


def test_weight_dict_form_round_trips_and_names_unknown_keys() -> None:
    for weight in (W(proportion=0.25), W(repeat=3), W(choose=7)):
        assert W.from_dict(weight.to_dict()) == weight
        assert weight.value == weight.to_dict()[weight.kind]
    assert W(choose=np.int64(4)).choose == 4 and type(W(choose=np.int64(4)).choose) is int
    with pytest.raises(ConfigTypeError, match=r"unknown key.*weight"):
        W.from_dict({"weight": 1.0})
    with pytest.raises(ConfigTypeError, match="must be a mapping"):
        W.from_dict([("proportion", 1.0)])  # type: ignore[arg-type]
    # the dict form is accepted wherever weights are
    assert mixture_quotas([4, 6], [{"proportion": 1}, {"choose": 2}]).tolist() == [4, 2]


# ---- quotas --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sizes", "weights", "epoch_size", "expected"),
    [
        # only proportions, no epoch size: the epoch is as long as all sources together
        ([10, 20, 30], [W(proportion=1), W(proportion=1), W(proportion=2)], None, [15, 15, 30]),
        ([10, 20, 30], [W(proportion=1), W(proportion=1), W(proportion=2)], 8, [2, 2, 4]),
        # largest remainder; equal remainders go to the lower source index
        ([5, 5, 5], [W(proportion=1)] * 3, 10, [4, 3, 3]),
        ([5, 5, 5], [W(proportion=1)] * 3, 11, [4, 4, 3]),
        ([5, 5, 5], [W(proportion=3), W(proportion=1), W(proportion=1)], 7, [4, 2, 1]),
        # repeat rounds half up, exactly: 0.5 * 3 = 1.5 -> 2, 0.5 * 5 = 2.5 -> 3
        ([3, 5, 4], [W(repeat=0.5), W(repeat=0.5), W(repeat=2.25)], None, [2, 3, 9]),
        ([10, 10], [W(choose=0), W(choose=13)], None, [0, 13]),
        ([10, 10], [W(choose=0), W(choose=13)], 13, [0, 13]),
        # mixed: proportions share what repeat and choose leave ...
        ([10, 20, 30], [W(repeat=2.5), W(choose=7), W(proportion=2)], 100, [25, 7, 68]),
        # ... which, without an epoch size, is their own total size
        ([10, 20, 30], [W(repeat=2.5), W(choose=7), W(proportion=2)], None, [25, 7, 30]),
        ([10, 20, 30], [W(proportion=1), W(choose=7), W(proportion=3)], None, [10, 7, 30]),
    ],
)
def test_quotas_of_each_form_and_mix(sizes, weights, epoch_size, expected) -> None:
    quotas = mixture_quotas(sizes, weights, epoch_size)
    assert quotas.dtype == np.int64 and not quotas.flags.writeable
    assert quotas.tolist() == expected


@SETTINGS
@given(mixtures(max_sources=12, max_size=500))
def test_quotas_are_exact_for_any_mix(mixture) -> None:
    sizes, weights, epoch_size = mixture
    quotas = mixture_quotas(sizes, weights, epoch_size).tolist()
    assert quotas == mixture_quotas(sizes, weights, epoch_size).tolist()
    shared = [i for i, w in enumerate(weights) if w.kind == "proportion"]
    fixed = 0
    for i, (size, weight) in enumerate(zip(sizes, weights, strict=True)):
        if weight.kind == "repeat":
            exact = Fraction(weight.repeat) * size
            assert abs(quotas[i] - exact) <= Fraction(1, 2)
            fixed += quotas[i]
        elif weight.kind == "choose":
            assert quotas[i] == weight.choose
            fixed += quotas[i]
    if not shared:
        assert sum(quotas) == fixed
        return
    rest = (epoch_size - fixed) if epoch_size is not None else sum(sizes[i] for i in shared)
    total = sum(Fraction(weights[i].proportion) for i in shared)
    assert sum(quotas[i] for i in shared) == rest
    assert sum(quotas) == (epoch_size if epoch_size is not None else fixed + rest)
    for i in shared:
        assert abs(quotas[i] - rest * Fraction(weights[i].proportion) / total) < 1


@pytest.mark.parametrize(
    ("sizes", "weights", "epoch_size", "error", "message"),
    [
        ([], [], None, ConfigError, "sizes is empty"),
        ([[1, 2]], [W(choose=1)], None, ConfigError, "one-dimensional"),
        ([3, 0], [W(choose=1)] * 2, None, ConfigError, r"sizes\[1\] must be >= 1"),
        ([3, 2.5], [W(choose=1)] * 2, None, ConfigTypeError, r"sizes\[1\] must be an int"),
        ("abc", [W(choose=1)], None, ConfigTypeError, "sizes must be a list"),
        ([3, 4], [W(choose=1)], None, ConfigError, "weights has 1 entries for 2 sources"),
        ([3], [0.5], None, ConfigTypeError, r"weights\[0\] must be a MixtureWeight"),
        ([3], W(choose=1), None, ConfigTypeError, "weights must be a list"),
        ([3], [W(proportion=1)], -1, ConfigError, "epoch_size must be >= 0"),
        ([3], [W(proportion=1)], 1.5, ConfigTypeError, "epoch_size must be an int"),
        (
            [10, 10],
            [W(choose=8), W(proportion=1)],
            8,
            ConfigError,
            "epoch_size=8 leaves no samples for the proportion weights",
        ),
        (
            [10, 10],
            [W(repeat=2), W(proportion=1)],
            5,
            ConfigError,
            "epoch_size=5 leaves no samples.*take 20",
        ),
        (
            [10, 10],
            [W(choose=8), W(repeat=1)],
            20,
            ConfigError,
            "epoch_size=20 differs from the 18",
        ),
        (
            [2**62, 2**62],
            [W(repeat=1), W(choose=1)],
            None,
            ConfigError,
            "epoch holds .* samples, above",
        ),
    ],
)
def test_impossible_mixtures_are_config_errors(sizes, weights, epoch_size, error, message):
    with pytest.raises(error, match=message):
        mixture_quotas(sizes, weights, epoch_size)
    with pytest.raises(error, match=message):
        MixtureSchedule(sizes, weights, epoch_size=epoch_size)


# ---- passes without replacement -----------------------------------------------------------


def frames_of(segments) -> list[int]:
    """Frames a source's segments use, each pass permuted by its own seed."""
    frames: list[int] = []
    for p, a, b, seed in zip(
        segments.passes.tolist(),
        segments.starts.tolist(),
        segments.stops.tolist(),
        segments.seeds.tolist(),
        strict=True,
    ):
        frames.extend(generator(seed, p).permutation(segments.size)[a:b].tolist())
    return frames


@SETTINGS
@given(st.integers(1, 30), st.integers(0, 80), st.integers(1, 7), st.integers(0, 2**64 - 1))
def test_passes_use_every_frame_equally_over_epochs(size, quota, epochs, seed) -> None:
    used = np.zeros(size, dtype=np.int64)
    stream = 0
    seeds_of: dict[int, int] = {}
    for epoch in range(epochs):
        segments = pass_segments(size, quota, epoch, seed=seed, source=3)
        assert segments.samples == quota
        # epoch e starts where e - 1 stopped in the source's stream of passes
        if len(segments):
            assert int(segments.stream_starts[0]) == stream == epoch * quota
        assert np.all((segments.starts >= 0) & (segments.starts < segments.stops))
        assert np.all(segments.stops <= size)
        assert np.array_equal(segments.stream_starts, segments.passes * size + segments.starts)
        assert np.all(np.diff(segments.passes) == 1)
        for p, s in zip(segments.passes.tolist(), segments.seeds.tolist(), strict=True):
            assert seeds_of.setdefault(p, s) == s  # a pass keeps its seed across epochs
        np.add.at(used, frames_of(segments), 1)
        stream += quota
        # without replacement until the frames are used up: counts differ by at most one
        assert used.max() - used.min() <= 1
        assert used.sum() == stream
    assert len(set(seeds_of.values())) == len(seeds_of)
    if seeds_of:
        passes = np.array(sorted(seeds_of))
        assert pass_seeds(seed, 3, passes).tolist() == [seeds_of[p] for p in passes.tolist()]


def test_pass_segments_of_a_part_and_their_limits() -> None:
    part = pass_segments(10, 25, 2, seed=1, source=0, first=3, stop=19)
    # stream positions 53..68: pass 5 offsets 3..9, pass 6 offsets 0..8
    assert part.passes.tolist() == [5, 6]
    assert part.starts.tolist() == [3, 0] and part.stops.tolist() == [10, 9]
    assert part.samples == 16
    assert len(pass_segments(10, 25, 2, first=4, stop=4)) == 0
    other = pass_segments(10, 25, 2, seed=1, source=1, first=3, stop=19)
    assert not np.array_equal(other.seeds, part.seeds)
    with pytest.raises(ConfigError, match="stop must be >= 3"):
        pass_segments(10, 25, 2, first=3, stop=2)
    with pytest.raises(ConfigError, match="first must be <= 25"):
        pass_segments(10, 25, 2, first=26)
    with pytest.raises(
        ConfigError, match=r"passes in one epoch, above 16777216 \(MAX_PASS_SEGMENTS"
    ):
        pass_segments(1, 2**25, 0)
    with pytest.raises(ConfigError, match="stream position"):
        pass_segments(5, 2**40, 2**30)
    with pytest.raises(ConfigError, match="passes must be ints >= 0"):
        pass_seeds(1, 0, [-1])


@SETTINGS
@given(mixtures(), st.integers(0, 2**32), st.integers(1, 4), st.booleans())
def test_each_epoch_takes_its_quota_in_stream_order(mixture, seed, epochs, shuffle) -> None:
    sizes, weights, epoch_size = mixture
    quotas = mixture_quotas(sizes, weights, epoch_size)
    used = [np.zeros(s, dtype=np.int64) for s in sizes]
    for epoch in range(epochs):
        schedule = MixtureSchedule(
            sizes, weights, seed, epoch_size=epoch_size, shuffle=shuffle, epoch=epoch, block_size=7
        )
        batch = schedule.take(schedule.remaining)
        assert np.array_equal(np.bincount(batch.sources, minlength=len(sizes)), quotas)
        assert np.array_equal(
            batch.passes * schedule.sizes[batch.sources] + batch.pass_offsets,
            batch.stream_positions,
        )
        for source, size in enumerate(sizes):
            mine = batch.stream_positions[batch.sources == source]
            # the k-th sample of the source this epoch is its stream position e * q + k
            assert np.array_equal(mine, epoch * quotas[source] + np.arange(quotas[source]))
            frames = batch.pass_offsets[batch.sources == source]
            np.add.at(used[source], frames, 1)
            assert used[source].max() - used[source].min() <= 1
            # the segments say the same
            assert schedule.segments(source).samples == quotas[source]
            assert size == schedule.sizes[source]


# ---- the order: determinism, shuffle=False, prefix proportions -----------------------------


def test_the_order_is_a_function_of_seed_and_epoch_only() -> None:
    sizes = [50, 80, 30, 200]
    weights = [W(proportion=1), W(repeat=2), W(choose=40), W(proportion=3)]
    first = whole(MixtureSchedule(sizes, weights, 5, epoch=1))
    again = whole(MixtureSchedule(np.array(sizes), list(weights), 5, epoch=1))
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))
    for other in (MixtureSchedule(sizes, weights, 6, epoch=1), MixtureSchedule(sizes, weights, 5)):
        assert not np.array_equal(whole(other)[0], first[0])
    # however a caller batches
    schedule = MixtureSchedule(sizes, weights, 5, epoch=1, block_size=16)
    reference = whole(MixtureSchedule(sizes, weights, 5, epoch=1, block_size=16))
    rng = np.random.default_rng(0)
    parts = []
    while schedule.remaining:
        parts.append(schedule.take(int(rng.integers(0, 40))).sources)
    assert np.array_equal(np.concatenate(parts), reference[0])


def test_without_shuffle_sources_come_in_sequence_frames_in_order() -> None:
    sizes = [4, 3, 5]
    weights = [W(repeat=1.5), W(choose=0), W(proportion=1)]
    schedule = MixtureSchedule(sizes, weights, 9, shuffle=False, epoch=2)
    batch = schedule.take(100)
    assert batch.sources.tolist() == [0] * 6 + [2] * 5
    assert batch.stream_positions.tolist() == list(range(12, 18)) + list(range(10, 15))
    assert batch.passes.tolist() == [3, 3, 3, 3, 4, 4] + [2] * 5
    assert batch.pass_offsets.tolist() == [0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4]


def prefix_deviation(sources: np.ndarray, quotas: np.ndarray) -> np.ndarray:
    """Per source, max over prefixes k of |count - k * q / N|."""
    n = int(quotas.sum())
    onehot = sources[:, None] == np.arange(quotas.size)[None, :]
    counts = np.cumsum(onehot, axis=0)
    ideal = np.arange(1, n + 1)[:, None] * quotas[None, :] / n
    return np.abs(counts - ideal).max(axis=0)


@SETTINGS
@given(
    st.lists(st.integers(1, 3000), min_size=1, max_size=8),
    st.lists(st.floats(0.01, 1.0), min_size=8, max_size=8),
    st.integers(1, 300),
    st.integers(0, 2**32),
)
def test_every_prefix_stays_within_the_stated_bound(sizes, shares, block_size, seed) -> None:
    weights = [W(proportion=p) for p in shares[: len(sizes)]]
    schedule = MixtureSchedule(sizes, weights, seed, block_size=block_size)
    sources, _ = whole(MixtureSchedule(sizes, weights, seed, block_size=block_size))
    assert np.all(prefix_deviation(sources, schedule.quotas) < schedule.prefix_bound())


def test_prefixes_follow_the_weights_closely_in_practice() -> None:
    """A realistic mix: deviations are those of a draw inside one block, not the bound's."""
    rng = np.random.default_rng(1)
    sizes = rng.integers(500, 5000, size=20)
    weights = [W(proportion=float(p)) for p in rng.random(20) + 0.1]
    schedule = MixtureSchedule(sizes, weights, 3, epoch_size=40_000, block_size=256)
    sources, _ = whole(schedule.with_epoch(0))
    deviation = prefix_deviation(sources, schedule.quotas)
    expected = np.sqrt(256 * schedule.quotas / schedule.epoch_size)
    assert np.all(deviation < 4 * expected + 2)
    # and a batch of 64 holds most sources about as often as their weights say
    batches = np.bincount(
        (np.arange(sources.size) // 64 * 20 + sources)[: sources.size // 64 * 64],
        minlength=sources.size // 64 * 20,
    ).reshape(-1, 20)
    assert np.abs(batches.mean(axis=0) - 64 * schedule.quotas / schedule.epoch_size).max() < 0.05


def test_a_shuffled_block_interleaves_not_concatenates() -> None:
    sources, _ = whole(MixtureSchedule([1000, 1000], [W(proportion=1)] * 2, 0, block_size=512))
    runs = np.count_nonzero(np.diff(sources)) + 1
    assert runs > 500  # a random order of two halves has about 1000 runs; blocks in turn, 4


# ---- slots ---------------------------------------------------------------------------------

COMBOS = [(w, k) for w in range(1, 6) for k in range(1, 5)] + [(3, 7), (8, 3), (16, 1), (7, 9)]


@pytest.mark.parametrize(("world_size", "num_workers"), COMBOS)
def test_rank_by_worker_parts_are_exact(world_size: int, num_workers: int) -> None:
    sizes = [37, 5, 61, 13]
    weights = [W(proportion=2), W(repeat=3), W(choose=29), W(proportion=1)]
    order = whole(MixtureSchedule(sizes, weights, 11, epoch=3, block_size=8))
    total = order[0].size
    parts, counts, covered = [], np.zeros(4, dtype=np.int64), 0
    for rank in range(world_size):
        rank_parts = []
        for worker in range(num_workers):
            slot = WorkerSlot(rank, world_size, worker, num_workers)
            schedule = MixtureSchedule(sizes, weights, 11, epoch=3, slot=slot, block_size=8)
            start, stop = schedule.span
            assert start == covered  # rank-major, contiguous, disjoint
            covered = stop
            mine = whole(schedule)
            assert np.array_equal(mine[0], order[0][start:stop])
            assert np.array_equal(mine[1], order[1][start:stop])
            assert np.array_equal(schedule.source_counts(), np.bincount(mine[0], minlength=4))
            counts += schedule.source_counts()
            parts.append(stop - start)
            rank_parts.append((start, stop))
            assert schedule.worker_totals().tolist() == [
                b - a
                for a, b in (
                    slot_span(total, WorkerSlot(rank, world_size, w, num_workers))
                    for w in range(num_workers)
                )
            ]
        # a rank's part does not depend on its worker count
        assert (rank_parts[0][0], rank_parts[-1][1]) == slot_span(
            total, WorkerSlot(rank, world_size)
        )
    assert covered == total and sum(parts) == total
    assert max(parts) - min(parts) <= 1
    assert np.array_equal(counts, mixture_quotas(sizes, weights))


@SETTINGS
@given(st.integers(0, 10**6), st.integers(1, 64), st.integers(1, 32))
def test_slot_spans_partition_any_epoch(total: int, world_size: int, num_workers: int) -> None:
    sizes, covered = [], 0
    for rank in range(world_size):
        for worker in range(num_workers):
            start, stop = slot_span(total, WorkerSlot(rank, world_size, worker, num_workers))
            assert start == covered and stop >= start
            covered = stop
            sizes.append(stop - start)
    assert covered == total and max(sizes) - min(sizes) <= 1


def test_a_slot_part_holds_each_source_as_its_segments_say() -> None:
    sizes = [7, 30]
    weights = [W(repeat=4), W(proportion=1)]
    for worker in range(3):
        slot = WorkerSlot(1, 2, worker, 3)
        schedule = MixtureSchedule(sizes, weights, 2, epoch=5, slot=slot, block_size=4)
        batch = schedule.take(schedule.remaining)
        for source in (0, 1):
            segments = schedule.segments(source)
            mine = batch.stream_positions[batch.sources == source]
            expected = np.concatenate(
                [
                    np.arange(s, s + b - a)
                    for s, a, b in zip(
                        segments.stream_starts, segments.starts, segments.stops, strict=True
                    )
                ]
                or [np.zeros(0, dtype=np.int64)]
            )
            assert np.array_equal(mine, expected)


# ---- resume --------------------------------------------------------------------------------


@SETTINGS
@given(mixtures(), st.integers(0, 2**64 - 1), st.booleans(), st.data())
def test_resume_from_any_position_equals_the_uninterrupted_order(
    mixture, seed, shuffle, data
) -> None:
    sizes, weights, epoch_size = mixture
    world_size = data.draw(st.integers(1, 3))
    num_workers = data.draw(st.integers(1, 3))
    slot = WorkerSlot(
        data.draw(st.integers(0, world_size - 1)),
        world_size,
        data.draw(st.integers(0, num_workers - 1)),
        num_workers,
    )
    block_size = data.draw(st.integers(1, 20))
    build = {
        "epoch_size": epoch_size,
        "shuffle": shuffle,
        "epoch": 4,
        "slot": slot,
        "block_size": block_size,
    }
    full = whole(MixtureSchedule(sizes, weights, seed, **build))
    k = data.draw(st.integers(0, full[0].size))

    interrupted = MixtureSchedule(sizes, weights, seed, **build)
    interrupted.take(k)
    saved = json.loads(json.dumps(interrupted.state_dict()))
    resumed = MixtureSchedule.from_state(saved, sizes, weights, epoch_size=epoch_size, slot=slot)
    assert resumed.position == k
    started = MixtureSchedule(sizes, weights, seed, start=k, **build)
    skipped = MixtureSchedule(sizes, weights, seed, **build)
    skipped.skip(k)
    for schedule in (resumed, started, skipped, interrupted):
        tail = whole(schedule)
        assert np.array_equal(tail[0], full[0][k:])
        assert np.array_equal(tail[1], full[1][k:])


def test_state_is_small_and_round_trips() -> None:
    sizes = [10**6, 3 * 10**6]
    weights = [W(proportion=1), W(proportion=1)]
    schedule = MixtureSchedule(sizes, weights, 7, epoch=2, slot=WorkerSlot(1, 4, 2, 3))
    schedule.take(1234)
    state = schedule.state()
    saved = schedule.state_dict()
    assert saved == json.loads(json.dumps(saved))
    assert len(json.dumps(saved)) < 400  # never the order
    assert saved["kind"] == "mixture" and saved["samples_yielded"] == 1234
    assert MixtureState.from_dict(saved) == state
    assert state.slot == WorkerSlot(1, 4, 2, 3)
    with_numpy = MixtureState(**{**_fields(state), "epoch": np.int64(2)})
    assert with_numpy == state and type(with_numpy.epoch) is int


def _fields(state: MixtureState) -> dict[str, Any]:
    saved = state.to_dict()
    del saved["kind"]
    return saved


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "worker"}, "not a mixture state: kind is 'worker'"),
        ({"version": 2}, "version 2 is newer than 1"),
        ({"seed": -1}, "seed must lie in"),
        ({"epoch": 1.5}, "epoch must be an int"),
        ({"shuffle": 1}, "shuffle must be a bool"),
        ({"block_size": 0}, "block_size must lie in"),
        ({"mixture_digest": ""}, "mixture_digest must be a non-empty str"),
        ({"rank": 4}, "rank=4 is not below world_size=4"),
        ({"worker": 3}, "worker=3 is not below num_workers=3"),
        ({"samples_yielded": True}, "samples_yielded must be an int"),
    ],
)
def test_each_malformed_state_field_is_named(change: dict, message: str) -> None:
    schedule = MixtureSchedule(
        [5, 6], [W(choose=3), W(proportion=1)], 1, slot=WorkerSlot(0, 4, 0, 3)
    )
    saved = {**schedule.state_dict(), **change}
    with pytest.raises(SamplingError, match=message):
        MixtureState.from_dict(saved)


def test_missing_fields_are_named_and_other_mixtures_refused() -> None:
    sizes, weights = [5, 6], [W(choose=3), W(proportion=1)]
    schedule = MixtureSchedule(sizes, weights, 1, slot=WorkerSlot(0, 2, 1, 2))
    schedule.take(2)
    saved = schedule.state_dict()
    with pytest.raises(SamplingError, match=r"lacks field\(s\) \['samples_yielded'\]"):
        MixtureState.from_dict({k: v for k, v in saved.items() if k != "samples_yielded"})
    with pytest.raises(SamplingError, match="must be a mapping"):
        MixtureState.from_dict([("kind", "mixture")])  # type: ignore[arg-type]
    with pytest.raises(SamplingError, match="sizes or quotas differ"):
        MixtureSchedule.from_state(saved, [5, 7], weights)
    with pytest.raises(SamplingError, match="sizes or quotas differ"):
        MixtureSchedule.from_state(saved, sizes, [W(choose=4), W(proportion=1)])
    with pytest.raises(SamplingError, match="belongs to"):
        MixtureSchedule.from_state(saved, sizes, weights, slot=WorkerSlot(0, 2, 0, 2))
    with pytest.raises(SamplingError, match="exceeds"):
        MixtureSchedule.from_state({**saved, "samples_yielded": 10**6}, sizes, weights)
    resumed = MixtureSchedule.from_state(MixtureState.from_dict(saved), sizes, weights)
    assert resumed.slot == WorkerSlot(0, 2, 1, 2) and resumed.position == 2


# ---- look-ahead: which sources the next positions need --------------------------------------


def brute_first_needs(sources: np.ndarray) -> tuple[list[int], list[int]]:
    seen: dict[int, int] = {}
    for i, s in enumerate(sources.tolist()):
        seen.setdefault(s, i)
    return list(seen), list(seen.values())


@SETTINGS
@given(mixtures(max_sources=8), st.integers(0, 1000), st.booleans(), st.data())
def test_upcoming_and_resident_match_the_order(mixture, seed, shuffle, data) -> None:
    sizes, weights, epoch_size = mixture
    slot = WorkerSlot(data.draw(st.integers(0, 1)), 2, 0, 1)
    build = {"epoch_size": epoch_size, "shuffle": shuffle, "slot": slot, "block_size": 3}
    order = whole(MixtureSchedule(sizes, weights, seed, **build))[0]
    k = data.draw(st.integers(0, order.size))
    n = data.draw(st.integers(0, order.size + 2))
    most = data.draw(st.integers(0, len(sizes) + 1))
    schedule = MixtureSchedule(sizes, weights, seed, start=k, **build)
    sources, ahead = schedule.first_needs(n)
    assert (sources.tolist(), ahead.tolist()) == brute_first_needs(order[k : k + n])
    assert schedule.upcoming(n).tolist() == brute_first_needs(order[k : k + n])[0]
    assert schedule.resident(most).tolist() == brute_first_needs(order[k:])[0][:most]
    assert schedule.position == k  # looking ahead takes nothing


def test_resident_finds_rare_sources_far_ahead_without_reading_every_block() -> None:
    sizes = [10**5] * 3
    weights = [W(proportion=1), W(proportion=1), W(choose=2)]
    schedule = MixtureSchedule(sizes, weights, 4, epoch_size=2 * 10**5 + 2, block_size=16)
    order = schedule.with_epoch(0)
    at = []
    while order.remaining:
        batch = order.take(1 << 20)
        at.extend((batch.start + np.flatnonzero(batch.sources == 2)).tolist())
    read = []
    materialise = schedule._chunk
    schedule._chunk = lambda c: read.append(c) or materialise(c)  # type: ignore[method-assign]
    sources, ahead = schedule.first_needs(max_sources=3)
    assert sources.tolist()[2] == 2 and int(ahead[2]) == at[0]
    # the rare source's block is found from the block counts alone: the chunks at the start
    # and its own are read, not the ~800 between
    assert len(set(read)) <= 3 < -(-schedule.epoch_size // (16 * 16))


# ---- arguments and extremes ----------------------------------------------------------------


def test_bad_schedule_arguments_are_named() -> None:
    sizes, weights = [5, 6], [W(choose=3), W(proportion=1)]
    for kwargs, error, message in [
        ({"seed": -1}, ConfigError, "seed must be >= 0"),
        ({"seed": 2**64}, ConfigError, "seed must be <="),
        ({"epoch": -2}, ConfigError, "epoch must be >= 0"),
        ({"block_size": 0}, ConfigError, "block_size must be >= 1"),
        ({"shuffle": "yes"}, ConfigTypeError, "shuffle must be a bool"),
        ({"slot": (0, 1)}, SamplingError, "slot must be a WorkerSlot"),
        ({"start": 100}, SamplingError, "cannot skip 100 samples"),
        ({"epoch": 2**61}, ConfigError, "stream positions up to"),
    ]:
        with pytest.raises(error, match=message):
            MixtureSchedule(sizes, weights, **kwargs)
    schedule = MixtureSchedule(sizes, weights)
    with pytest.raises(SamplingError, match="count must be >= 0"):
        schedule.take(-1)
    with pytest.raises(SamplingError, match="source 2 is not below 2"):
        schedule.segments(2)


def test_an_empty_epoch_is_empty_everywhere() -> None:
    schedule = MixtureSchedule([5, 6], [W(choose=0), W(choose=0)], slot=WorkerSlot(1, 2))
    assert schedule.total_samples == 0 and len(schedule.take(10)) == 0
    assert schedule.upcoming(10).size == 0 and schedule.resident(5).size == 0
    assert schedule.source_counts().tolist() == [0, 0]
    assert np.all(schedule.prefix_bound() == 0)


def test_huge_epochs_stay_exact_beyond_int64_products() -> None:
    """B * q above 2**62: block counts computed with Python ints."""
    sizes = [2**40, 3, 2**20]
    weights = [W(choose=2**58), W(choose=5), W(proportion=1)]
    quotas = mixture_quotas(sizes, weights, 2**59)
    counts = np.zeros(3, dtype=np.int64)
    for rank in range(3):
        schedule = MixtureSchedule(
            sizes, weights, 1, epoch_size=2**59, block_size=1, slot=WorkerSlot(rank, 3)
        )
        assert schedule._exact
        counts += schedule.source_counts()
        schedule.skip(schedule.total_samples - 5000)
        batch = schedule.take(10**4)
        assert len(batch) == 5000
        for source in range(3):
            mine = batch.stream_positions[batch.sources == source]
            assert np.all(np.diff(mine) == 1)
    assert np.array_equal(counts, quotas)
    assert int(quotas.sum()) == 2**59 <= MAX_COUNT.value

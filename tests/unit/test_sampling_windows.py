"""The window pool's pure order: windows partition episodes, every frame exactly once across
ranks and workers, windows enter in time order from a bounded set of open episodes, draws come
only from resident windows, resume yields the tail, and the budget arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from episodestream.errors import BudgetError, SamplingError
from episodestream.sampling import (
    PoolParams,
    PoolSchedule,
    WindowParams,
    WindowSchedule,
    WorkerSlot,
    decoded_span,
    window_bounds,
    window_slots,
)
from tests.support.sampling import (
    SETTINGS,
    assert_exact_cover,
    draws_of_every_slot,
    episode_sets_of,
)

episode_sets = episode_sets_of(max_frames=50, max_episodes=20, stride=5, first=2)
window_params = st.builds(
    WindowParams,
    window_frames=st.integers(1, 20),
    open_episodes=st.integers(1, 5),
    resident_windows=st.integers(1, 6),
    seed=st.integers(0, 2**32),
    shuffle=st.booleans(),
)


@SETTINGS
@given(st.lists(st.integers(1, 200), min_size=1, max_size=10), st.integers(1, 70))
def test_windows_partition_every_episode(counts, window_frames):
    episode, start, stop = window_bounds(counts, window_frames)
    sizes = stop - start
    assert sizes.min() >= 1 and sizes.max() <= window_frames
    for position, length in enumerate(counts):
        mine = episode == position
        assert mine.sum() == -(-length // window_frames)  # as few windows as fit
        # consecutive and covering [0, length)
        assert start[mine][0] == 0 and stop[mine][-1] == length
        assert np.array_equal(start[mine][1:], stop[mine][:-1])
        assert sizes[mine].max() - sizes[mine].min() <= 1


@SETTINGS
@given(
    episode_sets,
    window_params,
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(0, 4),
)
def test_every_frame_exactly_once_across_all_slots(
    episodes, params, world_size, num_workers, epoch
):
    ids, counts = episodes

    def schedule_for(e: np.ndarray, n: np.ndarray, slot: WorkerSlot) -> WindowSchedule:
        schedule = WindowSchedule(e, n, params=params, slot=slot, epoch=epoch)
        # n is plan.frame_counts_for(slot): the slot's draws (checked against the schedule's
        # total) are its frame counts summed, as well as the plan's frames_per_slot entry
        assert schedule.total_samples == n.sum()
        return schedule

    drawn = draws_of_every_slot(
        ids,
        counts,
        world_size=world_size,
        num_workers=num_workers,
        seed=params.seed,
        epoch=epoch,
        schedule_for=schedule_for,
        draws=lambda schedule: list(schedule.iter_draws()),
    )
    assert_exact_cover(ids, counts, drawn)


@SETTINGS
@given(episode_sets, window_params, st.integers(0, 3))
def test_draws_come_from_resident_windows_entered_in_time_order(episodes, params, epoch):
    ids, counts = episodes
    schedule = WindowSchedule(ids, counts, params=params, epoch=epoch)
    starts, stops = schedule.window_starts, schedule.window_stops
    owner = schedule.window_episodes
    resident: set[int] = set()
    entered: list[int] = []
    left_in_window = (stops - starts).tolist()
    for event in schedule.events():
        if event.kind == "enter":
            assert event.window not in resident and event.window not in entered
            resident.add(event.window)
            entered.append(event.window)
            assert len(resident) <= params.resident_windows
        elif event.kind == "draw":
            assert event.window in resident, "drawn from a window that is not resident"
            assert starts[event.window] <= event.frame_index < stops[event.window]
            assert event.episode_id == owner[event.window]
            left_in_window[event.window] -= 1
        else:
            assert left_in_window[event.window] == 0
            resident.remove(event.window)
    assert not resident and sorted(entered) == list(range(schedule.num_windows))
    assert entered == schedule.entry_order.tolist()
    # an episode's windows enter in time order, and at most open_episodes are open at once
    order = schedule.entry_order
    for episode in ids.tolist():
        mine = order[owner[order] == episode]
        assert np.array_equal(mine, np.sort(mine))
    first = {}
    last = {}
    for step, window in enumerate(order.tolist()):
        first.setdefault(int(owner[window]), step)
        last[int(owner[window])] = step
    for step in range(order.size):
        open_now = sum(1 for e in first if first[e] <= step <= last[e])
        assert open_now <= params.open_episodes
    assert schedule.episode_order().tolist() == sorted(first, key=first.__getitem__)


@SETTINGS
@given(episode_sets, window_params, st.integers(0, 3), st.data())
def test_resume_at_any_position_yields_the_tail(episodes, params, epoch, data):
    ids, counts = episodes
    full = list(WindowSchedule(ids, counts, params=params, epoch=epoch).iter_draws())
    start = data.draw(st.integers(0, len(full)))
    resumed = WindowSchedule(ids, counts, params=params, epoch=epoch, start=start)
    assert resumed.position == start
    assert list(resumed.iter_draws()) == full[start:]
    # the order does not depend on the order the episode set was given in
    reversed_ids = WindowSchedule(ids[::-1], counts[::-1], params=params, epoch=epoch)
    assert list(reversed_ids.iter_draws()) == full


def test_windows_to_decode_after_a_resume_counts_resident_and_upcoming_windows():
    ids, counts = np.arange(6), np.array([40, 17, 33, 8, 60, 25])
    params = WindowParams(window_frames=10, open_episodes=2, resident_windows=3, seed=9)
    full = WindowSchedule(ids, counts, params=params)
    total_windows = full.num_windows
    assert sum(full.windows_to_decode().values()) == total_windows  # nothing decoded yet
    resumed = WindowSchedule(ids, counts, params=params, start=100)
    needed = resumed.windows_to_decode()
    done = resumed.entered - resumed.resident().size
    assert sum(needed.values()) == total_windows - done
    assert 0 < done < total_windows
    assert set(resumed.upcoming(2).tolist()) <= set(resumed.entry_order[resumed.entered :].tolist())


def test_sequential_order_without_shuffle():
    ids, counts = np.array([4, 2, 9]), np.array([5, 12, 3])
    params = WindowParams(window_frames=4, open_episodes=3, resident_windows=2, shuffle=False)
    draws = list(WindowSchedule(ids, counts, params=params).iter_draws())
    expected = [
        (e, f) for e, n in sorted(zip(ids.tolist(), counts.tolist(), strict=True)) for f in range(n)
    ]
    assert draws == expected


def test_epochs_and_seeds_change_the_order_and_batches_mix_episodes():
    ids, counts = np.arange(40), np.full(40, 120)
    params = WindowParams(window_frames=30, open_episodes=16, resident_windows=24, seed=3)
    orders = [
        list(WindowSchedule(ids, counts, params=params, epoch=e).iter_draws()) for e in (0, 1)
    ]
    assert orders[0] != orders[1] and sorted(orders[0]) == sorted(orders[1])
    again = list(WindowSchedule(ids, counts, params=params, epoch=0).iter_draws())
    assert again == orders[0]
    # uniform draws over 24 resident windows: a batch of 32 touches many episodes
    unique = [len({e for e, _ in orders[0][i : i + 32]}) for i in range(0, 4800, 32)]
    assert np.mean(unique) > 10, np.mean(unique)
    sequential = WindowParams(
        window_frames=30, open_episodes=16, resident_windows=24, shuffle=False
    )
    plain = list(WindowSchedule(ids, counts, params=sequential).iter_draws())
    assert np.mean([len({e for e, _ in plain[i : i + 32]}) for i in range(0, 4800, 32)]) < 2


@pytest.mark.parametrize(
    ("start", "stop", "length", "offsets", "expected"),
    [
        (10, 20, 50, None, (10, 20)),
        (10, 20, 50, [-3, 0], (7, 20)),
        (0, 8, 50, [-3, 0], (0, 8)),  # clamped at the start
        (40, 50, 50, [0, 5], (40, 50)),  # clamped at the end
        (10, 20, 50, [2, 4], (12, 24)),  # future frames only
        (48, 50, 50, [5], (49, 50)),  # every query clamps to the last frame
    ],
)
def test_decoded_span_covers_what_samples_read(start, stop, length, offsets, expected):
    assert decoded_span(start, stop, length, offsets) == expected
    steps = np.zeros(1, dtype=int) if offsets is None else np.asarray(offsets)
    read = np.clip(np.arange(start, stop)[:, None] + steps, 0, length - 1)
    lo, hi = expected
    assert read.min() == lo and read.max() == hi - 1


@SETTINGS
@given(episode_sets, window_params, st.integers(0, 40))
def test_spread_draws_skip_recent_episodes_only_when_no_other_is_resident(episodes, params, spread):
    ids, counts = episodes
    params = WindowParams(
        window_frames=params.window_frames,
        open_episodes=params.open_episodes,
        resident_windows=params.resident_windows,
        seed=params.seed,
        spread=spread,
    )
    schedule = WindowSchedule(ids, counts, params=params)
    last: dict[int, int] = {}
    left = (schedule.window_stops - schedule.window_starts).copy()
    resident: set[int] = set()
    draws = []
    for event in schedule.events():
        if event.kind == "enter":
            resident.add(event.window)
        elif event.kind == "leave":
            resident.remove(event.window)
        else:
            q = event.position
            if spread and q - last.get(event.episode_id, -(10**9)) <= spread:
                # a recent episode: every resident window with frames left is recent too
                others = {int(schedule.window_episodes[w]) for w in resident if left[w] > 0}
                assert all(q - last.get(e, -(10**9)) <= spread for e in others)
            last[event.episode_id] = q
            left[event.window] -= 1
            draws.append((event.episode_id, event.frame_index))
    pairs = zip(ids.tolist(), counts.tolist(), strict=True)
    assert sorted(draws) == [(e, f) for e, n in pairs for f in range(n)]  # each frame once


def test_spread_fills_batches_with_distinct_episodes():
    ids, counts = np.arange(100), np.full(100, 60)

    def unique_per_batch(spread: int) -> float:
        params = WindowParams(
            window_frames=4, open_episodes=64, resident_windows=80, seed=5, spread=spread
        )
        draws = list(WindowSchedule(ids, counts, params=params).iter_draws())
        return float(np.mean([len({e for e, _ in draws[i : i + 32]}) for i in range(0, 5760, 32)]))

    spread, uniform = unique_per_batch(31), unique_per_batch(0)
    assert spread >= 30 and spread > uniform + 6, (spread, uniform)


def test_window_slots_keep_one_decoding_ahead_and_refuse_a_budget_below_two_windows():
    assert window_slots(10 * 100, 100, decode_ahead=2) == (8, 2)
    assert window_slots(3 * 100 + 99, 100, decode_ahead=4) == (2, 1)  # at most a quarter
    assert window_slots(200, 100, decode_ahead=1) == (1, 1)
    with pytest.raises(BudgetError, match="decoded_budget"):
        window_slots(199, 100, decode_ahead=1)


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(SamplingError, match="window_frames"):
        WindowParams(window_frames=0)
    with pytest.raises(SamplingError, match="resident_windows"):
        WindowParams(resident_windows=1.5)  # type: ignore[arg-type]
    with pytest.raises(SamplingError, match="spread"):
        WindowParams(spread=-1)
    with pytest.raises(SamplingError, match="entry_order"):
        PoolSchedule([1, 2, 3], [1, 1, 1], entry_order=[1, 2, 2])
    with pytest.raises(SamplingError, match="entry_order"):
        PoolSchedule([1, 2, 3], [1, 1, 1], entry_order=[1, 2])
    given_order = PoolSchedule(
        [1, 2, 3], [2, 2, 2], params=PoolParams(pool_size=1), entry_order=[3, 1, 2]
    )
    assert given_order.entry_order.tolist() == [3, 1, 2]
    assert [e for e, _ in given_order.iter_draws()] == [3, 3, 1, 1, 2, 2]

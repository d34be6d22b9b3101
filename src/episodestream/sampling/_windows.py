"""The window pool's order for one slot: which windows, in what order, which frame next.

A window is up to ``window_frames`` (W) consecutive frames of one episode. An episode of L
frames is cut into ``ceil(L / W)`` windows of near-equal size (sizes differ by at most one,
none above W), so an epoch's windows partition every frame of the slot's episodes.

Two exact-coverage pools (:class:`PoolSchedule`) are stacked:

1. **Window entry order.** A pool of ``open_episodes`` episodes, each holding its windows in
   time order: each step picks an open episode with probability proportional to its windows
   left and takes its next window; an episode whose windows are all taken closes and the next
   one (seeded permutation) opens. An episode's windows therefore enter during a bounded
   stretch of the order — its compressed bytes are needed only then — and in time order, so a
   decoder continues where the previous window stopped.
2. **Frame draws.** A pool of ``resident_windows`` decoded windows, entered in that order: each
   draw is uniform over the frames left in the resident windows, an exhausted window leaves and
   the next one enters. With ``spread`` > 0, a draw skips the windows of episodes drawn in the
   last ``spread`` draws while another resident window is left (then uniform over the frames
   of the others): several windows of one episode are often resident together, and uniform
   draws put their frames in the same batch; spreading gives a batch of ``spread + 1`` as many
   distinct episodes as are resident. Each window still yields its frames in a seeded
   permutation and leaves when empty.

Every frame is drawn exactly once per epoch. The order is a pure function of (seed, epoch,
episode set, slot, params), so a resume only skips draws. With ``shuffle=False`` episodes and
windows come in order and frames in order: the sequential order.

Trade-off (measured by the datasets layer's metrics): more resident windows and open episodes
mix more episodes into a batch but cost decoded memory; a window boundary does not move
between epochs, only which windows are resident together and the order within them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from episodestream.errors import BudgetError, SamplingError
from episodestream.sampling._cursor import DrawCursor
from episodestream.sampling._pool import (
    DEFAULT_POOL_SIZE,
    PoolEvent,
    PoolParams,
    PoolSchedule,
    draw_events,
)
from episodestream.sampling._rng import generator, stream_key
from episodestream.sampling._slot import WorkerSlot
from episodestream.sampling._validate import canonical_episodes, or_default, require_int

__all__ = [
    "DEFAULT_WINDOW_FRAMES",
    "WindowEvent",
    "WindowParams",
    "WindowSchedule",
    "decoded_span",
    "window_bounds",
    "window_slots",
]

DEFAULT_WINDOW_FRAMES = 64
"""Frames per window unless told otherwise (about two seconds at 30 fps)."""
DEFAULT_SPREAD = 31
"""Draws after which an episode may be drawn again while others are resident: a batch of 32."""

_EMPTY_I64 = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class WindowParams:
    """Parameters of the window order.

    Attributes:
        window_frames: most frames in one window (>= 1).
        open_episodes: episodes whose windows interleave in the entry order (>= 1); their
            compressed bytes are what a byte cache must hold.
        resident_windows: decoded windows drawn from at once (>= 1).
        seed: base seed (>= 0).
        shuffle: random order; ``False`` gives the sequential order.
        spread: draws after which an episode may be drawn again while windows of other
            episodes are resident (>= 0; 0: draws uniform over the resident frames). Ignored
            without ``shuffle``. A resume replays the spread draws up to its position (about
            25 µs each here).
    """

    window_frames: int = DEFAULT_WINDOW_FRAMES
    open_episodes: int = DEFAULT_POOL_SIZE
    resident_windows: int = 8
    seed: int = 0
    shuffle: bool = True
    spread: int = DEFAULT_SPREAD

    def __post_init__(self) -> None:
        for name in ("window_frames", "open_episodes", "resident_windows"):
            object.__setattr__(self, name, require_int(name, getattr(self, name), minimum=1))
        object.__setattr__(self, "spread", require_int("spread", self.spread, minimum=0))
        object.__setattr__(self, "seed", require_int("seed", self.seed, minimum=0))
        if not isinstance(self.shuffle, bool | np.bool_):
            raise SamplingError(f"shuffle must be a bool, got {self.shuffle!r}")
        object.__setattr__(self, "shuffle", bool(self.shuffle))


@dataclass(frozen=True, slots=True)
class WindowEvent:
    """One step of the window pool.

    ``kind`` is ``"enter"`` (the window joins the resident pool: its frames are needed now),
    ``"draw"`` (``frame_index``, within the episode, is drawn) or ``"leave"`` (its last frame
    was drawn). ``position`` counts draws before the event; ``frame_index`` is -1 unless
    ``kind == "draw"``.
    """

    kind: Literal["enter", "draw", "leave"]
    window: int
    episode_id: int
    frame_index: int
    position: int


def window_bounds(
    frame_counts: ArrayLike, window_frames: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut episodes into windows of at most ``window_frames`` frames, near-equal in size.

    Args:
        frame_counts: frames of each episode (>= 1).
        window_frames: most frames in one window (>= 1).

    Returns:
        ``(episode, start, stop)`` int64 arrays, one entry per window: the episode's position
        in ``frame_counts`` and the window's frames ``[start, stop)`` within it. Windows are
        listed episode by episode, in time order.

    Raises:
        SamplingError: a count below 1 or a bad ``window_frames``.
    """
    size = require_int("window_frames", window_frames, minimum=1)
    counts = np.asarray(frame_counts)
    if counts.ndim != 1 or (counts.size and not np.issubdtype(counts.dtype, np.integer)):
        raise SamplingError("frame_counts must be a 1-D array of integers")
    counts = counts.astype(np.int64)
    if counts.size and int(counts.min()) < 1:
        raise SamplingError(f"frame_counts must be >= 1, got {int(counts.min())}")
    per_episode = -(-counts // size)
    episode = np.repeat(np.arange(counts.size, dtype=np.int64), per_episode)
    first = np.cumsum(per_episode) - per_episode
    rank = np.arange(episode.size, dtype=np.int64) - np.repeat(first, per_episode)
    length, parts = counts[episode], per_episode[episode]
    return episode, rank * length // parts, (rank + 1) * length // parts


def decoded_span(
    start: int, stop: int, length: int, offsets: Sequence[int] | np.ndarray | None
) -> tuple[int, int]:
    """Frames ``[lo, hi)`` of an episode of ``length`` frames that the samples of window
    ``[start, stop)`` read, with ``delta_timestamps`` frame ``offsets`` (clamped to the
    episode as LeRobot clamps them; ``None``: the frame itself only)."""
    steps = np.zeros(1, dtype=np.int64) if offsets is None else np.asarray(offsets, np.int64)
    if steps.size == 0:
        steps = np.zeros(1, dtype=np.int64)
    lo = min(max(start + int(steps.min()), 0), length - 1)
    hi = min(max(stop - 1 + int(steps.max()), 0), length - 1) + 1
    return lo, hi


def window_slots(
    decoded_budget_bytes: int, window_bytes: int, *, decode_ahead: int
) -> tuple[int, int]:
    """How many windows a decoded budget holds: ``(resident_windows, decode_ahead)``.

    ``decoded_budget_bytes // window_bytes`` windows fit; ``decode_ahead`` of them (at least
    one, at most a quarter of the slots) are decoded ahead of entering, the rest are resident.

    Raises:
        BudgetError: the budget holds fewer than two windows (one resident, one decoding).
    """
    budget = require_int("decoded_budget_bytes", decoded_budget_bytes, minimum=1)
    size = require_int("window_bytes", window_bytes, minimum=1)
    ahead = require_int("decode_ahead", decode_ahead, minimum=1)
    slots = budget // size
    if slots < 2:
        raise BudgetError(
            f"decoded_budget share of {budget} bytes holds {slots} window(s) of {size} bytes; "
            "the window pool needs two (one resident, one decoding ahead): raise "
            "decoded_budget or lower window_frames"
        )
    ahead = max(1, min(ahead, slots // 4))
    return slots - ahead, ahead


class WindowSchedule(DrawCursor):
    """The window order of one slot's episodes for one epoch; see the module docstring.

    Windows are numbered by episode id (ascending), then time. Not thread-safe.

    Args:
        episode_ids: the slot's episodes (any order; the set matters); may be empty.
        frame_counts: frames per episode (>= 1), aligned with ``episode_ids``.
        params: window parameters.
        slot: the slot this order belongs to (seeds the streams).
        epoch: epoch number (>= 0).
        start: draws to skip at once (a resume).

    Raises:
        SamplingError: invalid arguments, naming the parameter.
    """

    def __init__(
        self,
        episode_ids: ArrayLike,
        frame_counts: ArrayLike,
        *,
        params: WindowParams | None = None,
        slot: WorkerSlot | None = None,
        epoch: int = 0,
        start: int = 0,
    ) -> None:
        self._params = or_default("params", params, WindowParams)
        slot = or_default("slot", slot, WorkerSlot)
        self._ids, self._counts = canonical_episodes(episode_ids, frame_counts, allow_empty=True)
        position, starts, stops = window_bounds(self._counts, self._params.window_frames)
        self._episode = self._ids[position] if position.size else _EMPTY_I64
        self._start, self._stop = starts, stops
        for array in (self._episode, self._start, self._stop):
            array.setflags(write=False)
        count = int(position.size)
        per_episode = np.bincount(position, minlength=self._ids.size).astype(np.int64)
        seed, shuffle = self._params.seed, self._params.shuffle
        entry = np.arange(count, dtype=np.int64)
        if count:
            # 1. which episode gives the next window: an exact-coverage pool over window counts
            by_episode = PoolSchedule(
                self._ids,
                per_episode,
                params=PoolParams(
                    pool_size=self._params.open_episodes,
                    seed=stream_key(seed, 0, "window_order"),
                    shuffle=shuffle,
                ),
                slot=slot,
                epoch=epoch,
            )
            owners = np.searchsorted(self._ids, by_episode.take(count).episode_ids)
            # the k-th step of an episode takes its k-th window: a stable sort by episode
            # lists the steps in window-number order
            entry[np.argsort(owners, kind="stable")] = np.arange(count, dtype=np.int64)
        entry.setflags(write=False)
        self._entry = entry
        # 2. which frame next: an exact-coverage pool over the windows, in that entry order
        self._pool: DrawCursor
        if shuffle and self._params.spread:
            context = (slot.rank, slot.world_size, slot.worker, slot.num_workers)
            self._pool = _SpreadDraws(
                self._episode,
                stops - starts,
                entry,
                resident_windows=self._params.resident_windows,
                spread=self._params.spread,
                key=stream_key(seed, epoch, "window_spread", *context),
            )
        else:
            self._pool = PoolSchedule(
                np.arange(count, dtype=np.int64),
                stops - starts,
                params=PoolParams(
                    pool_size=self._params.resident_windows,
                    seed=stream_key(seed, 0, "window_pool"),
                    shuffle=shuffle,
                ),
                slot=slot,
                epoch=epoch,
                entry_order=entry,
            )
        self._pool.skip(require_int("start", start, minimum=0))

    # ---- cursor ------------------------------------------------------------------------------

    def events(self, batch_draws: int = 4096) -> Iterator[WindowEvent]:
        """Yield the remaining events in order, starting with an ``enter`` for every window
        resident now (the initial pool; the restored pool after a resume); after a draw that
        empties a window, its ``leave`` and then the ``enter`` of its replacement."""
        episode, start = self._episode.tolist(), self._start.tolist()
        for event in self._pool.events(batch_draws):
            window = event.episode_id
            frame = start[window] + event.frame_index if event.kind == "draw" else -1
            yield WindowEvent(event.kind, window, episode[window], frame, event.position)

    def skip(self, count: int) -> None:
        self._pool.skip(count)

    # ---- introspection -----------------------------------------------------------------------

    @property
    def params(self) -> WindowParams:
        return self._params

    @property
    def position(self) -> int:
        return self._pool.position

    @property
    def total_samples(self) -> int:
        return self._pool.total_samples

    @property
    def num_windows(self) -> int:
        return int(self._episode.size)

    @property
    def window_episodes(self) -> np.ndarray:
        """Episode id of each window (read-only)."""
        return self._episode

    @property
    def window_starts(self) -> np.ndarray:
        """First frame (within its episode) of each window (read-only)."""
        return self._start

    @property
    def window_stops(self) -> np.ndarray:
        """One past the last frame of each window (read-only)."""
        return self._stop

    @property
    def entered(self) -> int:
        """Windows that have entered so far (prefix length of :attr:`entry_order`)."""
        return self._pool.entered

    def resident(self) -> np.ndarray:
        """Window ids resident now, in entry order."""
        return self._pool.resident()

    def episode_order(self) -> np.ndarray:
        """Episode ids in the order their first window enters: fetch their bytes in this order."""
        episodes = self._episode[self._entry]
        _, first = np.unique(episodes, return_index=True)
        return episodes[np.sort(first)]

    def windows_to_decode(self) -> Mapping[int, int]:
        """Per episode, its windows that are resident now or still to enter: the decodes this
        iteration still needs the episode's compressed bytes for."""
        entered = self.entered
        needed = np.concatenate([self.resident(), self._entry[entered:]])
        episodes, counts = np.unique(self._episode[needed], return_counts=True)
        return dict(zip(episodes.tolist(), counts.tolist(), strict=True))


class _SpreadDraws(DrawCursor):
    """Frame draws over resident windows that avoid recently drawn episodes (module
    docstring, ``spread``): the cursor :class:`WindowSchedule` uses in place of a
    :class:`PoolSchedule` over windows. Draws are produced one at a time (about 30 us each
    with hundreds of resident windows, against milliseconds to decode a frame; a skip replays
    them); events name windows as ``episode_id``, as the pool over windows does.
    """

    def __init__(
        self,
        window_episodes: np.ndarray,
        sizes: np.ndarray,
        entry: np.ndarray,
        *,
        resident_windows: int,
        spread: int,
        key: int,
    ) -> None:
        self._entry = entry
        self._left = np.asarray(sizes, dtype=np.int64).copy()
        self._sizes = np.asarray(sizes, dtype=np.int64)
        self._total = int(self._sizes.sum())
        self._key = key
        self._rng = generator(key)
        self._spread = spread
        self._entered = min(resident_windows, int(entry.size))
        # resident window ids in entry order; a slot freed by a leave takes the next entrant
        self._resident: list[int] = entry[: self._entered].tolist()
        # per window, its episode's dense index; per episode, the position of its last draw
        _, self._episode_index = np.unique(window_episodes, return_inverse=True)
        self._last_drawn = np.full(int(self._episode_index.max(initial=-1)) + 1, -(2**62))
        self._frames: dict[int, np.ndarray] = {}  # window -> its frames' order, drawn lazily
        self._position = 0

    def _frame_order(self, window: int) -> np.ndarray:
        order = self._frames.get(window)
        if order is None:
            order = generator(self._key, window + 1).permutation(int(self._sizes[window]))
            self._frames[window] = order
        return order

    def _draw(self) -> tuple[int, int, bool, int]:
        """One draw: (window, frame within the window, whether it left, entrant or -1)."""
        resident = np.asarray(self._resident, dtype=np.int64)
        weights = self._left[resident].astype(np.float64)
        episodes = self._episode_index[resident]
        fresh = self._last_drawn[episodes] < self._position - self._spread
        if fresh.any():
            weights = np.where(fresh, weights, 0.0)
        cumulative = np.cumsum(weights)
        at = int(np.searchsorted(cumulative, self._rng.random() * cumulative[-1], side="right"))
        at = min(at, resident.size - 1)
        while weights[at] == 0:  # float edge: land on a window that has frames
            at -= 1
        window = int(resident[at])
        left = int(self._left[window])
        order = self._frame_order(window)
        frame = int(order[int(self._sizes[window]) - left])
        self._left[window] = left - 1
        self._last_drawn[self._episode_index[window]] = self._position
        self._position += 1
        entrant = -1
        if left == 1:
            self._frames.pop(window, None)
            if self._entered < self._entry.size:
                entrant = int(self._entry[self._entered])
                self._entered += 1
                self._resident[at] = entrant
                # keep entry order: the entrant is the newest
                self._resident.append(self._resident.pop(at))
            else:
                del self._resident[at]
        return window, frame, left == 1, entrant

    def events(self, batch_draws: int = 4096) -> Iterator[PoolEvent]:
        for window in self._resident:
            yield PoolEvent("enter", window, -1, self._position)
        while self._position < self._total:
            position = self._position
            window, frame, leaves, entrant = self._draw()
            yield from draw_events(window, frame, position, leaves, entrant)

    def skip(self, count: int) -> None:
        for _ in range(self._skip_count(count)):
            self._draw()

    @property
    def entered(self) -> int:
        return self._entered

    def resident(self) -> np.ndarray:
        return np.asarray(self._resident, dtype=np.int64)

"""The exact-coverage episode pool order for one slot, as a pure, resumable schedule.

Rule: episodes enter a pool of ``pool_size`` in a seeded permutation; each resident
episode yields its frames in a seeded permutation; each draw picks a resident episode with
probability proportional to its remaining frames and takes its next frame; an exhausted episode
leaves and the next one enters. Every frame is drawn exactly once per epoch.

How it is computed without a per-draw loop: give every frame an exponential clock started when
its episode enters; draws happen in clock order. By memorylessness the remaining clocks of the
resident frames are always i.i.d., so the next to ring is uniform over the frames left in the
pool — exactly the rule above. An episode's clocks are ``t_enter + sorted offsets``; its last
offset (the maximum of L exponentials) is sampled first from its closed form, so the entry
times of all episodes follow from a heap over episodes alone (O(E log P)). Frames are then
produced chunk by chunk (about ``pool_size`` exits per chunk) by sorting the clocks that fall
in the chunk — vectorized, and independent of how callers batch their requests. Skipping a
whole chunk only counts clocks, so resuming deep into an epoch costs a fraction of drawing.

With ``shuffle=False`` episodes enter by ascending id, frames come in order and every draw takes
the oldest resident episode: the sequential order, with the pool still announcing entries so a
caller can prefetch.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from episodestream.errors import SamplingError
from episodestream.sampling._cursor import DrawCursor
from episodestream.sampling._rng import generator, stream_key
from episodestream.sampling._slot import WorkerSlot
from episodestream.sampling._state import ResumeState, episodes_digest
from episodestream.sampling._validate import canonical_episodes, or_default, require_int

__all__ = [
    "DEFAULT_POOL_SIZE",
    "DrawBatch",
    "PoolEvent",
    "PoolParams",
    "PoolSchedule",
]

DEFAULT_POOL_SIZE = 16
"""Episodes resident in a pool unless told otherwise."""

_EMPTY_I64 = np.zeros(0, dtype=np.int64)

# draws produced per chunk, roughly: bounds the transient arrays of one sort
_CHUNK_DRAWS = 1 << 16


@dataclass(frozen=True, slots=True)
class PoolParams:
    """Parameters of the pool order.

    Attributes:
        pool_size: episodes resident at once (>= 1).
        seed: base seed (>= 0) of every random choice.
        shuffle: random entry order, frame order and draws; ``False`` gives sequential order.
    """

    pool_size: int = DEFAULT_POOL_SIZE
    seed: int = 0
    shuffle: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "pool_size", require_int("pool_size", self.pool_size, minimum=1))
        object.__setattr__(self, "seed", require_int("seed", self.seed, minimum=0))
        if not isinstance(self.shuffle, bool | np.bool_):
            raise SamplingError(f"shuffle must be a bool, got {self.shuffle!r}")
        object.__setattr__(self, "shuffle", bool(self.shuffle))


@dataclass(frozen=True, slots=True, eq=False)
class DrawBatch:
    """Consecutive draws ``[start, start + len)`` of a schedule.

    Attributes:
        start: position (draws before this batch in the epoch).
        episode_ids: episode of each draw (int64).
        frame_indices: frame within its episode, in ``[0, frame_count)`` (int64).
        leaves: True where the draw takes the episode's last frame; it leaves the pool after it.
        enters: episode id entering the pool right after that draw, or -1 (int64).
    """

    start: int
    episode_ids: np.ndarray
    frame_indices: np.ndarray
    leaves: np.ndarray
    enters: np.ndarray

    def __len__(self) -> int:
        return int(self.episode_ids.size)


@dataclass(frozen=True, slots=True)
class PoolEvent:
    """One step of the pool: an episode enters, a frame is drawn, or an episode leaves.

    ``position`` counts draws before the event; ``frame_index`` is -1 unless ``kind == "draw"``.
    """

    kind: Literal["enter", "draw", "leave"]
    episode_id: int
    frame_index: int
    position: int


@dataclass(slots=True)
class _Open:
    """An episode whose frames are still being produced (generator-side bookkeeping)."""

    entry: int
    cursor: int
    keys: np.ndarray | None = None
    frames: np.ndarray | None = None


@dataclass(slots=True, eq=False)
class _Chunk:
    entries: np.ndarray
    frames: np.ndarray
    leaves: np.ndarray
    offset: int = 0

    @property
    def left(self) -> int:
        return int(self.entries.size) - self.offset


def draw_events(
    item: int, frame: int, position: int, leaves: bool, entrant: int
) -> Iterator[PoolEvent]:
    """The events of one draw: the ``draw``, then, when it took the item's last frame, its
    ``leave`` and the ``enter`` of the next item (``entrant``; -1 when none is left)."""
    yield PoolEvent("draw", item, frame, position)
    if leaves:
        yield PoolEvent("leave", item, -1, position + 1)
        if entrant >= 0:
            yield PoolEvent("enter", entrant, -1, position + 1)


class PoolSchedule(DrawCursor):
    """The pool order of one slot's episodes for one epoch; see the module docstring.

    A schedule is a cursor over a pure function of (episode set, params, slot, epoch): two
    schedules built from the same inputs produce the same draws however their callers batch or
    skip. Not thread-safe (one per worker).

    Args:
        episode_ids: the slot's episodes (any order; the set matters). May be empty when there
            are more slots than episodes.
        frame_counts: frames per episode (>= 1), aligned with ``episode_ids``.
        params: pool parameters.
        slot: the slot this order belongs to (seeds the streams).
        epoch: epoch number (>= 0).
        start: draws to skip at once, e.g. ``samples_yielded`` of a saved state.
        entry_order: the order episodes enter the pool (a permutation of ``episode_ids``)
            when the caller decides it; by default a seeded permutation (``shuffle``) or
            ascending ids. Draws stay uniform over the frames left in the pool either way.

    Raises:
        SamplingError: invalid arguments, naming the parameter.
    """

    def __init__(
        self,
        episode_ids: ArrayLike,
        frame_counts: ArrayLike,
        *,
        params: PoolParams | None = None,
        slot: WorkerSlot | None = None,
        epoch: int = 0,
        start: int = 0,
        entry_order: ArrayLike | None = None,
    ) -> None:
        self._params = or_default("params", params, PoolParams)
        self._slot = or_default("slot", slot, WorkerSlot)
        self._epoch = require_int("epoch", epoch, minimum=0)
        self._ids, self._counts = canonical_episodes(episode_ids, frame_counts, allow_empty=True)
        self._total = int(self._counts.sum())
        self._given_order = (
            None if entry_order is None else _entry_positions(self._ids, entry_order)
        )
        self._plan()
        self._position = 0
        self._next_chunk = 0
        self._next_open = 0
        self._open: dict[int, _Open] = {}
        self._chunk: _Chunk | None = None
        self._left = np.zeros(self._ids.size, dtype=bool)  # by entry index
        self._num_left = 0
        self.skip(require_int("start", start, minimum=0))

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any] | ResumeState,
        episode_ids: ArrayLike,
        frame_counts: ArrayLike,
        *,
        params: PoolParams,
        slot: WorkerSlot,
    ) -> PoolSchedule:
        """Resume from a worker's saved state (:meth:`state`): same epoch, positioned after
        its ``samples_yielded`` draws.

        Raises:
            SamplingError: the state is malformed, is a rank's (which places several workers,
                see :meth:`ResumeState.resume_position`), or does not match the given
                configuration (world size, worker count, slot, pool parameters, episode set),
                naming the field.
        """
        saved = state if isinstance(state, ResumeState) else ResumeState.from_dict(state)
        if saved.kind != "worker":
            raise SamplingError(
                f"PoolSchedule.from_state takes a 'worker' resume state (one slot's position), "
                f"got kind {saved.kind!r}"
            )
        schedule = cls(episode_ids, frame_counts, params=params, slot=slot, epoch=saved.epoch)
        saved.check_matches(schedule.state())
        _, start = saved.resume_position(slot)
        if start > schedule.total_samples:
            raise SamplingError(
                f"resume state samples_yielded={start} exceeds the {schedule.total_samples} "
                "draws of this slot's epoch"
            )
        schedule.skip(start)
        return schedule

    # ---- plan: entry order, entry/exit clock of every episode, chunk boundaries -------------

    def _plan(self) -> None:
        count = self._ids.size
        params, slot = self._params, self._slot
        pool = min(params.pool_size, count)
        context = (slot.rank, slot.world_size, slot.worker, slot.num_workers)
        self._episode_key = stream_key(params.seed, self._epoch, "pool_episode", *context)
        if params.shuffle and count:
            rng = generator(stream_key(params.seed, self._epoch, "pool_plan", *context))
            order = rng.permutation(count) if self._given_order is None else self._given_order
            lengths = self._counts[order]
            # maximum of L unit exponentials, by inversion of its CDF (1 - e^-x)^L
            uniform = rng.random(count)
            with np.errstate(divide="ignore"):
                spans = -np.log(-np.expm1(np.log(uniform) / lengths))
            enter = np.zeros(count)
            exit_ = np.zeros(count)
            trigger = np.full(count, -1, dtype=np.int64)
            exit_[:pool] = spans[:pool]
            heap = [(float(exit_[j]), j) for j in range(pool)]
            heapq.heapify(heap)
            for j in range(pool, count):
                when, leaving = heapq.heappop(heap)
                trigger[leaving] = j
                enter[j] = when
                exit_[j] = when + spans[j]
                heapq.heappush(heap, (float(exit_[j]), j))
            self._spans = spans
        else:
            order = np.arange(count) if self._given_order is None else self._given_order
            lengths = self._counts[order]
            # clocks j + k/(L+1): episode j is drawn whole before episode j+1
            exit_ = np.arange(count) + lengths / (lengths + 1.0)
            enter = np.zeros(count)
            enter[pool:] = exit_[: count - pool]
            trigger = np.full(count, -1, dtype=np.int64)
            trigger[: count - pool] = np.arange(pool, count)
            self._spans = np.zeros(count)
        self._order = order  # entry index -> canonical index
        self._entry = self._ids[order]
        self._entry.setflags(write=False)
        self._lengths = lengths
        self._enter = enter
        self._exit = exit_
        self._trigger = trigger
        self._pool = pool
        # a chunk ends at every step-th exit (by clock, ties by entry) and at the last one; the
        # order is a global sort by clock, so chunking changes cost, never the draws
        by_exit = np.lexsort((np.arange(count), exit_))
        mean_length = self._total / count if count else 1.0
        step = int(min(params.pool_size, max(1, _CHUNK_DRAWS // max(1, round(mean_length)))))
        ends = list(range(step - 1, count, step))
        if count and (not ends or ends[-1] != count - 1):
            ends.append(count - 1)
        self._bounds = exit_[by_exit[ends]] if count else np.zeros(0)

    def _materialize(self, item: _Open) -> None:
        entry = item.entry
        length = int(self._lengths[entry])
        if not self._params.shuffle:
            item.keys = entry + np.arange(1, length + 1) / (length + 1.0)
            item.keys[-1] = self._exit[entry]
            item.frames = np.arange(length, dtype=np.int64)
            return
        episode_id = int(self._entry[entry])
        rng = generator(self._episode_key, episode_id)
        span = float(self._spans[entry])
        # the other L-1 clocks: exponentials conditioned below the sampled maximum
        offsets = -np.log1p(rng.random(length - 1) * np.expm1(-span))
        offsets.sort()
        np.minimum(offsets, span, out=offsets)
        keys = np.empty(length)
        keys[:-1] = self._enter[entry] + offsets
        keys[-1] = self._exit[entry]  # exactly the exit clock the plan used
        item.keys = keys
        item.frames = rng.permutation(length).astype(np.int64)

    # ---- producing chunks ---------------------------------------------------------------

    def _takes(self, bound: float) -> list[tuple[_Open, int]]:
        """Open every episode entered by ``bound``; return (episode, end) of clocks <= bound."""
        while self._next_open < self._ids.size and self._enter[self._next_open] <= bound:
            self._open[self._next_open] = _Open(self._next_open, 0)
            self._next_open += 1
        takes = []
        for item in self._open.values():
            if self._exit[item.entry] <= bound:
                end = int(self._lengths[item.entry])
            else:
                if item.keys is None:
                    self._materialize(item)
                assert item.keys is not None
                end = int(np.searchsorted(item.keys, bound, side="right"))
            if end > item.cursor:
                takes.append((item, end))
        return takes

    def _advance(self, takes: list[tuple[_Open, int]]) -> None:
        for item, end in takes:
            item.cursor = end
            if end == self._lengths[item.entry]:
                del self._open[item.entry]

    def _load_chunk(self) -> _Chunk:
        bound = float(self._bounds[self._next_chunk])
        self._next_chunk += 1
        takes = self._takes(bound)
        keys, entries, ranks, frames = [], [], [], []
        for item, end in takes:
            if item.keys is None:
                self._materialize(item)
            assert item.keys is not None and item.frames is not None
            keys.append(item.keys[item.cursor : end])
            entries.append(np.full(end - item.cursor, item.entry, dtype=np.int64))
            ranks.append(np.arange(item.cursor, end, dtype=np.int64))
            frames.append(item.frames[item.cursor : end])
        self._advance(takes)
        if not takes:
            return _Chunk(_EMPTY_I64, _EMPTY_I64, np.zeros(0, dtype=bool))
        key_all = np.concatenate(keys)
        entry_all = np.concatenate(entries)
        rank_all = np.concatenate(ranks)
        by_clock = np.lexsort((rank_all, entry_all, key_all))
        entry_all = entry_all[by_clock]
        leaves = rank_all[by_clock] == self._lengths[entry_all] - 1
        return _Chunk(entry_all, np.concatenate(frames)[by_clock], leaves)

    def _consume(self, chunk: _Chunk, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        part = slice(chunk.offset, chunk.offset + count)
        entries, frames, leaves = chunk.entries[part], chunk.frames[part], chunk.leaves[part]
        chunk.offset += count
        self._position += count
        gone = entries[leaves]
        self._left[gone] = True
        self._num_left += int(gone.size)
        return entries, frames, leaves

    # ---- public cursor API -----------------------------------------------------------------

    def take(self, max_draws: int) -> DrawBatch:
        """The next ``max_draws`` draws (fewer at the end of the epoch, empty after it)."""
        wanted = require_int("max_draws", max_draws, minimum=0)
        start = self._position
        parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        while wanted > 0 and self._position < self._total:
            if self._chunk is None or self._chunk.left == 0:
                self._chunk = self._load_chunk()
                continue
            count = min(wanted, self._chunk.left)
            parts.append(self._consume(self._chunk, count))
            wanted -= count
        if not parts:
            empty = np.zeros(0, dtype=bool)
            return DrawBatch(start, _EMPTY_I64, _EMPTY_I64, empty, _EMPTY_I64)
        entries = np.concatenate([p[0] for p in parts])
        frames = np.concatenate([p[1] for p in parts])
        leaves = np.concatenate([p[2] for p in parts])
        triggered = np.where(leaves, self._trigger[entries], -1)
        enters = np.where(triggered >= 0, self._entry[np.maximum(triggered, 0)], -1)
        return DrawBatch(start, self._entry[entries], frames, leaves, enters)

    def skip(self, count: int) -> None:
        """Advance past ``count`` draws without producing them (whole chunks are only counted).

        Raises:
            SamplingError: ``count`` negative or past the end of the epoch.
        """
        target = self._position + self._skip_count(count)
        while self._position < target:
            if self._chunk is not None and self._chunk.left > 0:
                self._consume(self._chunk, min(target - self._position, self._chunk.left))
                continue
            bound = float(self._bounds[self._next_chunk])
            takes = self._takes(bound)
            size = sum(end - item.cursor for item, end in takes)
            if self._position + size > target:
                self._chunk = self._load_chunk()  # re-derives the same takes, then sorts
                continue
            self._next_chunk += 1
            for item, end in takes:
                if end == self._lengths[item.entry]:
                    self._left[item.entry] = True
                    self._num_left += 1
            self._advance(takes)
            self._position += size
            self._chunk = None

    def iter_draws(self) -> Iterator[tuple[int, int]]:
        """Yield the remaining draws as ``(episode_id, frame_index)`` Python ints."""
        while True:
            batch = self.take(4096)
            if not len(batch):
                return
            yield from zip(batch.episode_ids.tolist(), batch.frame_indices.tolist(), strict=True)

    def events(self, batch_draws: int = 4096) -> Iterator[PoolEvent]:
        """Yield the remaining pool events in order.

        Starts with an ``enter`` for every currently resident episode (all of the initial pool
        at position 0; the restored pool after a resume), then per draw a ``draw``, followed by
        ``leave`` when it took the episode's last frame and ``enter`` for its replacement.
        """
        batch_draws = require_int("batch_draws", batch_draws, minimum=1)
        for episode_id in self.resident().tolist():
            yield PoolEvent("enter", episode_id, -1, self._position)
        while True:
            batch = self.take(batch_draws)
            if not len(batch):
                return
            rows = zip(
                batch.episode_ids.tolist(),
                batch.frame_indices.tolist(),
                batch.leaves.tolist(),
                batch.enters.tolist(),
                strict=True,
            )
            for offset, (episode_id, frame, leaves, enters) in enumerate(rows):
                yield from draw_events(episode_id, frame, batch.start + offset, leaves, enters)

    # ---- introspection ---------------------------------------------------------------------

    @property
    def params(self) -> PoolParams:
        return self._params

    @property
    def slot(self) -> WorkerSlot:
        return self._slot

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def episode_ids(self) -> np.ndarray:
        """The slot's episode ids, ascending (read-only)."""
        return self._ids

    @property
    def frame_counts(self) -> np.ndarray:
        """Frame counts aligned with :attr:`episode_ids` (read-only)."""
        return self._counts

    @property
    def entered(self) -> int:
        """Episodes that have entered the pool so far (prefix length of :attr:`entry_order`)."""
        return min(self._ids.size, self._pool + self._num_left)

    def resident(self) -> np.ndarray:
        """Episode ids in the pool now (entered, not yet exhausted), in entry order."""
        entered = self.entered
        return self._entry[:entered][~self._left[:entered]]

    def state(self) -> ResumeState:
        """The resume state at the current position: this slot's (kind ``"worker"``), its
        ``episodes_digest`` that of the schedule's own episodes."""
        slot, params = self._slot, self._params
        return ResumeState(
            kind="worker",
            seed=params.seed,
            epoch=self._epoch,
            pool_size=params.pool_size,
            shuffle=params.shuffle,
            rank=slot.rank,
            world_size=slot.world_size,
            num_workers=slot.num_workers,
            episodes_digest=episodes_digest(self._ids, self._counts),
            worker=slot.worker,
            samples_yielded=self._position,
        )

    def state_dict(self) -> dict[str, Any]:
        """:meth:`state` as a plain JSON-able dict with a ``version`` key."""
        return self.state().to_dict()


def _entry_positions(ids: np.ndarray, entry_order: ArrayLike) -> np.ndarray:
    """Canonical positions (into ascending ``ids``) of ``entry_order``, which must list every
    id exactly once."""
    given = np.asarray(entry_order)
    if given.ndim != 1 or given.size != ids.size or not np.issubdtype(given.dtype, np.integer):
        raise SamplingError(
            f"entry_order must list each of the {ids.size} episode ids once, got shape "
            f"{given.shape} of {given.dtype}"
        )
    positions = np.searchsorted(ids, given)
    clipped = np.minimum(positions, max(ids.size - 1, 0))
    if ids.size and (
        not np.array_equal(ids[clipped], given) or np.unique(positions).size != ids.size
    ):
        raise SamplingError("entry_order must be a permutation of episode_ids")
    return positions.astype(np.int64)

"""Resume state: where an interrupted pool order stopped, as one frozen, validated value whose
dict form (plain ints, bools and strings, with a ``version`` key) goes into checkpoints.

One format, two kinds:

- ``"rank"``: what a training loop checkpoints for its rank — the samples its DataLoader
  delivered and the loader's shape (``num_workers``, ``batch_size``, ``drop_last``), from which
  every worker's position follows (:func:`loader_consumption`).
- ``"worker"``: one slot's own position (``samples_yielded``), as torchdata's
  ``StatefulDataLoader`` collects it from each DataLoader worker and as a bare
  :class:`PoolSchedule` reports it.

Both carry the identity of the order (everything it is a pure function of), so resuming
under another configuration is refused, naming the field.
"""

from __future__ import annotations

import hashlib
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from episodestream._checks import Bound, shown
from episodestream.errors import SamplingError
from episodestream.sampling._arguments import (
    MAX_COUNT,
    MAX_LOADER_WORKERS,
    MAX_SEED,
    MAX_WORLD_SIZE,
)
from episodestream.sampling._loader import loader_consumption
from episodestream.sampling._slot import WorkerSlot
from episodestream.sampling._validate import canonical_episodes, require_instance

__all__ = ["STATE_VERSION", "ResumeState", "episodes_digest"]

STATE_VERSION = 1
"""Version written by :meth:`ResumeState.to_dict`; older versions load, newer ones are refused."""

ResumeKind = Literal["rank", "worker"]
ResumeUnit = Literal["episode", "window"]

# the order's identity, compared on resume (epoch is not: the state carries it forward)
_IDENTITY = ("seed", "pool_size", "shuffle", "rank", "world_size", "episodes_digest")
# what a window pool's order also depends on; present in the dict only when unit == "window"
_WINDOW = ("window_frames", "decoded_budget", "window_bytes", "window_spread")
# the position each kind records
_POSITION: dict[str, tuple[str, ...]] = {
    "rank": ("batch_size", "drop_last", "samples_consumed"),
    "worker": ("worker", "samples_yielded"),
}
# every state has these, in the dict's key order (kind comes after episodes_digest)
_COMMON = ("version", "seed", "epoch", "pool_size", "shuffle", "rank", "world_size")


def episodes_digest(episode_ids: ArrayLike, frame_counts: ArrayLike) -> str:
    """A short hex digest of an episode set and its frame counts (order-independent)."""
    ids, counts = canonical_episodes(episode_ids, frame_counts, allow_empty=True)
    digest = hashlib.sha256()
    digest.update(ids.astype("<i8").tobytes())
    digest.update(counts.astype("<i8").tobytes())
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumeState:
    """Everything needed to recompute an order and where it stopped.

    Attributes:
        kind: ``"rank"`` (a rank's DataLoader position) or ``"worker"`` (one slot's own).
        seed, epoch: the order's seed and epoch.
        pool_size, shuffle: the pool parameters.
        rank, world_size: the rank the state belongs to.
        num_workers: DataLoader workers of that rank (1 without workers).
        episodes_digest: :func:`episodes_digest` of the episode set the order was computed
            from (a dataset's selection; a bare schedule's own episodes).
        unit: ``"episode"`` or ``"window"`` (a window pool).
        window_frames, decoded_budget, window_bytes, window_spread: a window pool's parameters
            (set exactly when ``unit == "window"``; ``window_spread`` is the draws' spread).
        batch_size, drop_last, samples_consumed: kind ``"rank"``: the loader's batching and
            the samples it delivered this epoch.
        worker, samples_yielded: kind ``"worker"``: the worker and the draws it delivered.
        version: format version of the dict form.

    Raises:
        SamplingError: a field of the wrong type or range, or one that does not belong to
            the kind or unit, naming it.
    """

    kind: ResumeKind
    seed: int
    epoch: int
    pool_size: int
    shuffle: bool
    rank: int
    world_size: int
    num_workers: int
    episodes_digest: str
    unit: ResumeUnit = "episode"
    window_frames: int | None = None
    decoded_budget: int | None = None
    window_bytes: int | None = None
    window_spread: int | None = None
    batch_size: int | None = None
    drop_last: bool | None = None
    samples_consumed: int | None = None
    worker: int | None = None
    samples_yielded: int | None = None
    version: int = STATE_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in _POSITION:
            raise SamplingError(f"resume state kind {shown(self.kind)} is not 'rank' or 'worker'")
        if not isinstance(self.unit, str) or self.unit not in ("episode", "window"):
            raise SamplingError(
                f"resume state unit {shown(self.unit)} is not 'episode' or 'window'"
            )
        version = self._int("version", minimum=1)
        if version > STATE_VERSION:
            _refuse_newer(version)
        self._int("seed", minimum=0, maximum=MAX_SEED)
        for name in ("epoch", "rank"):
            self._int(name, minimum=0, maximum=MAX_COUNT)
        self._int("pool_size", minimum=1, maximum=MAX_COUNT)
        self._int("world_size", minimum=1, maximum=MAX_WORLD_SIZE)
        self._int("num_workers", minimum=1, maximum=MAX_LOADER_WORKERS)
        if self.rank >= self.world_size:
            raise SamplingError(
                f"resume state rank={self.rank} is not below world_size={self.world_size}"
            )
        self._bool("shuffle")
        if not isinstance(self.episodes_digest, str) or not self.episodes_digest:
            raise SamplingError(
                f"resume state episodes_digest must be a non-empty str, "
                f"got {self.episodes_digest!r}"
            )
        for name in _WINDOW:
            self._belongs(name, self.unit == "window", f"unit {self.unit!r}")
            if self.unit == "window":
                self._int(name, minimum=0 if name == "window_spread" else 1, maximum=MAX_COUNT)
        for kind, names in _POSITION.items():
            for name in names:
                self._belongs(name, self.kind == kind, f"kind {self.kind!r}")
        if self.kind == "rank":
            self._int("batch_size", minimum=1, maximum=MAX_COUNT)
            self._bool("drop_last")
            self._int("samples_consumed", minimum=0, maximum=MAX_COUNT)
        else:
            self._int("worker", minimum=0, maximum=MAX_COUNT)
            self._int("samples_yielded", minimum=0, maximum=MAX_COUNT)
            if self.worker >= self.num_workers:
                raise SamplingError(
                    f"resume state worker={self.worker} is not below num_workers={self.num_workers}"
                )

    # ---- validation helpers: normalize numpy scalars to Python values in place -------------

    def _int(self, name: str, *, minimum: int, maximum: Bound | None = None) -> int:
        value = getattr(self, name)
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
            raise SamplingError(f"resume state {name} must be an int, got {shown(value)}")
        if int(value) < minimum:
            raise SamplingError(
                f"resume state {name} must be >= {minimum}, got {shown(int(value))}"
            )
        if maximum is not None and int(value) > maximum.value:
            raise SamplingError(
                f"resume state {name} must be <= {maximum}, got {shown(int(value))}"
            )
        object.__setattr__(self, name, int(value))
        return int(value)

    def _bool(self, name: str) -> None:
        value = getattr(self, name)
        if not isinstance(value, bool | np.bool_):
            raise SamplingError(f"resume state {name} must be a bool, got {value!r}")
        object.__setattr__(self, name, bool(value))

    def _belongs(self, name: str, expected: bool, what: str) -> None:
        present = getattr(self, name) is not None
        if present != expected:
            raise SamplingError(
                f"resume state {name} is required with {what}"
                if expected
                else f"resume state {name} does not belong to a state of {what}"
            )

    # ---- dict form --------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The plain JSON-able dict a checkpoint stores; window fields only for a window pool."""
        window = {"unit": "window", **{n: getattr(self, n) for n in _WINDOW}}
        return {
            **(window if self.unit == "window" else {}),
            **{name: getattr(self, name) for name in _COMMON},
            "episodes_digest": self.episodes_digest,
            "kind": self.kind,
            "num_workers": self.num_workers,
            **{name: getattr(self, name) for name in _POSITION[self.kind]},
        }

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> ResumeState:
        """Parse a dict written by :meth:`to_dict` (or by an earlier version); unknown keys are
        ignored.

        A dict without ``kind`` (written before states had one) is a worker's when it holds
        ``samples_yielded`` and not ``samples_consumed``, else a rank's.

        Raises:
            SamplingError: not a mapping, a missing field, a bad value, or a newer version,
                naming the field.
        """
        if not isinstance(state, Mapping):
            raise SamplingError(f"resume state must be a mapping, got {type(state).__name__}")
        version = state.get("version")
        if isinstance(version, numbers.Integral) and version > STATE_VERSION:
            _refuse_newer(int(version))
        kind = state.get("kind")
        if "kind" not in state:
            worker = "samples_yielded" in state and "samples_consumed" not in state
            kind = "worker" if worker else "rank"
        if not isinstance(kind, str) or kind not in _POSITION:
            raise SamplingError(f"resume state kind {shown(kind)} is not 'rank' or 'worker'")
        unit = state.get("unit", "episode")
        required = (
            *_COMMON,
            "episodes_digest",
            "num_workers",
            *_POSITION[kind],
            *(_WINDOW if unit == "window" else ()),
        )
        missing = [name for name in required if name not in state]
        if unit == "window" and "window_spread" in missing:
            raise SamplingError(
                "resume state lacks field(s) ['window_spread']: a window pool's state written "
                "before window draws were spread across episodes, so its order is not this one's; "
                "start the epoch afresh (or resume with the episodestream that wrote it)"
            )
        if missing:
            raise SamplingError(f"resume state lacks field(s) {missing}")
        return cls(kind=kind, unit=unit, **{name: state[name] for name in required})

    # ---- resuming ---------------------------------------------------------------------------

    def check_matches(self, expected: ResumeState) -> None:
        """Raise unless this saved state resumes the order ``expected`` describes (this run's
        configuration): the same unit and identity; the window parameters of a window pool.

        Epoch and positions are not compared (the saved state carries them), nor the worker
        layout (:meth:`resume_position` checks it against the slot that resumes).

        Raises:
            SamplingError: naming the first field that differs and both values.
        """
        if self.unit != expected.unit:
            raise SamplingError(
                f"resume state unit={self.unit!r} does not match this run's {expected.unit!r}"
            )
        for name in _IDENTITY + (_WINDOW if self.unit == "window" else ()):
            saved, running = getattr(self, name), getattr(expected, name)
            if saved != running:
                raise SamplingError(
                    f"resume state {name}={shown(saved)} does not match this run's "
                    f"{shown(running)}"
                    + (" (the episode set differs)" if name == "episodes_digest" else "")
                )

    def resume_position(
        self, slot: WorkerSlot, worker_totals: ArrayLike | None = None
    ) -> tuple[WorkerSlot, int]:
        """The slot ``slot`` plays on resume and the draws that slot already delivered.

        A worker's state resumes the same worker. A rank's state needs ``worker_totals`` (the
        samples each of the rank's workers yields this epoch): a fresh DataLoader polls worker
        0 first, while the interrupted one would next have polled some worker ``w``, so
        DataLoader worker ``d`` plays worker ``(d + w) % num_workers`` of the saved run and the
        batches come out in the original order.

        Raises:
            SamplingError: the state belongs to another worker or worker count, or a rank's
                state comes without ``worker_totals``.
        """
        require_instance("slot", slot, WorkerSlot)
        if self.kind == "worker":
            if (self.worker, self.num_workers) != (slot.worker, slot.num_workers):
                raise SamplingError(
                    f"resume state of DataLoader worker {self.worker} of {self.num_workers} "
                    f"was handed to worker {slot.worker} of {slot.num_workers}"
                    + (" (num_workers differs)" if self.num_workers != slot.num_workers else "")
                )
            return slot, int(self.samples_yielded)
        if self.num_workers != slot.num_workers:
            raise SamplingError(
                f"resume state num_workers={self.num_workers} does not match this "
                f"DataLoader's {slot.num_workers}"
            )
        if worker_totals is None:
            raise SamplingError("a rank's resume state needs worker_totals to place its workers")
        totals = np.asarray(worker_totals)
        if totals.shape != (self.num_workers,):
            raise SamplingError(
                f"worker_totals must hold one count per worker ({self.num_workers}), "
                f"got shape {totals.shape}"
            )
        batch_size, drop_last = int(self.batch_size), bool(self.drop_last)
        consumed = loader_consumption(
            self.samples_consumed,
            worker_totals=totals,
            batch_size=batch_size,
            drop_last=drop_last,
        )
        first = _next_worker(consumed, totals.astype(np.int64), batch_size, drop_last)
        worker = (slot.worker + first) % slot.num_workers
        return slot.with_worker(worker, slot.num_workers), int(consumed[worker])


def _refuse_newer(version: int) -> None:
    raise SamplingError(
        f"resume state version {shown(version)} is newer than {STATE_VERSION}, the newest this "
        "episodestream reads: upgrade episodestream to resume from it"
    )


def _next_worker(consumed: np.ndarray, totals: np.ndarray, batch_size: int, drop_last: bool) -> int:
    """The worker a DataLoader polls next after delivering ``consumed`` samples per worker.

    It takes one batch from each unfinished worker in turn (round-major), so the next batch
    belongs to the unfinished worker with the fewest batches delivered, lowest id first.
    """
    delivered = totals // batch_size * batch_size if drop_last else totals
    unfinished = np.flatnonzero(consumed < delivered)
    if unfinished.size == 0:
        return 0
    batches = -(-consumed[unfinished] // batch_size)
    return int(unfinished[np.lexsort((unfinished, batches))[0]])

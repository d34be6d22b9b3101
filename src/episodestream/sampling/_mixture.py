"""The order of a weighted mixture of sources for one epoch, as a pure, resumable schedule.

**Quotas.** Each source has a size (its samples: frames, or windows) and one
:class:`MixtureWeight`: ``repeat`` (a multiple of its own size) and ``choose`` (a count) fix
its samples per epoch; ``proportion`` sources share what the epoch has left, in proportion to
their (relative) weights, split into integers by largest remainder (ties: lower source index),
so quotas sum exactly to the epoch size. See :func:`mixture_quotas` for the epoch size rule.

**Without replacement.** Every source has its own stream of *passes*: pass ``p`` visits each of
its frames once, in an order of the caller's choosing seeded by the pass's own seed
(:func:`pass_segments`). Epoch ``e`` takes stream positions ``[e * quota, (e + 1) * quota)``, so
it starts where epoch ``e - 1`` stopped: a source whose quota exceeds its size passes over its
frames more than once, one smaller than its size goes on next epoch where it stopped, and over
any number of epochs the times two frames of a source were used differ by at most one.

**Interleaving.** The epoch's ``N`` positions are cut into ``B = ceil(N / block_size)`` blocks.
Source ``s`` with quota ``q`` and a random phase ``phi`` in ``[0, B)`` (per epoch) has
``G(j) = ceil((j * q - phi) / B)`` of its samples before block ``j``: within one of the ideal
``j * q / B``, so the counts of every block follow the weights as closely as integers allow
(a low-discrepancy, stratified split). Inside a block the order is a uniform random shuffle of
its samples: any run of consecutive draws in it holds a multivariate hypergeometric count of
each source. A source's samples keep their stream order (its ``k``-th sample this epoch is its
stream position ``e * q + k``), so a source's frames are consumed in its own order.

*Prefix bound.* For every prefix of ``k`` positions of the epoch's order and every source,
``|count - k * q / N| < 1 + (3 * S + block_size) * q / N`` (``S``: sources with a positive
quota): the block counts are within one of the ideal, block starts within ``S`` of theirs, and
a block holds fewer than ``N / B + 2 * S`` positions. Typical deviations are those of a
hypergeometric draw inside one block, about ``sqrt(block_size * q / N)``.

**Slots.** The order is one global function of (sizes, weights, epoch size, seed, epoch,
block size); each (rank, DataLoader worker) takes a contiguous part of it: ranks first (their
parts depend only on ``world_size``, so every rank computes the same split), then the rank's
part between its workers, as :mod:`._shard` splits ranks then workers. Parts are near-equal
(the first ``total % parts`` get one more; sizes differ by at most one over all slots) and every
contiguous part keeps the weights within twice the prefix bound. Blocks are computed lazily
from ``G`` alone, so building a schedule, skipping or resuming anywhere costs ``O(S log B)``,
never the epoch.

With ``shuffle=False`` the sources come one after another, each one's samples in stream order.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike

from episodestream._checks import Bound, check_int, check_number, shown
from episodestream.errors import ConfigError, ConfigTypeError, SamplingError
from episodestream.sampling._arguments import (
    MAX_COUNT,
    MAX_LOADER_WORKERS,
    MAX_SEED,
    MAX_WORLD_SIZE,
)
from episodestream.sampling._rng import counter_keys, generator, stream_key
from episodestream.sampling._slot import WorkerSlot
from episodestream.sampling._validate import or_default, require_int

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "MAX_PASS_SEGMENTS",
    "MixtureBatch",
    "MixtureSchedule",
    "MixtureState",
    "MixtureWeight",
    "PassSegments",
    "mixture_digest",
    "mixture_quotas",
    "pass_seeds",
    "pass_segments",
    "slot_span",
]

DEFAULT_BLOCK_SIZE = 1024
"""Positions per interleaving block: the shuffle's reach, and the prefix bound's main term."""

MAX_PASS_SEGMENTS = Bound(
    "MAX_PASS_SEGMENTS", 2**24, "one array entry per pass an epoch's share covers"
)
MIXTURE_STATE_VERSION = 1
"""Version written by :meth:`MixtureState.to_dict`; newer versions are refused."""

WeightKind = Literal["proportion", "repeat", "choose"]
_KINDS: tuple[WeightKind, ...] = ("proportion", "repeat", "choose")
# blocks shuffled together by one generator: spreads a generator's cost over many blocks
_CHUNK_BLOCKS = 16
# chunks kept materialised by a schedule (the current one and a few looked ahead)
_CACHED_CHUNKS = 4
# G is evaluated for this many (blocks x sources) at once when scanning ahead
_SCAN_CELLS = 1 << 16
_EMPTY_I64 = np.zeros(0, dtype=np.int64)
_EMPTY_I64.setflags(write=False)


# ---- weights and quotas ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MixtureWeight:
    """How much of a source one epoch takes: exactly one of three forms.

    Attributes:
        proportion: a share of the epoch (> 0), relative to the other proportion sources'
            (they need not sum to one); they share what ``repeat`` and ``choose`` leave.
        repeat: a multiple of the source's own size (> 0; ``0.5`` takes half its frames each
            epoch, ``3`` each frame three times); rounded half up to whole samples.
        choose: samples per epoch (an int >= 0).

    Raises:
        ConfigError: none or several forms given, or a value out of range, naming the field.
        ConfigTypeError: a value of the wrong type.
    """

    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None

    def __post_init__(self) -> None:
        given = [name for name in _KINDS if getattr(self, name) is not None]
        if len(given) != 1:
            raise ConfigError(
                "MixtureWeight takes exactly one of proportion, repeat or choose, got "
                + (", ".join(f"{n}={shown(getattr(self, n))}" for n in given) or "none")
            )
        name = given[0]
        value = getattr(self, name)
        if name == "choose":
            checked: float | int = check_int(
                "MixtureWeight.choose", value, minimum=0, maximum=MAX_COUNT
            )
        else:
            checked = check_number(f"MixtureWeight.{name}", value, above=0.0)
        object.__setattr__(self, name, checked)

    @property
    def kind(self) -> WeightKind:
        """Which form this weight takes."""
        return next(name for name in _KINDS if getattr(self, name) is not None)

    @property
    def value(self) -> float | int:
        """The value of that form."""
        return getattr(self, self.kind)

    def to_dict(self) -> dict[str, float | int]:
        """``{kind: value}``, as a mixture file writes it."""
        return {self.kind: self.value}

    @classmethod
    def from_dict(cls, weight: Mapping[str, Any]) -> MixtureWeight:
        """Parse ``{"proportion": 0.3}`` (or ``repeat``, ``choose``).

        Raises:
            ConfigTypeError: not a mapping, or an unknown key.
            ConfigError: not exactly one form, or a bad value.
        """
        if not isinstance(weight, Mapping):
            raise ConfigTypeError(f"a mixture weight must be a mapping, got {shown(weight)}")
        unknown = sorted(str(key) for key in weight if key not in _KINDS)
        if unknown:
            raise ConfigTypeError(
                f"mixture weight: unknown key(s) {', '.join(unknown)}; "
                "it takes proportion, repeat or choose"
            )
        return cls(**{str(key): value for key, value in weight.items()})


def _check_sizes(sizes: ArrayLike) -> list[int]:
    if isinstance(sizes, str | bytes | Mapping):
        raise ConfigTypeError(f"sizes must be a list of source sizes, got {shown(sizes)}")
    array = np.asarray(sizes, dtype=object) if not isinstance(sizes, np.ndarray) else sizes
    if array.ndim != 1:
        raise ConfigError(f"sizes must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        raise ConfigError("sizes is empty: a mixture needs at least one source")
    return [
        check_int(f"sizes[{i}]", value, minimum=1, maximum=MAX_COUNT)
        for i, value in enumerate(array.tolist())
    ]


def _check_weights(weights: Sequence[MixtureWeight | Mapping[str, Any]], count: int) -> list:
    if isinstance(weights, str | bytes | Mapping) or not isinstance(weights, Sequence):
        raise ConfigTypeError(f"weights must be a list of MixtureWeight, got {shown(weights)}")
    if len(weights) != count:
        raise ConfigError(f"weights has {len(weights)} entries for {count} sources")
    checked = []
    for i, weight in enumerate(weights):
        if isinstance(weight, Mapping):
            weight = MixtureWeight.from_dict(weight)
        if not isinstance(weight, MixtureWeight):
            raise ConfigTypeError(
                f"weights[{i}] must be a MixtureWeight (or a mapping like "
                f"{{'proportion': 0.5}}), got {shown(weight)}"
            )
        checked.append(weight)
    return checked


def mixture_quotas(
    sizes: ArrayLike,
    weights: Sequence[MixtureWeight | Mapping[str, Any]],
    epoch_size: int | None = None,
) -> np.ndarray:
    """Samples each source gives one epoch.

    ``repeat`` gives ``round(repeat * size)`` (half up, computed exactly), ``choose`` its count.
    Proportion sources share ``rest`` in proportion to their weights, ``floor`` of each exact
    share plus one for the largest remainders (ties: lower source index) so the shares sum to
    ``rest`` exactly, where ``rest`` is:

    - ``epoch_size`` minus the repeat and choose quotas, when ``epoch_size`` is given (it must
      leave at least one sample);
    - the proportion sources' own total size, when it is not: with only proportions, an epoch
      is as long as all sources together (each source's own size, reweighted).

    Without proportion sources the epoch size is the sum of the quotas; an ``epoch_size`` given
    must equal it.

    Args:
        sizes: samples of each source (>= 1).
        weights: one :class:`MixtureWeight` (or its dict form) per source.
        epoch_size: the epoch's samples (>= 0), or None (see above).

    Returns:
        Read-only int64 array of quotas, one per source; they sum to the epoch size.

    Raises:
        ConfigError: a bad size or weight (naming it), weights not matching sources, an
            epoch size the fixed quotas exceed or leave nothing of for the proportions, or
            quotas summing above ``MAX_COUNT``.
    """
    counts = _check_sizes(sizes)
    forms = _check_weights(weights, len(counts))
    if epoch_size is not None:
        epoch_size = check_int("epoch_size", epoch_size, minimum=0, maximum=MAX_COUNT)
    quotas = [0] * len(counts)
    shared = []
    for i, (size, weight) in enumerate(zip(counts, forms, strict=True)):
        if weight.kind == "repeat":
            quotas[i] = math.floor(Fraction(weight.repeat) * size + Fraction(1, 2))
        elif weight.kind == "choose":
            quotas[i] = weight.choose
        else:
            shared.append(i)
    fixed = sum(quotas)
    if not shared:
        if epoch_size is not None and epoch_size != fixed:
            raise ConfigError(
                f"epoch_size={epoch_size} differs from the {fixed} samples the repeat and "
                "choose weights take; give a proportion weight to fill an epoch, or omit "
                "epoch_size"
            )
    else:
        if epoch_size is None:
            rest = sum(counts[i] for i in shared)
        else:
            rest = epoch_size - fixed
            if rest <= 0:
                raise ConfigError(
                    f"epoch_size={epoch_size} leaves no samples for the proportion weights: "
                    f"the repeat and choose weights take {fixed}"
                )
        weights_of = [Fraction(forms[i].proportion) for i in shared]
        total_weight = sum(weights_of)
        exact = [rest * w / total_weight for w in weights_of]
        floors = [math.floor(x) for x in exact]
        extra = rest - sum(floors)
        by_remainder = sorted(range(len(shared)), key=lambda m: (-(exact[m] - floors[m]), m))
        for m in by_remainder[:extra]:
            floors[m] += 1
        for m, i in enumerate(shared):
            quotas[i] = floors[m]
    if sum(quotas) > MAX_COUNT.value:
        raise ConfigError(f"the mixture's epoch holds {sum(quotas)} samples, above {MAX_COUNT}")
    result = np.array(quotas, dtype=np.int64)
    result.setflags(write=False)
    return result


def mixture_digest(sizes: ArrayLike, quotas: ArrayLike) -> str:
    """A short hex digest of the sources' sizes and quotas: what a mixture order depends on
    besides seed, epoch, block size and shuffle."""
    digest = hashlib.sha256(b"mixture")
    digest.update(np.asarray(sizes, dtype="<i8").tobytes())
    digest.update(np.asarray(quotas, dtype="<i8").tobytes())
    return digest.hexdigest()[:32]


# ---- passes ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class PassSegments:
    """The stretches of a source's passes that an epoch's samples of it cover, in order.

    Segment ``i`` is offsets ``[starts[i], stops[i])`` of pass ``passes[i]`` over the source's
    own frames (half-open; offsets index the pass's own order of the frames, a permutation the
    caller derives from ``seeds[i]``, or the identity for sequential order). Together they are
    stream positions ``[stream_starts[0], stream_starts[-1] + stops[-1] - starts[-1])``.

    Attributes:
        source: the source's index.
        size: the source's frames per pass.
        passes: pass number of each segment (int64, ascending, consecutive).
        starts, stops: the segment's offsets within its pass (int64).
        stream_starts: stream position of each segment's first sample (int64).
        seeds: each pass's own 64-bit seed (uint64): a pure function of (seed, source, pass),
            the same whichever epoch reaches the pass.
    """

    source: int
    size: int
    passes: np.ndarray
    starts: np.ndarray
    stops: np.ndarray
    stream_starts: np.ndarray
    seeds: np.ndarray

    def __len__(self) -> int:
        return int(self.passes.size)

    @property
    def samples(self) -> int:
        """Samples the segments hold together."""
        return int((self.stops - self.starts).sum())


def pass_seeds(seed: int, source: int, passes: ArrayLike) -> np.ndarray:
    """The 64-bit seeds of passes ``passes`` over source ``source``'s frames (uint64 array):
    a pure function of (seed, source, pass), whichever epoch reaches the pass. Derive a pass's
    order of the frames from its seed, e.g. ``generator(seed, pass).permutation(size)`` or a
    source-level pool seeded by it."""
    seed = check_int("seed", seed, minimum=0, maximum=MAX_SEED)
    source = check_int("source", source, minimum=0, maximum=MAX_COUNT)
    numbers_of = np.asarray(passes)
    if numbers_of.size and (numbers_of.dtype.kind not in "iu" or int(numbers_of.min()) < 0):
        raise ConfigError(f"passes must be ints >= 0, got {shown(passes)}")
    return counter_keys(stream_key(seed, 0, "mixture_pass", source), numbers_of)


def pass_segments(
    size: int,
    quota: int,
    epoch: int,
    *,
    seed: int = 0,
    source: int = 0,
    first: int = 0,
    stop: int | None = None,
) -> PassSegments:
    """Which passes over a source's frames epoch ``epoch`` covers, given its quota.

    The epoch takes the source's stream positions ``[epoch * quota, (epoch + 1) * quota)``;
    ``first`` and ``stop`` narrow that to the epoch's samples ``[first, stop)`` of the source
    (e.g. one slot's share, :meth:`MixtureSchedule.source_spans`).

    Args:
        size: the source's frames (>= 1).
        quota: its samples per epoch (>= 0).
        epoch: the epoch (>= 0).
        seed: the mixture's seed (the passes' seeds derive from it).
        source: the source's index (seeds differ per source).
        first, stop: the part of the epoch's samples of this source, half-open (default all).

    Raises:
        ConfigError: an argument out of range, or more than ``MAX_PASS_SEGMENTS`` segments.
    """
    size = check_int("size", size, minimum=1, maximum=MAX_COUNT)
    quota = check_int("quota", quota, minimum=0, maximum=MAX_COUNT)
    epoch = check_int("epoch", epoch, minimum=0, maximum=MAX_COUNT)
    seed = check_int("seed", seed, minimum=0, maximum=MAX_SEED)
    source = check_int("source", source, minimum=0, maximum=MAX_COUNT)
    first = check_int("first", first, minimum=0, maximum=quota)
    stop = quota if stop is None else check_int("stop", stop, minimum=first, maximum=quota)
    begin = epoch * quota + first
    end = epoch * quota + stop
    if end > MAX_COUNT.value:
        raise ConfigError(f"epoch {epoch} reaches stream position {end}, above {MAX_COUNT}")
    if begin == end:
        passes = _EMPTY_I64
    else:
        count = (end - 1) // size - begin // size + 1
        if count > MAX_PASS_SEGMENTS.value:
            raise ConfigError(
                f"source {source}: {count} passes in one epoch, above {MAX_PASS_SEGMENTS}; "
                "narrow the part with first/stop"
            )
        passes = np.arange(begin // size, (end - 1) // size + 1, dtype=np.int64)
    origins = passes * size
    starts = np.maximum(begin - origins, 0)
    stops = np.minimum(end - origins, size)
    return PassSegments(
        source=source,
        size=size,
        passes=passes,
        starts=starts,
        stops=stops,
        stream_starts=origins + starts,
        seeds=pass_seeds(seed, source, passes),
    )


# ---- slots -------------------------------------------------------------------------------------


def _part(total: int, parts: int, index: int) -> tuple[int, int]:
    base, remainder = divmod(total, parts)
    start = index * base + min(index, remainder)
    return start, start + base + (1 if index < remainder else 0)


def slot_span(total: int, slot: WorkerSlot) -> tuple[int, int]:
    """The positions ``[start, stop)`` of an epoch of ``total`` that ``slot`` takes.

    Ranks split the epoch first (the first ``total % world_size`` ranks get one more), then
    each rank's part is split between its DataLoader workers the same way: contiguous, disjoint
    parts whose union is the epoch and whose sizes differ by at most one over all slots.
    """
    total = require_int("total", total, minimum=0, maximum=MAX_COUNT)
    rank_start, rank_stop = _part(total, slot.world_size, slot.rank)
    start, stop = _part(rank_stop - rank_start, slot.num_workers, slot.worker)
    return rank_start + start, rank_start + stop


# ---- resume state ------------------------------------------------------------------------------

_STATE_INTS = {
    "seed": (0, MAX_SEED),
    "epoch": (0, MAX_COUNT),
    "block_size": (1, MAX_COUNT),
    "world_size": (1, MAX_WORLD_SIZE),
    "rank": (0, MAX_COUNT),
    "num_workers": (1, MAX_LOADER_WORKERS),
    "worker": (0, MAX_COUNT),
    "samples_yielded": (0, MAX_COUNT),
}
# the dict's keys, in order; the order's identity is all but epoch, worker layout and position
_STATE_KEYS = (
    "version",
    "kind",
    "seed",
    "epoch",
    "shuffle",
    "block_size",
    "mixture_digest",
    "world_size",
    "rank",
    "num_workers",
    "worker",
    "samples_yielded",
)
_IDENTITY = ("seed", "shuffle", "block_size", "mixture_digest")


@dataclass(frozen=True, slots=True, kw_only=True)
class MixtureState:
    """Where one slot's mixture order stopped: the order's inputs and a position, never the
    order itself.

    Attributes:
        seed, epoch, shuffle, block_size: the schedule's.
        mixture_digest: :func:`mixture_digest` of the sources' sizes and quotas.
        world_size, rank, num_workers, worker: the slot.
        samples_yielded: samples the slot took or skipped this epoch.
        version: format version of the dict form.

    Raises:
        SamplingError: a field of the wrong type or range, naming it.
    """

    seed: int
    epoch: int
    shuffle: bool
    block_size: int
    mixture_digest: str
    world_size: int
    rank: int
    num_workers: int
    worker: int
    samples_yielded: int
    version: int = MIXTURE_STATE_VERSION

    def __post_init__(self) -> None:
        version = self.version
        if isinstance(version, bool) or not isinstance(version, numbers.Integral) or version < 1:
            raise SamplingError(f"mixture state version must be an int >= 1, got {shown(version)}")
        if version > MIXTURE_STATE_VERSION:
            _refuse_newer(int(version))
        object.__setattr__(self, "version", int(version))
        for name, (minimum, maximum) in _STATE_INTS.items():
            value = getattr(self, name)
            if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
                raise SamplingError(f"mixture state {name} must be an int, got {shown(value)}")
            if not minimum <= int(value) <= maximum.value:
                raise SamplingError(
                    f"mixture state {name} must lie in {minimum}..{maximum}, got {shown(value)}"
                )
            object.__setattr__(self, name, int(value))
        if not isinstance(self.shuffle, bool | np.bool_):
            raise SamplingError(f"mixture state shuffle must be a bool, got {shown(self.shuffle)}")
        object.__setattr__(self, "shuffle", bool(self.shuffle))
        if not isinstance(self.mixture_digest, str) or not self.mixture_digest:
            raise SamplingError(
                f"mixture state mixture_digest must be a non-empty str, "
                f"got {shown(self.mixture_digest)}"
            )
        for name, limit in (("rank", "world_size"), ("worker", "num_workers")):
            if getattr(self, name) >= getattr(self, limit):
                raise SamplingError(
                    f"mixture state {name}={getattr(self, name)} is not below "
                    f"{limit}={getattr(self, limit)}"
                )

    @property
    def slot(self) -> WorkerSlot:
        """The slot the state belongs to."""
        return WorkerSlot(self.rank, self.world_size, self.worker, self.num_workers)

    def to_dict(self) -> dict[str, Any]:
        """The plain JSON-able dict a checkpoint stores (with ``kind: "mixture"``)."""
        return {name: "mixture" if name == "kind" else getattr(self, name) for name in _STATE_KEYS}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> MixtureState:
        """Parse a dict written by :meth:`to_dict`; unknown keys are ignored.

        Raises:
            SamplingError: not a mapping, another kind of state, a missing or bad field, or a
                newer version, naming the field.
        """
        if not isinstance(state, Mapping):
            raise SamplingError(f"mixture state must be a mapping, got {type(state).__name__}")
        version = state.get("version")
        if isinstance(version, numbers.Integral) and version > MIXTURE_STATE_VERSION:
            _refuse_newer(int(version))
        if state.get("kind") != "mixture":
            raise SamplingError(
                f"not a mixture state: kind is {shown(state.get('kind'))}, not 'mixture' "
                "(a single dataset's pool state does not resume a mixture)"
            )
        missing = [name for name in _STATE_KEYS if name not in state]
        if missing:
            raise SamplingError(f"mixture state lacks field(s) {missing}")
        return cls(**{name: state[name] for name in _STATE_KEYS if name != "kind"})


def _refuse_newer(version: int) -> None:
    raise SamplingError(
        f"mixture state version {shown(version)} is newer than {MIXTURE_STATE_VERSION}, the "
        "newest this episodestream reads: upgrade episodestream to resume from it"
    )


# ---- the schedule ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class MixtureBatch:
    """Consecutive samples ``[start, start + len)`` of a slot's mixture order.

    Attributes:
        start: the slot's position of the first sample (samples before it this epoch).
        sources: source index of each sample (int64).
        stream_positions: the sample's position in its source's stream of passes (int64):
            ``epoch * quota + k`` for the source's ``k``-th sample of the epoch.
        passes: ``stream_positions // size``: which pass over the source's frames.
        pass_offsets: ``stream_positions % size``: the offset within that pass's order.
    """

    start: int
    sources: np.ndarray
    stream_positions: np.ndarray
    passes: np.ndarray
    pass_offsets: np.ndarray

    def __len__(self) -> int:
        return int(self.sources.size)


@dataclass(frozen=True, slots=True, eq=False)
class _Chunk:
    """Blocks ``[first_block, first_block + _CHUNK_BLOCKS)``, materialised."""

    index: int
    first_block: int
    begin: int  # global position of its first sample
    end: int
    sources: np.ndarray  # source index per position
    ranks: np.ndarray  # the source's sample number this epoch


class MixtureSchedule:
    """One slot's part of a mixture's order for one epoch; see the module docstring.

    A cursor over a pure function of (sizes, weights, epoch size, seed, epoch, block size,
    shuffle) and the slot: schedules built from the same inputs give the same samples however
    their callers batch or skip. Not thread-safe (one per worker).

    Args:
        sizes: samples of each source (>= 1).
        weights: one :class:`MixtureWeight` (or its dict form) per source.
        seed: base seed (>= 0).
        epoch_size: the epoch's samples, or None; see :func:`mixture_quotas`.
        shuffle: interleave at random; ``False``: sources in order, each one's samples in
            stream order.
        epoch: epoch number (>= 0).
        slot: this (rank, worker); by default the whole epoch.
        block_size: positions per interleaving block (>= 1); see the prefix bound.
        start: samples of the slot's part to skip at once (a saved ``samples_yielded``).

    Raises:
        ConfigError: a bad size, weight, epoch size, seed, epoch or block size, naming it.
        SamplingError: a bad slot or ``start``.
    """

    def __init__(
        self,
        sizes: ArrayLike,
        weights: Sequence[MixtureWeight | Mapping[str, Any]],
        seed: int = 0,
        *,
        epoch_size: int | None = None,
        shuffle: bool = True,
        epoch: int = 0,
        slot: WorkerSlot | None = None,
        block_size: int = DEFAULT_BLOCK_SIZE,
        start: int = 0,
    ) -> None:
        self._quotas = mixture_quotas(sizes, weights, epoch_size)
        self._epoch_size_given = epoch_size
        self._weights = tuple(_check_weights(weights, self._quotas.size))
        self._sizes = np.array(_check_sizes(sizes), dtype=np.int64)
        self._sizes.setflags(write=False)
        self._seed = check_int("seed", seed, minimum=0, maximum=MAX_SEED)
        self._epoch = check_int("epoch", epoch, minimum=0, maximum=MAX_COUNT)
        self._block_size = check_int("block_size", block_size, minimum=1, maximum=MAX_COUNT)
        if not isinstance(shuffle, bool | np.bool_):
            raise ConfigTypeError(f"shuffle must be a bool, got {shown(shuffle)}")
        self._shuffle = bool(shuffle)
        self._slot = or_default("slot", slot, WorkerSlot)
        largest = int(self._quotas.max())
        if (self._epoch + 1) * largest > MAX_COUNT.value:
            raise ConfigError(
                f"epoch={self._epoch} takes stream positions up to "
                f"{(self._epoch + 1) * largest}, above {MAX_COUNT}"
            )
        self._digest = mixture_digest(self._sizes, self._quotas)
        self._total_epoch = int(self._quotas.sum())
        self._cum = np.concatenate([[0], np.cumsum(self._quotas)]).astype(np.int64)
        self._offsets = self._epoch * self._quotas  # stream position of each source's first
        self._first, self._stop = slot_span(self._total_epoch, self._slot)
        self._total = self._stop - self._first
        self._active = np.flatnonzero(self._quotas > 0)
        self._blocks = -(-self._total_epoch // self._block_size)
        self._exact = False
        if self._shuffle and self._total_epoch:
            rng = generator(stream_key(self._seed, self._epoch, "mixture_phase"))
            phases = rng.integers(0, self._blocks, size=self._quotas.size, dtype=np.int64)
            self._block_key = stream_key(self._seed, self._epoch, "mixture_block")
            # j * q needs up to log2(B * q) bits: int64 where it fits, Python ints beyond
            self._exact = self._blocks * largest >= 2**62
            kind = object if self._exact else np.int64
            self._phase = phases[self._active].astype(kind)
            self._q = self._quotas[self._active].astype(kind)
        self._cache: OrderedDict[int, _Chunk] = OrderedDict()
        self._position = 0
        self.skip(require_int("start", start, minimum=0))

    @classmethod
    def from_state(
        cls,
        state: Mapping[str, Any] | MixtureState,
        sizes: ArrayLike,
        weights: Sequence[MixtureWeight | Mapping[str, Any]],
        *,
        epoch_size: int | None = None,
        slot: WorkerSlot | None = None,
    ) -> MixtureSchedule:
        """Resume from a saved :meth:`state`: its seed, epoch, shuffle and block size, its slot
        (``slot`` must be the same one when given), positioned after ``samples_yielded``.

        Raises:
            SamplingError: a malformed state, or one of another mixture (sizes or quotas
                differ), another slot or a position past the part's end, naming the field.
        """
        saved = state if isinstance(state, MixtureState) else MixtureState.from_dict(state)
        if slot is not None and slot != saved.slot:
            raise SamplingError(f"the mixture state belongs to {saved.slot}, not to {slot}")
        schedule = cls(
            sizes,
            weights,
            saved.seed,
            epoch_size=epoch_size,
            shuffle=saved.shuffle,
            epoch=saved.epoch,
            slot=saved.slot,
            block_size=saved.block_size,
        )
        if saved.mixture_digest != schedule._digest:
            raise SamplingError(
                f"mixture state mixture_digest={saved.mixture_digest!r} does not match this "
                f"mixture's {schedule._digest!r}: the sources' sizes or quotas differ"
            )
        if saved.samples_yielded > schedule.total_samples:
            raise SamplingError(
                f"mixture state samples_yielded={saved.samples_yielded} exceeds the "
                f"{schedule.total_samples} samples of this slot's part"
            )
        schedule.skip(saved.samples_yielded)
        return schedule

    def with_epoch(self, epoch: int) -> MixtureSchedule:
        """The same mixture and slot at the start of epoch ``epoch``."""
        return MixtureSchedule(
            self._sizes,
            self._weights,
            self._seed,
            epoch_size=self._epoch_size_given,
            shuffle=self._shuffle,
            epoch=epoch,
            slot=self._slot,
            block_size=self._block_size,
        )

    # ---- the global order: counts before block j, blocks, ranges --------------------------

    def _before(self, j: int) -> np.ndarray:
        """Samples of each active source before block ``j`` (``G``), as int64."""
        counts = -((self._phase - j * self._q) // self._blocks)
        return counts.astype(np.int64)

    def _begin(self, j: int) -> int:
        return self._total_epoch if j >= self._blocks else int(self._before(j).sum())

    def _locate(self, k: int) -> int:
        """The block holding global position ``k`` (``0 <= k < N``)."""
        n, b, s = self._total_epoch, self._blocks, int(self._active.size)
        lo = max(0, (k - s) * b // n)  # begin(lo) <= k
        hi = min(b, -(-(k + s) * b // n))  # begin(hi) > k, or hi == B
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._begin(mid) <= k:
                lo = mid
            else:
                hi = mid
        return lo

    def _before_many(self, first: int, stop: int) -> np.ndarray:
        """``G`` at block boundaries ``first..stop`` (rows) for every active source (int64)."""
        boundaries = np.arange(first, stop + 1, dtype=np.int64)[:, None]
        if self._exact:
            boundaries = boundaries.astype(object)
        before = -((self._phase[None, :] - boundaries * self._q[None, :]) // self._blocks)
        return before.astype(np.int64)

    def _chunk(self, c: int) -> _Chunk:
        cached = self._cache.get(c)
        if cached is not None:
            self._cache.move_to_end(c)
            return cached
        first = c * _CHUNK_BLOCKS
        stop = min(self._blocks, first + _CHUNK_BLOCKS)
        before = self._before_many(first, stop)
        counts = np.diff(before, axis=0).ravel()  # block-major, then source
        width = int(self._active.size)
        # a (block, source) cell per position, laid out cell by cell
        cells = (stop - first) * width
        layout = np.repeat(np.arange(cells, dtype=np.int64), counts)
        rng = generator(self._block_key, c)
        ends = np.cumsum(before.sum(axis=1)[1:] - before.sum(axis=1)[:-1])
        block_start = 0
        for block_end in ends.tolist():
            rng.shuffle(layout[block_start:block_end])  # inside one block only
            block_start = block_end
        # a source's samples keep their stream order: its i-th position in a block is its i-th
        # (as int16 when the cells fit: numpy sorts those by radix)
        grouped = np.argsort(layout.astype(np.int16) if cells < 2**15 else layout, kind="stable")
        ranks = np.empty(layout.size, dtype=np.int64)
        ranks[grouped] = np.arange(layout.size, dtype=np.int64) + np.repeat(
            before[:-1].ravel() - (np.cumsum(counts) - counts), counts
        )
        begin = int(before[0].sum())
        sources = np.tile(self._active, stop - first)[layout]
        chunk = _Chunk(c, first, begin, begin + layout.size, sources, ranks)
        self._cache[c] = chunk
        if len(self._cache) > _CACHED_CHUNKS:
            self._cache.popitem(last=False)
        return chunk

    def _chunk_at(self, k: int) -> _Chunk:
        """The chunk holding global position ``k`` (``0 <= k < N``)."""
        for chunk in reversed(self._cache.values()):
            if chunk.begin <= k < chunk.end:
                return chunk
        last = next(reversed(self._cache.values()), None)
        if last is not None and last.end == k:
            following = self._chunk(last.index + 1)
            if following.begin <= k < following.end:
                return following
        return self._chunk(self._locate(k) // _CHUNK_BLOCKS)

    def _range(self, begin: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """(source, epoch sample number) of global positions ``[begin, end)``."""
        if begin >= end:
            return _EMPTY_I64, _EMPTY_I64
        if not self._shuffle:
            positions = np.arange(begin, end, dtype=np.int64)
            sources = np.searchsorted(self._cum[1:], positions, side="right")
            return sources, positions - self._cum[sources]
        sources, ranks = [], []
        k = begin
        while k < end:
            chunk = self._chunk_at(k)
            part = slice(k - chunk.begin, min(end, chunk.end) - chunk.begin)
            sources.append(chunk.sources[part])
            ranks.append(chunk.ranks[part])
            k = min(end, chunk.end)
        if len(sources) == 1:
            return sources[0], ranks[0]
        return np.concatenate(sources), np.concatenate(ranks)

    def _counts_before(self, k: int) -> np.ndarray:
        """Samples of each source among global positions ``[0, k)`` (int64, every source)."""
        counts = np.zeros(self._quotas.size, dtype=np.int64)
        if k >= self._total_epoch:
            return self._quotas.copy()
        if not self._shuffle:
            return np.clip(k - self._cum[:-1], 0, self._quotas)
        chunk = self._chunk_at(k)
        counts[self._active] = self._before(chunk.first_block)
        np.add.at(counts, chunk.sources[: k - chunk.begin], 1)
        return counts

    # ---- public cursor API ----------------------------------------------------------------

    def take(self, count: int) -> MixtureBatch:
        """The next ``count`` samples (fewer at the end of the part, none after it)."""
        count = require_int("count", count, minimum=0)
        start = self._position
        stop = min(self._total, start + count)
        sources, ranks = self._range(self._first + start, self._first + stop)
        self._position = stop
        stream = self._offsets[sources] + ranks
        sizes = self._sizes[sources]
        return MixtureBatch(start, sources, stream, stream // sizes, stream % sizes)

    def skip(self, count: int) -> None:
        """Advance past ``count`` samples without producing them (costs nothing per sample).

        Raises:
            SamplingError: ``count`` negative or past the end of the slot's part.
        """
        count = require_int("count", count, minimum=0)
        if self._position + count > self._total:
            raise SamplingError(
                f"cannot skip {count} samples from position {self._position}: the slot's "
                f"part of the epoch has {self._total}"
            )
        self._position += count

    def first_needs(
        self, count: int | None = None, *, max_sources: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """When each source is next needed: the distinct sources of the next ``count``
        samples (all that remain when None), in order of first need, at most ``max_sources``
        of them.

        Returns:
            ``(sources, ahead)``: int64 arrays; ``ahead[i]`` is how many samples come before
            the first one of ``sources[i]`` (0: the next sample).
        """
        count = self.remaining if count is None else require_int("count", count, minimum=0)
        limit = (
            self._quotas.size
            if max_sources is None
            else require_int("max_sources", max_sources, minimum=0)
        )
        here = self._first + self._position
        end = min(self._first + self._total, here + count)
        if limit == 0 or here >= end:
            return _EMPTY_I64, _EMPTY_I64
        if not self._shuffle:
            sources = np.arange(
                int(np.searchsorted(self._cum[1:], here, side="right")),
                int(np.searchsorted(self._cum[1:], end - 1, side="right")) + 1,
            )
            sources = sources[self._quotas[sources] > 0][:limit]
            return sources, np.maximum(self._cum[sources], here) - here
        found_sources: list[np.ndarray] = []
        found_at: list[np.ndarray] = []
        seen = np.zeros(self._quotas.size, dtype=bool)
        left = limit
        k = here
        while k < end and left > 0:
            chunk = self._chunk_at(k)
            if chunk.begin == k and chunk.end <= end:
                # a whole chunk ahead: go to the first block holding an unseen source (G alone)
                j = self._next_block_with(chunk.first_block, seen, end)
                if j is None:
                    break
                if self._begin(j) > k:
                    k = self._begin(j)
                    continue
            stop = min(end, chunk.end)
            new, at = _first_of(chunk.sources[k - chunk.begin : stop - chunk.begin], seen)
            new, at = new[:left], at[:left]
            found_sources.append(new)
            found_at.append(at + k)
            seen[new] = True
            left -= new.size
            k = stop
        if not found_sources:
            return _EMPTY_I64, _EMPTY_I64
        return np.concatenate(found_sources), np.concatenate(found_at) - here

    def _next_block_with(self, j: int, seen: np.ndarray, end: int) -> int | None:
        """The first block from ``j`` (not past global ``end``) holding an unseen source."""
        unseen = ~seen[self._active]
        step = max(1, _SCAN_CELLS // max(1, int(self._active.size)))
        while j < self._blocks:
            stop = min(self._blocks, j + step)
            before = self._before_many(j, stop)
            begins = before.sum(axis=1)
            has = (np.diff(before, axis=0) > 0)[:, unseen].any(axis=1)
            has &= begins[:-1] < end
            hits = np.flatnonzero(has)
            if hits.size:
                return j + int(hits[0])
            if int(begins[-1]) >= end:
                return None
            j = stop
        return None

    def upcoming(self, count: int) -> np.ndarray:
        """The distinct sources the next ``count`` samples draw from, in order of first need:
        open these ahead."""
        return self.first_needs(count)[0]

    def resident(self, k: int) -> np.ndarray:
        """The ``k`` sources needed soonest from here, however far ahead (fewer when fewer
        remain), in order of first need: what a reader holding at most ``k`` sources open
        should hold now."""
        return self.first_needs(None, max_sources=k)[0]

    # ---- introspection --------------------------------------------------------------------

    @property
    def sizes(self) -> np.ndarray:
        """Samples of each source (read-only)."""
        return self._sizes

    @property
    def weights(self) -> tuple[MixtureWeight, ...]:
        return self._weights

    @property
    def quotas(self) -> np.ndarray:
        """Samples of each source in the whole epoch (read-only)."""
        return self._quotas

    @property
    def epoch_size(self) -> int:
        """Samples in the whole epoch (all slots)."""
        return self._total_epoch

    @property
    def seed(self) -> int:
        return self._seed

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def shuffle(self) -> bool:
        return self._shuffle

    @property
    def block_size(self) -> int:
        return self._block_size

    @property
    def slot(self) -> WorkerSlot:
        return self._slot

    @property
    def span(self) -> tuple[int, int]:
        """This slot's positions ``[start, stop)`` of the epoch's order (:func:`slot_span`)."""
        return self._first, self._stop

    @property
    def position(self) -> int:
        """Samples of the slot's part already taken or skipped."""
        return self._position

    @property
    def total_samples(self) -> int:
        """Samples in the slot's part of the epoch."""
        return self._total

    @property
    def remaining(self) -> int:
        return self._total - self._position

    def worker_totals(self) -> np.ndarray:
        """Samples each DataLoader worker of this slot's rank yields this epoch (int64), as
        :func:`~episodestream.sampling.loader_consumption` takes them."""
        slot = self._slot
        totals = np.zeros(slot.num_workers, dtype=np.int64)
        for worker in range(slot.num_workers):
            start, stop = slot_span(self._total_epoch, slot.with_worker(worker, slot.num_workers))
            totals[worker] = stop - start
        return totals

    def source_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Which of each source's samples this epoch the slot's part holds: ``(first, stop)``
        int64 arrays, half-open, numbering the source's samples of the epoch from 0 (feed
        them to :func:`pass_segments`)."""
        first = self._counts_before(self._first)
        stop = self._counts_before(self._stop)
        return first, stop

    def source_counts(self) -> np.ndarray:
        """Samples of each source in the slot's part (int64); over all slots, the quotas."""
        first, stop = self.source_spans()
        return stop - first

    def segments(self, source: int) -> PassSegments:
        """The passes over ``source``'s frames that this slot's part covers."""
        source = require_int("source", source, minimum=0)
        if source >= self._quotas.size:
            raise SamplingError(f"source {source} is not below {self._quotas.size}")
        first, stop = self.source_spans()
        return pass_segments(
            int(self._sizes[source]),
            int(self._quotas[source]),
            self._epoch,
            seed=self._seed,
            source=source,
            first=int(first[source]),
            stop=int(stop[source]),
        )

    def prefix_bound(self) -> np.ndarray:
        """Per source, the bound on ``|count - k * quota / N|`` over every prefix of ``k``
        positions of the epoch's order (float; see the module docstring)."""
        active = int(self._active.size)
        if not self._total_epoch:
            return np.zeros(self._quotas.size)
        return 1.0 + (3 * active + self._block_size) * self._quotas / self._total_epoch

    def state(self) -> MixtureState:
        """The resume state at the current position."""
        slot = self._slot
        return MixtureState(
            seed=self._seed,
            epoch=self._epoch,
            shuffle=self._shuffle,
            block_size=self._block_size,
            mixture_digest=self._digest,
            world_size=slot.world_size,
            rank=slot.rank,
            num_workers=slot.num_workers,
            worker=slot.worker,
            samples_yielded=self._position,
        )

    def state_dict(self) -> dict[str, Any]:
        """:meth:`state` as a plain JSON-able dict with a ``version`` key."""
        return self.state().to_dict()


def _first_of(sources: np.ndarray, seen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sources of ``sources`` not ``seen``, in order of first appearance, and where."""
    unique, first = np.unique(sources, return_index=True)
    keep = ~seen[unique]
    unique, first = unique[keep], first[keep]
    order = np.argsort(first, kind="stable")
    return unique[order], first[order].astype(np.int64)

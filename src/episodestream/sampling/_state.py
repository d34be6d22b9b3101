"""Resume state of one slot's pool schedule: the inputs of the pure order plus the number of
samples already yielded, as a small JSON-able dict with a ``version`` key."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from episodestream.errors import SamplingError
from episodestream.sampling._validate import canonical_episodes, require_int

__all__ = ["STATE_VERSION", "SamplingState", "episodes_digest"]

STATE_VERSION = 1
"""Version written by :meth:`SamplingState.to_dict`; older versions load, newer ones are refused."""

# fields that must equal the running configuration for a resume to reproduce the same order;
# epoch and samples_yielded are what the state carries forward
_MUST_MATCH = (
    "world_size",
    "num_workers",
    "rank",
    "worker",
    "pool_size",
    "seed",
    "shuffle",
    "num_episodes",
    "num_frames",
    "episodes_digest",
)


def episodes_digest(episode_ids: ArrayLike, frame_counts: ArrayLike) -> str:
    """A short hex digest of an episode set and its frame counts (order-independent)."""
    ids, counts = canonical_episodes(episode_ids, frame_counts, allow_empty=True)
    digest = hashlib.sha256()
    digest.update(ids.astype("<i8").tobytes())
    digest.update(counts.astype("<i8").tobytes())
    return digest.hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class SamplingState:
    """Everything needed to recompute one slot's order and where it stopped.

    Attributes:
        seed, epoch: the order's seed and epoch.
        rank, world_size, worker, num_workers: the slot (see :class:`WorkerSlot`).
        pool_size, shuffle: the pool parameters.
        num_episodes, num_frames, episodes_digest: the slot's episode set.
        samples_yielded: draws already delivered; a resume starts at this position.
        version: format version of the dict form.
    """

    seed: int
    epoch: int
    rank: int
    world_size: int
    worker: int
    num_workers: int
    pool_size: int
    shuffle: bool
    num_episodes: int
    num_frames: int
    episodes_digest: str
    samples_yielded: int
    version: int = STATE_VERSION

    def __post_init__(self) -> None:
        for name in ("seed", "epoch", "rank", "worker", "num_episodes", "num_frames"):
            require_int(name, getattr(self, name), minimum=0)
        for name in ("world_size", "num_workers", "pool_size", "version"):
            require_int(name, getattr(self, name), minimum=1)
        require_int("samples_yielded", self.samples_yielded, minimum=0)
        if not isinstance(self.shuffle, bool):
            raise SamplingError(f"shuffle must be a bool, got {self.shuffle!r}")
        if not isinstance(self.episodes_digest, str):
            raise SamplingError(f"episodes_digest must be a str, got {self.episodes_digest!r}")
        if self.samples_yielded > self.num_frames:
            raise SamplingError(
                f"samples_yielded={self.samples_yielded} exceeds num_frames={self.num_frames}"
            )

    def to_dict(self) -> dict[str, Any]:
        """A plain JSON-able dict (ints, bool, str)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> SamplingState:
        """Parse a dict written by :meth:`to_dict`; unknown keys are ignored.

        Raises:
            SamplingError: not a mapping, a missing key, a bad value, or a newer version.
        """
        if not isinstance(state, Mapping):
            raise SamplingError(f"sampling state must be a mapping, got {type(state).__name__}")
        version = require_int("version", state.get("version"), minimum=1)
        if version > STATE_VERSION:
            raise SamplingError(
                f"sampling state version {version} is newer than this episodestream "
                f"understands ({STATE_VERSION}); upgrade episodestream to resume from it"
            )
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in state:
                raise SamplingError(f"sampling state lacks the field {f.name!r}")
            values[f.name] = state[f.name]
        if isinstance(values["shuffle"], np.bool_):
            values["shuffle"] = bool(values["shuffle"])
        return cls(**values)

    def check_compatible(self, expected: SamplingState) -> None:
        """Raise if this saved state cannot resume the run configured as ``expected``.

        ``epoch`` and ``samples_yielded`` are not compared: the saved state carries them.

        Raises:
            SamplingError: naming the first field that differs and both values.
        """
        for name in _MUST_MATCH:
            saved, running = getattr(self, name), getattr(expected, name)
            if saved != running:
                what = "episode set" if name.startswith(("num_", "episodes_")) else name
                raise SamplingError(
                    f"cannot resume: {name} differs ({what}): saved state has {saved!r}, "
                    f"this run has {running!r}"
                )

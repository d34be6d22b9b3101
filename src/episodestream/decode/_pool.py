"""DecoderPool: open decoders kept for reuse, bounded by count and bytes, leased one user at a
time."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from types import TracebackType
from typing import Generic, TypeVar

from episodestream._checks import check_int
from episodestream._closing import Closing
from episodestream.decode._base import Decoder
from episodestream.decode._heap import HeapTrimmer, heap_trimmer
from episodestream.errors import DecodeError, FrameNotFoundError

__all__ = [
    "DEFAULT_POOL_MAX_BYTES",
    "DEFAULT_POOL_MAX_DECODERS",
    "DecoderLease",
    "DecoderPool",
    "DecoderPoolStats",
]

_LOG = logging.getLogger(__name__)

#: Open decoders kept by default: a pool of 16 episodes x 3 cameras fits with room to spare.
DEFAULT_POOL_MAX_DECODERS = 64
#: Bytes of open decoders (their ``nbytes``) kept by default.
DEFAULT_POOL_MAX_BYTES = 512 * 1024 * 1024

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True, slots=True)
class DecoderPoolStats:
    """A snapshot of a pool's counters.

    ``decoders``/``bytes`` count every open decoder (idle and leased); ``hits`` are leases
    served by an idle decoder, ``opens`` leases that opened one; ``evictions`` idle decoders
    closed to respect the bounds; ``discarded`` decoders closed by :meth:`DecoderPool.discard`,
    by an error during a lease, or by closing the pool.
    """

    decoders: int
    bytes: int
    leased: int
    hits: int
    opens: int
    evictions: int
    discarded: int
    peak_decoders: int
    peak_bytes: int


class _Entry(Generic[K]):
    __slots__ = ("decoder", "generation", "key", "nbytes")

    def __init__(self, key: K, decoder: Decoder, generation: int) -> None:
        self.key = key
        self.decoder = decoder
        self.nbytes = int(decoder.nbytes)
        self.generation = generation


class DecoderLease(Generic[K]):
    """Exclusive use of one pooled decoder; returns it to the pool on exit.

    The decoder goes back idle when the block ends normally or with
    :class:`FrameNotFoundError` (raised before any decoding); any other exception closes it,
    since its state is then unknown.
    """

    __slots__ = ("_entry", "_pool", "_returned")

    def __init__(self, pool: DecoderPool[K], entry: _Entry[K]) -> None:
        self._pool = pool
        self._entry = entry
        self._returned = False

    @property
    def decoder(self) -> Decoder:
        return self._entry.decoder

    def __enter__(self) -> Decoder:
        return self._entry.decoder

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release(healthy=exc is None or isinstance(exc, FrameNotFoundError))

    def release(self, *, healthy: bool = True) -> None:
        """Give the decoder back (idempotent); ``healthy=False`` closes it instead."""
        if not self._returned:
            self._returned = True
            self._pool._give_back(self._entry, healthy)


class DecoderPool(Closing, Generic[K]):
    """Open decoders keyed by a caller's key (e.g. ``(episode, camera)``), reused across calls.

    Thread-safe. :meth:`lease` hands a decoder to one user at a time: a key already leased by
    another thread gets a second decoder rather than waiting. Idle decoders are kept in
    least-recently-used order and closed when the open decoders exceed ``max_decoders`` or
    their summed ``nbytes`` exceeds ``max_bytes``. Leased decoders are never closed under their
    user, so while more than the bounds are leased at once the pool runs over them until
    enough leases end. Whenever it closes decoders it asks ``trimmer`` (the process's
    :func:`heap_trimmer` by default) to hand free heap pages back.

    Usage::

        with pool.lease((episode, camera), lambda: open_decoder(clip_bytes, name=...)) as dec:
            frames = dec.frames_at(timestamps)
    """

    def __init__(
        self,
        *,
        max_decoders: int = DEFAULT_POOL_MAX_DECODERS,
        max_bytes: int = DEFAULT_POOL_MAX_BYTES,
        trimmer: HeapTrimmer | None = None,
    ) -> None:
        max_decoders = check_int("max_decoders", max_decoders, minimum=1)
        max_bytes = check_int("max_bytes", max_bytes, minimum=1)
        self._max_decoders = max_decoders
        self._max_bytes = max_bytes
        self._trimmer = heap_trimmer() if trimmer is None else trimmer
        self._lock = threading.Lock()
        self._idle: OrderedDict[int, _Entry[K]] = OrderedDict()  # id(entry), oldest first
        self._idle_by_key: dict[K, list[_Entry[K]]] = {}
        self._leased: dict[int, _Entry[K]] = {}
        self._generation: dict[K, int] = {}
        self._count = 0
        self._bytes = 0
        self._hits = self._opens = self._evictions = self._discarded = 0
        self._peak_count = self._peak_bytes = 0
        self._closed = False

    @property
    def max_decoders(self) -> int:
        return self._max_decoders

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    def lease(self, key: K, open_fn: Callable[[], Decoder]) -> DecoderLease[K]:
        """A decoder for ``key`` for exclusive use; ``open_fn()`` opens one when none is idle.

        ``open_fn`` runs in the calling thread without the pool's lock held; its errors
        propagate unchanged. Use the result as a context manager (or call ``release()``).

        Raises:
            DecodeError: the pool is closed.
        """
        with self._lock:
            self._check_open()
            entry = self._take_idle(key)
            if entry is not None:
                self._hits += 1
                self._leased[id(entry)] = entry
                return DecoderLease(self, entry)
            generation = self._generation.get(key, 0)
        decoder = open_fn()
        entry = _Entry(key, decoder, generation)
        with self._lock:
            closed = self._closed
            if not closed:
                self._opens += 1
                self._leased[id(entry)] = entry
                self._count += 1
                self._bytes += entry.nbytes
                self._peak_count = max(self._peak_count, self._count)
                self._peak_bytes = max(self._peak_bytes, self._bytes)
                to_close = self._evict_locked()
        if closed:
            self._close_all([entry])
            raise DecodeError(f"decoder pool closed while opening a decoder for {key!r}")
        self._close_all(to_close)
        return DecoderLease(self, entry)

    def discard(self, key: K) -> int:
        """Close the idle decoders of ``key`` now and its leased ones when their lease ends
        (e.g. after the clip's bytes were evicted). Returns how many were closed now."""
        with self._lock:
            self._generation[key] = self._generation.get(key, 0) + 1
            entries = self._idle_by_key.pop(key, [])
            for entry in entries:
                del self._idle[id(entry)]
                self._forget_locked(entry)
            self._discarded += len(entries)
        self._close_all(entries)
        return len(entries)

    def stats(self) -> DecoderPoolStats:
        with self._lock:
            return DecoderPoolStats(
                decoders=self._count,
                bytes=self._bytes,
                leased=len(self._leased),
                hits=self._hits,
                opens=self._opens,
                evictions=self._evictions,
                discarded=self._discarded,
                peak_decoders=self._peak_count,
                peak_bytes=self._peak_bytes,
            )

    def reset_stats(self) -> None:
        """Zero the counters and start the peaks afresh from the decoders open now (a pool
        reusing this one for its next pass reports that pass alone)."""
        with self._lock:
            self._hits = self._opens = self._evictions = self._discarded = 0
            self._peak_count, self._peak_bytes = self._count, self._bytes

    def __len__(self) -> int:
        with self._lock:
            return self._count

    def close(self) -> None:
        """Close every idle decoder now and each leased one when its lease ends; further
        leases raise DecodeError. Idempotent."""
        with self._lock:
            self._closed = True
            entries = list(self._idle.values())
            self._idle.clear()
            self._idle_by_key.clear()
            for entry in entries:
                self._forget_locked(entry)
            self._discarded += len(entries)
        self._close_all(entries)

    # -- internals (callers hold self._lock where the name says _locked) --------------------

    def _check_open(self) -> None:
        if self._closed:
            raise DecodeError("decoder pool is closed")

    def _take_idle(self, key: K) -> _Entry[K] | None:
        entries = self._idle_by_key.get(key)
        if not entries:
            return None
        entry = entries.pop()
        if not entries:
            del self._idle_by_key[key]
        del self._idle[id(entry)]
        return entry

    def _forget_locked(self, entry: _Entry[K]) -> None:
        self._count -= 1
        self._bytes -= entry.nbytes

    def _evict_locked(self) -> list[_Entry[K]]:
        evicted: list[_Entry[K]] = []
        while self._idle and (self._count > self._max_decoders or self._bytes > self._max_bytes):
            _, entry = self._idle.popitem(last=False)
            entries = self._idle_by_key[entry.key]
            entries.remove(entry)
            if not entries:
                del self._idle_by_key[entry.key]
            self._forget_locked(entry)
            self._evictions += 1
            evicted.append(entry)
        return evicted

    def _give_back(self, entry: _Entry[K], healthy: bool) -> None:
        to_close: list[_Entry[K]] = []
        with self._lock:
            self._leased.pop(id(entry), None)
            current = self._generation.get(entry.key, 0) == entry.generation
            if healthy and current and not self._closed:
                self._idle[id(entry)] = entry
                self._idle_by_key.setdefault(entry.key, []).append(entry)
                to_close = self._evict_locked()
            else:
                self._forget_locked(entry)
                self._discarded += 1
                to_close = [entry]
        self._close_all(to_close)

    def _close_all(self, entries: list[_Entry[K]]) -> None:
        for entry in entries:
            try:
                entry.decoder.close()
            except Exception:  # one decoder failing to close must not leak the others
                _LOG.warning("error closing decoder %s", entry.decoder.name, exc_info=True)
        if entries:
            # decoders close when an episode leaves: the moment its frames and decoder state
            # have been freed, so free pages are handed back (rate-limited, decode/_heap.py)
            self._trimmer.maybe_trim()

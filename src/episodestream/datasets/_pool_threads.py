"""The pool's thread lifetime: one process's fetch, rows, decode and open threads, kept from
one pass (epoch) to the next, parked between passes and stopped by ``close()``."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from episodestream.datasets._engine import OpenedDataset, StreamEngine
from episodestream.datasets._groups import Resources
from episodestream.decode import DecodeExecutor

__all__ = ["PassThreads", "ThreadKeeper"]

#: threads reading Parquet rows ahead (network-bound reads of entering episodes)
ROWS_THREADS = 2


class PassThreads:
    """One process's fetch, rows and decode threads and the engine they serve (with its
    decoder-open thread), kept from one pass (epoch) to the next.

    Fresh threads every pass made glibc give each new thread a malloc arena of its own, and
    RSS grew by a few MiB per pass; kept threads keep their arenas, so memory stays flat.
    They belong to the process that started them: a forked child (a DataLoader worker)
    inherits the object but not the threads, and never uses or closes it.
    """

    def __init__(
        self,
        dataset: OpenedDataset,
        resources: Resources,
        *,
        tolerance_s: float,
        max_open_decoders: int,
        byte_budget: int,
        decode_pending: int,
        rows_pending: int,
    ) -> None:
        decode_threads = resources.decode_threads
        #: what the threads were sized for: a pass needing other sizes starts its own
        self.key = (byte_budget, decode_threads, decode_pending, rows_pending)
        self.pid = os.getpid()
        self.engine = StreamEngine(
            dataset,
            resources,
            tolerance_s=tolerance_s,
            byte_budget=byte_budget,
            max_open_decoders=max_open_decoders,
        )
        decode: DecodeExecutor | None = None
        try:
            decode = DecodeExecutor(
                decode_threads, max_pending=decode_pending, name="episodestream-pool"
            )
            # rows read ahead on threads of their own: a Parquet read over a WAN must not
            # hold a decode thread
            rows = DecodeExecutor(ROWS_THREADS, max_pending=rows_pending, name="episodestream-rows")
        except BaseException:
            if decode is not None:
                decode.close()
            self.engine.close()
            raise
        self.decode, self.rows = decode, rows

    def start_pass(self) -> None:
        """Counters from zero: metrics() reports the pass that starts now."""
        self.engine.cache.reset_metrics()
        self.engine.decoders.reset_stats()

    def close(self) -> None:
        """Join every thread (idempotent); a no-op in a process that did not start them."""
        if os.getpid() != self.pid:
            return
        # the engine first: a pass still running in another thread then fails fast with a
        # typed error (cache or decoder pool closed) instead of waiting on cancelled work
        self.engine.close()
        self.decode.close()
        self.rows.close()


def _close_parked(parked: list[PassThreads]) -> None:
    """Finalizer of a keeper dropped without close(), also run at interpreter exit."""
    while parked:
        try:
            threads = parked.pop()
        except IndexError:  # emptied by another thread meanwhile
            return
        threads.close()


class ThreadKeeper:
    """The threads of a pool dataset in this process: those of the pass running now, and
    those of the last finished pass, parked for the next one (at most one set).

    Pickled (into a DataLoader worker, or elsewhere), it arrives empty: threads and locks stay
    in the process that started them. A finalizer joins parked threads when the keeper is
    dropped without :meth:`close` or the interpreter exits.
    """

    def __init__(self) -> None:
        #: threads of the last finished pass, kept for the next one (at most one set)
        self._parked: list[PassThreads] = []
        #: threads of the pass running now
        self._active: PassThreads | None = None
        #: close() calls so far: a pass that saw one after it started does not park
        self._closes = 0
        self._lock = threading.Lock()
        self._pid = os.getpid()
        weakref.finalize(self, _close_parked, self._parked)

    def _guard(self) -> threading.Lock:
        """The lock guarding the thread state, fresh in a forked child (where another
        thread of the parent may have held it at the fork)."""
        if self._pid != os.getpid():
            self._lock, self._pid = threading.Lock(), os.getpid()
        return self._lock

    @property
    def active(self) -> PassThreads | None:
        return self._active

    def start_pass(
        self,
        dataset: OpenedDataset,
        resources: Resources,
        *,
        tolerance_s: float,
        max_open_decoders: int,
        byte_budget: int,
        decode_pending: int,
        rows_pending: int,
    ) -> tuple[PassThreads, int]:
        """This process's kept threads if sized alike, else fresh ones; and the close count."""
        with self._guard():
            parked = self._parked[:]
            self._parked.clear()
            closes = self._closes
        key = (byte_budget, resources.decode_threads, decode_pending, rows_pending)
        kept = None
        for threads in parked:
            if threads.pid != os.getpid():
                continue  # a parent's, inherited by fork: its threads do not exist here
            if kept is None and threads.key == key:
                kept = threads
            else:
                threads.close()
        if kept is None:
            kept = PassThreads(
                dataset,
                resources,
                tolerance_s=tolerance_s,
                max_open_decoders=max_open_decoders,
                byte_budget=byte_budget,
                decode_pending=decode_pending,
                rows_pending=rows_pending,
            )
        else:
            kept.start_pass()
        with self._guard():
            self._active = kept
        return kept, closes

    def end_pass(self, threads: PassThreads, *, closes: int, finished: bool) -> None:
        """Keep the threads of a pass that ran to its end for the next pass; a pass ended
        early (break, error, close) may leave work in flight: its threads stop."""
        with self._guard():
            if self._active is threads:
                self._active = None
            keep = finished and closes == self._closes and not self._parked
            if keep and threads.engine.cache.idle:
                self._parked.append(threads)
                return
        threads.close()

    def close(self) -> None:
        """Stop the threads of a pass running now and those parked for the next pass."""
        with self._guard():
            self._closes += 1
            stopping = self._parked[:]
            self._parked.clear()
            if self._active is not None:
                stopping.append(self._active)
            self._active = None
        for threads in stopping:
            threads.close()  # a no-op for threads a parent process started before a fork

    def __getstate__(self) -> dict[str, Any]:
        return {}  # threads and locks stay in this process

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]

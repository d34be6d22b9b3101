"""Recycled float32 frame buffers: a converted frame is written to pages already mapped.

A 640x480 float32 frame is 3.5 MiB. glibc serves such blocks with mmap, or from a heap it trims
when a run of them is freed together (a batch collated, a pool's queue drained), so each new
buffer page-faults in ~900 zeroed pages: 2-3 ms of CPU per sample with two cameras when decode
threads convert frames that another thread frees (benchmarks/per_frame.py, docs/BENCHMARKS.md,
"Per-frame overhead"). Here a buffer returns to an idle list when the last tensor viewing it is
freed, and the next frame of the same size reuses it.
"""

from __future__ import annotations

import os
import threading
import weakref

import numpy as np
import torch

__all__ = ["FloatFrameBuffers", "float_frame_buffers"]

#: Buffers smaller than this come from torch's allocator as usual (glibc's default mmap
#: threshold: below it, freed blocks are reused from the heap without faults).
MIN_RECYCLED_BYTES = 128 * 1024
#: Idle bytes kept per process: a batch of 32 samples with three 640x480 cameras fits.
MAX_IDLE_BYTES = 512 * 1024 * 1024


class FloatFrameBuffers:
    """Hands out float32 tensors backed by recycled numpy buffers.

    Thread-safe; a buffer goes back to the idle list (bounded by ``max_idle_bytes``) when the
    last tensor or view of it is freed, from whichever thread frees it. At the bound, idle
    buffers of other sizes (frames nobody converts any more) make room first; then the
    returning buffer goes to the allocator.
    """

    def __init__(self, *, max_idle_bytes: int = MAX_IDLE_BYTES) -> None:
        self._max_idle_bytes = max_idle_bytes
        # reentrant: a garbage collection inside the lock may free a tensor and return its
        # buffer from this very thread
        self._lock = threading.RLock()
        self._idle: dict[int, list[np.ndarray]] = {}
        self._idle_bytes = 0

    @property
    def idle_bytes(self) -> int:
        return self._idle_bytes

    def empty_like(self, frames: torch.Tensor) -> torch.Tensor:
        """An uninitialised float32 CPU tensor of ``frames``' shape and layout (strides), as
        ``torch.empty_like(frames, dtype=torch.float32)`` gives."""
        count = frames.numel()
        layout = _layout(frames)
        if layout is None or 4 * count < MIN_RECYCLED_BYTES:
            return torch.empty_like(frames, dtype=torch.float32)
        shape, permutation = layout
        base = self._take(count)
        view = base.reshape(shape)  # a new array object: its death frees the buffer
        finalizer = weakref.finalize(view, self._give_back, base)
        finalizer.atexit = False
        tensor = torch.from_numpy(view)
        return tensor if permutation is None else tensor.permute(permutation)

    def clear(self) -> None:
        """Drop every idle buffer."""
        with self._lock:
            self._idle.clear()
            self._idle_bytes = 0

    def _take(self, count: int) -> np.ndarray:
        with self._lock:
            idle = self._idle.get(count)
            if idle:
                self._idle_bytes -= 4 * count
                return idle.pop()
        return np.empty(count, dtype=np.float32)

    def _give_back(self, base: np.ndarray) -> None:
        with self._lock:
            if self._idle_bytes + base.nbytes > self._max_idle_bytes:
                self._drop_other_sizes(base.size, base.nbytes)
            if self._idle_bytes + base.nbytes > self._max_idle_bytes:
                return  # over the bound: the allocator takes it back
            self._idle.setdefault(base.size, []).append(base)
            self._idle_bytes += base.nbytes

    def _drop_other_sizes(self, keep: int, needed: int) -> None:
        """Free idle buffers of sizes other than ``keep`` until ``needed`` more bytes fit."""
        for size in [s for s in self._idle if s != keep]:
            idle = self._idle[size]
            while idle and self._idle_bytes + needed > self._max_idle_bytes:
                self._idle_bytes -= idle.pop().nbytes
            if not idle:
                del self._idle[size]
            if self._idle_bytes + needed <= self._max_idle_bytes:
                return

    def _after_fork(self) -> None:
        # a lock held by another thread at fork time stays held in the child
        self._lock = threading.RLock()
        self._idle = {}
        self._idle_bytes = 0


def _layout(frames: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...] | None] | None:
    """(shape in memory order, permutation back to ``frames``' order) for a contiguous tensor
    or an ``N x C x H x W`` view of ``N x H x W x C`` memory (what torchcodec returns); None
    for other layouts."""
    if frames.is_contiguous():
        return tuple(frames.shape), None
    if frames.dim() == 4 and frames.permute(0, 2, 3, 1).is_contiguous():
        n, c, h, w = frames.shape
        return (n, h, w, c), (0, 3, 1, 2)
    return None


_BUFFERS = FloatFrameBuffers()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_BUFFERS._after_fork)


def float_frame_buffers() -> FloatFrameBuffers:
    """The process's recycler, used by :func:`to_float`."""
    return _BUFFERS

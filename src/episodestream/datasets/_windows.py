"""The window pool's run time: windows decoded once, in order, under a decoded-byte budget,
and samples served from them (docs/ARCHITECTURE.md; README, "Decoding each frame once").

The order comes from :class:`episodestream.sampling.WindowSchedule` (pure). Here:

- an episode's compressed bytes are fetched into the byte cache ahead of its first window and
  released once its last window is decoded, so every window of a fetched episode costs no
  network;
- a window's frames ``[lo, hi)`` of every camera (its own frames plus the margins that
  ``delta_timestamps`` read, decoded but not counted as samples) are decoded on the decode
  threads frame by frame, in order, ahead of the window entering the pool;
- each window's decoded bytes are reserved from :class:`DecodedBudget` before its decode is
  queued and returned when its last sample is built, so the budget holds at every moment;
- samples are built by :class:`SampleBuilder` with a frames source that reads the window
  instead of seeking a decoder: the same source times, the same uint8 frames, bit for bit.

Threads: only the iterating thread touches the schedule, the budget's reservations and the
byte cache's pins; decode threads run :func:`decode_window` and sample builds.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any

import numpy as np
import torch

from episodestream.cache import ResidentEpisode
from episodestream.datasets._engine import StreamEngine
from episodestream.datasets._samples import EpisodeRows, SampleBuilder
from episodestream.datasets._waits import result_within
from episodestream.decode import DecodeExecutor
from episodestream.errors import DatasetFormatError, DecodeError
from episodestream.lerobot import DatasetMeta
from episodestream.sampling import WindowSchedule, decoded_span

__all__ = [
    "DEFAULT_DECODE_AHEAD",
    "DecodedBudget",
    "DecodedWindow",
    "WindowRun",
    "decode_window",
    "max_window_bytes",
]

#: windows decoded ahead of entering the pool (their bytes come out of the decoded budget)
DEFAULT_DECODE_AHEAD = 2
#: bound on waiting for one decoded sample (a whole window's decode may be in front of it)
_SAMPLE_TIMEOUT_S = 300.0
# a window's frame times are computed as SampleBuilder computes them; allow float noise only
_TIME_SLACK_S = 1e-7
_RGB = 3


def max_window_bytes(
    meta: DatasetMeta, offsets: Mapping[str, np.ndarray], window_frames: int
) -> int:
    """Decoded bytes of the largest possible window: ``window_frames`` plus the margins its
    cameras' ``delta_timestamps`` read, times each camera's ``3 x H x W`` (info.json)."""
    total = 0
    for key in meta.video_keys:
        feature = meta.feature(key)
        steps = offsets.get(key)
        margin = 0 if steps is None else int(steps.max() - steps.min())
        total += (window_frames + margin) * _RGB * int(feature.height) * int(feature.width)
    return max(total, 1)


class DecodedBudget:
    """Decoded bytes reserved by windows, under a fixed budget; the peak is kept.

    Reservations and releases come from one thread; reads may come from any.
    """

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = int(budget_bytes)
        self._used = 0
        self._peak = 0
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        return self._used

    @property
    def peak_bytes(self) -> int:
        return self._peak

    def fits(self, nbytes: int) -> bool:
        return self._used + nbytes <= self.budget_bytes

    def reserve(self, nbytes: int) -> None:
        with self._lock:
            if self._used + nbytes > self.budget_bytes:  # a caller bug: it checks fits() first
                raise AssertionError(
                    f"decoded budget exceeded: {self._used} + {nbytes} > {self.budget_bytes}"
                )
            self._used += nbytes
            self._peak = max(self._peak, self._used)

    def release(self, nbytes: int) -> None:
        with self._lock:
            self._used -= nbytes


class DecodedWindow:
    """One window's decoded frames: per camera, frames ``[lo, hi)`` of the episode, each its
    own uint8 ``3 x H x W`` tensor as the decoder returned it, and their source times.

    A frame that only one sample reads (a camera without ``delta_timestamps``: every frame is
    drawn once per epoch) is handed to that sample as is, with no copy; frames several samples
    read are copied. Each frame being its own allocation, a sample keeps no more memory alive
    than its own frames (a view into a batch of frames would keep the whole batch).
    """

    __slots__ = ("_frames", "_served_once", "_times", "episode", "window")

    def __init__(
        self,
        window: int,
        episode: int,
        times: Mapping[str, np.ndarray],
        frames: Mapping[str, list[torch.Tensor]],
        *,
        served_once: frozenset[str] = frozenset(),
    ) -> None:
        self.window = window
        self.episode = episode
        self._times = dict(times)
        self._frames = dict(frames)
        self._served_once = served_once

    @property
    def nbytes(self) -> int:
        return sum(f.numel() for frames in self._frames.values() for f in frames)

    def frames(self, camera: str, source_times_s: np.ndarray) -> torch.Tensor:
        """uint8 ``N x 3 x H x W`` frames shown at ``source_times_s``: the decoded frame itself
        for a single frame of a camera whose frames are served once, else copies.

        Raises:
            DecodeError: a time this window did not decode (a bug: the window's span is
                computed from the same ``delta_timestamps`` as the samples).
        """
        times = self._times[camera]
        query = np.asarray(source_times_s, dtype=np.float64)
        at = np.clip(np.searchsorted(times, query - _TIME_SLACK_S), 0, times.size - 1)
        if not np.all(np.abs(times[at] - query) <= _TIME_SLACK_S):
            raise DecodeError(
                f"window {self.window} of episode {self.episode} / {camera}: frames at "
                f"{query.round(6).tolist()[:5]} s are outside its decoded span "
                f"{times[0]:.6f}..{times[-1]:.6f} s"
            )
        frames = self._frames[camera]
        if at.size == 1 and camera in self._served_once:
            return frames[int(at[0])].unsqueeze(0)
        picked = [frames[i] for i in at.tolist()]
        if all(f.device.type == "cpu" and f.permute(1, 2, 0).is_contiguous() for f in picked):
            # decoders hand out channels-last frames viewed as CHW: copy them in that layout
            # (a memcpy; a CHW copy is a transpose, 25x slower), with numpy (one thread: torch's
            # parallel copy leaves OpenMP threads spinning), and view them as decoders do
            hwc = np.stack([f.permute(1, 2, 0).numpy() for f in picked])
            return torch.from_numpy(hwc).permute(0, 3, 1, 2)
        return torch.stack(picked)


def window_frames_source(
    window: DecodedWindow, camera: str, source_times_s: np.ndarray
) -> torch.Tensor:
    """:meth:`SampleBuilder.build`'s frames callback, served from a decoded window."""
    return window.frames(camera, source_times_s)


def decode_window(
    engine: StreamEngine,
    resident: ResidentEpisode,
    timestamps: np.ndarray,
    *,
    window: int,
    spans: Mapping[str, tuple[int, int]],
    source_offsets_s: Mapping[str, float],
    frame_bytes: Mapping[str, int],
    served_once: frozenset[str] = frozenset(),
) -> DecodedWindow:
    """Decode frames ``spans[camera]`` of every camera of ``resident``'s episode, in order,
    one frame per decoder call.

    One frame per call: each frame is its own allocation, handed to its sample without a copy
    (``served_once`` cameras; see :class:`DecodedWindow`). Measured against batches of 4-16
    frames copied into recycled window buffers, this costs less CPU per frame: two memcpys
    of every frame (into the buffer, out to the sample) cost more than the extra calls, and
    freed single frames are reused by the allocator without page faults.

    Source times are ``source_offsets_s[camera] + timestamps[frame]``, computed exactly as
    :class:`SampleBuilder` computes them, so lookups find the same frames.

    Raises:
        DatasetFormatError: frames larger than info.json says (the decoded budget was
            computed from it).
    """
    times: dict[str, np.ndarray] = {}
    frames: dict[str, list[torch.Tensor]] = {}
    for camera, (lo, hi) in spans.items():
        source = float(source_offsets_s[camera]) + timestamps[lo:hi].astype(np.float64)
        decoded = []
        for at in range(source.size):
            frame = engine.frames(resident, camera, source[at : at + 1])[0]
            if frame.numel() * frame.element_size() > frame_bytes[camera]:
                raise DatasetFormatError(
                    f"episode {resident.episode} / {camera}: frames decode to "
                    f"{tuple(frame.shape)}, larger than meta/info.json's video shape, from "
                    "which the decoded budget is computed"
                )
            decoded.append(frame)
        times[camera] = source
        frames[camera] = decoded
    return DecodedWindow(window, resident.episode, times, frames, served_once=served_once)


class WindowRun:
    """One iteration of the window pool in one process (see the module docstring).

    Args:
        engine: this process's fetch/decode machinery.
        samples: the sample builder (its ``offsets`` give the margins).
        rows: the Parquet rows of episodes, read ahead on their own threads.
        schedule: the slot's window order, positioned where the iteration starts.
        budget: the slot's decoded budget.
        executor: decode threads (decodes and sample builds).
        prefetch_episodes: episodes whose bytes are fetched ahead of their first window.
        decode_ahead: windows decoded ahead of entering.
        max_pending_samples: sample builds in flight.
        wait_timeout_s: bound on waiting for one episode's bytes.
        on_sample: called with the episode of each sample handed out.
    """

    def __init__(
        self,
        engine: StreamEngine,
        samples: SampleBuilder,
        rows: EpisodeRows,
        schedule: WindowSchedule,
        *,
        budget: DecodedBudget,
        executor: DecodeExecutor,
        prefetch_episodes: int,
        decode_ahead: int,
        max_pending_samples: int,
        wait_timeout_s: float,
        on_sample: Callable[[int], None],
        episode_lengths: Mapping[int, int],
    ) -> None:
        self.engine = engine
        self.samples = samples
        self.rows = rows
        self.schedule = schedule
        self.budget = budget
        self.executor = executor
        self.prefetch_episodes = prefetch_episodes
        self.decode_ahead = decode_ahead
        self.max_pending = max_pending_samples
        self.wait_timeout_s = wait_timeout_s
        self.on_sample = on_sample
        self.lengths = episode_lengths
        meta = samples.meta
        self.cameras = meta.video_keys
        self.frame_bytes = {
            key: _RGB * meta.feature(key).height * meta.feature(key).width for key in self.cameras
        }
        # cameras whose every frame one sample reads: frames go to samples without a copy
        self.served_once = frozenset(k for k in self.cameras if k not in samples.offsets)
        table = meta.episodes
        self.from_ts = {key: table.video(key).from_timestamp for key in self.cameras}
        # windows in the order they are decoded: the resident ones first (after a resume
        # some of their frames were drawn already), then every one still to enter
        self.decode_order = np.concatenate(
            [schedule.resident(), schedule.entry_order[schedule.entered :]]
        ).tolist()
        self.next_decode = 0
        self.to_decode = dict(schedule.windows_to_decode())
        episodes = self.schedule.window_episodes[self.decode_order]
        _, first = np.unique(episodes, return_index=True)
        self.episode_order = episodes[np.sort(first)].tolist()
        self.next_episode = 0
        self.decoded: dict[int, Future[DecodedWindow]] = {}
        self.reserved: dict[int, int] = {}
        self.entered_windows: set[int] = set()
        self.finishing: list[tuple[int, Future[DecodedWindow]]] = []
        self.retained: set[int] = set()
        self.started: set[int] = set()
        self.pending: collections.deque[tuple[str, Any]] = collections.deque()
        # counters, read by metrics() from any thread
        self.windows_decoded = 0
        self.frames_decoded = 0  # camera-frames
        self.samples_out = 0
        self.window_waits = 0
        self.refill_waits = 0
        self.refill_wait_s = 0.0

    # -- metrics -------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        cameras = max(len(self.cameras), 1)
        return {
            "unit": "window",
            "episodes_entered": len(self.started),
            "windows_decoded": self.windows_decoded,
            "decoded_frames": self.frames_decoded // cameras,
            "decoded_frames_per_sample": (self.frames_decoded / cameras / self.samples_out)
            if self.samples_out
            else None,
            "decoded_bytes": self.budget.used_bytes,
            "decoded_peak_bytes": self.budget.peak_bytes,
            "decoded_budget_bytes": self.budget.budget_bytes,
            "resident_windows": self.schedule.params.resident_windows,
            "window_waits": self.window_waits,
            "refill_waits": self.refill_waits,
            "refill_wait_s": self.refill_wait_s,
        }

    # -- the loop --------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            self._prefetch_episodes()
            for event in self.schedule.events():
                if event.kind == "enter":
                    yield from self._enter(event.window)
                elif event.kind == "draw":
                    future = self.executor.submit(
                        self._build, event.episode_id, event.frame_index, self.decoded[event.window]
                    )
                    self.pending.append(("sample", (event.episode_id, future)))
                    while len(self.pending) > self.max_pending:
                        yield from self._pop()
                else:
                    self.pending.append(("leave", event.window))
            while self.pending:
                yield from self._pop()
            self._finish_episodes(wait=True)
        finally:
            # the run object outlives the iteration (metrics): the decoded frames do not
            self.decoded.clear()

    def _enter(self, window: int) -> Iterator[dict[str, Any]]:
        if window not in self.decoded:
            # not decoded ahead (the budget was busy): it is the next to decode; make room
            assert self.decode_order[self.next_decode] == window
            size = self._window_bytes(window)
            while not self.budget.fits(size) and self.pending:
                yield from self._pop()  # a leave frees a window and may queue this one
            if window not in self.decoded:
                self._submit(window, block=True)
        elif not self.decoded[window].done():
            self.window_waits += 1
        self.entered_windows.add(window)
        self._top_up()

    def _pop(self) -> Iterator[dict[str, Any]]:
        kind, item = self.pending.popleft()
        if kind == "leave":  # every sample of the window is built: its frames can go
            self.decoded.pop(item, None)
            self.entered_windows.discard(item)
            self.budget.release(self.reserved.pop(item))
            self._top_up()
            return
        episode, future = item
        sample = result_within(
            future,
            _SAMPLE_TIMEOUT_S,
            lambda: DecodeError(
                f"episode {episode}: a sample of the window pool was not built within "
                f"{_SAMPLE_TIMEOUT_S:g} s"
            ),
        )
        self.samples_out += 1
        self.on_sample(episode)
        yield sample

    def _build(self, episode: int, frame: int, window: Future[DecodedWindow]) -> dict[str, Any]:
        decoded = result_within(
            window,
            _SAMPLE_TIMEOUT_S,
            lambda: DecodeError(
                f"episode {episode} frame {frame}: its window was not decoded within "
                f"{_SAMPLE_TIMEOUT_S:g} s"
            ),
        )
        return self.samples.build(
            episode, frame, self.rows.get(episode), decoded, window_frames_source
        )

    # -- decoding ahead ----------------------------------------------------------------------

    def _spans(self, window: int) -> dict[str, tuple[int, int]]:
        episode = int(self.schedule.window_episodes[window])
        start = int(self.schedule.window_starts[window])
        stop = int(self.schedule.window_stops[window])
        length = self.lengths[episode]
        offsets = self.samples.offsets
        return {key: decoded_span(start, stop, length, offsets.get(key)) for key in self.cameras}

    def _window_bytes(self, window: int) -> int:
        return sum(
            (hi - lo) * self.frame_bytes[key] for key, (lo, hi) in self._spans(window).items()
        )

    def _top_up(self) -> None:
        """Queue decodes of the next windows to enter while the budget and the byte cache
        allow, never blocking; fetch the bytes of upcoming episodes."""
        self._finish_episodes(wait=False)
        while self.next_decode < len(self.decode_order):
            ahead = len(self.decoded) - len(self.entered_windows)
            if ahead >= self.decode_ahead:
                break
            window = self.decode_order[self.next_decode]
            if not self.budget.fits(self._window_bytes(window)):
                break
            if not self._submit(window, block=False):
                break
        self._prefetch_episodes()

    def _submit(self, window: int, *, block: bool) -> bool:
        episode = int(self.schedule.window_episodes[window])
        cache = self.engine.cache
        if episode not in self.started:
            cache.retain(episode)
            self.started.add(episode)
            self.retained.add(episode)
            self.rows.prefetch(episode)
        resident: ResidentEpisode | None = None
        if self.cameras:
            if not cache.is_ready(episode):
                if not block:
                    cache.prefetch(episode)
                    return False
                waited = time.perf_counter()
                # needed now; when pinned episodes fill the budget (after a resume the resident
                # windows may span more episodes than are open), let their decodes finish
                while not cache.prefetch(episode, evict=True) and self.finishing:
                    finishing_episode, last_decode = self.finishing[0]
                    if not concurrent.futures.wait([last_decode], timeout=_SAMPLE_TIMEOUT_S).done:
                        raise DecodeError(
                            f"episode {finishing_episode}: its last window decodes did not "
                            f"finish within {_SAMPLE_TIMEOUT_S:g} s"
                        )
                    self._finish_episodes(wait=False)
                resident = cache.wait_ready(episode, timeout=self.wait_timeout_s)
                self.refill_waits += 1
                self.refill_wait_s += time.perf_counter() - waited
            else:
                resident = cache.wait_ready(episode, timeout=self.wait_timeout_s)
        spans = self._spans(window)
        size = self._window_bytes(window)
        self.budget.reserve(size)
        self.reserved[window] = size
        self.next_decode += 1
        self.windows_decoded += 1
        self.frames_decoded += sum(hi - lo for lo, hi in spans.values())
        future = self.executor.submit(self._decode, episode, window, resident, spans)
        self.decoded[window] = future
        self.to_decode[episode] -= 1
        if self.to_decode[episode] == 0:
            self.finishing.append((episode, future))
        return True

    def _decode(
        self,
        episode: int,
        window: int,
        resident: ResidentEpisode | None,
        spans: dict[str, tuple[int, int]],
    ) -> DecodedWindow:
        if resident is None:  # no cameras: nothing to decode
            return DecodedWindow(window, episode, {}, {})
        timestamps = self.rows.get(episode)["timestamp"]
        row = self.samples.meta.episodes.row(episode)
        offsets = {key: float(self.from_ts[key][row]) for key in self.cameras}
        return decode_window(
            self.engine,
            resident,
            timestamps,
            window=window,
            spans=spans,
            source_offsets_s=offsets,
            frame_bytes=self.frame_bytes,
            served_once=self.served_once,
        )

    def _finish_episodes(self, *, wait: bool) -> None:
        """Unpin and drop the bytes of episodes whose last window is decoded."""
        still = []
        for episode, future in self.finishing:
            if wait or future.done():  # at the end every decode has finished
                cache = self.engine.cache
                cache.release(episode)
                cache.evict(episode)
                self.engine.forget(episode)
                self.retained.discard(episode)
            else:
                still.append((episode, future))
        self.finishing = still

    def _prefetch_episodes(self) -> None:
        """Fetch the bytes of the next episodes to start decoding, in order."""
        order = self.episode_order
        while self.next_episode < len(order) and order[self.next_episode] in self.started:
            self.next_episode += 1
        cache = self.engine.cache
        for episode in order[self.next_episode : self.next_episode + self.prefetch_episodes]:
            if not cache.prefetch(episode):
                break
            self.rows.prefetch(episode)

"""EpisodePoolDataset: the exact-coverage episode pool as a torch IterableDataset."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import CancelledError
from dataclasses import replace
from typing import Any

import torch.utils.data

from episodestream._closing import Closing
from episodestream.datasets._compat import LeRobotSurface, dataset_config, one_of
from episodestream.datasets._engine import (
    StreamEngine,
    open_for_samples,
)
from episodestream.datasets._groups import (
    MAX_DECODE_THREADS,
    MAX_PENDING_SAMPLES,
    MAX_POOL_EPISODES,
    MAX_WINDOW_FRAMES,
    ImageDtype,
    Order,
    PoolUnit,
    Resources,
    SampleOptions,
)
from episodestream.datasets._options import StreamOptions
from episodestream.datasets._pool_progress import PoolMetrics
from episodestream.datasets._pool_resume import PoolPosition
from episodestream.datasets._pool_run import RunSettings, pass_sizes, run_episodes, window_run
from episodestream.datasets._pool_threads import ThreadKeeper
from episodestream.datasets._samples import ImageTransform
from episodestream.datasets._source import Source
from episodestream.datasets._windows import DEFAULT_DECODE_AHEAD, WindowRun, max_window_bytes
from episodestream.datasets._world import detect_rank, detect_slot
from episodestream.decode import BackendName
from episodestream.errors import DecodeError
from episodestream.sampling import (
    DEFAULT_SPREAD,
    PoolSchedule,
    episodes_digest,
    plan_shards,
    window_slots,
)
from episodestream.storage import BaseRangeReader, Location

__all__ = [
    "MAX_DECODE_THREADS",
    "MAX_PENDING_SAMPLES",
    "MAX_POOL_EPISODES",
    "MAX_WINDOW_FRAMES",
    "EpisodePoolDataset",
]

#: bound on waiting for one decoded sample (decode of one multi-camera sample)
DEFAULT_SAMPLE_TIMEOUT_S = 120.0


class EpisodePoolDataset(Closing, LeRobotSurface, torch.utils.data.IterableDataset):
    """Iterable dataset drawing every selected frame exactly once per epoch from a pool of
    resident episodes (see docs/ARCHITECTURE.md, "A sample's way through").

    Episodes are split between ranks (``torch.distributed`` or ``RANK``/``WORLD_SIZE``) and
    then DataLoader workers, balanced by frames; ``byte_budget`` is per rank and is split
    between its workers. Each worker keeps ``pool_size`` episodes resident, draws uniformly
    over the frames left in its pool, prefetches the next ``prefetch_episodes`` entries, and
    decodes on ``decode_threads`` threads (image transforms run there too; 0: in the iterating
    thread, one core per DataLoader worker, for as many workers as cores). Samples equal
    :class:`EpisodeStreamDataset`'s for the same (episode, frame).

    Resume: ``state_dict(samples_consumed=..., num_workers=..., batch_size=...)`` then, in a new
    run, ``load_state_dict(state)`` before iterating: the iteration yields exactly the samples
    the interrupted one had not delivered, in the same order. Call ``set_epoch(e)`` each epoch.

    Threads: an iteration that runs to its end keeps this process's fetch, rows, decode and
    decoder-open threads for the next one (in persistent DataLoader workers too): no epoch
    starts fresh threads, which glibc gave fresh malloc arenas. One ended early (``break``, an
    error) stops them. ``close()`` joins them all, as does dropping the dataset or leaving the
    interpreter.

    ``unit="window"`` (README, "Decoding each frame once") makes the resident unit a window
    of ``window_frames`` consecutive frames of one episode (all cameras), decoded once, in
    order, into uint8 frames held under ``decoded_budget`` (per rank, split between workers
    like ``byte_budget``), and drawn from memory: about one decoded frame per sample instead of
    a seek per sample. ``pool_size`` episodes are then open at once (their compressed bytes in
    the byte cache, their windows interleaved); as many windows as the decoded budget holds
    are resident. Coverage, resume, epochs and samples are as with whole episodes;
    ``metrics()`` reports ``decoded_frames_per_sample`` and unique episodes per batch.

    Configuration (README, "Options"): ``source=`` (a :class:`Source`, or the first
    argument), ``resources=`` (:class:`Resources`), ``samples=``/``sample_options=``
    (:class:`SampleOptions`) and ``order=`` (:class:`Order`); each flat keyword is a field of
    one of them, LeRobot's keywords and ``options=`` (:class:`StreamOptions`) are still taken
    (``datasets/_compat.py``). A keyword left at None takes its group's default; a setting
    given twice with two values is a ``ConfigError``. The resolved groups are ``ds.source``,
    ``ds.resources``, ``ds.sample_options`` and ``ds.order``.

    This class is a shell: the threads live in ``_pool_threads.py``, the epoch and resume
    bookkeeping in ``_pool_resume.py``, the counters in ``_pool_progress.py`` and the run loops
    in ``_pool_run.py``.
    """

    def __init__(
        self,
        repo_id: str | os.PathLike[str] | Location | Source | None = None,
        root: str | os.PathLike[str] | Location | None = None,
        *,
        source: Source | None = None,
        resources: Resources | None = None,
        samples: SampleOptions | None = None,
        sample_options: SampleOptions | None = None,
        order: Order | None = None,
        pool_size: int | None = None,
        prefetch_episodes: int | None = None,
        byte_budget: int | str | None = None,
        seed: int | None = None,
        shuffle: bool | None = None,
        episodes: Sequence[int] | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        decode_threads: int | None = None,
        max_pending_samples: int | None = None,
        image_dtype: ImageDtype | None = None,
        image_transforms: ImageTransform | None = None,
        decoder: BackendName | None = None,
        device: str | None = None,
        revision: str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        tolerance_s: float | None = None,
        video_backend: str | None = None,
        return_uint8: bool = False,
        repo_type: str | None = None,
        depth_output_unit: str | None = None,
        unit: PoolUnit | None = None,
        window_frames: int | None = None,
        decoded_budget: int | str | None = None,
        options: StreamOptions | None = None,
        reader: BaseRangeReader | None = None,
        **stream_options: Any,
    ) -> None:
        super().__init__()
        # every argument is checked, in its option group, before anything is opened (no
        # request for a bad one); a keyword left at None takes the group's default
        config = dataset_config(
            "EpisodePoolDataset",
            first=repo_id,
            root=root,
            source=source,
            resources=resources,
            samples=one_of("samples", samples, "sample_options", sample_options),
            order=order,
            options=options,
            keywords={
                "pool_size": pool_size,
                "prefetch_episodes": prefetch_episodes,
                "byte_budget": byte_budget,
                "seed": seed,
                "shuffle": shuffle,
                "episodes": episodes,
                "delta_timestamps": delta_timestamps,
                "decode_threads": decode_threads,
                "max_pending_samples": max_pending_samples,
                "image_dtype": image_dtype,
                "image_transforms": image_transforms,
                "decoder": decoder,
                "device": device,
                "revision": revision,
                "rank": rank,
                "world_size": world_size,
                "tolerance_s": tolerance_s,
                "repo_type": repo_type,
                "depth_output_unit": depth_output_unit,
                "unit": unit,
                "window_frames": window_frames,
                "decoded_budget": decoded_budget,
            },
            extra=stream_options,
            lerobot={"video_backend": video_backend, "return_uint8": return_uint8},
            reader=reader,
        )
        self.config, self.name = config, config.name
        self.dataset, self.samples = open_for_samples(
            self.name.location,
            config.source,
            config.resources,
            config.samples,
            resident_episodes=config.order.pool_size,
            reader=reader,
        )
        self._describe_for_lerobot()
        try:  # the reader is open: any refusal below must close it
            #: decoded bytes of the largest window (margins included), from info.json's shapes
            self.window_bytes = max_window_bytes(
                self.dataset.meta, self.samples.offsets, config.order.window_frames
            )
            if config.order.unit == "window":
                # fail fast: the whole budget must hold two windows (workers split it later)
                window_slots(
                    config.resources.decoded_budget,
                    self.window_bytes,
                    decode_ahead=DEFAULT_DECODE_AHEAD,
                )
        except BaseException:
            self.dataset.close()
            raise
        # one decoder per resident (and next) episode-camera per decode thread, so random
        # draws across the pool reuse decoders instead of reopening evicted ones (unless
        # max_open_decoders was given)
        cameras = len(self.dataset.meta.video_keys)
        wanted = (config.order.pool_size + 1) * cameras * max(config.resources.decode_threads, 1)
        resolved = replace(
            config.resources, max_open_decoders=config.resources.open_decoders(wanted)
        )
        self.config = replace(config, resources=resolved)
        self.options = (
            config.options
            if options is not None
            else replace(config.options, max_open_decoders=resolved.max_open_decoders)
        )
        # the settings as attributes of before (read by tools and tests)
        self.params = self.order.params
        self.unit, self.window_frames = self.order.unit, self.order.window_frames
        self.decoded_budget = resolved.decoded_budget
        self.prefetch_episodes = resolved.prefetch_episodes
        self.decode_threads = resolved.decode_threads
        self.max_pending_samples = resolved.pending_samples
        self._rank_args = (self.order.rank, self.order.world_size)
        self._position = PoolPosition()
        self._threads = ThreadKeeper()
        self._metrics: PoolMetrics | None = None
        # the engine of the pass running in this process (metrics, close from another thread)
        self._engine: StreamEngine | None = None
        self._window_run: WindowRun | None = None

    # -- epochs and resume ----------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._position.epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iteration draws (also in persistent DataLoader workers)."""
        self._position.set_epoch(epoch)

    def __len__(self) -> int:
        """Samples this rank yields per epoch (all its workers together)."""
        rank, world_size = detect_rank(*self._rank_args)
        plan = self._plan(world_size, 1)
        return int(plan.frames_per_rank[rank])

    def _plan(self, world_size: int, num_workers: int):
        return plan_shards(
            self.dataset.episode_ids,
            self.dataset.episode_lengths,
            world_size=world_size,
            num_workers=num_workers,
            seed=self.params.seed,
            epoch=self.epoch,
            shuffle=self.params.shuffle,
        )

    def state_dict(
        self,
        samples_consumed: int | None = None,
        *,
        num_workers: int | None = None,
        batch_size: int = 1,
        drop_last: bool = False,
    ) -> dict[str, Any]:
        """Resume state after ``samples_consumed`` samples of the current epoch.

        Iterating in this process (no DataLoader workers), both default to what was iterated.
        With a ``DataLoader(num_workers=N, batch_size=B)``, pass the samples your loop
        received and the loader's ``num_workers``, ``batch_size`` and ``drop_last``.
        ``samples_consumed`` counts from the start of the epoch, samples received before an
        earlier resume included.

        Called without arguments inside a DataLoader worker (torchdata's
        ``StatefulDataLoader`` does so after each batch), it returns that worker's own
        position; the loader hands it back to the same worker through
        :meth:`load_state_dict`.

        Raises:
            SamplingError: ``samples_consumed`` is not a count such a loader can have
                delivered (not on a batch boundary, or more than the epoch holds), or it is
                missing while DataLoader workers iterated copies of this dataset.
        """
        return self._position.state_dict(
            self._identity,
            lambda world_size, workers: self._plan(world_size, workers).frames_per_slot,
            detect_rank(*self._rank_args),
            torch.utils.data.get_worker_info(),
            samples_consumed=samples_consumed,
            num_workers=num_workers,
            batch_size=batch_size,
            drop_last=drop_last,
        )

    def _identity(self, rank: int, world_size: int) -> dict[str, Any]:
        """:class:`ResumeState` fields of this run's order (what makes two runs' orders the
        same), the window ones unset for an episode pool."""
        window = self.unit == "window"
        return {
            "unit": self.unit,
            "window_frames": self.window_frames if window else None,
            "decoded_budget": self.decoded_budget if window else None,
            "window_bytes": self.window_bytes if window else None,
            "window_spread": DEFAULT_SPREAD if window else None,
            "seed": self.params.seed,
            "epoch": self.epoch,
            "pool_size": self.params.pool_size,
            "shuffle": self.params.shuffle,
            "rank": rank,
            "world_size": world_size,
            "episodes_digest": episodes_digest(
                self.dataset.episode_ids, self.dataset.episode_lengths
            ),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume from :meth:`state_dict`; the next iteration of its epoch continues it.

        Takes both a rank's state (from ``state_dict(samples_consumed=...)``) and a DataLoader
        worker's own (what ``StatefulDataLoader`` collects and restores per worker).

        Raises:
            SamplingError: the state is malformed or newer than this version reads, or it
                does not resume this dataset's order (seed, pool, ranks, episode set, unit,
                window parameters), naming the field.
        """
        self._position.load_state_dict(state, self._identity, detect_rank(*self._rank_args))

    # -- iteration ------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[dict[str, Any]]:
        slot = detect_slot(*self._rank_args)
        plan = self._plan(slot.world_size, slot.num_workers)
        in_worker = torch.utils.data.get_worker_info() is not None
        slot, start = self._position.begin(
            slot, plan.frames_per_slot[slot.rank], in_worker=in_worker
        )
        ids = plan.episodes_for(slot)
        counts = plan.frame_counts_for(slot)
        if ids.size == 0:
            return
        resources = self.resources
        sizes = pass_sizes(
            self.dataset, ids, slot, resources, self.order, window_bytes=self.window_bytes
        )
        threads, closes = self._threads.start_pass(
            self.dataset,
            resources,
            tolerance_s=self.sample_options.tolerance_s,
            max_open_decoders=resources.open_decoders(),
            byte_budget=sizes.byte_budget,
            decode_pending=sizes.decode_pending,
            rows_pending=sizes.rows_pending,
        )
        metrics = PoolMetrics()
        self._engine, self._metrics, self._window_run = threads.engine, metrics, None
        position = self._position

        def on_sample(episode: int) -> None:
            metrics.sample(episode)
            position.delivered()

        settings = RunSettings(
            samples=self.samples,
            url=self.name.location.url,
            prefetch_episodes=self.prefetch_episodes,
            max_pending_samples=self.max_pending_samples,
            wait_timeout_s=resources.wait_timeout_s,
            # read when the pass starts (a test patches it)
            sample_timeout_s=DEFAULT_SAMPLE_TIMEOUT_S,
            rows_capacity=sizes.rows_capacity,
            on_sample=on_sample,
        )
        finished = False
        try:
            if sizes.windows is not None:
                self._window_run = window_run(
                    threads,
                    ids,
                    counts,
                    self.order,
                    slot,
                    epoch=self.epoch,
                    start=start,
                    settings=settings,
                    windows=sizes.windows,
                )
                yield from self._window_run
            else:
                schedule = PoolSchedule(
                    ids, counts, params=self.params, slot=slot, epoch=self.epoch, start=start
                )
                yield from run_episodes(threads, schedule, metrics, settings)
            finished = True
        except CancelledError as error:  # close() cancelled queued work under this pass
            raise DecodeError(
                f"{self.name.location.url}: the dataset was closed while samples were decoded"
            ) from error
        finally:
            self._engine = None
            self._threads.end_pass(threads, closes=closes, finished=finished)

    # -- introspection --------------------------------------------------------------------------

    def metrics(self) -> dict[str, Any]:
        """Counters of the current (or last) iteration in this process."""
        result: dict[str, Any] = {"reader": self.dataset.reader.metrics()}
        if self._metrics is not None:
            result.update(self._metrics.snapshot())
        if self._window_run is not None:
            window = self._window_run.snapshot()
            result["refill_waits"] += window.pop("refill_waits")
            result["refill_wait_s"] += window.pop("refill_wait_s")
            result.update(window)
        engine = self._engine
        if engine is not None:
            result["cache"] = engine.cache.metrics()
            result["decoders"] = engine.decoders.stats()
        return result

    def close(self) -> None:
        """Stop this process's fetch, rows, decode and open threads (those of a pass running now
        and those kept for the next pass) and close its connections."""
        self._engine = None
        self._threads.close()
        self.dataset.close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_engine"] = None
        state["_metrics"] = None
        state["_window_run"] = None
        return state  # the thread keeper and the position pickle themselves

    def __repr__(self) -> str:
        return (
            f"EpisodePoolDataset(root={self.dataset.root!r}, episodes="
            f"{len(self.dataset.episode_ids)}, frames={self.dataset.num_frames}, "
            f"pool_size={self.params.pool_size}, epoch={self.epoch}"
            + (
                f", unit='window', window_frames={self.window_frames}, "
                f"decoded_budget={self.decoded_budget})"
                if self.unit == "window"
                else ")"
            )
        )

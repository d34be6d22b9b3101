"""What a dataset needs at run time: the opened dataset (picklable) and per-process engines."""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass

import numpy as np
import torch

from episodestream.cache import EpisodeByteCache, ManifestClipSource, ResidentEpisode
from episodestream.datasets._groups import Resources, SampleOptions
from episodestream.datasets._samples import SampleBuilder
from episodestream.datasets._source import Source
from episodestream.datasets._waits import result_within
from episodestream.decode import (
    DecodeExecutor,
    Decoder,
    DecoderPool,
    open_decoder,
    resolve_backend,
)
from episodestream.errors import (
    BudgetError,
    DatasetFormatError,
    DecodeError,
    LocationError,
    SamplingError,
)
from episodestream.lerobot import (
    DatasetMeta,
    EpisodeRowReader,
    load_dataset_meta,
    open_dataset_files,
    open_metadata_reader,
)
from episodestream.manifest import EpisodeManifest, open_manifest
from episodestream.sampling import episode_selection
from episodestream.storage import BaseRangeReader, Location, RangeReader

__all__ = ["OpenedDataset", "StreamEngine", "open_dataset", "open_for_samples"]

logger = logging.getLogger(__name__)

#: How long a decode thread waits for its decoder to be opened, once the open is queued (opens
#: queue on one thread; each takes milliseconds, the clip's bytes being in memory). Below the
#: pool's wait for a sample, so that a stuck open is reported as such.
OPEN_TIMEOUT_S = 60.0
# opens waiting for the open thread: about one per decode thread, plus the map-style caller
_OPENS_PENDING = 16

# per camera: clip header bytes beyond the payload (ftyp + moov), bounded generously
_CLIP_HEADER_BASE = 4096
_CLIP_HEADER_PER_FRAME = 48


@dataclass(frozen=True, slots=True, eq=False)
class OpenedDataset:
    """A dataset's reader, metadata and manifest, opened once in the main process and
    pickled into DataLoader workers (readers and sidecar-backed manifests pickle cheaply)."""

    root: str
    reader: RangeReader
    meta: DatasetMeta
    manifest: EpisodeManifest
    episode_ids: np.ndarray  # selected episodes, in the caller's order
    episode_lengths: np.ndarray  # frames of each selected episode
    episode_nbytes: np.ndarray  # clip bytes (all cameras) of each selected episode, bounded
    owns_reader: bool = True  # False: the caller handed the reader in and closes it

    @property
    def num_frames(self) -> int:
        return int(self.episode_lengths.sum())

    def close(self) -> None:
        if self.owns_reader:
            self.reader.close()


def _close_abandoned(future: Future[Decoder]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()


def open_dataset(
    root: str | Location,
    source: Source,
    resources: Resources,
    *,
    root_label: str | None = None,
    reader: BaseRangeReader | None = None,
) -> OpenedDataset:
    """Open ``root`` (path, URL, hf://, s3://, ...; the one ``source`` names), its metadata
    and manifest, for ``source.episodes``. The groups are checked values: nothing here
    checks them again.

    With ``reader``, the dataset is read through it (``root`` only names the dataset); the
    caller keeps it: neither an error here nor closing the dataset closes it.
    """
    # fail fast on a backend that cannot run here; loading it now (torchcodec takes seconds)
    # also lets forked DataLoader workers inherit it instead of each loading it again
    resolve_backend(resources.decoder, resources.device)
    location = Location.parse(root)
    owns_reader = reader is None
    episodes = source.episodes
    if reader is not None:
        reader, meta = _open_through(reader, location, source, root_label)
    else:
        if source.revision is not None:
            if location.kind != "hub":
                raise LocationError(
                    f"revision={source.revision!r} applies to hf:// roots only, "
                    f"not {location.url!r}"
                )
            location = dataclasses.replace(location, revision=source.revision)
        reader, meta = open_dataset_files(
            location,
            label=root_label,
            data_root=source.data_root,
            reader_options=source.reader_options,
            data_reader_options=source.data_reader_options,
        )
    try:
        unsupported = meta.image_keys
        if unsupported:
            raise DatasetFormatError(
                f"meta/info.json: features {list(unsupported)} have dtype 'image' (still images "
                "inside Parquet); episodestream streams 'video' features only"
            )
        ids = _select_episodes(meta, episodes)
        # split roots: a published sidecar lives beside meta/ (index --publish writes it there)
        published = (
            open_metadata_reader(location, meta, source.reader_options)
            if source.data_root
            else None
        )
        try:
            manifest = open_manifest(
                reader,
                meta,
                sidecar=source.sidecar,
                cache_dir=resources.cache_dir,
                build=source.build_index,
                progress=source.progress,
                published_reader=published,
                # a cached sidecar of a subset holding these episodes will do
                episodes=None if episodes is None else ids,
            )
        finally:
            if published is not None:
                published.close()
        rows = meta.episodes.rows(ids)
        lengths = meta.episodes.length[rows].astype(np.int64)
        payload = manifest.episode_bytes().sum(axis=1)[manifest_rows(manifest, ids)]
    except BaseException:
        if owns_reader:
            reader.close()
        raise
    headers = len(meta.video_keys) * (_CLIP_HEADER_BASE + _CLIP_HEADER_PER_FRAME * lengths)
    nbytes = (payload + headers).astype(np.int64)
    for shared in (ids, lengths, nbytes):  # read by every layer above in this process
        shared.flags.writeable = False
    return OpenedDataset(
        root=meta.root,
        reader=reader,
        meta=meta,
        manifest=manifest,
        episode_ids=ids,
        episode_lengths=lengths,
        episode_nbytes=nbytes,
        owns_reader=owns_reader,
    )


def open_for_samples(
    root: str | os.PathLike[str] | Location,
    source: Source,
    resources: Resources,
    samples: SampleOptions,
    *,
    resident_episodes: int,
    reader: BaseRangeReader | None = None,
) -> tuple[OpenedDataset, SampleBuilder]:
    """What both dataset classes open first: the dataset, its sample builder, and a check
    that ``resources.byte_budget`` holds ``resident_episodes`` of this dataset's episodes
    pinned at once; the reader is closed on any error."""
    dataset = open_dataset(
        os.fspath(root) if isinstance(root, os.PathLike) else root,
        source,
        resources,
        reader=reader,
    )
    try:
        builder = SampleBuilder(
            dataset.meta,
            delta_timestamps=samples.delta_timestamps,
            image_dtype=samples.image_dtype,
            image_transforms=samples.image_transforms,
        )
        check_budget(
            dataset,
            resources.byte_budget,
            resident_episodes=min(resident_episodes, len(dataset.episode_ids)),
            what="byte_budget",
        )
    except BaseException:
        dataset.close()
        raise
    return dataset, builder


def _open_through(
    reader: BaseRangeReader, location: Location, source: Source, root_label: str | None
) -> tuple[BaseRangeReader, DatasetMeta]:
    """The metadata of a dataset read through a reader the caller opened (and keeps); the
    datasets checked the reader's type, and that ``source`` asks for no other reader, when
    they resolved their arguments (``datasets/_compat.py``)."""
    meta = load_dataset_meta(reader, root=root_label or location.url, revision=reader.revision)
    return reader, meta


def restrict(dataset: OpenedDataset, mask: np.ndarray) -> OpenedDataset:
    """``dataset`` with only the selected episodes where ``mask`` is True."""
    return dataclasses.replace(
        dataset,
        episode_ids=dataset.episode_ids[mask],
        episode_lengths=dataset.episode_lengths[mask],
        episode_nbytes=dataset.episode_nbytes[mask],
    )


def manifest_rows(manifest: EpisodeManifest, ids: np.ndarray) -> np.ndarray:
    """Span rows of episodes ``ids`` (vectorized ``manifest.row``)."""
    order = manifest.episode_index
    rows = np.searchsorted(order, ids)
    found = (rows < order.size) & (order[np.minimum(rows, order.size - 1)] == ids)
    if not found.all():
        raise DatasetFormatError(
            f"episodes {ids[~found][:10].tolist()} are in meta/episodes but not in the index"
        )
    return rows.astype(np.int64)


def _select_episodes(meta: DatasetMeta, episodes: object) -> np.ndarray:
    """The selected episode ids: every episode for None, else ``episodes`` (checked as
    given by :func:`episode_selection`) once each is known to the dataset."""
    available = meta.episodes.episode_index
    ids = episode_selection(episodes)
    if ids is None:
        return np.asarray(available, dtype=np.int64).copy()
    unknown = np.setdiff1d(ids, available)
    if unknown.size:
        has = (
            f"episodes {int(available.min())}..{int(available.max())} ({available.size} in all)"
            if available.size
            else "no episodes"
        )
        raise SamplingError(
            f"episodes lists unknown episode(s) {unknown[:10].tolist()}: the dataset has {has}"
        )
    return ids.copy()


def check_budget(dataset: OpenedDataset, budget: int, *, resident_episodes: int, what: str) -> None:
    """Refuse a budget that cannot hold ``resident_episodes`` of the largest episodes plus one
    more in flight (payload + clip): the pool would otherwise stall instead of failing fast."""
    sizes = np.sort(dataset.episode_nbytes)[::-1]
    largest_in_flight = 2 * int(sizes[0])
    if budget < largest_in_flight:
        episode = int(dataset.episode_ids[int(np.argmax(dataset.episode_nbytes))])
        raise BudgetError(
            f"{what} of {budget} bytes is smaller than episode {episode}, which needs "
            f"{largest_in_flight} bytes while it is fetched (payload + clip): raise byte_budget"
        )
    needed = int(sizes[:resident_episodes].sum()) + largest_in_flight
    if budget < needed:
        raise BudgetError(
            f"{what} of {budget} bytes cannot hold {resident_episodes} resident episodes plus "
            f"one in flight ({needed} bytes for the largest ones): raise byte_budget or lower "
            "pool_size"
        )


class StreamEngine:
    """Per-process machinery: row reader, episode byte cache, open decoders.

    Created lazily in the process that iterates (never pickled); ``close()`` joins every
    thread it started.
    """

    def __init__(
        self,
        dataset: OpenedDataset,
        resources: Resources,
        *,
        tolerance_s: float,
        byte_budget: int,
        max_open_decoders: int,
    ) -> None:
        """``byte_budget`` is this process's share of ``resources.byte_budget``;
        ``max_open_decoders`` the decoders it keeps (``Resources.open_decoders``)."""
        self.dataset = dataset
        self.resources = resources
        self.tolerance_s = tolerance_s
        self.rows = EpisodeRowReader(dataset.reader, dataset.meta)
        source = ManifestClipSource(dataset.manifest, dataset.reader, root=dataset.root)
        self.cache = EpisodeByteCache(
            source,
            dataset.reader,
            byte_budget=byte_budget,
            fetch_workers=resources.fetch_workers,
        )
        self.decoders: DecoderPool[tuple[int, str]] = DecoderPool(
            max_decoders=max_open_decoders, max_bytes=resources.max_decoder_bytes
        )
        self._lock = threading.Lock()
        self._closed = False
        self._opener: DecodeExecutor | None = None  # started by the first open

    def frames(
        self, resident: ResidentEpisode, camera: str, source_times_s: np.ndarray
    ) -> torch.Tensor:
        """uint8 ``N x C x H x W`` frames of ``camera`` shown at source-file times."""
        clip = resident.clips[camera]
        key = (resident.episode, camera)
        name = f"episode {resident.episode} / {camera}"
        options = self.resources

        def open_clip():
            return open_decoder(
                clip.data,
                backend=options.decoder,
                device=options.device,
                threads=options.ffmpeg_threads,
                name=name,
                # from the manifest: spares the decoder a pass over the clip's packets
                frame_times_s=clip.frame_times_s,
            )

        with self.decoders.lease(key, lambda: self._open_on_own_thread(open_clip, name)) as decoder:
            return decoder.frames_at(
                np.asarray(source_times_s, dtype=np.float64) - clip.time_offset_s,
                tolerance_s=self.tolerance_s,
            )

    def _open_on_own_thread(self, open_clip: Callable[[], Decoder], name: str) -> Decoder:
        """``open_clip()`` run on the engine's one open thread.

        Why a thread of its own: torchcodec leaks a few small heap blocks at every decoder
        open (strings passed through torch's stable ABI, pytorch/pytorch#191340), and glibc
        places them in the opening thread's malloc arena. Opened on the decode threads, they
        lay scattered among the frame buffers those threads allocate and free, each pinning
        pages that ``malloc_trim`` cannot return, so RSS grew with every episode opened
        (docs/BENCHMARKS.md, "Memory over 50 passes"). Here they sit beside decoder state.
        """
        with self._lock:
            if self._closed:
                raise DecodeError(f"{name}: the dataset's decoders are closed")
            if self._opener is None:
                self._opener = DecodeExecutor(
                    1, max_pending=_OPENS_PENDING, name="episodestream-open"
                )
            opener = self._opener
        future = opener.submit(open_clip)
        try:
            return result_within(
                future,
                OPEN_TIMEOUT_S,
                lambda: DecodeError(f"{name}: decoder not opened within {OPEN_TIMEOUT_S:g} s"),
            )
        except CancelledError:
            raise DecodeError(f"{name}: the dataset closed while its decoder opened") from None
        except BaseException:
            # given up (timeout, Ctrl-C): an open still queued is dropped; one under way that
            # finishes after all must not leave its decoder open
            if not future.cancel():
                future.add_done_callback(_close_abandoned)
            raise

    def forget(self, episode: int) -> None:
        """Close the decoders of an episode that left (their clip bytes go with them)."""
        for camera in self.dataset.meta.video_keys:
            self.decoders.discard((episode, camera))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.cache.close()
        self.decoders.close()
        if self._opener is not None:
            self._opener.close()

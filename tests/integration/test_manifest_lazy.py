"""The lazy, per-file index: an open touches only the files of the episodes asked for; the
cache keeps one entry per video file, so later opens add the files they lack."""

from __future__ import annotations

import collections
import dataclasses
import logging
import multiprocessing
import pickle
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from episodestream import EpisodePoolDataset, EpisodeStreamDataset, StreamOptions
from episodestream.errors import ManifestError
from episodestream.lerobot import DatasetMeta, load_dataset_meta
from episodestream.manifest import (
    PUBLISHED_SIDECAR_PATH,
    EpisodeManifest,
    build_manifest,
    open_manifest,
    sidecar_cache_path,
    sidecar_status,
    write_sidecar,
)
from episodestream.manifest._entries import FileEntryStore, IndexedFile, file_entry_bytes
from episodestream.storage import LocalRangeReader, open_reader
from episodestream_tools.serving import NginxServer
from episodestream_tools.synthetic import SyntheticSpec

# one video file per episode and camera, one data file per episode: 24 + 12 small files
LAZY_SPEC = SyntheticSpec(
    cameras=("observation.images.cam_high", "observation.images.cam_left_wrist"),
    width=64,
    height=48,
    fps=30,
    episodes=12,
    min_length=4,
    max_length=7,
    episodes_per_file=1,
    episodes_per_data_file=1,
    codec="av1",
    seed=25,
)


@pytest.fixture(scope="session")
def lazy_dataset(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> Path:
    return synthetic_dataset(LAZY_SPEC)


@pytest.fixture(scope="session")
def lazy_meta(lazy_dataset: Path) -> DatasetMeta:
    with LocalRangeReader(lazy_dataset) as reader:
        return load_dataset_meta(reader)


def video_files(meta: DatasetMeta, episodes: Iterable[int]) -> set[str]:
    return {meta.episode_video_path(e, key) for e in episodes for key in meta.video_keys}


def data_files(meta: DatasetMeta, episodes: Iterable[int]) -> set[str]:
    return {meta.episode_data_path(e) for e in episodes}


def settled(server: NginxServer, since: int) -> list[Any]:
    """The access log after ``since`` once it stops growing (nginx writes a line just after
    its reply, so a client can be done before the line is)."""
    records = server.access_records(since)
    for _ in range(25):
        time.sleep(0.2)
        again = server.access_records(since)
        if len(again) == len(records):
            break
        records = again
    return records


def touched(server: NginxServer, since: int, url: str) -> collections.Counter[str]:
    """Requests per dataset file (relative path) after ``since``, meta/ left out."""
    prefix = "/" + url.rstrip("/").rsplit("/", 1)[-1] + "/"
    counts: collections.Counter[str] = collections.Counter()
    for record in settled(server, since):
        path = record.uri.split("?", 1)[0]
        assert path.startswith(prefix), record.uri
        relative = path[len(prefix) :]
        if not relative.startswith("meta/"):
            counts[relative] += 1
    return counts


def assert_same_spans(got: EpisodeManifest, want: EpisodeManifest) -> None:
    """``got``'s spans, sample tables and file sizes are ``want``'s, for every episode
    ``got`` has (validators differ between a local root and its nginx twin)."""
    for episode in got.episode_index.tolist():
        for camera in got.cameras:
            span = got.span(episode, camera)
            assert span == want.span(episode, camera), (episode, camera)
            assert got.track(span.file_path) == want.track(span.file_path)
            assert got.source(span.file_path).size == want.source(span.file_path).size


def assert_same_sample(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got.keys() == want.keys()
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


def test_a_subset_touches_only_its_files_and_ignores_a_missing_one(
    http_server: NginxServer,
    http_publish: Any,
    lazy_dataset: Path,
    lazy_meta: DatasetMeta,
    tmp_path: Path,
) -> None:
    root = shutil.copytree(lazy_dataset, tmp_path / "dataset", copy_function=shutil.copyfile)
    missing = lazy_meta.episode_video_path(0, lazy_meta.video_keys[0])
    (root / missing).unlink()  # a video of an episode nobody asks for
    url = http_publish(root)
    options = StreamOptions(decoder="pyav", cache_dir=tmp_path / "cache")
    mark = http_server.log_mark()
    with EpisodeStreamDataset(url, episodes=[7, 3], options=options) as dataset:
        assert len(dataset) == int(lazy_meta.episodes.length[[3, 7]].sum())
        indices = [0, len(dataset) - 1]
        got = [dataset[i] for i in indices]
        manifest = dataset.dataset.manifest
    logged = touched(http_server, mark, url)
    assert set(logged) == video_files(lazy_meta, [3, 7]) | data_files(lazy_meta, [3, 7])
    assert manifest.num_files == 4 and manifest.episode_index.tolist() == [3, 7]
    assert manifest.origin == "built" and manifest.identity.episodes is not None

    # the same samples as the intact dataset read from disk
    reference = StreamOptions(decoder="pyav", cache_dir=tmp_path / "reference")
    with EpisodeStreamDataset(lazy_dataset, episodes=[7, 3], options=reference) as intact:
        for index, sample in zip(indices, got, strict=True):
            assert_same_sample(sample, intact[index])
        with LocalRangeReader(lazy_dataset) as reader:
            assert_same_spans(manifest, build_manifest(reader, lazy_meta, progress=False))

    # the whole dataset needs the missing file: a typed error naming it
    with pytest.raises(ManifestError, match=f"{missing}: video file is missing"):
        EpisodeStreamDataset(url, options=options)


def test_a_pool_over_a_subset_touches_only_its_files(
    http_server: NginxServer,
    http_publish: Any,
    lazy_dataset: Path,
    lazy_meta: DatasetMeta,
    tmp_path: Path,
) -> None:
    url = http_publish(lazy_dataset)
    mark = http_server.log_mark()
    with EpisodePoolDataset(
        url, episodes=[5, 10], decoder="pyav", cache_dir=tmp_path / "cache", seed=1
    ) as dataset:
        episodes = sorted(int(sample["episode_index"]) for sample in dataset)
    lengths = lazy_meta.episodes.length
    assert episodes == [5] * int(lengths[5]) + [10] * int(lengths[10])
    logged = touched(http_server, mark, url)
    assert set(logged) == video_files(lazy_meta, [5, 10]) | data_files(lazy_meta, [5, 10])


def test_each_open_adds_only_the_files_it_lacks(
    http_server: NginxServer,
    http_publish: Any,
    lazy_dataset: Path,
    lazy_meta: DatasetMeta,
    tmp_path: Path,
) -> None:
    url = http_publish(lazy_dataset)
    cache = tmp_path / "cache"
    with LocalRangeReader(lazy_dataset) as local:
        reference = build_manifest(local, lazy_meta, progress=False)
    with open_reader(url) as reader:
        meta = load_dataset_meta(reader)

        def open_logged(
            episodes: list[int] | None, **options: Any
        ) -> tuple[EpisodeManifest, collections.Counter[str]]:
            mark = http_server.log_mark()
            manifest = open_manifest(reader, meta, cache_dir=cache, episodes=episodes, **options)
            return manifest, touched(http_server, mark, url)

        first, logged = open_logged([5, 2])
        assert set(logged) == video_files(meta, [2, 5])
        statuses = sidecar_status(reader, meta, cache_dir=cache)
        per_file = [(s.state, s.reason) for s in statuses if s.where == "per-file"]
        assert per_file == [("partial", "4 of the dataset's 24 video files indexed")]
        assert first.origin == "built" and first.build_stats is not None
        assert (first.build_stats.files, first.build_stats.reused_files) == (4, 0)
        assert_same_spans(first, reference)

        # another subset: only the file of the episode the first lacked
        second, logged = open_logged([8, 5])
        assert set(logged) == video_files(meta, [8])
        assert second.build_stats is not None
        assert (second.build_stats.files, second.build_stats.reused_files) == (2, 2)
        assert_same_spans(second, reference)

        # everything already indexed: nothing is read, not even to build
        third, logged = open_logged([2, 8], build=False)
        assert not logged and third.origin == "cache"
        assert_same_spans(third, reference)

        # the whole dataset reads only the files no subset read, and writes its sidecar
        whole, logged = open_logged(None)
        assert set(logged) == video_files(meta, range(12)) - video_files(meta, [2, 5, 8])
        assert whole.build_stats is not None and whole.build_stats.reused_files == 6
        assert whole.sidecar_path == sidecar_cache_path(meta, cache)
        assert whole.identity.episodes is None and whole.num_files == 24
        assert_same_spans(whole, reference)
        assert_same_spans(reference, whole)
        # what each subset recorded of a file (ETag included) is what the whole one has
        for subset in (first, second, third):
            assert set(subset.sources()) <= set(whole.sources())

        # which then serves any subset, with no request at all
        served, logged = open_logged([11], build=False)
        assert not logged and served.sidecar_path == whole.sidecar_path
    # verified (by a reader that has not yet looked at any file), a subset looks up its own
    # files only
    with open_reader(url) as fresh:
        meta = load_dataset_meta(fresh)
        mark = http_server.log_mark()
        verified = open_manifest(fresh, meta, cache_dir=cache, episodes=[11], verify=True)
        assert set(touched(http_server, mark, url)) == video_files(meta, [11])
        assert verified.origin == "cache"


def _open_in_process(url: str, cache: str, episodes: list[int], start: Any, results: Any) -> None:
    with open_reader(url) as reader:
        meta = load_dataset_meta(reader)
        start.wait(60)
        manifest = open_manifest(reader, meta, cache_dir=cache, episodes=episodes, progress=False)
        stats = manifest.build_stats
        assert stats is not None
        results.put((episodes, stats.files, stats.reused_files, manifest.num_samples))


def test_concurrent_processes_index_each_file_once(
    http_server: NginxServer,
    http_publish: Any,
    wan_emulator_factory: Any,
    lazy_dataset: Path,
    lazy_meta: DatasetMeta,
    tmp_path: Path,
) -> None:
    # round trips of 30 ms keep the two builds running at once
    url = wan_emulator_factory(rtt_ms=30).rebase_url(http_publish(lazy_dataset))
    with open_reader(url) as reader:
        meta = load_dataset_meta(reader)
        mark = http_server.log_mark()
        open_manifest(reader, meta, cache_dir=tmp_path / "alone", episodes=[1, 2, 3, 4])
        once = touched(http_server, mark, url)  # what indexing each file costs, once
    assert set(once) == video_files(lazy_meta, [1, 2, 3, 4])

    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    subsets = [[1, 2, 3], [2, 3, 4]]
    cache = str(tmp_path / "shared")
    mark = http_server.log_mark()
    workers = [
        context.Process(target=_open_in_process, args=(url, cache, episodes, start, results))
        for episodes in subsets
    ]
    for worker in workers:
        worker.start()
    start.set()
    outcomes = sorted(results.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert touched(http_server, mark, url) == once  # each file indexed by one of them
    read = sum(files for _, files, _, _ in outcomes)
    assert read == len(once)  # 8 files: each read by exactly one process
    assert [files + reused for _, files, reused, _ in outcomes] == [6, 6]


def _corrupt_truncated(store: FileEntryStore, path: str, entry: IndexedFile) -> None:
    location = store.entry_path(path)
    location.write_bytes(location.read_bytes()[:-100])


def _corrupt_other_file(store: FileEntryStore, path: str, entry: IndexedFile) -> None:
    other = next(p for p in store.folder.glob("*.arrow") if p != store.entry_path(path))
    shutil.copyfile(other, store.entry_path(path))


def _corrupt_samples_outside(store: FileEntryStore, path: str, entry: IndexedFile) -> None:
    track = dataclasses.replace(entry.track, offsets=entry.track.offsets + entry.info.size)
    damaged = dataclasses.replace(entry, track=track)
    store.entry_path(path).write_bytes(file_entry_bytes(damaged, store.key))


def _corrupt_other_dataset(store: FileEntryStore, path: str, entry: IndexedFile) -> None:
    key = dataclasses.replace(store.key, info_sha256="0" * 64)
    store.entry_path(path).write_bytes(file_entry_bytes(entry, key))


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_corrupt_truncated, "not a readable file entry"),
        (_corrupt_other_file, "the entry is of"),
        (_corrupt_samples_outside, "outside the file"),
        (_corrupt_other_dataset, "belongs to another dataset"),
    ],
)
def test_a_damaged_entry_is_refused_logged_and_rebuilt(
    damage: Callable[[FileEntryStore, str, IndexedFile], None],
    reason: str,
    lazy_dataset: Path,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache = tmp_path / "cache"
    with LocalRangeReader(lazy_dataset) as reader:
        meta = load_dataset_meta(reader)
        first = open_manifest(reader, meta, cache_dir=cache, episodes=[6, 9], progress=False)
        store = FileEntryStore.beside(sidecar_cache_path(meta, cache), meta, lock_timeout_s=60)
        path = meta.episode_video_path(9, meta.video_keys[1])
        entry = store.load(path)
        assert entry is not None and entry.track == first.track(path)
        damage(store, path, entry)
        assert store.load(path) is None  # refused

        with pytest.raises(ManifestError, match="not in the per-file index"):
            open_manifest(reader, meta, cache_dir=cache, episodes=[9], build=False)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="episodestream.manifest"):
            again = open_manifest(reader, meta, cache_dir=cache, episodes=[6, 9], progress=False)
    refusals = [r.getMessage() for r in caplog.records if "entry refused" in r.getMessage()]
    assert refusals and reason in refusals[0] and path in refusals[0]
    assert again.build_stats is not None
    assert (again.build_stats.files, again.build_stats.reused_files) == (1, 3)
    assert_same_spans(again, first)
    rebuilt = store.load(path)
    assert rebuilt is not None and rebuilt.track == entry.track and rebuilt.info == entry.info


def test_a_subset_manifest_pickles_by_reference_to_its_entries(
    lazy_dataset: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    with LocalRangeReader(lazy_dataset) as reader:
        meta = load_dataset_meta(reader)
        manifest = open_manifest(reader, meta, cache_dir=cache, episodes=[1, 10], progress=False)
    store = FileEntryStore.beside(sidecar_cache_path(meta, cache), meta, lock_timeout_s=60)
    assert manifest.sidecar_path is None and manifest.entries_folder == store.folder
    by_reference = pickle.dumps(manifest)
    copy = pickle.loads(by_reference)
    assert_same_spans(copy, manifest)
    assert copy.sources() == manifest.sources() and copy.entries_folder == store.folder
    # no sample table travels: smaller than the manifest pickled by value
    manifest.entries_folder = None
    assert len(by_reference) < len(pickle.dumps(manifest)) - 500
    # an entry replaced by one of another version of the file is not taken for it
    path = meta.episode_video_path(10, meta.video_keys[0])
    entry = store.load(path)
    assert entry is not None
    changed = dataclasses.replace(entry, info=dataclasses.replace(entry.info, etag='"other"'))
    store.save(changed)
    with pytest.raises(ManifestError, match="the per-file index changed since the dataset"):
        pickle.loads(by_reference)


def test_a_subset_without_a_writable_cache_is_indexed_in_memory(
    lazy_dataset: Path, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with LocalRangeReader(lazy_dataset) as reader:
        meta = load_dataset_meta(reader)
        for options in ({"cache_dir": blocker / "cache"}, {"use_cache": False}):
            manifest = open_manifest(reader, meta, episodes=[0, 4], progress=False, **options)
            assert manifest.origin == "built" and manifest.num_files == 4
            assert manifest.sidecar_path is None and manifest.entries_folder is None
            assert pickle.loads(pickle.dumps(manifest)).sources() == manifest.sources()


def test_a_small_published_sidecar_serves_a_subset(
    http_server: NginxServer,
    http_publish: Any,
    lazy_dataset: Path,
    lazy_meta: DatasetMeta,
    tmp_path: Path,
) -> None:
    root = shutil.copytree(lazy_dataset, tmp_path / "dataset", copy_function=shutil.copyfile)
    with LocalRangeReader(root) as local:
        write_sidecar(
            build_manifest(local, lazy_meta, progress=False), root / PUBLISHED_SIDECAR_PATH
        )
    url = http_publish(root)
    cache = tmp_path / "cache"
    with open_reader(url) as reader:
        meta = load_dataset_meta(reader)
        mark = http_server.log_mark()
        manifest = open_manifest(reader, meta, cache_dir=cache, episodes=[4])
        assert not touched(http_server, mark, url)  # the sidecar only (under meta/)
        assert manifest.origin == "published"
        assert manifest.sidecar_path == sidecar_cache_path(meta, cache)  # now the whole one
        assert np.array_equal(manifest.episode_index, np.arange(12))


def test_superseded_entry_folders_are_pruned_beyond_the_newest_few(tmp_path: Path) -> None:
    # a metadata change makes a new folder; processes still on the older metadata (a worker
    # unpickling its manifest) keep finding theirs among the newest kept
    import os

    from episodestream.manifest._entries import _SUPERSEDED_KEPT, FileEntryStore

    folders = [tmp_path / f"files-{k:016x}" for k in range(_SUPERSEDED_KEPT + 3)]
    for age, folder in enumerate(folders):
        FileEntryStore(folder, None, lock_timeout_s=0.0).prepare()  # type: ignore[arg-type]
        (folder / "entry.arrow").write_bytes(b"x")
        os.utime(folder, (1000 + age, 1000 + age))
    newest = tmp_path / "files-ffffffffffffffff"
    FileEntryStore(newest, None, lock_timeout_s=0.0).prepare()  # type: ignore[arg-type]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([newest.name, *(f.name for f in folders[-_SUPERSEDED_KEPT:])])

"""Sidecar index: exact round trip, staleness, resolution order, one build among racing ranks."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from episodestream import EpisodeStreamDataset, StreamOptions
from episodestream.errors import ConfigError, ConfigTypeError, ManifestError, StaleSourceError
from episodestream.lerobot import DatasetMeta, load_dataset_meta
from episodestream.manifest import (
    PUBLISHED_SIDECAR_PATH,
    SPAN_FIELDS,
    EpisodeManifest,
    EpisodeSubset,
    SidecarCoverageError,
    UnknownEpisodesError,
    build_manifest,
    load_sidecar,
    open_manifest,
    publish_sidecar,
    sidecar_bytes,
    sidecar_cache_path,
    sidecar_status,
    write_sidecar,
)
from episodestream.storage import FileInfo, LocalRangeReader, open_reader

VIDEO = "videos/observation.images.cam_high/chunk-000/file-000.mp4"


def copy_dataset(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, copy_function=shutil.copyfile)
    return target


def assert_same(a: EpisodeManifest, b: EpisodeManifest) -> None:
    assert a.identity == b.identity
    assert a.cameras == b.cameras
    assert a.file_paths == b.file_paths
    assert a.sources() == b.sources()
    assert np.array_equal(a.episode_index, b.episode_index)
    for name in SPAN_FIELDS:
        x, y = getattr(a.spans, name), getattr(b.spans, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    for f in range(a.num_files):
        ta, tb = a.track(f), b.track(f)
        for field in ta.__dataclass_fields__:
            va, vb = getattr(ta, field), getattr(tb, field)
            if isinstance(va, np.ndarray):
                assert va.dtype == vb.dtype and np.array_equal(va, vb), field
            else:
                assert va == vb and type(va) is type(vb), field


@pytest.fixture
def sim5_copy(lerobot_fixture_root: Path, tmp_path: Path) -> Path:
    return copy_dataset(lerobot_fixture_root, tmp_path / "sim5")


@pytest.mark.parametrize("fixture", ["lerobot_fixture_root", "synthetic_h264"])
def test_round_trip_is_exact_and_memory_mapped(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    root: Path = request.getfixturevalue(fixture)
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
        built = build_manifest(reader, meta, progress=False)
    path = write_sidecar(built, tmp_path / "index.arrow")
    loaded = load_sidecar(path)
    assert_same(built, loaded)
    assert loaded.sidecar_path == path and loaded.origin == "explicit"
    for array in (loaded.spans.byte_start, loaded.track(0).offsets, loaded.track(0).keyframes):
        assert not array.flags.owndata and not array.flags.writeable
    assert loaded.track(0).keyframes.dtype == np.bool_
    assert sidecar_bytes(built) == path.read_bytes()
    assert_same(built, load_sidecar(pa.py_buffer(path.read_bytes())))
    assert not list(tmp_path.glob(".*tmp"))  # no temporary file left behind


def test_pickles_by_path_when_mapped(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        built = build_manifest(reader, load_dataset_meta(reader), progress=False)
    loaded = load_sidecar(write_sidecar(built, tmp_path / "index.arrow"))
    mapped_pickle = pickle.dumps(loaded)
    assert len(mapped_pickle) < 2000 < len(pickle.dumps(built))
    assert_same(loaded, pickle.loads(mapped_pickle))
    assert_same(built, pickle.loads(pickle.dumps(built)))


def test_open_builds_once_then_uses_the_cache(sim5_copy: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        first = open_manifest(reader, meta, cache_dir=cache, progress=False)
        assert first.origin == "built" and first.build_stats is not None
        assert first.sidecar_path == sidecar_cache_path(meta, cache)
        before = reader.metrics()["requests"]
        second = open_manifest(reader, meta, cache_dir=cache, verify=True)
        assert second.origin == "cache"
        assert reader.metrics()["requests"] == before  # verification looks, never reads
        assert_same(first, second)


def test_changed_source_file_is_detected(sim5_copy: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        manifest = open_manifest(reader, meta, cache_dir=cache, progress=False)
        recorded = manifest.source(VIDEO)

        # same size, new Last-Modified
        os.utime(sim5_copy / VIDEO, (1_000_000_000, 1_000_000_000))
        with pytest.raises(ManifestError) as raised:
            open_manifest(reader, meta, cache_dir=cache, verify=True, build=False)
        assert VIDEO in str(raised.value) and "Last-Modified" in str(raised.value)
        statuses = {s.where: s for s in sidecar_status(reader, meta, cache_dir=cache)}
        assert statuses["cache"].state == "stale" and VIDEO in statuses["cache"].reason
        rebuilt = open_manifest(reader, meta, cache_dir=cache, verify=True, progress=False)
        assert rebuilt.origin == "built"
        assert rebuilt.source(VIDEO).last_modified != recorded.last_modified

        # a new size (a trailing 'free' box keeps the MP4 valid)
        with (sim5_copy / VIDEO).open("ab") as handle:
            handle.write(b"\x00\x00\x00\x08free")
        with pytest.raises(ManifestError, match=f"{VIDEO} is {recorded.size + 8} bytes"):
            open_manifest(reader, meta, cache_dir=cache, verify=True, build=False)
        # without verify the sidecar is used; the per-file check catches the change
        unverified = open_manifest(reader, meta, cache_dir=cache, build=False)
        with pytest.raises(StaleSourceError, match="rebuild the index"):
            unverified.check_source(VIDEO, reader.file_info(VIDEO))


def test_check_source_compares_validators_only_at_the_same_root(
    lerobot_fixture_root: Path,
) -> None:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        manifest = build_manifest(reader, load_dataset_meta(reader), progress=False)
    recorded = manifest.source(0)
    manifest.check_source(0, recorded.info)
    other_etag = FileInfo(recorded.size, '"abc"', "Thu, 01 Jan 2026 00:00:00 GMT")
    with pytest.raises(StaleSourceError):
        manifest.check_source(0, other_etag)
    with pytest.raises(StaleSourceError):
        manifest.check_source(0, other_etag, root=manifest.identity.root)
    manifest.check_source(0, other_etag, root="http://mirror.example/sim5")  # a mirror
    with pytest.raises(StaleSourceError, match="bytes"):
        manifest.check_source(0, FileInfo(recorded.size + 1), root="http://mirror.example/sim5")


def test_changed_metadata_is_detected(sim5_copy: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with LocalRangeReader(sim5_copy) as reader:
        open_manifest(reader, load_dataset_meta(reader), cache_dir=cache, progress=False)
        info_path = sim5_copy / "meta/info.json"
        info = json.loads(info_path.read_text())
        info["robot_type"] = "another"
        info_path.write_text(json.dumps(info))
        meta = load_dataset_meta(reader)
        with pytest.raises(ManifestError, match=r"meta/info\.json changed"):
            open_manifest(reader, meta, cache_dir=cache, build=False)
        assert open_manifest(reader, meta, cache_dir=cache, progress=False).origin == "built"
        assert open_manifest(reader, meta, cache_dir=cache).origin == "cache"


def test_other_revision_is_refused(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        built = build_manifest(reader, load_dataset_meta(reader, revision="aaaa"), progress=False)
        path = write_sidecar(built, tmp_path / "index.arrow")
        meta = load_dataset_meta(reader, revision="bbbb")
        with pytest.raises(ManifestError, match="built for revision 'aaaa'"):
            open_manifest(reader, meta, sidecar=path, build=False)
        with pytest.raises(ManifestError, match="revision"):
            load_sidecar(path, expect=type(built.identity).of(meta))


def test_unreadable_and_foreign_sidecars(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
        built = build_manifest(reader, meta, progress=False)
        path = write_sidecar(built, tmp_path / "index.arrow")
        data = path.read_bytes()

        path.write_bytes(data[: len(data) // 2])
        with pytest.raises(ManifestError, match="not a readable sidecar"):
            load_sidecar(path)
        # an explicit path is rebuilt in place when building is allowed
        rebuilt = open_manifest(reader, meta, sidecar=path, progress=False)
        assert rebuilt.origin == "built" and path.read_bytes() == data
        assert open_manifest(reader, meta, sidecar=path).origin == "explicit"

        table = ipc.open_file(pa.py_buffer(data)).read_all()
        header = json.loads(table.schema.metadata[b"episodestream.sidecar"])
        header["version"] = 99
        future = table.replace_schema_metadata(
            {b"episodestream.sidecar": json.dumps(header).encode()}
        )
        with ipc.new_file(str(path), future.schema) as writer:
            writer.write_table(future)
        with pytest.raises(ManifestError, match="format version 99"):
            load_sidecar(path)

        with ipc.new_file(str(path), pa.schema([("x", pa.int64())])) as writer:
            writer.write_table(pa.table({"x": [1]}))
        with pytest.raises(ManifestError, match="not an episodestream sidecar"):
            load_sidecar(path)


def test_published_copy_is_used_and_cached(
    sim5_copy: Path, tmp_path: Path, http_publish: Any
) -> None:
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        built = build_manifest(reader, meta, progress=False)
    published = sim5_copy / PUBLISHED_SIDECAR_PATH
    write_sidecar(built, published)

    with LocalRangeReader(sim5_copy) as reader:
        found = open_manifest(reader, meta, cache_dir=tmp_path / "a")
        assert found.origin == "published"
        assert_same(built, found)
        assert open_manifest(reader, meta, cache_dir=tmp_path / "a").origin == "cache"
        status = {s.where: s.state for s in sidecar_status(reader, meta, cache_dir=tmp_path / "a")}
        assert status == {"cache": "valid", "published": "valid"}
        # without a cache it is read into memory
        in_memory = open_manifest(reader, meta, use_cache=False)
        assert in_memory.origin == "published" and in_memory.sidecar_path is None

    with open_reader(http_publish(sim5_copy)) as remote:
        remote_meta = load_dataset_meta(remote)
        found = open_manifest(remote, remote_meta, cache_dir=tmp_path / "b")
        assert found.origin == "published"
        assert np.array_equal(found.spans.byte_start, built.spans.byte_start)


def test_published_copy_of_another_dataset_is_ignored(
    sim5_copy: Path, synthetic_av1: Path, tmp_path: Path
) -> None:
    with LocalRangeReader(synthetic_av1) as other:
        foreign = build_manifest(other, load_dataset_meta(other), progress=False)
    write_sidecar(foreign, sim5_copy / PUBLISHED_SIDECAR_PATH)
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        with pytest.raises(ManifestError, match=r"published: .*total_episodes"):
            open_manifest(reader, meta, cache_dir=tmp_path / "c", build=False)
        manifest = open_manifest(reader, meta, cache_dir=tmp_path / "c", progress=False)
        assert manifest.origin == "built" and manifest.num_episodes == 5


def test_nothing_usable_and_building_disabled(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
        with pytest.raises(ManifestError) as raised:
            open_manifest(reader, meta, cache_dir=tmp_path, build=False)
        assert "cache: absent" in str(raised.value)
        assert "published: absent" in str(raised.value)


def test_unwritable_cache_falls_back_to_memory(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with LocalRangeReader(lerobot_fixture_root) as reader:
        manifest = open_manifest(
            reader, load_dataset_meta(reader), cache_dir=blocker / "cache", progress=False
        )
    assert manifest.origin == "built" and manifest.sidecar_path is None
    assert manifest.num_episodes == 5


def _race(root: str, cache: str, start: Any, results: Any) -> None:
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
        start.wait(60)
        manifest = open_manifest(reader, meta, cache_dir=cache, progress=False)
        results.put((manifest.origin, str(manifest.sidecar_path), int(manifest.num_samples)))


def test_racing_processes_build_one_sidecar(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    results = context.Queue()
    cache = tmp_path / "cache"
    workers = [
        context.Process(target=_race, args=(str(lerobot_fixture_root), str(cache), start, results))
        for _ in range(3)
    ]
    for worker in workers:
        worker.start()
    start.set()
    outcomes = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    origins = sorted(origin for origin, _, _ in outcomes)
    assert origins == ["built", "cache", "cache"], outcomes
    paths = {path for _, path, _ in outcomes}
    assert len(paths) == 1
    path = Path(paths.pop())
    assert load_sidecar(path).num_samples == outcomes[0][2]
    assert sorted(p.name for p in path.parent.iterdir()) == ["index.arrow", "index.arrow.lock"]


def test_big_published_sidecar_is_judged_by_its_header(sim5_copy: Path, tmp_path: Path) -> None:
    from benchmarks.manifest import synthesize_manifest

    foreign = synthesize_manifest(episodes=300, episodes_per_file=100)  # ~11 MB
    path = write_sidecar(foreign, sim5_copy / PUBLISHED_SIDECAR_PATH)
    assert path.stat().st_size > 8 << 20
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        before = reader.metrics()["bytes"]
        with pytest.raises(ManifestError, match=r"published: .*total_episodes is 300"):
            open_manifest(reader, meta, cache_dir=tmp_path, build=False)
        assert reader.metrics()["bytes"] - before < 64 << 10  # footer only, never the file
        status = {s.where: s for s in sidecar_status(reader, meta, cache_dir=tmp_path)}
        assert status["published"].state == "stale"


# --- sidecars of a subset of the episodes (index --episodes / --num-episodes) ---------------


def _header(path: Path) -> dict[str, Any]:
    schema = ipc.open_file(pa.py_buffer(path.read_bytes())).schema
    return json.loads(schema.metadata[b"episodestream.sidecar"])


def _write_subset(
    reader: LocalRangeReader,
    meta: DatasetMeta,
    episodes: list[int],
    path: Path | None = None,
    *,
    cache: Path | None = None,
) -> Path:
    """A sidecar of ``episodes`` built and written to ``path``, or where ``cache`` keeps it."""
    if path is None:
        assert cache is not None
        path = sidecar_cache_path(meta, cache, episodes=episodes)
    return write_sidecar(build_manifest(reader, meta, progress=False, episodes=episodes), path)


def test_episode_subset_runs() -> None:
    subset = EpisodeSubset.of([7, 0, 1, 2, 5, 1])
    assert subset.runs == ((0, 3), (5, 6), (7, 8))
    assert subset.count == 5 and subset.ids().tolist() == [0, 1, 2, 5, 7]
    assert subset.missing([8, 2, 6, 0, 4]).tolist() == [4, 6, 8]
    assert subset.describe() == "5 episodes (0..2, 5, 7)"
    assert EpisodeSubset.of(range(1000)).runs == ((0, 1000),)  # the first N: one run
    assert EpisodeSubset.of([2, 1]).key() == EpisodeSubset.of([1, 2]).key()
    assert EpisodeSubset.of([1, 2]).key() != EpisodeSubset.of([1, 3]).key()
    assert EpisodeSubset.from_json(subset.to_json()) == subset
    with pytest.raises(ConfigError, match="at least one episode"):
        EpisodeSubset.of([])
    with pytest.raises(ManifestError, match="not ascending runs"):
        EpisodeSubset(((3, 5), (4, 6)))


def test_subset_sidecar_records_its_episodes(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
        full = build_manifest(reader, meta, progress=False)
        before = reader.metrics()["requests"]
        subset = build_manifest(reader, meta, progress=False, episodes=[3, 1, 3])
        subset_requests = reader.metrics()["requests"] - before
        # a list of every episode is the whole dataset
        every = build_manifest(reader, meta, progress=False, episodes=[4, 3, 2, 1, 0])
    assert subset.identity.episodes == EpisodeSubset(((1, 2), (3, 4)))
    assert subset.episode_index.tolist() == [1, 3] and not subset.episode_index.flags.writeable
    assert subset.identity.dataset_mismatch(full.identity) is None
    assert subset.identity != full.identity
    for episode in (1, 3):
        for camera in meta.video_keys:
            assert subset.span(episode, camera) == full.span(episode, camera)
    with pytest.raises(KeyError):
        subset.row(0)
    # only the files holding episodes 1 and 3 are read
    assert subset.num_files == 6 < full.num_files == 9
    assert full.build_stats is not None and subset_requests < full.build_stats.requests
    assert every.identity == full.identity

    path = write_sidecar(subset, tmp_path / "subset.arrow")
    loaded = load_sidecar(path)
    assert_same(subset, loaded)
    assert_same(loaded, pickle.loads(pickle.dumps(loaded)))
    assert _header(path)["version"] == 2
    assert _header(path)["identity"]["episodes"] == [[1, 2], [3, 4]]
    # a sidecar of every episode keeps format version 1 and no episodes field
    whole = write_sidecar(full, tmp_path / "whole.arrow")
    assert _header(whole)["version"] == 1 and "episodes" not in _header(whole)["identity"]
    assert load_sidecar(whole).identity.episodes is None


def test_sidecar_whose_episode_column_contradicts_its_header_is_refused(
    lerobot_fixture_root: Path, tmp_path: Path
) -> None:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        subset = build_manifest(reader, load_dataset_meta(reader), progress=False, episodes=[1, 3])
    path = write_sidecar(subset, tmp_path / "subset.arrow")
    table = ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    header = json.loads(table.schema.metadata[b"episodestream.sidecar"])
    header["identity"]["episodes"] = [[1, 3]]  # episodes 1 and 2; the column holds 1 and 3
    edited = table.replace_schema_metadata({b"episodestream.sidecar": json.dumps(header).encode()})
    with ipc.new_file(str(path), edited.schema) as writer:
        writer.write_table(edited)
    with pytest.raises(ManifestError, match="not the subset its header records"):
        load_sidecar(path)


def test_subset_cache_paths_do_not_collide(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
    whole = sidecar_cache_path(meta, tmp_path)
    first_two = sidecar_cache_path(meta, tmp_path, episodes=[1, 0])
    assert first_two.parent == whole.parent and first_two != whole
    assert first_two.name.startswith("index.episodes-2-")
    assert first_two == sidecar_cache_path(meta, tmp_path, episodes=EpisodeSubset.of([0, 1]))
    assert first_two != sidecar_cache_path(meta, tmp_path, episodes=[0, 2])
    assert sidecar_cache_path(meta, tmp_path, episodes=range(5)) == whole
    with pytest.raises(UnknownEpisodesError, match="unknown episode"):
        sidecar_cache_path(meta, tmp_path, episodes=[5])


def test_unknown_episodes_are_named(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
        with pytest.raises(UnknownEpisodesError) as raised:
            build_manifest(reader, meta, progress=False, episodes=[1, 99, 7, 7])
        assert raised.value.episodes == (7, 99)
        assert "unknown episode(s) 7, 99" in str(raised.value)
        assert "0..4, 5 in all" in str(raised.value)
        assert isinstance(raised.value, ManifestError) and isinstance(raised.value, ConfigError)
        copy = pickle.loads(pickle.dumps(raised.value))
        assert copy.episodes == (7, 99) and str(copy) == str(raised.value)
        with pytest.raises(UnknownEpisodesError, match="unknown episode"):
            open_manifest(reader, meta, cache_dir=tmp_path, episodes=[-1])
        assert not tmp_path.joinpath("sidecars").exists()  # refused before anything is built


def test_episodes_that_are_not_integers_are_refused(
    lerobot_fixture_root: Path, tmp_path: Path
) -> None:
    # a cast would take 1.5 for episode 1 and index (or look up) the wrong subset
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
        for bad in ([1.5], [0, 2.0], np.array([1.0]), [True], ["1"]):
            with pytest.raises(ConfigTypeError, match="episode indices must be integers"):
                sidecar_cache_path(meta, tmp_path, episodes=bad)
            with pytest.raises(ConfigTypeError, match="episode indices must be integers"):
                open_manifest(reader, meta, cache_dir=tmp_path, episodes=bad)
            with pytest.raises(ConfigTypeError, match="episode indices must be integers"):
                build_manifest(reader, meta, progress=False, episodes=bad)
            with pytest.raises(ConfigTypeError, match="episode indices must be integers"):
                EpisodeSubset.of(bad)
        assert not tmp_path.joinpath("sidecars").exists()  # refused before anything is built
    # integers of any integer dtype still do
    subset = sidecar_cache_path(meta, tmp_path, episodes=np.array([1, 3], dtype=np.uint8))
    assert subset == sidecar_cache_path(meta, tmp_path, episodes=[3, 1])


def test_subset_sidecar_serves_its_subset_and_smaller(sim5_copy: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        subset = build_manifest(reader, meta, progress=False, episodes=[1, 2, 3])
        path = write_sidecar(subset, sidecar_cache_path(meta, cache, episodes=[1, 2, 3]))
        before = reader.metrics()["requests"]
        same = open_manifest(reader, meta, cache_dir=cache, episodes=[3, 1, 2])
        smaller = open_manifest(reader, meta, cache_dir=cache, episodes=[2], build=False)
        assert reader.metrics()["requests"] == before  # nothing built, nothing read
        for manifest in (same, smaller):
            assert manifest.origin == "cache" and manifest.sidecar_path == path
            assert_same(subset, manifest)
        # a larger subset is not served by it: with building disabled nothing is usable
        with pytest.raises(ManifestError, match="cache: absent"):
            open_manifest(reader, meta, cache_dir=cache, episodes=[0, 1], build=False)
        statuses = [s for s in sidecar_status(reader, meta, cache_dir=cache) if s.where == "cache"]
        assert [(s.location, s.state) for s in statuses] == [
            (str(sidecar_cache_path(meta, cache)), "absent"),
            (str(path), "partial"),
        ]
        assert "indexes only 3 episodes (1..3) of the dataset's 5" in statuses[1].reason


def test_whole_sidecar_serves_any_subset(sim5_copy: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        whole = open_manifest(reader, meta, cache_dir=cache, progress=False)
        assert whole.origin == "built" and whole.identity.episodes is None
        before = reader.metrics()["requests"]
        for episodes in ([4], [0, 2, 3]):
            manifest = open_manifest(reader, meta, cache_dir=cache, episodes=episodes, build=False)
            assert manifest.origin == "cache" and manifest.sidecar_path == whole.sidecar_path
        explicit = open_manifest(
            reader, meta, sidecar=whole.sidecar_path, episodes=[1], build=False
        )
        assert explicit.origin == "explicit"
        assert reader.metrics()["requests"] == before
        # a sidecar of a subset beside it is not needed, and a whole one is preferred
        _write_subset(reader, meta, [4], cache=cache)
        assert open_manifest(reader, meta, cache_dir=cache, episodes=[4]).sidecar_path == (
            whole.sidecar_path
        )


def test_subset_sidecar_is_never_taken_for_the_whole_dataset(
    sim5_copy: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        subset_path = _write_subset(reader, meta, [0, 1], cache=cache)
        kept = subset_path.read_bytes()
        with pytest.raises(ManifestError, match="cache: absent"):
            open_manifest(reader, meta, cache_dir=cache, build=False)
        whole = open_manifest(reader, meta, cache_dir=cache, progress=False)
        assert whole.origin == "built" and whole.identity.episodes is None
        assert whole.num_episodes == 5 and whole.sidecar_path == sidecar_cache_path(meta, cache)
        assert subset_path.read_bytes() == kept  # built beside it, not over it

        # a subset sidecar where the whole one belongs (written there by hand) is refused
        write_sidecar(load_sidecar(subset_path), whole.sidecar_path)
        with pytest.raises(ManifestError, match=r"cache: .*indexes only 2 episodes \(0\.\.1\)"):
            open_manifest(reader, meta, cache_dir=cache, build=False)


def test_explicit_subset_sidecar_lacking_episodes_is_a_typed_error(
    sim5_copy: Path, tmp_path: Path
) -> None:
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        path = _write_subset(reader, meta, [1, 3], tmp_path / "mine.arrow")
        kept = path.read_bytes()
        for episodes, missing in ((None, (0, 2, 4)), ([0, 1], (0,))):
            with pytest.raises(SidecarCoverageError) as raised:
                open_manifest(reader, meta, sidecar=path, episodes=episodes, progress=False)
            assert raised.value.path == str(path) and raised.value.missing == missing
            assert str(path) in str(raised.value)
            assert f"lacks episode(s) {', '.join(map(str, missing))}" in str(raised.value)
        assert path.read_bytes() == kept  # not rebuilt over
        served = open_manifest(reader, meta, sidecar=path, episodes=[3], build=False)
        assert served.origin == "explicit" and served.episode_index.tolist() == [1, 3]
        statuses = {s.where: s for s in sidecar_status(reader, meta, sidecar=path)}
        assert statuses["explicit"].state == "partial"


def test_published_subset_sidecar_is_not_used(sim5_copy: Path, tmp_path: Path) -> None:
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        _write_subset(reader, meta, [0], sim5_copy / PUBLISHED_SIDECAR_PATH)
        with pytest.raises(ManifestError, match=r"published: .*indexes only 1 episode \(0\)"):
            open_manifest(reader, meta, cache_dir=tmp_path / "cache", build=False)
        with pytest.raises(ManifestError, match=r"published: .*indexes only 1 episode \(0\)"):
            open_manifest(reader, meta, use_cache=False, build=False)
        built = open_manifest(reader, meta, cache_dir=tmp_path / "cache", progress=False)
        assert built.origin == "built" and built.num_episodes == 5


def test_publishing_a_subset_sidecar_is_refused(sim5_copy: Path, tmp_path: Path) -> None:
    with LocalRangeReader(sim5_copy) as reader:
        meta = load_dataset_meta(reader)
        path = _write_subset(reader, meta, [0, 1], tmp_path / "s.arrow")
        with pytest.raises(ManifestError, match="a published sidecar is the dataset's whole index"):
            publish_sidecar(path, reader, meta, str(sim5_copy))
    assert not (sim5_copy / PUBLISHED_SIDECAR_PATH).exists()


def test_dataset_opened_on_a_subset_uses_its_cached_sidecar(
    lerobot_fixture_root: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
        path = _write_subset(reader, meta, [1, 2], cache=cache)
    options = StreamOptions(decoder="pyav", cache_dir=cache, build_index=False)
    with EpisodeStreamDataset(lerobot_fixture_root, episodes=[2], options=options) as dataset:
        assert dataset.dataset.manifest.sidecar_path == path
        assert len(dataset) == int(meta.episodes.length[2])
    # the whole dataset does not take it: nothing usable, building disabled
    with pytest.raises(ManifestError, match="cache: absent"):
        EpisodeStreamDataset(lerobot_fixture_root, options=options)
    # nor when it is handed over: a typed error naming the file and what it lacks
    explicit = dataclasses.replace(options, sidecar=path, build_index=True)
    with pytest.raises(SidecarCoverageError, match=r"lacks episode\(s\) 0, 3, 4 \(3 in all\)"):
        EpisodeStreamDataset(lerobot_fixture_root, options=explicit)
    with EpisodeStreamDataset(lerobot_fixture_root, episodes=[1], options=explicit) as dataset:
        assert dataset.dataset.manifest.origin == "explicit"

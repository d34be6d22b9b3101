"""One RangeReader contract, run against every backend on real servers.

Backends: local disk, HTTP (a Python server and the session's nginx), the Hugging Face Hub
stand-in (redirects to a signed-URL CDN), fsspec ``memory://`` and S3 through s3fs on moto.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from episodestream import ConfigTypeError, InvalidResponse, LocationError, NotFound, StorageError
from episodestream.storage import (
    BaseRangeReader,
    FsspecRangeReader,
    HttpRangeReader,
    HubRangeReader,
    Limits,
    ListableReader,
    LocalRangeReader,
    RangeReader,
    ReaderStats,
    ReadRequest,
)
from tests.support.memory_reader import MemoryReader

pytestmark = pytest.mark.timeout(120)

FILES: dict[str, bytes] = {
    "meta/info.json": b'{"codebase_version": "v3.0"}',
    "videos/observation.images.cam/chunk-000/file-000.mp4": random.Random(1).randbytes(700_000),
    "videos/observation.images.cam/chunk-000/file-001.mp4": random.Random(2).randbytes(90_001),
    "data/chunk-000/file-000.parquet": random.Random(3).randbytes(40_000),
    "odd name #1 ü.bin": random.Random(4).randbytes(1_234),
}
BIG = "videos/observation.images.cam/chunk-000/file-000.mp4"
# Small split and coalesce sizes so a few hundred KB exercise both paths.
LIMITS = Limits(
    max_connections_per_host=4,
    max_concurrency=4,
    split_threshold_bytes=256 * 1024,
    split_part_bytes=100_000,
    coalesce_gap_bytes=1024,
    coalesce_max_bytes=200_000,
)


@dataclass
class Case:
    reader: RangeReader
    listable: bool


@pytest.fixture(scope="session")
def contract_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("contract")
    for relative, data in FILES.items():
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root


BACKENDS = ["local", "http", "nginx", "hub", "memory", "s3"]


@pytest.fixture(params=BACKENDS)
def case(request: pytest.FixtureRequest, contract_dir: Path) -> Iterator[Case]:
    kind = request.param
    if kind == "local":
        reader: RangeReader = LocalRangeReader(contract_dir)
        listable = True
    elif kind == "http":
        server = request.getfixturevalue("fault_server")
        for relative, data in FILES.items():
            server.put(f"root/{relative}", data)
        reader, listable = HttpRangeReader(server.url + "/root", limits=LIMITS), False
    elif kind == "nginx":
        url = request.getfixturevalue("http_publish")(contract_dir)
        reader, listable = HttpRangeReader(url, limits=LIMITS), False
    elif kind == "hub":
        hub = request.getfixturevalue("hub_standin")
        hub.commit("org/contract", {f"sub/{k}": v for k, v in FILES.items()})
        reader = HubRangeReader(
            "hf://datasets/org/contract/sub", token=hub.token, endpoint=hub.endpoint, limits=LIMITS
        )
        listable = True
    elif kind == "memory":
        import fsspec

        memory = fsspec.filesystem("memory")
        for relative, data in FILES.items():
            memory.pipe(f"/contract-{os.getpid()}/{relative}", data)
        reader, listable = FsspecRangeReader(f"memory://contract-{os.getpid()}"), True
    else:
        s3 = request.getfixturevalue("s3_server")
        client = s3.client()
        client.create_bucket(Bucket="contract")
        for relative, data in FILES.items():
            client.put_object(Bucket="contract", Key=f"ds/{relative}", Body=data)
        reader = FsspecRangeReader("s3://contract/ds", storage_options=s3.storage_options)
        listable = True
    try:
        yield Case(reader, listable)
    finally:
        reader.close()


def _thread_names() -> set[str]:
    prefixes = ("episodestream-http", "episodestream-fsspec")
    return {t.name for t in threading.enumerate() if t.name.startswith(prefixes)}


def test_sizes_and_protocols(case: Case):
    assert isinstance(case.reader, RangeReader)
    assert isinstance(case.reader, ListableReader) == case.listable
    for relative, data in FILES.items():
        assert case.reader.size(relative) == len(data), relative


def test_random_ranges_are_exact(case: Case):
    rng = random.Random(11)
    for relative, data in FILES.items():
        size = len(data)
        ranges = [(0, size), (size - 1, 1), (0, 1)]
        ranges += [(o, rng.randint(1, size - o)) for o in rng.sample(range(size), min(6, size))]
        for offset, length in ranges:
            assert case.reader.read(relative, offset, length) == data[offset : offset + length]
    assert case.reader.read(BIG, 5, 0) == b""


def test_read_many_keeps_request_order(case: Case):
    rng = random.Random(5)
    data = FILES[BIG]
    requests = [
        ReadRequest(BIG, rng.randrange(0, 600_000), rng.randint(1, 5000)) for _ in range(20)
    ]
    requests += [
        ReadRequest(BIG, 1000, 100),
        ReadRequest(BIG, 1100, 100),  # adjacent
        ReadRequest(BIG, 1050, 100),  # overlapping
        ReadRequest(BIG, 1000, 100),  # duplicate
        ReadRequest(BIG, 0, len(data)),  # long: split into parts
        ReadRequest("meta/info.json", 0, 0),
        ReadRequest("odd name #1 ü.bin", 3, 500),
    ]
    rng.shuffle(requests)
    results = case.reader.read_many(requests)
    expected = [FILES[r.path][r.offset : r.end] for r in requests]
    assert results == expected
    assert case.reader.read_many([]) == []
    metrics = case.reader.metrics()
    assert metrics["requests"] > 0 and metrics["bytes"] >= len(data)


def test_reads_count_the_ranges_asked_for_on_every_backend(case: Case):
    """``reads`` means the same everywhere: one per range a caller asked for, however a
    backend fetches it (one range alone, empty ones, several at once)."""
    before = case.reader.stats().reads
    assert case.reader.read_many([ReadRequest(BIG, 10, 100)]) == [FILES[BIG][10:110]]
    assert case.reader.stats().reads == before + 1
    case.reader.read_many([ReadRequest(BIG, 10, 100), ReadRequest(BIG, 0, 0)])
    assert case.reader.stats().reads == before + 3
    case.reader.read_many([ReadRequest(BIG, 10, 100), ReadRequest(BIG, 50_000, 100)])
    assert case.reader.stats().reads == before + 5
    case.reader.read(BIG, 0, 1)
    assert case.reader.stats().reads == before + 6


def test_lookups_are_the_requests_that_asked_for_no_bytes(case: Case):
    """``lookups`` counts the requests among ``requests`` that learned a size or listed a folder
    (an HTTP probe, a Hub tree page, an fsspec info), so ``requests - lookups`` are the
    requests for bytes: what bench's fetch phase reports per episode-camera."""
    other = "videos/observation.images.cam/chunk-000/file-001.mp4"

    def counts() -> tuple[int, int, int]:
        stats = case.reader.stats()
        return stats.requests, stats.lookups, stats.redirects

    requests, lookups, _ = counts()
    assert case.reader.size(other) == len(FILES[other])
    after_requests, after_lookups, after_redirects = counts()
    assert after_requests - after_lookups == requests - lookups  # no bytes asked for
    if isinstance(case.reader, LocalRangeReader):
        assert after_lookups == lookups == 0  # the file system answers, no request
    else:
        assert after_lookups > lookups
    assert case.reader.read(BIG, 1_000, 100) == FILES[BIG][1_000:1_100]
    final_requests, final_lookups, final_redirects = counts()
    # one range asked for: one request for bytes, whether or not a size was learned first,
    # and one more for each redirect it followed (the Hub's resolve URL to its CDN)
    for_bytes = (final_requests - final_lookups) - (after_requests - after_lookups)
    assert for_bytes == 1 + final_redirects - after_redirects


def test_errors_are_typed(case: Case):
    with pytest.raises(NotFound) as missing:
        case.reader.read("meta/absent.json", 0, 10)
    assert isinstance(missing.value, FileNotFoundError)
    assert "absent.json" in str(missing.value)
    with pytest.raises(NotFound):
        case.reader.size("meta/absent.json")
    size = len(FILES["meta/info.json"])
    with pytest.raises(StorageError) as past_end:
        case.reader.read("meta/info.json", size - 2, 10)
    assert "info.json" in str(past_end.value)
    with pytest.raises(StorageError):
        case.reader.read("meta/info.json", size + 100, 10)
    for bad in ("../escape", "/etc/passwd", "meta/../../x"):
        with pytest.raises(LocationError):
            case.reader.read(bad, 0, 1)
    with pytest.raises(ValueError):
        case.reader.read("meta/info.json", -1, 1)


def test_listing(case: Case):
    if not case.listable:
        assert not hasattr(case.reader, "list_files")
        return
    assert isinstance(case.reader, ListableReader)
    assert case.reader.list_files("") == sorted(FILES)
    assert case.reader.list_files("videos") == sorted(k for k in FILES if k.startswith("videos/"))
    assert case.reader.list_files("meta/") == ["meta/info.json"]
    assert case.reader.list_files("absent") == []


def test_pickled_reader_works_and_holds_no_threads(case: Case):
    before = _thread_names()
    case.reader.read_many([ReadRequest(BIG, 0, 10), ReadRequest(BIG, 500_000, 10)])
    # Locks, sockets and executors do not pickle: this fails if the reader carried any.
    clone = pickle.loads(pickle.dumps(case.reader))
    try:
        assert clone.read(BIG, 100, 50) == FILES[BIG][100:150]
        assert clone.read_many([ReadRequest(BIG, 7, 3), ReadRequest(BIG, 9_000, 30_000)]) == [
            FILES[BIG][7:10],
            FILES[BIG][9_000:39_000],
        ]
    finally:
        clone.close()
    case.reader.close()
    assert _thread_names() <= before


def test_read_file_returns_whole_files(case: Case):
    for relative, data in FILES.items():
        assert case.reader.read_file(relative) == data, relative
    with pytest.raises(NotFound):
        case.reader.read_file("meta/absent.json")
    with pytest.raises(StorageError, match="max_bytes"):
        case.reader.read_file(BIG, max_bytes=1000)


def test_the_seam_is_declared_and_the_same_for_every_backend(case: Case):
    """What layers above storage use of a reader is what BaseRangeReader declares: root,
    revision, file_info, read_file and stats with the same fields everywhere."""
    reader = case.reader
    assert isinstance(reader, BaseRangeReader)
    assert isinstance(reader.root, str) and reader.root
    assert reader.revision is None or isinstance(reader.revision, str)
    before = reader.stats()
    assert isinstance(before, ReaderStats)
    data = reader.read(BIG, 1000, 5000)
    assert reader.file_info(BIG).size == len(FILES[BIG])
    after = reader.stats()
    assert after.bytes_returned - before.bytes_returned >= len(data)
    assert after.requests > before.requests
    # the flat counters have one key set, whatever the backend
    names = {f.name for f in dataclasses.fields(ReaderStats)} - {"statuses", "other"}
    assert names <= reader.metrics().keys()
    with pytest.raises(AttributeError):
        after.requests = 0  # type: ignore[misc]


def test_stats_round_trip_through_flat_counters():
    counters = {"requests": 3, "bytes": 10, "status_206": 2, "status_403": 1, "chunk_waits": 4}
    stats = ReaderStats.from_counters(counters)
    assert (stats.requests, stats.bytes, stats.retries) == (3, 10, 0)
    assert dict(stats.statuses) == {206: 2, 403: 1}
    assert dict(stats.other) == {"chunk_waits": 4}
    flat = stats.as_dict()
    assert {k: flat[k] for k in counters} == counters
    assert ReaderStats.from_counters(flat) == stats


def test_a_minimal_backend_gets_the_rest_from_the_base(lerobot_fixture_root: Path):
    """Four methods make a reader the metadata layer can use (fast in-memory tests)."""
    from episodestream.lerobot import load_dataset_meta

    reader = MemoryReader.of_folder(lerobot_fixture_root)
    files = reader.files
    with reader:
        meta = load_dataset_meta(reader)
        assert meta.root == "memory://test"
        assert meta.total_episodes > 0
        assert reader.read_file("meta/info.json") == files["meta/info.json"]
        assert reader.file_info("meta/info.json").size == len(files["meta/info.json"])
        assert reader.read_many([ReadRequest("meta/info.json", 1, 3)]) == [
            files["meta/info.json"][1:4]
        ]
        assert reader.metrics()["requests"] == reader.reads
        with pytest.raises(InvalidResponse, match="read it by ranges"):
            reader.read_file("meta/info.json", max_bytes=2)


def test_one_readers_failing_fork_hook_does_not_leave_the_others_on_the_parents_state():
    class Recorder(MemoryReader):
        forked = False

        def _after_fork_in_child(self) -> None:
            type(self).forked = True

    class Failing(MemoryReader):
        def _after_fork_in_child(self) -> None:
            raise RuntimeError("cannot")

    readers = [Failing({}), Recorder({}), Failing({})]
    pid = os.fork()
    if pid == 0:  # the child: every hook ran, the failure was logged, not raised
        os._exit(0 if Recorder.forked else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(readers) == 3 and not Recorder.forked  # the parent's hooks never ran


def test_a_boolean_token_is_refused_for_http_roots():
    with pytest.raises(ConfigTypeError, match=r"URL must be a str, got True"):
        HttpRangeReader("https://example.invalid/d", token=True)  # type: ignore[arg-type]

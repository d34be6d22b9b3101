"""The HTTP reader against a fault-injecting server: exact bytes or a typed error, never a hang."""

from __future__ import annotations

import json
import random
import threading

import pytest

from episodestream import (
    InvalidResponse,
    NotFound,
    RangeNotSupported,
    StaleSourceError,
    StorageError,
    StorageTimeout,
)
from episodestream.storage import HttpRangeReader, Limits, ReadRequest, RetryPolicy, Timeouts
from tests.plugins.storage import Fault, FaultServer

pytestmark = pytest.mark.timeout(60)

DATA = random.Random(42).randbytes(2_000_000)
PATH = "videos/file-000.mp4"
# Fast retries so fault tests take milliseconds; bounded attempts so failures end.
FAST = RetryPolicy(max_attempts=4, backoff_initial_seconds=0.01, backoff_max_seconds=0.05)
NO_SPLIT = Limits(split_threshold_bytes=0, coalesce_gap_bytes=-1)


def _reader(server: FaultServer, **options) -> HttpRangeReader:
    options.setdefault("retry", FAST)
    options.setdefault("limits", NO_SPLIT)
    options.setdefault("timeouts", Timeouts(connect_seconds=2, read_seconds=2))
    return HttpRangeReader(server.url, seed=0, **options)


@pytest.fixture
def served(fault_server: FaultServer) -> FaultServer:
    fault_server.put(PATH, DATA)
    return fault_server


def test_503_burst_is_retried_and_logged(served, tmp_path):
    log = tmp_path / "failures.jsonl"
    served.inject(PATH, *[Fault("status", status=503, retry_after="0")] * 3)
    with _reader(served, failure_log=log, token="tok-SECRET") as reader:
        assert reader.read(PATH, 1000, 5000) == DATA[1000:6000]
        assert reader.metrics()["retries"] == 3
        assert reader.metrics()["status_503"] == 3
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["status"] for r in records] == [503, 503, 503]
    assert all(r["retry"] and r["range"] == [1000, 5999] for r in records)
    assert "SECRET" not in log.read_text()


def test_retry_statuses_and_retry_after(served, tmp_path):
    log = tmp_path / "failures.jsonl"
    faults = [Fault("status", status=s) for s in (408, 425, 500, 502, 504)]
    served.inject(PATH, Fault("status", status=429, retry_after="1"), *faults)
    policy = RetryPolicy(max_attempts=7, backoff_initial_seconds=0.01, backoff_max_seconds=0.02)
    with _reader(served, retry=policy, failure_log=log) as reader:
        assert reader.read(PATH, 0, 100) == DATA[:100]
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["status"] for r in records] == [429, 408, 425, 500, 502, 504]
    assert records[0]["delay_seconds"] == 1.0  # Retry-After won over a 10 ms backoff
    assert all(r["delay_seconds"] <= 0.02 for r in records[1:])


def test_persistent_503_gives_up_after_the_attempt_budget(served):
    served.inject(PATH, *[Fault("status", status=503)] * 10)
    with _reader(served) as reader, pytest.raises(StorageError) as info:
        reader.read(PATH, 0, 10)
    assert "HTTP 503" in str(info.value) and "4 attempt" in str(info.value)
    assert PATH in str(info.value) and "bytes 0-9" in str(info.value)
    assert len(served.requests_for(PATH)) == 4


def test_no_retry_on_404(served):
    with _reader(served) as reader, pytest.raises(NotFound):
        reader.read("videos/missing.mp4", 0, 10)
    assert len(served.requests_for("videos/missing.mp4")) == 1


def test_connection_reset_mid_body(served):
    served.inject(PATH, Fault("reset", after_bytes=300_000))
    with _reader(served) as reader:
        assert reader.read(PATH, 10, 1_500_000) == DATA[10:1_500_010]
        assert reader.metrics()["retries"] + reader.metrics()["resumes"] >= 1


def test_truncated_body_resumes_from_the_first_missing_byte(served):
    served.inject(PATH, Fault("truncate", after_bytes=123_456))
    with _reader(served) as reader:
        assert reader.read(PATH, 1000, 500_000) == DATA[1000:501_000]
        assert reader.metrics()["resumes"] == 1
    ranges = [r.header("Range") for r in served.requests_for(PATH)]
    assert ranges == ["bytes=1000-500999", f"bytes={1000 + 123_456}-500999"]


def test_repeated_truncation_still_converges(served):
    served.inject(PATH, *[Fault("truncate", after_bytes=50_000)] * 6)
    with _reader(served) as reader:
        assert reader.read(PATH, 0, 400_000) == DATA[:400_000]
        assert reader.metrics()["resumes"] == 6


def test_first_byte_slower_than_the_timeout(served):
    # the first attempt never answers before the test ends (released after), so it must
    # time out; the retry, not stalled, has a read timeout no loaded machine comes near
    release = threading.Event()
    served.inject(PATH, Fault("stall", release=release))
    timeouts = Timeouts(connect_seconds=2, read_seconds=2)
    try:
        with _reader(served, timeouts=timeouts) as reader:
            assert reader.read(PATH, 0, 1000) == DATA[:1000]
            assert reader.metrics()["retries"] == 1
    finally:
        release.set()


def test_a_server_that_always_stalls_ends_in_storage_timeout(served):
    served.inject(PATH, *[Fault("stall", delay_seconds=1.5)] * 2)
    timeouts = Timeouts(connect_seconds=1, read_seconds=0.3)
    policy = RetryPolicy(max_attempts=2, backoff_initial_seconds=0.01)
    with (
        _reader(served, timeouts=timeouts, retry=policy) as reader,
        pytest.raises(StorageTimeout) as info,
    ):
        reader.read(PATH, 0, 1000)
    assert isinstance(info.value, TimeoutError)
    assert "bytes 0-999" in str(info.value)


def test_wrong_content_range_is_never_trusted(served):
    served.inject(PATH, Fault("wrong_range", shift=7))
    with _reader(served) as reader:
        assert reader.read(PATH, 100, 1000) == DATA[100:1100]
    served.inject(PATH, *[Fault("wrong_range", shift=1)] * 4)
    with _reader(served) as reader, pytest.raises(InvalidResponse) as info:
        reader.read(PATH, 100, 1000)
    assert "Content-Range" in str(info.value) and "bytes 100-1099" in str(info.value)


def test_200_instead_of_206_streams_to_the_range_without_buffering(served):
    served.inject(PATH, Fault("ignore_range"))
    with _reader(served, max_skip_bytes=64 * 1024) as reader:
        assert reader.read(PATH, 50_000, 1000) == DATA[50_000:51_000]
        metrics = reader.metrics()
        assert metrics["range_ignored"] == 1
        # Read up to the end of the range, not the whole 2 MB file.
        assert metrics["bytes"] <= 51_000 + 1  # (+1: nothing else was read)


def test_200_instead_of_206_far_into_a_file_is_range_not_supported(served):
    served.inject(PATH, Fault("ignore_range"))
    with _reader(served, max_skip_bytes=64 * 1024) as reader:
        with pytest.raises(RangeNotSupported) as info:
            reader.read(PATH, 1_000_000, 1000)
        assert reader.metrics()["bytes"] == 0
    assert "bytes 1000000-1000999" in str(info.value)


def test_file_replaced_between_reads_is_stale(served):
    with _reader(served) as reader:
        assert reader.read(PATH, 0, 100) == DATA[:100]
        served.replace(PATH, DATA[::-1])
        with pytest.raises(StaleSourceError) as info:
            reader.read(PATH, 100, 100)
        # The pinned validator went out as If-Range; the server answered 200 with the new file.
        first, last = served.requests_for(PATH)[0], served.requests_for(PATH)[-1]
        assert first.header("If-Range") is None
        assert last.header("If-Range") is not None and last.status == 200
    assert "changed" in str(info.value) and PATH in str(info.value)


def test_file_replaced_mid_read_many_is_stale(served):
    with _reader(served, limits=Limits(max_concurrency=2, coalesce_gap_bytes=-1)) as reader:
        reader.size(PATH)
        served.inject(PATH, None, None, Fault("replace", data=DATA[::-1]))  # type: ignore[arg-type]
        requests = [ReadRequest(PATH, i * 100_000, 1000) for i in range(8)]
        with pytest.raises(StaleSourceError):
            reader.read_many(requests)


def test_stale_detection_with_last_modified_only(fault_server):
    fault_server.put(PATH, DATA, validators="last_modified")
    with _reader(fault_server) as reader:
        info = reader.file_info(PATH)
        assert info.etag is None and info.last_modified is not None
        fault_server.replace(PATH, DATA[::-1])
        with pytest.raises(StaleSourceError):
            reader.read(PATH, 0, 10)


def test_same_size_replacement_without_validators_is_still_refused_when_size_changes(
    fault_server,
):
    fault_server.put(PATH, DATA, validators="none")
    with _reader(fault_server) as reader:
        assert reader.size(PATH) == len(DATA)
        fault_server.replace(PATH, DATA + b"x")
        with pytest.raises(StaleSourceError):
            reader.read(PATH, 0, 10)


def test_large_range_is_split_into_parallel_sub_ranges(served):
    limits = Limits(split_threshold_bytes=500_000, split_part_bytes=300_000, max_concurrency=4)
    with _reader(served, limits=limits) as reader:
        assert reader.read(PATH, 7, 1_200_000) == DATA[7:1_200_007]
    ranges = sorted(r.header("Range") for r in served.requests_for(PATH))
    assert ranges == sorted(
        ["bytes=7-300006", "bytes=300007-600006", "bytes=600007-900006", "bytes=900007-1200006"]
    )


def test_adjacent_small_ranges_are_coalesced(served):
    limits = Limits(coalesce_gap_bytes=100, coalesce_max_bytes=1_000_000)
    requests = [ReadRequest(PATH, 1000 + i * 4096, 4096) for i in range(16)]
    requests.append(ReadRequest(PATH, 1000 + 16 * 4096 + 50, 10))  # within the gap
    requests.append(ReadRequest(PATH, 900_000, 10))  # far away: its own request
    with _reader(served, limits=limits) as reader:
        assert reader.read_many(requests) == [DATA[r.offset : r.end] for r in requests]
        assert reader.metrics()["coalesced_requests"] == 16
    assert len(served.requests_for(PATH)) == 2


def test_connection_refused_ends_in_a_typed_error():
    server = FaultServer()
    url = server.url
    server.close()
    policy = RetryPolicy(max_attempts=3, backoff_initial_seconds=0.01)
    with HttpRangeReader(url, retry=policy) as reader, pytest.raises(StorageError) as info:
        reader.read("x", 0, 1)
    assert "connection failed" in str(info.value) and "3 attempt" in str(info.value)


def test_close_interrupts_a_retry_wait_and_joins_threads(served):
    served.inject(PATH, *[Fault("status", status=503, retry_after="30")] * 4)
    policy = RetryPolicy(max_attempts=4, retry_after_max_seconds=30)
    reader = _reader(served, retry=policy)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            reader.read(PATH, 0, 10)
        except BaseException as error:
            errors.append(error)

    worker = threading.Thread(target=run)
    worker.start()
    while not served.requests_for(PATH):
        threading.Event().wait(0.01)
    reader.close()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], StorageError)
    assert "closed" in str(errors[0])
    with pytest.raises(StorageError, match="closed"):
        reader.read(PATH, 0, 10)


@pytest.mark.parametrize("kind", ["chunked", "no_length", "informational"])
def test_unusual_but_legal_framings(served, kind):
    served.inject(PATH, Fault(kind, after_bytes=777))
    with _reader(served) as reader:
        assert reader.read(PATH, 5, 100_000) == DATA[5:100_005]
        assert reader.read(PATH, 0, 10) == DATA[:10]  # the connection state stayed sane
        assert reader.metrics()["retries"] == 0


def test_idle_connections_closed_by_the_server_are_replaced_without_a_retry(served):
    with _reader(served) as reader:
        assert reader.read(PATH, 0, 10) == DATA[:10]
        served.drop_connections()
        assert reader.read(PATH, 10, 10) == DATA[10:20]
        metrics = reader.metrics()
        assert metrics["retries"] == 0 and metrics["connections"] == 2


def test_per_host_connection_limit_is_a_hard_cap(served):
    limits = Limits(max_connections_per_host=2, max_concurrency=8, split_threshold_bytes=0)
    requests = [ReadRequest(PATH, i * 100_000, 50_000) for i in range(16)]
    with _reader(served, limits=limits) as reader:
        assert reader.read_many(requests) == [DATA[r.offset : r.end] for r in requests]
        assert reader.metrics()["connections"] <= 2


def test_read_file_is_one_request_and_copes_with_odd_servers(fault_server):
    fault_server.put("empty.bin", b"")
    fault_server.put("small.json", b'{"a": 1}')
    with _reader(fault_server) as reader:
        assert reader.read_file("empty.bin") == b""
        assert reader.read_file("small.json") == b'{"a": 1}'
        assert reader.size("small.json") == 8  # learnt from the same request
        assert reader.metrics()["requests"] == 2
    for kind in ("ignore_range", "chunked", "truncate"):
        fault_server.put(PATH, DATA)
        fault_server.inject(PATH, Fault(kind, after_bytes=4321))  # type: ignore[arg-type]
        with _reader(fault_server) as reader:
            assert reader.read_file(PATH) == DATA, kind


def test_redirects_are_followed_cached_and_bounded(served):
    served.put("moved/elsewhere.mp4", DATA)
    served.inject(PATH, Fault("redirect", location="/moved/elsewhere.mp4"))
    with _reader(served, token="tok") as reader:
        assert reader.read(PATH, 0, 100) == DATA[:100]
        assert reader.read(PATH, 100, 100) == DATA[100:200]
    assert len(served.requests_for(PATH)) == 1  # the target was cached
    moved = served.requests_for("moved/elsewhere.mp4")
    assert len(moved) == 2 and all(r.header("Authorization") == "Bearer tok" for r in moved)
    served.inject(PATH, Fault("redirect", location="ftp://127.0.0.1/x"))
    with _reader(served) as reader, pytest.raises(InvalidResponse, match="non-HTTP"):
        reader.read(PATH, 0, 1)
    served.inject(PATH, *[Fault("redirect", location="/" + PATH)] * 10)
    with _reader(served) as reader, pytest.raises(InvalidResponse, match="too many redirects"):
        reader.read(PATH, 0, 1)


def test_fsspec_http_is_available_as_an_escape_hatch(served):
    from episodestream.storage import FsspecRangeReader

    with FsspecRangeReader(served.url + "/videos") as reader:
        assert reader.read("file-000.mp4", 10, 1000) == DATA[10:1010]
        assert reader.read_many([ReadRequest("file-000.mp4", 5, 5)]) == [DATA[5:10]]
        with pytest.raises(NotFound) as info:
            reader.read("absent.mp4", 0, 1)
    assert served.url in str(info.value)


# ------------------------------------------------ small bodies, skips: the minimum-rate rule


class _TrickleServer:
    """Answers every GET ``200`` with a ``Content-Length`` of ``size`` (Range ignored), then
    sends the body 1 KiB at a time every 50 ms (20 KiB/s, below the readers' minimum rate of
    64 KiB/s, yet never silent for a read timeout). The reader reads it in 64 KiB calls and
    checks its deadline between them: the first check comes after 3.2 s at the earliest.

    ``silent_after``: bytes sent before the server falls silent (a socket read timeout)."""

    def __init__(self, size: int, silent_after: int | None = None) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        stop = self.stop = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.send_header("ETag", '"trickle"')
                self.end_headers()
                sent = 0
                try:
                    while sent < size and not stop.wait(0.05):
                        if silent_after is not None and sent >= silent_after:
                            stop.wait()  # silent until the test ends
                            return
                        chunk = min(1024, size - sent)
                        self.wfile.write(b"x" * chunk)
                        self.wfile.flush()
                        sent += chunk
                except OSError:
                    return  # the reader gave up and closed the connection

            def log_message(self, *args: object) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.stop.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture
def trickle() -> _TrickleServer:
    server = _TrickleServer(size=128 * 1024)
    try:
        yield server
    finally:
        server.close()


ONCE = RetryPolicy(max_attempts=1)
QUICK = Timeouts(connect_seconds=2, read_seconds=0.5)


def test_skipping_to_a_range_at_a_trickle_fails_at_the_minimum_rate_deadline(trickle):
    # 128 KiB to skip: the deadline is 2 s (128 KiB at 64 KiB/s); at 20 KiB/s, half of it
    # has come only after 3.2 s
    with (
        HttpRangeReader(trickle.url, retry=ONCE, timeouts=QUICK) as reader,
        # the wire's rule (the exchange as a whole) or the skip's own check, whichever first
        pytest.raises(StorageTimeout, match="slower than"),
    ):
        reader.read("blob.bin", 131_000, 10)


def test_a_small_document_at_a_trickle_fails_at_the_deadline_naming_its_url(trickle):
    with HttpRangeReader(trickle.url, retry=ONCE, timeouts=QUICK) as reader:
        with pytest.raises(StorageTimeout, match="slower than") as raised:
            # 128 KiB: the deadline is 2 s, half the body has come only after 3.2 s
            reader._get_document(f"{trickle.url}/api/doc.json?sig=SECRET", max_bytes=128 * 1024)
        assert f"{trickle.url}/api/doc.json" in str(raised.value)
        assert "SECRET" not in str(raised.value)


@pytest.fixture
def falls_silent() -> _TrickleServer:
    server = _TrickleServer(size=128 * 1024, silent_after=2048)
    try:
        yield server
    finally:
        server.close()


def test_skipping_through_a_body_that_falls_silent_is_a_timeout(falls_silent):
    with (
        HttpRangeReader(falls_silent.url, retry=ONCE, timeouts=QUICK) as reader,
        # silent within the read timeout, but the exchange's own deadline (0.5 s + 2 KiB at
        # 64 KiB/s from the request) comes sooner and ends the wait
        pytest.raises(StorageTimeout, match=r"slower than allowed.* while skipping") as raised,
    ):
        reader.read("blob.bin", 131_000, 10)
    assert isinstance(raised.value.__cause__, TimeoutError)


def test_a_small_document_that_falls_silent_is_a_timeout(falls_silent):
    with HttpRangeReader(falls_silent.url, retry=ONCE, timeouts=QUICK) as reader:
        with pytest.raises(StorageTimeout, match=r"slower than allowed") as raised:
            reader._get_document(f"{falls_silent.url}/api/doc.json", max_bytes=128 * 1024)
        assert f"{falls_silent.url}/api/doc.json" in str(raised.value)


def test_a_document_too_large_names_its_url(served):
    with _reader(served) as reader:
        with pytest.raises(InvalidResponse) as raised:
            reader._get_document(f"{served.url}/{PATH}?sig=SECRET", max_bytes=1000)
        message = str(raised.value)
        assert message.startswith(f"{served.url}/{PATH}?…: body of {len(DATA)} bytes exceeds 1000")
        assert "SECRET" not in message

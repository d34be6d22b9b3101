"""The reader's Transport seam: the reader's rules hold whichever client carries the bytes.

Our wire (the default) and the benchmark's urllib3 and httpx adapters (benchmarks/transports.py)
each serve one reader against the same faulty server: exact bytes after resets, truncations,
wrong ranges, 503s and redirects — the retries, resumption and checks are the reader's, not
the client's. A recording factory shows the reader's side of the contract: one transport per
reader, a new one after unpickling, closed with the reader.
"""

from __future__ import annotations

import pickle
import random
from collections.abc import Mapping
from typing import ClassVar

import pytest
from benchmarks.transports import HttpxTransport, Urllib3Transport

from episodestream import StorageError
from episodestream.storage import HttpRangeReader, Limits, ReadRequest, RetryPolicy, Timeouts
from episodestream.storage.http._transport import Response, TransportFactory, TransportOptions
from episodestream.storage.http._wire import WireTransport
from tests.plugins.storage import Fault, FaultServer

pytestmark = pytest.mark.timeout(120)

DATA = random.Random(5).randbytes(300_000)
PATH = "videos/file-000.mp4"
RETRY = RetryPolicy(max_attempts=6, backoff_initial_seconds=0.01, backoff_max_seconds=0.02)
FACTORIES: dict[str, TransportFactory] = {
    "wire": WireTransport,
    "urllib3": Urllib3Transport,
    "httpx": HttpxTransport,
}


def _reader(server: FaultServer, transport: TransportFactory) -> HttpRangeReader:
    return HttpRangeReader(
        server.url,
        retry=RETRY,
        limits=Limits(split_threshold_bytes=0, max_connections_per_host=4, max_concurrency=4),
        timeouts=Timeouts(connect_seconds=5, read_seconds=5),
        seed=0,
        transport=transport,
    )


@pytest.mark.parametrize("name", list(FACTORIES))
def test_every_transport_reads_exact_bytes_through_faults(name: str, fault_server: FaultServer):
    fault_server.put(PATH, DATA)
    fault_server.inject(
        PATH,
        Fault("reset", after_bytes=1000),
        Fault("truncate", after_bytes=5000),
        Fault("status", status=503),
        Fault("wrong_range", shift=7),
        Fault("redirect", location=f"/{PATH}"),  # to itself: a relative Location
    )
    with _reader(fault_server, FACTORIES[name]) as reader:
        assert reader.read(PATH, 10_000, 200_000) == DATA[10_000:210_000]
        spans = [(0, 1), (123, 4567), (250_000, 50_000)]
        got = reader.read_many([ReadRequest(PATH, o, n) for o, n in spans])
        assert got == [DATA[o : o + n] for o, n in spans]
        stats = reader.stats()
    assert stats.retries >= 4  # reset, 503, wrong range; the truncation resumed
    assert stats.resumes >= 1
    assert stats.redirects == 1
    # the first range went out once per attempt, each asking only for what was still missing
    ranges = [r.header("Range") for r in fault_server.requests_for(PATH)]
    assert ranges[0] == "bytes=10000-209999"
    # resumed from a later byte (where depends on how much of a broken body a client hands
    # over: the httpx adapter keeps a reset's first bytes, ours and urllib3 lose that read)
    resumed = [int(r.split("=")[1].split("-")[0]) for r in ranges if r.endswith("-209999")]
    assert max(resumed) >= 15_000


@pytest.mark.parametrize("name", list(FACTORIES))
def test_every_transport_sees_a_changed_file(name: str, fault_server: FaultServer):
    fault_server.put(PATH, DATA)
    with _reader(fault_server, FACTORIES[name]) as reader:
        assert reader.read(PATH, 0, 100) == DATA[:100]
        fault_server.replace(PATH, DATA[::-1])
        with pytest.raises(StorageError, match="changed"):
            reader.read(PATH, 100, 100)


class _Recorded:
    """A transport that records the reader's calls and lends the wire's answers."""

    made: ClassVar[list[_Recorded]] = []

    def __init__(self, options: TransportOptions) -> None:
        self.options = options
        self.urls: list[str] = []
        self.closed = False
        self._wire = WireTransport(options)
        _Recorded.made.append(self)

    def get(self, url: str, headers: Mapping[str, str]) -> Response:
        self.urls.append(url)
        return self._wire.get(url, headers)

    def drop_after_fork(self) -> None:
        self._wire.drop_after_fork()

    def close(self) -> None:
        self.closed = True
        self._wire.close()


def test_the_reader_makes_owns_and_closes_its_transport(fault_server: FaultServer):
    fault_server.put(PATH, DATA)
    _Recorded.made.clear()
    reader = _reader(fault_server, _Recorded)
    (first,) = _Recorded.made
    assert first.options.max_connections_per_host == 4
    assert first.options.timeouts.read_seconds == 5
    assert first.options.on_connect is not None
    assert reader.read(PATH, 5, 10) == DATA[5:15]
    assert first.urls == [f"{fault_server.url}/{PATH}"]
    assert reader.stats().connections == 1  # counted through on_connect

    copy = pickle.loads(pickle.dumps(reader))  # pickles without the transport
    assert len(_Recorded.made) == 2 and _Recorded.made[1] is not first
    assert copy.read(PATH, 5, 10) == DATA[5:15]

    reader.close()
    assert first.closed
    with pytest.raises(StorageError, match="closed"):
        reader.read(PATH, 0, 1)
    assert not _Recorded.made[1].closed
    copy.close()
    assert _Recorded.made[1].closed

"""The fsspec reader never waits on a store without a bound: a silent server (it accepts the
connection and never answers) is a StorageTimeout naming the file and range, for one range
and for a batch, through fsspec's own HTTP filesystem (async, on fsspec's event loop)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from episodestream import ConfigTypeError, StorageError, StorageTimeout
from episodestream.storage import FsspecRangeReader, ReadRequest, Timeouts, open_reader

pytestmark = pytest.mark.timeout(60)

SHORT = Timeouts(connect_seconds=0.2, read_seconds=0.2, pool_seconds=0.2)


@pytest.fixture
def silent_url() -> Iterator[str]:
    """An http URL whose server completes the handshake (the listen backlog) and is silent."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        yield f"http://127.0.0.1:{silent.getsockname()[1]}/data"


def test_one_range_from_a_silent_store_times_out_naming_it(silent_url: str):
    with FsspecRangeReader(silent_url, timeouts=SHORT) as reader:
        with pytest.raises(StorageTimeout) as raised:
            reader.read("blob.bin", 10, 100)
        assert "/data/blob.bin bytes 10-109" in str(raised.value)
        assert reader.stats().failures == 1


def test_a_batch_from_a_silent_store_times_out_naming_its_ranges(silent_url: str):
    with FsspecRangeReader(silent_url, timeouts=SHORT) as reader:
        with pytest.raises(StorageTimeout) as raised:
            reader.read_many([ReadRequest("a.bin", 0, 10), ReadRequest("b.bin", 5, 10)])
        assert "/data/a.bin bytes 0-9 and 1 more range(s)" in str(raised.value)


def test_timeouts_are_typed_and_reach_the_reader_through_open_reader(silent_url: str):
    with pytest.raises(ConfigTypeError, match="timeouts"):
        FsspecRangeReader("memory://x", timeouts=5)  # type: ignore[arg-type]
    with open_reader("memory://x", timeouts=SHORT) as reader:
        assert isinstance(reader, FsspecRangeReader)
        assert reader._timeouts is SHORT


class _ClosedRightAfterLookup(FsspecRangeReader):
    """Closed (as by another thread) after ``read_many``'s filesystem lookups, before its
    thread pool is made: the batch's bound is worked out in between."""

    def _bound_seconds(self, *args):
        self.close()
        return super()._bound_seconds(*args)


def test_a_batch_closed_before_its_pool_exists_never_makes_one():
    reader = _ClosedRightAfterLookup("memory://closing-race")
    with pytest.raises(StorageError, match="is closed"):
        reader.read_many([ReadRequest("a.bin", 0, 10), ReadRequest("b.bin", 5, 10)])
    assert reader._executor is None  # a pool made now would never be shut down

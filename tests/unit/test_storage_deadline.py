"""Deadlines of whole operations held by a reader (``storage/_deadline.py``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from episodestream import StorageTimeout
from episodestream.storage import (
    Deadline,
    HttpRangeReader,
    LocalRangeReader,
    Timeouts,
    reads_within,
)
from episodestream.storage._within import open_seconds_of


def test_a_deadline_names_the_operation_and_the_setting_that_bounds_it():
    deadline = Deadline.after(0.0, "reading the metadata of http://h/x")
    assert deadline.passed() and not deadline.allows_wait(0.0)
    with pytest.raises(StorageTimeout) as raised:
        deadline.check()
    message = str(raised.value)
    assert message.startswith("reading the metadata of http://h/x did not finish within")
    assert "Timeouts.open_seconds=0 s" in message
    later = Deadline.after(60.0, "x")
    later.check()
    assert later.allows_wait(1.0) and not later.allows_wait(61.0)


def test_the_open_deadline_comes_from_the_readers_timeouts(tmp_path):
    assert open_seconds_of(HttpRangeReader("http://h/x", timeouts=Timeouts(open_seconds=7))) == 7
    assert open_seconds_of(LocalRangeReader(tmp_path)) == Timeouts().open_seconds == 600.0
    with pytest.raises(ValueError, match="open_seconds"):
        Timeouts(open_seconds=0)
    with pytest.raises(ValueError, match="read_seconds"):
        Timeouts(read_seconds=1e300)  # a socket cannot wait that long


def test_reads_within_sets_the_sooner_deadline_and_restores_the_last(tmp_path):
    reader = LocalRangeReader(tmp_path)
    assert reader._deadline is None
    with reads_within(reader, 60.0, what="outer") as outer:
        assert reader._deadline is outer
        with reads_within(reader, 600.0, what="inner, later") as inner:
            assert inner is outer  # the enclosing deadline comes sooner: it stays
        with reads_within(reader, 1.0, what="inner, sooner") as inner:
            assert reader._deadline is inner and inner.what == "inner, sooner"
        assert reader._deadline is outer
    assert reader._deadline is None


def test_reads_within_a_reader_that_is_no_base_reader_yields_a_deadline_only():
    reader = SimpleNamespace(root="memory://x")  # a RangeReader by duck typing only
    with reads_within(reader, 5.0, what="op") as deadline:
        assert deadline.what == "op" and 0 < deadline.remaining() <= 5.0
        assert getattr(reader, "_deadline", None) is None


def test_a_passed_deadline_stops_an_http_read_before_it_is_sent():
    reader = HttpRangeReader("http://127.0.0.1:9/x")  # discard port: never asked
    with (
        reads_within(reader, 0.0, what="opening x"),
        pytest.raises(StorageTimeout, match="opening x"),
    ):
        reader.read("a", 0, 1)
    assert reader.stats().requests == 0
    reader.close()

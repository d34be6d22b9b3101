"""The local-disk reader pins each file's identity: a file rewritten mid-run is refused."""

from __future__ import annotations

import os
import pickle

import pytest

from episodestream import StaleSourceError
from episodestream.storage import LocalRangeReader

pytestmark = pytest.mark.timeout(60)

DATA = bytes(range(256)) * 64


def _rewrite_in_place(path, data: bytes) -> None:
    """Same inode, same size, different bytes, an mtime one second later."""
    before = os.stat(path).st_mtime_ns
    with open(path, "r+b") as handle:
        handle.write(data)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def test_file_rewritten_between_reads_is_stale(tmp_path):
    target = tmp_path / "videos" / "a.mp4"
    target.parent.mkdir()
    target.write_bytes(DATA)
    with LocalRangeReader(tmp_path) as reader:
        assert reader.read("videos/a.mp4", 10, 20) == DATA[10:30]
        _rewrite_in_place(target, DATA[::-1])
        with pytest.raises(StaleSourceError, match=r"videos/a\.mp4"):
            reader.read("videos/a.mp4", 10, 20)
        with pytest.raises(StaleSourceError, match=r"videos/a\.mp4"):
            reader.read("videos/a.mp4", 0, 1)
        # file_info is a fresh look (the manifest compares it with its records): it reports
        # the new version and pins it for later reads
        info = reader.file_info("videos/a.mp4")
        assert info.last_modified is not None and info.size == len(DATA)
        assert reader.read("videos/a.mp4", 10, 20) == DATA[::-1][10:30]


def test_file_replaced_by_a_new_file_after_file_info_is_stale(tmp_path):
    target = tmp_path / "a.bin"
    target.write_bytes(DATA)
    reader = LocalRangeReader(tmp_path)
    assert reader.size("a.bin") == len(DATA)  # first contact pins the file
    copy = pickle.loads(pickle.dumps(reader))  # a DataLoader worker keeps the pins
    replacement = tmp_path / "a.bin.new"
    replacement.write_bytes(DATA[::-1])
    os.replace(replacement, target)  # same size, another inode
    for each in (reader, copy):
        with pytest.raises(StaleSourceError, match=r"a\.bin"):
            each.read("a.bin", 0, 10)


def test_unchanged_files_read_as_before(tmp_path):
    (tmp_path / "a.bin").write_bytes(DATA)
    (tmp_path / "b.bin").write_bytes(DATA[:100])
    with LocalRangeReader(tmp_path) as reader:
        for _ in range(3):
            assert reader.read("a.bin", 5, 7) == DATA[5:12]
            assert reader.file_info("b.bin").size == 100
        assert reader.read_file("b.bin") == DATA[:100]

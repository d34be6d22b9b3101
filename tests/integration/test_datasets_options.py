"""Typed configuration of the datasets: ``options=StreamOptions(...)`` and ``reader=``.

A dataset handed a reader reads every byte through it (the in-memory reader below has only the
four methods a backend must write) and returns LeRobot's reference samples bit for bit.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from episodestream import (
    ConfigError,
    ConfigTypeError,
    EpisodePoolDataset,
    EpisodeStreamDataset,
    StreamOptions,
)
from episodestream.storage import LocalRangeReader
from tests.integration.test_datasets_reference import assert_matches_reference
from tests.plugins.datasets import LeRobotReference
from tests.support.memory_reader import MemoryReader

pytestmark = pytest.mark.timeout(300)

CLASSES = [EpisodeStreamDataset, EpisodePoolDataset]


@pytest.fixture
def memory_reader(lerobot_fixture_root: Path) -> MemoryReader:
    return MemoryReader.of_folder(lerobot_fixture_root, root="memory://sim5")


@pytest.mark.parametrize("cls", CLASSES)
def test_options_object_is_used_as_given(cls, lerobot_fixture_root, datasets_cache_dir):
    options = StreamOptions(decoder="pyav", byte_budget="1GiB", cache_dir=datasets_cache_dir)
    with cls(lerobot_fixture_root, options=options) as dataset:
        assert dataset.options is options
        assert dataset.options.decoder == "pyav"


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize(
    "keyword", [{"decoder": "pyav"}, {"byte_budget": "3GiB"}, {"fetch_workers": 2}]
)
def test_options_and_keyword_options_together_are_refused(cls, keyword, lerobot_fixture_root):
    name = next(iter(keyword))
    with pytest.raises(ConfigError, match=f"options= already says how to stream; set {name}"):
        cls(lerobot_fixture_root, options=StreamOptions(), **keyword)


@pytest.mark.parametrize("cls", CLASSES)
def test_options_of_another_type_are_refused(cls, lerobot_fixture_root):
    with pytest.raises(ConfigTypeError, match="options must be a StreamOptions, got dict"):
        cls(lerobot_fixture_root, options={"decoder": "pyav"})


def test_a_dataset_reads_through_the_reader_it_is_handed(
    memory_reader: MemoryReader,
    lerobot_reference: LeRobotReference,
    datasets_cache_dir: Path,
):
    with EpisodeStreamDataset(
        reader=memory_reader, image_dtype="uint8", cache_dir=datasets_cache_dir
    ) as dataset:
        assert dataset.meta.root == "memory://sim5"  # named by the reader's root
        assert len(dataset) == 244
        assert_matches_reference(dataset, lerobot_reference.samples, image_dtype="uint8")
        assert memory_reader.reads > 0
        assert dataset.metrics()["reader"]["requests"] == memory_reader.reads
    assert not memory_reader.closed  # the caller's reader stays the caller's


def test_a_pool_draws_every_frame_through_a_handed_reader(
    memory_reader: MemoryReader, datasets_cache_dir: Path
):
    with EpisodePoolDataset(
        reader=memory_reader, pool_size=2, byte_budget="256MiB", cache_dir=datasets_cache_dir
    ) as pool:
        indices = sorted(int(sample["index"]) for sample in pool)
    assert indices == list(range(244))
    assert memory_reader.reads > 0 and not memory_reader.closed


def test_a_handed_reader_names_a_root_given_beside_it(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
):
    reader = LocalRangeReader(lerobot_fixture_root)
    with EpisodeStreamDataset(
        "org/sim5", root=lerobot_fixture_root, reader=reader, cache_dir=datasets_cache_dir
    ) as dataset:
        assert dataset.repo_id == "org/sim5"
        assert len(dataset) == 244
    assert reader.stats().requests > 0


@pytest.mark.parametrize(
    "opens_another",
    [{"revision": "main"}, {"data_root": "/elsewhere"}, {"reader_options": {"token": "x"}}],
)
def test_options_that_would_open_another_reader_are_refused(
    opens_another, memory_reader: MemoryReader
):
    name = next(iter(opens_another))
    with pytest.raises(ConfigError, match=f"reader= is already open: {name}"):
        EpisodeStreamDataset(reader=memory_reader, **opens_another)
    assert not memory_reader.closed


def test_a_reader_of_another_kind_is_refused(lerobot_fixture_root: Path):
    @dataclasses.dataclass
    class NotAReader:
        root: str = str(lerobot_fixture_root)

    with pytest.raises(ConfigTypeError, match="reader must be a RangeReader"):
        EpisodeStreamDataset(lerobot_fixture_root, reader=NotAReader())


def test_reader_options_are_typed_when_the_options_are_made():
    from episodestream import ReaderOptions
    from episodestream.storage import RetryPolicy, Timeouts

    typed = ReaderOptions(token="secret", timeouts=Timeouts(read_seconds=7.0))
    assert StreamOptions(reader_options=typed).reader_options is typed
    # a dict of the same fields becomes the same value, at once
    from_dict = StreamOptions(reader_options={"token": "secret", "timeouts": Timeouts(7.0)})
    assert isinstance(from_dict.reader_options, ReaderOptions)
    assert from_dict.reader_options.given().keys() == {"token", "timeouts"}
    assert "secret" not in repr(typed) and "secret" not in repr(from_dict)
    with pytest.raises(ConfigTypeError, match=r"reader_options: unknown option\(s\) tokn;"):
        StreamOptions(reader_options={"tokn": "x"})
    with pytest.raises(ConfigTypeError, match="retry must be a RetryPolicy, got int"):
        ReaderOptions(retry=3)
    with pytest.raises(ConfigError, match="max_concurrency"):
        ReaderOptions(max_concurrency=0)
    assert ReaderOptions(retry=RetryPolicy(max_attempts=2)).given() == {
        "retry": RetryPolicy(max_attempts=2)
    }


def test_open_reader_takes_typed_options_and_refuses_what_a_backend_does_not_take(
    lerobot_fixture_root: Path,
):
    from episodestream import ReaderOptions, open_reader

    with open_reader(lerobot_fixture_root, ReaderOptions()) as reader:
        assert reader.size("meta/info.json") > 0
    with pytest.raises(ConfigTypeError, match=r"local path\): unknown option\(s\) token"):
        open_reader(lerobot_fixture_root, ReaderOptions(token="x"))
    with pytest.raises(ConfigError, match="not both"):
        open_reader(lerobot_fixture_root, ReaderOptions(), token="x")


def test_a_byte_budget_at_its_default_in_another_spelling_is_no_clash(lerobot_fixture_root):
    options = StreamOptions(decoder="pyav")
    # 8 GiB, the one default (DEFAULT_BYTE_BUDGET), spelt as bytes
    with EpisodeStreamDataset(lerobot_fixture_root, options=options, byte_budget=2**33) as ds:
        assert ds.options is options


def test_the_opened_datasets_episode_arrays_are_read_only(lerobot_fixture_root, datasets_cache_dir):
    # every layer above (sampling, workers, the map index) reads these arrays: none may change
    # them, and the caller's own episode list is left as it was given
    episodes = [4, 1, 2]
    with EpisodeStreamDataset(
        lerobot_fixture_root, episodes=episodes, cache_dir=datasets_cache_dir
    ) as dataset:
        opened = dataset.dataset
        assert opened.episode_ids.tolist() == [4, 1, 2] and episodes == [4, 1, 2]
        for name in ("episode_ids", "episode_lengths", "episode_nbytes"):
            with pytest.raises(ValueError, match="read-only"):
                getattr(opened, name)[0] = 0
        assert opened.num_frames == int(sum(opened.episode_lengths))

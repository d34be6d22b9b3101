"""The datasets' configuration: Source and the option groups (Resources, SampleOptions, Order).

Three promises are checked here:

- one default per setting: the defaults are read from the group classes, and every way of
  building a dataset (flat keywords, ``options=StreamOptions()``, the groups, a Source, the
  positional root) ends with the same values;
- every bad argument of every public constructor (the datasets, Source, each group,
  StreamOptions, the LeRobot factory) is a ``ConfigError`` naming the argument, raised before
  the first request: the datasets read through a reader that fails the test when touched;
- a setting given twice with two values is refused, the same value twice is not.
"""

from __future__ import annotations

import dataclasses
import math
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from episodestream import (
    BudgetError,
    ConfigError,
    ConfigTypeError,
    EpisodePoolDataset,
    EpisodeStreamDataset,
    Order,
    ReaderOptions,
    Resources,
    SampleOptions,
    SamplingError,
    Source,
    StreamOptions,
)
from episodestream.datasets import DEFAULT_BYTE_BUDGET, DEFAULT_IMAGE_DTYPE
from episodestream.integrations import lerobot as lerobot_integration
from episodestream.storage import BaseRangeReader, ReaderStats

GROUPS = (Source, Resources, SampleOptions, Order)


def _fixture_root() -> Path:
    return Path(__file__).parents[1] / "data" / "lerobot_sim5"


class Touched(AssertionError):
    """A read of a reader that no argument check may reach (not an EpisodeStreamError)."""


class Tripwire(BaseRangeReader):
    """A reader named after the fixture dataset whose every read fails the test."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    @property
    def root(self) -> str:
        return str(_fixture_root())

    def size(self, path: str) -> int:
        self.calls += 1
        raise Touched(path)

    def read(self, path: str, offset: int, length: int) -> bytes:
        self.calls += 1
        raise Touched(path)

    def stats(self) -> ReaderStats:
        return ReaderStats()


# -- one default per setting ----------------------------------------------------------------


def _default(cls: type, name: str) -> Any:
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    assert field.default is not dataclasses.MISSING
    return field.default


def test_the_defaults_live_in_the_groups_and_stream_options_shares_them() -> None:
    assert _default(Resources, "byte_budget") == DEFAULT_BYTE_BUDGET == 8 * 2**30
    assert _default(SampleOptions, "image_dtype") == DEFAULT_IMAGE_DTYPE == "float32"
    stream = StreamOptions()
    shared = 0
    for cls in GROUPS:
        for field in dataclasses.fields(cls):
            if field.name in StreamOptions.__slots__ and field.default is not dataclasses.MISSING:
                assert getattr(stream, field.name) == field.default, (cls, field.name)
                shared += 1
    assert shared >= 15  # every StreamOptions field with a plain default belongs to a group


def _constructor_paths(root: Path, cache: Path) -> dict[str, dict[str, Any]]:
    """Ways of building a dataset that give no setting: each must end at the defaults."""
    return {
        "positional root": {"repo_id": root, "cache_dir": cache},
        "root=": {"root": root, "cache_dir": cache},
        "options=StreamOptions()": {"repo_id": root, "options": StreamOptions(cache_dir=cache)},
        "source=Source(root)": {"source": Source(root=root), "cache_dir": cache},
        "Source first": {"repo_id": Source.coerce(root), "cache_dir": cache},
        "groups": {
            "source": Source(root=root),
            "resources": Resources(cache_dir=cache),
            "samples": SampleOptions(),
        },
        "sample_options=": {
            "repo_id": root,
            "sample_options": SampleOptions(),
            "resources": Resources(cache_dir=cache),
        },
    }


@pytest.mark.parametrize("cls", [EpisodeStreamDataset, EpisodePoolDataset])
def test_every_constructor_path_gives_the_same_defaults(cls: type, tmp_path: Path) -> None:
    byte_budget = _default(Resources, "byte_budget")
    image_dtype = _default(SampleOptions, "image_dtype")
    seen = []
    for path, arguments in _constructor_paths(_fixture_root(), tmp_path).items():
        with cls(**arguments) as dataset:
            assert dataset.resources.byte_budget == byte_budget, path
            assert dataset.options.byte_budget == byte_budget, path
            assert dataset.sample_options.image_dtype == image_dtype, path
            assert dataset.samples.image_dtype == image_dtype, path  # what acts on frames
            assert dataset.source.root == str(_fixture_root()), path
            seen.append(
                (
                    dataclasses.replace(dataset.resources, cache_dir=None),
                    dataset.sample_options,
                    dataset.order if cls is EpisodePoolDataset else None,
                )
            )
    assert all(values == seen[0] for values in seen)


def test_one_budget_for_both_classes_and_return_uint8_folds_into_image_dtype(
    tmp_path: Path,
) -> None:
    with (
        EpisodeStreamDataset(_fixture_root(), cache_dir=tmp_path, return_uint8=True) as ds,
        EpisodePoolDataset(_fixture_root(), cache_dir=tmp_path) as pool,
    ):
        assert ds.resources.byte_budget == pool.resources.byte_budget == DEFAULT_BYTE_BUDGET
        assert ds.sample_options.image_dtype == ds.samples.image_dtype == "uint8"
        assert pool.order == Order() and pool.params.pool_size == Order().pool_size
        # the pool sizes its decoders for its pool; the group's None says "not given"
        assert pool.resources.max_open_decoders >= 64
        assert Resources().max_open_decoders is None


# -- the values themselves --------------------------------------------------------------------


def test_source_is_a_hashable_value_for_a_list_of_sources() -> None:
    first = Source(root=_fixture_root(), episodes=[2, 0], reader_options={"token": "secret"})
    again = Source(root=str(_fixture_root()), episodes=(2, 0), reader_options={"token": "secret"})
    assert first == again and hash(first) == hash(again)
    assert first.episodes == (2, 0) and first.root == str(_fixture_root())
    assert isinstance(first.reader_options, ReaderOptions)
    assert len({first, again, Source(repo_id="org/name")}) == 2
    assert pickle.loads(pickle.dumps(first)) == first
    assert not hasattr(first, "__dict__")  # slots: no dataset state can be attached
    assert Source.coerce(first) is first
    assert Source.coerce("org/name") == Source(repo_id="org/name")
    assert Source.coerce(_fixture_root()).root == str(_fixture_root())


def test_source_repr_shows_no_secret() -> None:
    source = Source(
        root="https://user:hunter2@host/data?X-Amz-Signature=abc",
        reader_options={"token": "hf_secret", "headers": {"Authorization": "Bearer zz"}},
        data_reader_options={"storage_options": {"key": "aws-secret"}},
    )
    shown = repr(source)
    for secret in ("hunter2", "abc", "hf_secret", "Bearer zz", "aws-secret", "user:"):
        assert secret not in shown, shown
    assert "host/data" in shown


def test_groups_are_frozen_and_normalise_what_they_check() -> None:
    resources = Resources(byte_budget="1GiB", decoded_budget="512MiB")
    assert (resources.byte_budget, resources.decoded_budget) == (2**30, 2**29)
    assert Order(seed=None).seed == 0  # LeRobot's "unseeded"
    assert Resources(decode_threads=3).pending_samples == 12
    with pytest.raises(dataclasses.FrozenInstanceError):
        resources.byte_budget = 1  # type: ignore[misc]
    samples = SampleOptions(delta_timestamps={"action": [0.0, 0.1]})
    with pytest.raises(TypeError):
        samples.delta_timestamps["action"] = [1.0]  # type: ignore[index]


# -- every bad argument is a ConfigError before the first request --------------------------

# one bad value per field of every group (the sweep below fails for a field without one)
BAD: dict[str, Any] = {
    # Source
    "root": 5,
    "repo_id": 5,
    "revision": 5,
    "repo_type": "model",
    "data_root": "/tmp/a\x00b",
    "episodes": [-1],
    "sidecar": 5,
    "build_index": "no",
    "progress": 1,
    "reader_options": {"tokn": "x"},
    "data_reader_options": ["x"],
    # Resources
    "byte_budget": "lots",
    "decoded_budget": 0,
    "fetch_workers": 0,
    "prefetch_episodes": -1,
    "prefetch_next": "no",
    "decode_threads": 10**6,
    "max_pending_samples": 0,
    "decoder": "ffmpeg",
    "device": "tpu",
    "ffmpeg_threads": 1.5,
    "max_open_decoders": 0,
    "max_decoder_bytes": 10**400,
    "wait_timeout_s": math.nan,
    "cache_dir": 5,
    # SampleOptions
    "delta_timestamps": {"action": [math.inf]},
    "image_dtype": "float16",
    "image_transforms": 5,
    "tolerance_s": -1.0,
    "depth_output_unit": 5,
    # Order
    "pool_size": 0,
    "seed": -1,
    "shuffle": "no",
    "unit": "frame",
    "window_frames": 0,
    "rank": -1,
    "world_size": 0,
}
FIELDS = [(cls, f.name) for cls in GROUPS for f in dataclasses.fields(cls)]


def test_the_table_has_a_bad_value_for_every_field() -> None:
    assert sorted(name for _, name in FIELDS) == sorted(BAD)


def _assert_config_error(error: BaseException, name: str) -> None:
    assert isinstance(error, ConfigError), repr(error)
    assert name in str(error), (name, str(error))


@pytest.mark.parametrize(("cls", "name"), FIELDS, ids=[f"{c.__name__}.{n}" for c, n in FIELDS])
def test_each_group_refuses_its_bad_value_naming_it(cls: type, name: str) -> None:
    with pytest.raises(ConfigError) as raised:
        cls(**{name: BAD[name]})
    _assert_config_error(raised.value, name)


STREAM_FIELDS = [name for name in BAD if name in StreamOptions.__slots__]


@pytest.mark.parametrize("name", STREAM_FIELDS)
def test_stream_options_refuse_the_same_bad_values(name: str) -> None:
    with pytest.raises(ConfigError) as raised:
        StreamOptions(**{name: BAD[name]})
    _assert_config_error(raised.value, name)


DATASET_CASES = [(cls, name) for cls in (EpisodeStreamDataset, EpisodePoolDataset) for name in BAD]


@pytest.mark.parametrize(
    ("cls", "name"), DATASET_CASES, ids=[f"{c.__name__}-{n}" for c, n in DATASET_CASES]
)
def test_a_dataset_refuses_each_bad_keyword_before_any_read(
    cls: type, name: str, tmp_path: Path
) -> None:
    reader = Tripwire()
    with pytest.raises(ConfigError) as raised:
        cls(reader=reader, **{"cache_dir": tmp_path / "cache", name: BAD[name]})
    # a keyword the class does not take is refused naming it too (ConfigTypeError)
    _assert_config_error(raised.value, name)
    assert reader.calls == 0
    assert not (tmp_path / "cache").exists()


def test_errors_keep_their_former_types_too() -> None:
    # the tables of before expect SamplingError and BudgetError for these: both still hold
    for call, former in (
        (lambda: SampleOptions(image_dtype="float16"), SamplingError),
        (lambda: Order(pool_size=0), SamplingError),
        (lambda: Source(episodes=[1, 1]), SamplingError),
        (lambda: Resources(byte_budget="lots"), BudgetError),
    ):
        with pytest.raises(ConfigError) as raised:
            call()
        assert isinstance(raised.value, former)


@pytest.mark.parametrize("cls", [EpisodeStreamDataset, EpisodePoolDataset])
def test_a_group_of_another_type_or_a_setting_given_twice_is_refused(cls: type) -> None:
    reader = Tripwire()
    cases: list[tuple[dict[str, Any], type[ConfigError], str]] = [
        ({"resources": {"byte_budget": "1GiB"}}, ConfigTypeError, "resources must be"),
        ({"samples": StreamOptions()}, ConfigTypeError, "samples must be"),
        ({"resources": Resources(byte_budget="1GiB"), "byte_budget": "2GiB"}, ConfigError, "twice"),
        (
            {"samples": SampleOptions(), "sample_options": SampleOptions(image_dtype="uint8")},
            ConfigError,
            "one argument",
        ),
        (
            {"options": StreamOptions(fetch_workers=2), "resources": Resources(fetch_workers=3)},
            ConfigError,
            "fetch_workers",
        ),
        ({"source": Source(root="/elsewhere"), "root": "/other"}, ConfigError, "root"),
    ]
    if cls is EpisodePoolDataset:
        cases.append(({"order": Order(seed=1), "seed": 2}, ConfigError, "seed"))
    for arguments, error, text in cases:
        with pytest.raises(error, match=text):
            cls(reader=reader, **arguments)
    assert reader.calls == 0


def test_the_same_value_given_twice_is_no_conflict(tmp_path: Path) -> None:
    with EpisodePoolDataset(
        _fixture_root(),
        resources=Resources(byte_budget="1GiB", cache_dir=tmp_path),
        byte_budget=2**30,
        order=Order(pool_size=2),
        pool_size=2,
    ) as pool:
        assert pool.resources.byte_budget == 2**30 and pool.order.pool_size == 2


# -- LeRobot's factory checks every option before it reads the metadata ---------------------


class _NoFactory:
    """Stands in for LeRobot's factory: nothing of it may run before the refusal."""

    def __getattr__(self, name: str) -> Any:
        raise Touched(f"factory.{name}")


def _lerobot_cfg(streaming: bool, eval_split: float = 0.0) -> SimpleNamespace:
    dataset = SimpleNamespace(
        repo_id="local/sim5",
        root=str(_fixture_root()),
        streaming=streaming,
        revision=None,
        episodes=None,
        eval_split=eval_split,
    )
    return SimpleNamespace(dataset=dataset, seed=0, tolerance_s=1e-4)


LEROBOT_CASES = [(streaming, name) for streaming in (False, True) for name in BAD]


@pytest.mark.parametrize(
    ("streaming", "name"),
    LEROBOT_CASES,
    ids=[f"{'pool' if s else 'map'}-{n}" for s, n in LEROBOT_CASES],
)
def test_the_lerobot_factory_refuses_each_bad_option_before_reading(
    streaming: bool, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_metadata(*args: Any, **kwargs: Any) -> Any:
        raise Touched("load_metadata")

    monkeypatch.setattr(lerobot_integration, "_lerobot_factory", lambda: _NoFactory())
    monkeypatch.setattr(lerobot_integration, "load_metadata", no_metadata)
    for make in (
        lambda: lerobot_integration.make_dataset(_lerobot_cfg(streaming), **{name: BAD[name]}),
        lambda: lerobot_integration.make_train_eval_datasets(
            _lerobot_cfg(streaming, eval_split=0.2), **{name: BAD[name]}
        ),
    ):
        with pytest.raises(ConfigError) as raised:
            make()
        _assert_config_error(raised.value, name)


def test_the_map_style_dataset_takes_only_the_default_order(tmp_path: Path) -> None:
    reader = Tripwire()
    with pytest.raises(ConfigError, match="order= applies to EpisodePoolDataset"):
        EpisodeStreamDataset(reader=reader, order=Order(seed=3))
    assert reader.calls == 0
    with EpisodeStreamDataset(_fixture_root(), order=Order(), cache_dir=tmp_path) as dataset:
        assert dataset.order == Order()

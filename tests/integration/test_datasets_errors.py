"""Bad arguments to the datasets are typed episodestream errors whose message names the
parameter (and the offending value), raised when the dataset is built, not mid-training."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from episodestream import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.datasets import _pool, _windows
from episodestream.errors import (
    BudgetError,
    ConfigError,
    ConfigTypeError,
    DatasetFormatError,
    DecodeError,
    EpisodeStreamError,
    LocationError,
    SamplingError,
)

BOTH = [EpisodeStreamDataset, EpisodePoolDataset]

CASES: list[tuple[str, dict[str, Any], type[EpisodeStreamError], str]] = [
    ("unknown episode", {"episodes": [0, 9]}, SamplingError, r"episodes .*\[9\].*0\.\.4"),
    ("empty episodes", {"episodes": []}, SamplingError, "episodes is empty"),
    ("repeated episode", {"episodes": [1, 1]}, SamplingError, "episodes lists an episode more"),
    ("episodes as int", {"episodes": 3}, SamplingError, "episodes must be a list"),
    (
        "budget below the largest episode",
        {"byte_budget": "100KB"},
        BudgetError,
        r"byte_budget of 100000 bytes is smaller than episode \d+",
    ),
    ("negative budget", {"byte_budget": -5}, BudgetError, "byte_budget must be positive"),
    ("unparsable budget", {"byte_budget": "8 parsecs"}, BudgetError, "byte_budget='8 parsecs'"),
    (
        "non-multiple delta",
        {"delta_timestamps": {"action": [0.0, 0.01]}},
        SamplingError,
        r"delta_timestamps\['action'\] offset 0.01 s is not a multiple of 1/30",
    ),
    (
        "unknown delta key",
        {"delta_timestamps": {"actions": [0.0]}},
        SamplingError,
        r"delta_timestamps keys \['actions'\] are not features",
    ),
    ("empty delta", {"delta_timestamps": {"action": []}}, SamplingError, "'action'.* is empty"),
    ("image dtype", {"image_dtype": "float16"}, SamplingError, "image_dtype.*'float16'"),
    ("revision off the Hub", {"revision": "main"}, LocationError, "revision='main'.*hf://"),
]


@pytest.mark.parametrize("cls", BOTH, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_argument_is_a_clear_typed_error(
    cls: type,
    kwargs: dict[str, Any],
    error: type[EpisodeStreamError],
    message: str,
    lerobot_fixture_root: Path,
    datasets_cache_dir: Path,
) -> None:
    with pytest.raises(error, match=message) as caught:
        cls(lerobot_fixture_root, cache_dir=datasets_cache_dir, **kwargs)
    assert isinstance(caught.value, ValueError)  # argument errors stay ValueErrors too


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pool_size": 0}, "pool_size must be >= 1, got 0"),
        ({"pool_size": -3}, "pool_size must be >= 1, got -3"),
        ({"pool_size": 2.5}, "pool_size must be an integer"),
        ({"seed": -1}, "seed must be >= 0"),
    ],
)
def test_bad_pool_parameter_is_a_sampling_error(
    kwargs: dict[str, Any], message: str, lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    with pytest.raises(SamplingError, match=message):
        EpisodePoolDataset(lerobot_fixture_root, cache_dir=datasets_cache_dir, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"prefetch_episodes": -1}, ConfigError, "prefetch_episodes must be >= 0"),
        ({"prefetch_episodes": 1.5}, ConfigTypeError, "prefetch_episodes must be an int"),
        ({"decode_threads": -1}, ConfigError, "decode_threads must be >= 0"),
        ({"decode_threads": "2"}, ConfigTypeError, "decode_threads must be an int"),
        ({"max_pending_samples": 0}, ConfigError, "max_pending_samples must be >= 1"),
        ({"max_pending_samples": "a"}, ConfigTypeError, "max_pending_samples must be an int"),
        ({"window_frames": 0}, ConfigError, "window_frames must be >= 1"),
    ],
)
def test_bad_pool_setting_is_a_config_error(
    kwargs: dict[str, Any],
    error: type[ConfigError],
    message: str,
    lerobot_fixture_root: Path,
    datasets_cache_dir: Path,
) -> None:
    with pytest.raises(error, match=message) as caught:
        EpisodePoolDataset(lerobot_fixture_root, cache_dir=datasets_cache_dir, **kwargs)
    assert type(caught.value) is error  # a bad value is not a bad type, and the reverse


@pytest.mark.parametrize(
    ("module", "timeout_name", "options", "message"),
    [
        pytest.param(
            _pool,
            "DEFAULT_SAMPLE_TIMEOUT_S",
            {},
            r"episode \d+ frame \d+ was not decoded within 0.2 s",
            id="episode pool",
        ),
        pytest.param(
            _windows,
            "_SAMPLE_TIMEOUT_S",
            {"unit": "window", "window_frames": 8},
            r"episode \d+: a sample of the window pool was not",
            id="window pool",
        ),
    ],
)
def test_a_sample_not_built_in_time_is_a_decode_error_naming_it(
    module: Any,
    timeout_name: str,
    options: dict[str, Any],
    message: str,
    lerobot_fixture_root: Path,
    datasets_cache_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()

    def stuck(image: torch.Tensor) -> torch.Tensor:
        # a decode thread that finishes the sample 10x past the pool's patched bound; it must
        # end on its own: the pass's clean-up (inside next(), before the test's finally) waits
        # for it, up to the decoders' 30 s close bound
        release.wait(2.0)
        return image

    monkeypatch.setattr(module, timeout_name, 0.2)
    pool = EpisodePoolDataset(
        lerobot_fixture_root,
        **options,
        cache_dir=datasets_cache_dir,
        image_transforms=stuck,
        max_pending_samples=1,
    )
    try:
        with pytest.raises(DecodeError, match=message):
            next(iter(pool))
    finally:
        release.set()
        pool.close()


def test_budget_too_small_for_the_pool_names_pool_size(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    # room for one episode in flight but not for five resident ones
    with pytest.raises(BudgetError, match=r"5 resident episodes.*pool_size"):
        EpisodePoolDataset(
            lerobot_fixture_root, pool_size=5, byte_budget="2MiB", cache_dir=datasets_cache_dir
        )


def test_missing_dataset_is_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(DatasetFormatError, match=r"meta/info\.json"):
        EpisodeStreamDataset(tmp_path / "absent", cache_dir=tmp_path)


def test_bad_index_and_epoch(lerobot_fixture_root: Path, datasets_cache_dir: Path) -> None:
    with EpisodeStreamDataset(lerobot_fixture_root, cache_dir=datasets_cache_dir) as dataset:
        assert dataset.locate(-1) == dataset.locate(243) == (4, dataset.locate(243)[1])
        with pytest.raises(IndexError, match="index 244 out of range for 244 frames"):
            dataset[244]
        with pytest.raises(IndexError, match="index -245 out of range"):
            dataset[-245]
        with pytest.raises(TypeError, match="index must be an int, got float"):
            dataset[1.0]  # type: ignore[index]
    with EpisodePoolDataset(lerobot_fixture_root, cache_dir=datasets_cache_dir) as pool:
        with pytest.raises(SamplingError, match="epoch must be an int >= 0, got -1"):
            pool.set_epoch(-1)
        # never iterated anywhere: nothing was consumed (StatefulDataLoader asks this early)
        assert pool.state_dict()["samples_consumed"] == 0
        loader = torch.utils.data.DataLoader(pool, batch_size=4, num_workers=1)
        assert len(next(iter(loader))["index"]) == 4
        with pytest.raises(SamplingError, match="samples_consumed="):
            pool.state_dict()  # DataLoader workers iterated copies: the caller must say
    with EpisodePoolDataset(lerobot_fixture_root, cache_dir=datasets_cache_dir) as pool:
        next(iter(pool))  # this process iterated once (say, to look at a sample) ...
        assert pool.state_dict()["samples_consumed"] == 1
        loader = torch.utils.data.DataLoader(pool, batch_size=4, num_workers=1)
        next(iter(loader))  # ... then workers did: its own count is stale now
        with pytest.raises(SamplingError, match="samples_consumed="):
            pool.state_dict()

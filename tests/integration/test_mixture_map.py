"""MixtureStreamDataset over generated sources that differ in cameras, camera names, state and
action sizes, fps, resolution, codec (AV1, H.264) and layout (v3.0, v2.1): every sample is its
source's own EpisodeStreamDataset sample after the declared mapping; lengths, per-source
sampling weights, the bound on open sources, errors before any data is read, DataLoader
workers, and lerobot_sim5 as a source still equal to LeRobot's own samples."""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, WeightedRandomSampler

import episodestream
from episodestream import ConfigError, EpisodeStreamDataset, SampleIndexError
from episodestream.datasets import MixtureStreamDataset, _mixture_map
from episodestream.datasets._mixture_schema import KeySpec, MixtureSchema
from episodestream.sampling import MixtureWeight
from episodestream.storage import LocalRangeReader
from episodestream_tools.synthetic import SyntheticSpec
from tests.integration.test_datasets_reference import assert_matches_reference
from tests.plugins.datasets import LeRobotReference

HIGH = "observation.images.cam_high"
WRIST = "observation.images.cam_left_wrist"

# A: two cameras 64x48, AV1, v3.0, 30 fps, state 6 / action 6
SPEC_A = SyntheticSpec(
    cameras=(HIGH, WRIST),
    width=64,
    height=48,
    fps=30,
    episodes=3,
    min_length=6,
    max_length=10,
    episodes_per_file=2,
    codec="av1",
    state_size=6,
    action_size=6,
    seed=21,
)
# B: one camera under another name (mapped to WRIST), 80x60, H.264, v3.0, 15 fps, 4 / 3
SPEC_B = SyntheticSpec(
    cameras=("observation.images.hand",),
    width=80,
    height=60,
    fps=15,
    episodes=3,
    min_length=6,
    max_length=10,
    episodes_per_file=2,
    codec="h264",
    state_size=4,
    action_size=3,
    seed=22,
)
# C: one camera 96x72 (the largest: the schema's size), AV1, v2.1, 10 fps, 8 / 7
SPEC_C = SyntheticSpec(
    cameras=(HIGH,),
    width=96,
    height=72,
    fps=10,
    episodes=3,
    min_length=6,
    max_length=10,
    episodes_per_file=1,
    episodes_per_data_file=1,
    codec="av1",
    state_size=8,
    action_size=7,
    layout="v2.1",
    seed=23,
)
KEY_MAPS: list[dict[str, str | None] | None] = [
    None,
    {"observation.images.hand": WRIST},
    None,
]


@pytest.fixture(scope="module")
def roots(synthetic_dataset: Callable[[SyntheticSpec], Path]) -> list[Path]:
    return [synthetic_dataset(spec) for spec in (SPEC_A, SPEC_B, SPEC_C)]


@pytest.fixture
def mixture(roots: list[Path], datasets_cache_dir: Path) -> Iterator[MixtureStreamDataset]:
    with MixtureStreamDataset(
        roots, key_maps=KEY_MAPS, cache_dir=datasets_cache_dir, decoder="pyav"
    ) as dataset:
        yield dataset


def assert_same_sample(got: dict[str, Any], expected: dict[str, Any], where: str) -> None:
    assert set(got) == set(expected), f"{where}: keys {sorted(set(got) ^ set(expected))}"
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert isinstance(got[key], torch.Tensor), (where, key)
            assert got[key].dtype == value.dtype, (where, key)
            assert torch.equal(got[key], value), (where, key)
        else:
            assert got[key] == value, (where, key)


# --------------------------------------------------------------------------------------------
# samples


def test_schema_lengths_and_meta(mixture: MixtureStreamDataset, roots: list[Path]) -> None:
    sizes = []
    for root in roots:
        with EpisodeStreamDataset(root) as own:
            sizes.append(len(own))
    assert mixture.sizes.tolist() == sizes
    assert len(mixture) == sum(sizes)
    schema = mixture.schema
    assert schema.cameras == (HIGH, WRIST)
    assert schema.keys[HIGH].shape == (3, 72, 96)
    assert schema.keys[WRIST].shape == (3, 60, 80)  # each camera the largest of its sources
    assert schema.keys["observation.state"] == KeySpec.vector(8)
    assert schema.keys["action"] == KeySpec.vector(7)
    meta = mixture.meta
    assert meta.fps == 30  # the first source's
    assert meta.camera_keys == [HIGH, WRIST]
    assert meta.total_frames == len(mixture)
    assert meta.total_episodes == 9
    assert meta.features["observation.state"]["shape"] == (8,)
    assert len(meta.per_source_stats) == 3
    # pooled statistics: the state's count is every frame's, a padded entry's spread is that
    # of the zeros the mapper puts there in sources B (4 entries) and A (6)
    state = meta.stats["observation.state"]
    assert int(state["count"][0]) == len(mixture)
    assert state["mean"].shape == (8,)
    assert meta.stats[WRIST]["count"][0] == sizes[0] + sizes[1]  # C has no wrist camera
    # no source was opened to learn any of this
    assert mixture.open_sources == ()


def test_every_sample_is_the_source_sample_mapped(
    mixture: MixtureStreamDataset, roots: list[Path], datasets_cache_dir: Path
) -> None:
    starts = np.concatenate([[0], np.cumsum(mixture.sizes)])
    checked = 0
    for k, root in enumerate(roots):
        mapper = mixture.mappers[k]
        with EpisodeStreamDataset(root, cache_dir=datasets_cache_dir, decoder="pyav") as own:
            for j in range(0, len(own), 2):
                got = mixture[int(starts[k]) + j]
                assert_same_sample(got, mapper(own[j]), f"source {k} frame {j}")
                assert int(got["source_index"]) == k
                assert got["source_id"] == str(root)
                checked += 1
    assert checked >= 3 * 9
    # what the mapping did, once by hand: A's wrist camera letterboxed from 48x64 into B's
    # 60x80 (the largest wrist; aspect 4:3 kept: it fills it); B's state padded from 4 to 8
    # with the mask saying so, and no cam_high
    a = mixture[0]
    assert a[WRIST].shape == (3, 60, 80) and bool(a[WRIST + "_mask"])
    assert a[WRIST].amax() > 0
    b = mixture[int(starts[1])]
    assert b[WRIST].shape == (3, 60, 80) and bool(b[WRIST + "_mask"])
    assert not bool(b[HIGH + "_mask"]) and not b[HIGH].any()
    assert b["observation.state_mask"].tolist() == [True] * 4 + [False] * 4
    assert not b["observation.state"][4:].any()
    # negative indices count from the end
    assert_same_sample(mixture[-1], mixture[len(mixture) - 1], "last")


def test_index_out_of_range_is_a_sample_index_error(mixture: MixtureStreamDataset) -> None:
    for index in (len(mixture), -len(mixture) - 1, 10**12):
        with pytest.raises(SampleIndexError, match="out of range"):
            mixture[index]
    with pytest.raises(IndexError):
        mixture[len(mixture)]
    with pytest.raises(ConfigError):
        mixture["3"]  # type: ignore[index]
    sources, local = mixture.locate([0, len(mixture) - 1, int(mixture.sizes[0])])
    assert sources.tolist() == [0, 2, 1] and local.tolist() == [0, int(mixture.sizes[2]) - 1, 0]


def test_delta_timestamps_per_source_stack_alike(
    roots: list[Path], datasets_cache_dir: Path
) -> None:
    # seconds per source: each stacks 3 steps of state at its own fps
    deltas = [
        {"observation.state": [-2 / fps, 0.0, 1 / fps], "action": [0.0, 1 / fps]}
        for fps in (30, 15, 10)
    ]
    with MixtureStreamDataset(
        roots, key_maps=KEY_MAPS, delta_timestamps=deltas, cache_dir=datasets_cache_dir
    ) as mixture:
        starts = np.concatenate([[0], np.cumsum(mixture.sizes)])
        for k, root in enumerate(roots):
            with EpisodeStreamDataset(
                root, delta_timestamps=deltas[k], cache_dir=datasets_cache_dir
            ) as own:
                for j in (0, len(own) - 1):
                    got = mixture[int(starts[k]) + j]
                    assert_same_sample(got, mixture.mappers[k](own[j]), f"{k}/{j}")
                    assert got["observation.state"].shape == (3, 8)
                    assert got["observation.state_is_pad"].shape == (3,)
        assert mixture[0]["observation.state_is_pad"].tolist() == [True, False, False]
    uneven = [deltas[0], {"observation.state": [0.0]}, deltas[2]]
    with pytest.raises(ConfigError, match="steps"):
        MixtureStreamDataset(roots, key_maps=KEY_MAPS, delta_timestamps=uneven)
    unstacked = [deltas[0], {"action": [0.0, 1 / 15]}, deltas[2]]
    with pytest.raises(ConfigError, match=r"source 1 .*observation\.state"):
        MixtureStreamDataset(roots, key_maps=KEY_MAPS, delta_timestamps=unstacked)
    # source key names, checked when the mixture is built (not at the first sample)
    renamed = [None, {"observation.images.cam_left_wrist": [0.0]}, None]
    with pytest.raises(ConfigError, match=r"source 1 .*not a feature"):
        MixtureStreamDataset(roots, key_maps=KEY_MAPS, delta_timestamps=renamed)


def test_a_source_equals_lerobot_reference(
    lerobot_fixture_root: Path,
    roots: list[Path],
    lerobot_reference: LeRobotReference,
    datasets_cache_dir: Path,
) -> None:
    """lerobot_sim5 first in a mixture with a smaller source: its keys keep LeRobot's exact
    values (the schema is its size), the mixture only adds masks and the source's name."""

    class Unmixed:
        def __init__(self, mixture: MixtureStreamDataset) -> None:
            self.mixture = mixture

        def __getitem__(self, index: int) -> dict[str, Any]:
            sample = self.mixture[index]
            assert int(sample.pop("source_index")) == 0
            assert sample.pop("source_id") == str(lerobot_fixture_root)
            for key in [key for key in sample if key.endswith("_mask")]:
                assert bool(sample.pop(key).all()), key
            return sample

    with MixtureStreamDataset(
        [lerobot_fixture_root, roots[0]], cache_dir=datasets_cache_dir
    ) as mixture:
        assert mixture.sizes[0] == 244
        compared = assert_matches_reference(
            Unmixed(mixture),  # type: ignore[arg-type]
            lerobot_reference.samples,
            image_dtype="float32",
        )
    assert compared > 24 * 3 * 3 * 96 * 128


# --------------------------------------------------------------------------------------------
# weights


def test_sample_weights_give_each_source_its_quota(
    roots: list[Path], datasets_cache_dir: Path
) -> None:
    weights = [MixtureWeight(choose=10), {"repeat": 2.0}, 1.0]
    with MixtureStreamDataset(
        roots, key_maps=KEY_MAPS, weights=weights, cache_dir=datasets_cache_dir
    ) as mixture:
        sizes = mixture.sizes.tolist()
        quotas = [10, 2 * sizes[1], sizes[2]]  # proportions share their own size
        assert mixture.epoch_quotas().tolist() == quotas
        per_index = mixture.sample_weights()
        assert per_index.dtype == np.float64 and per_index.shape == (len(mixture),)
        assert np.isclose(per_index.sum(), 1.0)
        sources, _ = mixture.locate(np.arange(len(mixture)))
        total = sum(quotas)
        for k in range(3):
            assert np.isclose(per_index[sources == k].sum(), quotas[k] / total)
            # uniform within a source
            assert np.ptp(per_index[sources == k]) == 0
        draws = 20_000
        sampler = WeightedRandomSampler(
            torch.from_numpy(per_index),
            num_samples=draws,
            generator=torch.Generator().manual_seed(5),
        )
        drawn = np.bincount(sources[np.fromiter(sampler, dtype=np.int64)], minlength=3)
        for k in range(3):
            p = quotas[k] / total
            sigma = np.sqrt(draws * p * (1 - p))
            assert abs(drawn[k] - draws * p) < 3 * sigma, (k, drawn.tolist(), quotas)


def test_bad_weights_are_config_errors(roots: list[Path]) -> None:
    cases: list[tuple[Any, str]] = [
        ([1.0, 1.0], "entries for 3 sources"),
        ([1.0, -1.0, 1.0], "proportion"),
        ([1.0, "x", 1.0], "weights\\[1\\]"),
        ([{"proportion": 1, "repeat": 1}, 1.0, 1.0], "exactly one"),
        ([{"choose": 0}] * 3, "quota of 0"),
        ({"proportion": 1.0}, "list"),
    ]
    for weights, match in cases:
        with pytest.raises(ConfigError, match=match):
            MixtureStreamDataset(roots, key_maps=KEY_MAPS, weights=weights)


# --------------------------------------------------------------------------------------------
# errors before any data


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every path local readers are asked for (size or read), in order."""
    seen: list[str] = []
    size, read = LocalRangeReader.size, LocalRangeReader.read

    def counted_size(self: LocalRangeReader, path: str) -> int:
        seen.append(path)
        return size(self, path)

    def counted_read(self: LocalRangeReader, path: str, offset: int, length: int) -> bytes:
        seen.append(path)
        return read(self, path, offset, length)

    monkeypatch.setattr(LocalRangeReader, "size", counted_size)
    monkeypatch.setattr(LocalRangeReader, "read", counted_read)
    return seen


def _only_metadata(paths: list[str]) -> bool:
    return bool(paths) and all(path.lstrip("/").startswith("meta/") for path in paths)


def test_unmappable_source_is_refused_before_any_data_is_read(
    roots: list[Path], reads: list[str]
) -> None:
    too_small = MixtureSchema(
        {
            HIGH: KeySpec.camera(3, 72, 96),
            "observation.state": KeySpec.vector(6),  # C has 8 entries
            "action": KeySpec.vector(7),
        }
    )
    no_hand = [None, {"observation.images.hand": None}, None]
    with pytest.raises(ConfigError, match=r"source 2 .*observation\.state"):
        MixtureStreamDataset(roots, key_maps=no_hand, schema=too_small)
    assert _only_metadata(reads), reads
    reads.clear()
    # a key map naming a key the source lacks, and a camera channel-count clash
    with pytest.raises(ConfigError, match=r"observation\.images\.nope"):
        MixtureStreamDataset(roots, key_maps=[None, {"observation.images.nope": WRIST}, None])
    assert _only_metadata(reads), reads
    reads.clear()
    required = MixtureSchema({HIGH: KeySpec.camera(3, 72, 96, required=True)})
    with pytest.raises(ConfigError, match=r"source 1 .*lacks camera key .*cam_high"):
        MixtureStreamDataset(roots, key_maps=no_hand, schema=required)
    assert _only_metadata(reads), reads


def test_construction_reads_metadata_only(
    roots: list[Path], reads: list[str], datasets_cache_dir: Path
) -> None:
    with MixtureStreamDataset(roots, key_maps=KEY_MAPS, cache_dir=datasets_cache_dir) as mixture:
        assert _only_metadata(reads), reads
        mixture[len(mixture) - 1]
        assert any(path.lstrip("/").startswith("videos/") for path in reads)
        assert mixture.open_sources == (2,)


def test_bad_arguments_are_config_errors(roots: list[Path]) -> None:
    with pytest.raises(ConfigError, match="sources is empty"):
        MixtureStreamDataset([])
    with pytest.raises(ConfigError, match="list of dataset roots"):
        MixtureStreamDataset(str(roots[0]))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="key_maps has 2"):
        MixtureStreamDataset(roots, key_maps=[None, None])
    with pytest.raises(ConfigError, match="max_open_sources"):
        MixtureStreamDataset(roots, key_maps=KEY_MAPS, max_open_sources=0)
    with pytest.raises(ConfigError, match="episodes="):
        MixtureStreamDataset(roots, key_maps=KEY_MAPS, episodes=[0])
    with pytest.raises(ConfigError, match="image_dtype"):
        MixtureStreamDataset(roots, key_maps=KEY_MAPS, image_dtype="float16")


# --------------------------------------------------------------------------------------------
# open sources, workers


def test_open_sources_stay_within_the_bound(
    roots: list[Path], datasets_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    live: set[int] = set()
    peak = [0]
    opened = [0]
    real_open = _mixture_map.open_source

    def counting_open(root: Any, **kwargs: Any) -> EpisodeStreamDataset:
        dataset = real_open(root, **kwargs)
        opened[0] += 1
        live.add(id(dataset))
        peak[0] = max(peak[0], len(live))
        close = dataset.close

        def counted_close() -> None:
            live.discard(id(dataset))
            close()

        dataset.close = counted_close  # type: ignore[method-assign]
        return dataset

    monkeypatch.setattr(_mixture_map, "open_source", counting_open)
    with MixtureStreamDataset(
        roots,
        key_maps=KEY_MAPS,
        max_open_sources=2,
        cache_dir=datasets_cache_dir,
        decoder="pyav",
    ) as mixture:
        starts = np.concatenate([[0], np.cumsum(mixture.sizes)])
        for k in (0, 1, 0, 2, 1, 2, 0):
            mixture[int(starts[k])]
            assert len(mixture.open_sources) <= 2
            assert mixture.open_sources[-1] == k
        assert peak[0] == 2
        # 0, 1 open; 0 hit; 2 evicts 1; 1 evicts 0; 2 hit; 0 evicts 1
        assert opened[0] == 5
        assert len(live) == 2
    assert live == set()


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_pickles_and_collates_in_two_workers(
    mixture: MixtureStreamDataset, start_method: str
) -> None:
    mixture[0]  # an open source must not travel
    copy = pickle.loads(pickle.dumps(mixture))
    assert copy.open_sources == ()
    assert_same_sample(copy[len(copy) - 2], mixture[len(mixture) - 2], "unpickled")
    copy.close()

    sampler = WeightedRandomSampler(
        torch.from_numpy(mixture.sample_weights()),
        num_samples=24,
        generator=torch.Generator().manual_seed(3),
    )
    loader = DataLoader(
        mixture, batch_size=12, sampler=sampler, num_workers=2, multiprocessing_context=start_method
    )
    indices = list(iter(sampler))
    sampler.generator.manual_seed(3)  # the loader draws the same indices again
    batches = list(loader)
    assert len(batches) == 2
    sources, _ = mixture.locate(indices)
    for number, batch in enumerate(batches):
        want = sources[number * 12 : (number + 1) * 12]
        assert batch["source_index"].tolist() == want.tolist()
        assert batch[HIGH].shape == (12, 3, 72, 96)
        assert batch["observation.state"].shape == (12, 8)
        assert batch[HIGH + "_mask"].dtype == torch.bool
        assert len(batch["source_id"]) == 12
        for row, index in enumerate(indices[number * 12 : (number + 1) * 12]):
            assert torch.equal(batch[WRIST][row], mixture[index][WRIST])
    assert len(set(sources.tolist())) > 1  # the batches mix sources


def test_exported() -> None:
    assert episodestream.MixtureStreamDataset is MixtureStreamDataset
    assert "MixtureStreamDataset" in episodestream.__all__


def test_uint8_sources_and_a_declared_float_schema(
    roots: list[Path], datasets_cache_dir: Path
) -> None:
    """Sources decode to uint8; an inferred schema keeps uint8 frames, a declared float32
    camera turns them into x / 255 (as the mapper does, after the source's own sample)."""
    declared = MixtureSchema(
        {
            HIGH: KeySpec.camera(3, 72, 96, dtype="float32"),
            WRIST: KeySpec.camera(3, 60, 80, dtype="float32"),
            "observation.state": KeySpec.vector(8),
        }
    )
    for schema, dtype in ((None, torch.uint8), (declared, torch.float32)):
        with MixtureStreamDataset(
            roots,
            key_maps=KEY_MAPS,
            schema=schema,
            image_dtype="uint8",
            cache_dir=datasets_cache_dir,
        ) as mixture:
            starts = np.concatenate([[0], np.cumsum(mixture.sizes)])
            for k in (0, 2):
                with EpisodeStreamDataset(
                    roots[k], image_dtype="uint8", cache_dir=datasets_cache_dir
                ) as own:
                    got = mixture[int(starts[k]) + 1]
                    assert_same_sample(got, mixture.mappers[k](own[1]), f"{k}")
                    assert got[HIGH].dtype == dtype

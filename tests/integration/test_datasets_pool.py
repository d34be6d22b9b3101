"""EpisodePoolDataset: exact coverage with DataLoader workers and over epochs, uniform draws,
resume (in process and through a DataLoader), mismatched resume refused, samples equal to
EpisodeStreamDataset's, no thread left behind, the byte budget kept, transforms in the decode
threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, get_worker_info

from episodestream import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.errors import SamplingError
from episodestream.sampling import WorkerSlot, split_budget
from tests.support.threads import episodestream_threads

TOTAL_FRAMES = 104  # synthetic_av1: 6 episodes of 8..20 frames, 2 cameras
BUDGET = "32MiB"


def _pool(root: Path | str, cache_dir: Path, **kwargs: Any) -> EpisodePoolDataset:
    kwargs.setdefault("pool_size", 3)
    kwargs.setdefault("byte_budget", BUDGET)
    kwargs.setdefault("decode_threads", 1)
    kwargs.setdefault("fetch_workers", 2)
    return EpisodePoolDataset(root, cache_dir=cache_dir, **kwargs)


def _loader_indices(dataset: EpisodePoolDataset, **loader_kwargs: Any) -> list[int]:
    loader = DataLoader(dataset, **loader_kwargs)
    return [int(i) for batch in loader for i in torch.atleast_1d(batch["index"]).tolist()]


@pytest.fixture(scope="module")
def pool(synthetic_av1: Path, datasets_cache_dir: Path) -> Iterator[EpisodePoolDataset]:
    dataset = _pool(synthetic_av1, datasets_cache_dir)
    yield dataset
    dataset.close()


@pytest.mark.parametrize("num_workers", [0, 1, 2])
def test_every_frame_exactly_once_with_dataloader_workers(
    pool: EpisodePoolDataset, num_workers: int
) -> None:
    pool.set_epoch(0)
    seen = _loader_indices(pool, batch_size=5, num_workers=num_workers)
    assert len(seen) == TOTAL_FRAMES == len(pool)
    assert sorted(seen) == list(range(TOTAL_FRAMES))


def test_every_frame_exactly_once_over_http(
    pool: EpisodePoolDataset, synthetic_av1: Path, http_publish: Any, datasets_cache_dir: Path
) -> None:
    pool.set_epoch(3)
    local = _loader_indices(pool, batch_size=5, num_workers=2)
    with _pool(http_publish(synthetic_av1), datasets_cache_dir) as remote:
        remote.set_epoch(3)
        seen = _loader_indices(remote, batch_size=5, num_workers=2)
        # the order depends on the episode set and seed, not on where the bytes come from
        assert seen == local
        assert sorted(seen) == list(range(TOTAL_FRAMES))
        assert sum(1 for _ in remote) == TOTAL_FRAMES  # in process: its counters are ours
        metrics = remote.metrics()
    assert metrics["samples"] == TOTAL_FRAMES and metrics["samples_per_s"] > 0
    assert metrics["reader"]["bytes"] > 0


def test_epochs_change_the_order_not_the_set(pool: EpisodePoolDataset) -> None:
    orders = []
    for epoch in range(3):
        pool.set_epoch(epoch)
        seen = _loader_indices(pool, batch_size=4, num_workers=2)
        assert sorted(seen) == list(range(TOTAL_FRAMES)), f"epoch {epoch}"
        orders.append(seen)
    assert len({tuple(order) for order in orders}) == 3
    pool.set_epoch(1)  # an epoch's order is a pure function of it
    assert _loader_indices(pool, batch_size=4, num_workers=2) == orders[1]


def test_first_pool_size_draws_touch_most_of_the_pool(
    synthetic_many: Path, datasets_cache_dir: Path
) -> None:
    """Draws are uniform over the frames left in the pool, so the first ``pool_size`` draws
    touch 1 - (1 - 1/P)^P ~ 63 % of its episodes on average (a sequential reader: 1-2)."""
    pool_size = 32
    fractions = []
    for seed in range(6):
        with _pool(synthetic_many, datasets_cache_dir, pool_size=pool_size, seed=seed) as dataset:
            iterator = iter(dataset)
            episodes = {int(next(iterator)["episode_index"]) for _ in range(pool_size)}
            iterator.close()
        fractions.append(len(episodes) / pool_size)
    assert min(fractions) >= 0.5, fractions
    assert float(np.mean(fractions)) >= 0.6, fractions
    # the same measure tells a sequential order apart
    with _pool(synthetic_many, datasets_cache_dir, pool_size=pool_size, shuffle=False) as dataset:
        iterator = iter(dataset)
        episodes = {int(next(iterator)["episode_index"]) for _ in range(pool_size)}
        iterator.close()
    assert len(episodes) / pool_size < 0.3


def test_in_process_resume_yields_the_uninterrupted_tail(
    synthetic_av1: Path, datasets_cache_dir: Path
) -> None:
    with _pool(synthetic_av1, datasets_cache_dir, seed=4) as reference:
        reference.set_epoch(2)
        full = [int(sample["index"]) for sample in reference]
    assert sorted(full) == list(range(TOTAL_FRAMES))
    for k in (0, 1, 37, TOTAL_FRAMES - 1, TOTAL_FRAMES):
        with _pool(synthetic_av1, datasets_cache_dir, seed=4) as first:
            first.set_epoch(2)
            iterator = iter(first)
            head = [int(next(iterator)["index"]) for _ in range(k)]
            # after k draws in this process the defaults are what it iterated
            state = first.state_dict() if k else first.state_dict(0, num_workers=1)
            iterator.close()
        assert head == full[:k]
        assert state["samples_consumed"] == k and state["epoch"] == 2
        with _pool(synthetic_av1, datasets_cache_dir, seed=4) as resumed:
            resumed.load_state_dict(state)
            assert resumed.epoch == 2
            tail = [int(sample["index"]) for sample in resumed]
            assert tail == full[k:], f"resume after {k}"
            # the resume applies to one iteration: the next one is the whole epoch again
            assert [int(sample["index"]) for sample in resumed] == full


@pytest.fixture(scope="module")
def epoch0_batches(pool: EpisodePoolDataset) -> list[list[int]]:
    """Epoch 0 through DataLoader(batch_size=5, num_workers=2): 2 workers x 52 frames."""
    pool.set_epoch(0)
    loader = DataLoader(pool, batch_size=5, num_workers=2)
    return [batch["index"].tolist() for batch in loader]


# after an odd count the interrupted loader would next poll worker 1, a fresh one polls
# worker 0 first; after an even one both poll worker 0; after 21 batches worker 0 is done
# (11 batches) and worker 1 has one left
@pytest.mark.parametrize("batches", [1, 8, 9, 21])
def test_dataloader_resume_yields_the_uninterrupted_tail(
    pool: EpisodePoolDataset,
    epoch0_batches: list[list[int]],
    synthetic_av1: Path,
    datasets_cache_dir: Path,
    batches: int,
) -> None:
    full = epoch0_batches
    assert len(full) == 22 and sorted(i for b in full for i in b) == list(range(TOTAL_FRAMES))
    pool.set_epoch(0)
    head = []
    for batch in DataLoader(pool, batch_size=5, num_workers=2):
        head.append(batch["index"].tolist())
        if len(head) == batches:
            break
    assert head == full[:batches]
    consumed = sum(len(b) for b in head)
    state = pool.state_dict(samples_consumed=consumed, num_workers=2, batch_size=5)
    with _pool(synthetic_av1, datasets_cache_dir) as resumed:
        resumed.load_state_dict(state)
        loader = DataLoader(resumed, batch_size=5, num_workers=2)
        tail = [b["index"].tolist() for b in loader]
    # the same batches in the same order, not only the same samples
    assert tail == full[batches:]


def test_mismatched_resume_is_refused_naming_the_field(
    pool: EpisodePoolDataset, synthetic_av1: Path, datasets_cache_dir: Path
) -> None:
    pool.set_epoch(0)
    state = pool.state_dict(samples_consumed=10, num_workers=2, batch_size=5)
    cases = {
        "world_size": dict(rank=0, world_size=2),
        "seed": dict(seed=1),
        "pool_size": dict(pool_size=4),
        "episodes_digest": dict(episodes=[0, 1, 2, 3, 4]),
    }
    for field, kwargs in cases.items():
        with (
            _pool(synthetic_av1, datasets_cache_dir, **kwargs) as other,
            pytest.raises(SamplingError, match=field),
        ):
            other.load_state_dict(state)
    with _pool(synthetic_av1, datasets_cache_dir) as other:
        other.load_state_dict(state)  # same configuration: accepted
        with pytest.raises(SamplingError, match="num_workers"):
            next(iter(other))  # iterated in process: 1 worker, the state says 2
        with pytest.raises(SamplingError, match="lacks"):
            other.load_state_dict({k: v for k, v in state.items() if k != "seed"})
    with pytest.raises(SamplingError, match="batch boundary"):
        pool.state_dict(samples_consumed=7, num_workers=2, batch_size=5)
    with pytest.raises(SamplingError, match="exceeds"):
        pool.state_dict(samples_consumed=TOTAL_FRAMES + 5, num_workers=2, batch_size=5)


def _assert_same_sample(sample: dict[str, Any], expected: dict[str, Any]) -> None:
    """Every key, dtype and value of ``expected`` (a map-style sample) in ``sample``."""
    assert set(sample) == set(expected)
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert value.dtype == sample[key].dtype and torch.equal(value, sample[key]), key
        else:
            assert value == sample[key], key


def test_pool_samples_equal_map_dataset_samples(
    synthetic_av1: Path, datasets_cache_dir: Path
) -> None:
    deltas = {"observation.images.cam_high": [-2 / 30, 0.0], "action": [0.0, 3 / 30]}
    with (
        _pool(synthetic_av1, datasets_cache_dir, delta_timestamps=deltas, decode_threads=2) as pool,
        EpisodeStreamDataset(
            synthetic_av1, delta_timestamps=deltas, cache_dir=datasets_cache_dir
        ) as reference,
    ):
        count = 0
        for sample in pool:
            if count == 48:  # enough to cross several pool entries and exits
                break
            _assert_same_sample(sample, reference[int(sample["index"])])
            count += 1
    assert count == 48


@pytest.mark.parametrize("source", ["local", "http"])
def test_closing_an_iteration_midway_stops_every_thread(
    synthetic_av1: Path, http_publish: Any, datasets_cache_dir: Path, source: str
) -> None:
    root = str(synthetic_av1) if source == "local" else http_publish(synthetic_av1)
    before = episodestream_threads()  # other tests' long-lived threads, if any
    dataset = _pool(root, datasets_cache_dir, decode_threads=2, prefetch_episodes=3)
    iterator = iter(dataset)
    for _ in range(7):
        next(iterator)
    started = sorted(t.name for t in episodestream_threads() - before)
    assert any("fetch" in name for name in started), started
    assert any("pool" in name for name in started), started
    iterator.close()
    left = sorted(t.name for t in episodestream_threads() - before)
    assert not [name for name in left if "fetch" in name or "pool" in name], left
    dataset.close()  # the reader's connection threads (HTTP) go with the dataset
    assert sorted(t.name for t in episodestream_threads() - before) == []


def _peak_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs in the DataLoader worker: attach its cache's peak bytes and budget share."""
    batch = torch.utils.data.default_collate(samples)
    info = get_worker_info()
    dataset: EpisodePoolDataset = info.dataset
    batch["peak_bytes"] = dataset.metrics()["cache"].peak_bytes
    batch["share"] = split_budget(
        dataset.options.byte_budget, WorkerSlot(worker=info.id, num_workers=info.num_workers)
    )
    return batch


def test_byte_budget_is_never_exceeded(synthetic_av1: Path, datasets_cache_dir: Path) -> None:
    probe = _pool(synthetic_av1, datasets_cache_dir)
    sizes = np.sort(probe.dataset.episode_nbytes)[::-1]
    probe.close()
    pool_size = 2
    # just enough for two workers: each needs its pool plus one episode in flight (x2)
    budget = 2 * int(sizes[:pool_size].sum() + 2 * sizes[0])
    dataset = _pool(
        synthetic_av1,
        datasets_cache_dir,
        pool_size=pool_size,
        byte_budget=budget,
        prefetch_episodes=4,
    )
    # in process: the whole budget is this iteration's
    peaks = []
    for _ in dataset:
        peaks.append(dataset.metrics()["cache"].peak_bytes)
    assert len(peaks) == TOTAL_FRAMES
    assert 0 < max(peaks) <= budget
    # two DataLoader workers: each holds at most its share
    seen = 0
    for batch in DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=_peak_collate):
        assert 0 < batch["peak_bytes"] <= batch["share"] <= budget // 2 + 1
        seen += len(batch["index"])
    assert seen == TOTAL_FRAMES
    metrics = dataset.metrics()  # of the in-process iteration
    dataset.close()
    assert metrics["samples"] == TOTAL_FRAMES and metrics["episodes_entered"] == 6
    assert metrics["unique_episodes"] == 6 and metrics["refill_waits"] >= 0
    assert metrics["unique_episodes_per_32_mean"] > 1  # batches mix episodes


def test_image_transforms_run_in_decode_threads(
    synthetic_av1: Path, datasets_cache_dir: Path
) -> None:
    threads: set[str] = set()

    def flip(images: torch.Tensor) -> torch.Tensor:
        threads.add(threading.current_thread().name)
        return images.flip(-1)

    with (
        _pool(synthetic_av1, datasets_cache_dir, image_transforms=flip, decode_threads=2) as pool,
        EpisodeStreamDataset(synthetic_av1, cache_dir=datasets_cache_dir) as plain,
    ):
        iterator = iter(pool)
        for _ in range(6):
            sample = next(iterator)
            expected = plain[int(sample["index"])]
            for camera in ("observation.images.cam_high", "observation.images.cam_left_wrist"):
                assert torch.equal(sample[camera], expected[camera].flip(-1))
        iterator.close()
    assert threads and all(name.startswith("episodestream-pool") for name in threads), threads


def _threads_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs in the DataLoader worker: the batch plus the names of the worker's threads."""
    batch = torch.utils.data.default_collate(samples)
    batch["threads"] = sorted(t.name for t in threading.enumerate())
    return batch


def test_inline_decoding_keeps_samples_and_starts_no_decode_thread(
    synthetic_av1: Path, datasets_cache_dir: Path
) -> None:
    """decode_threads=0 (one core per DataLoader worker, as the scaling benchmark runs it)
    decodes in the iterating thread: the same samples, in the same order, and no decode
    thread, in process and in each worker."""
    deltas = {"observation.images.cam_high": [-2 / 30, 0.0], "action": [0.0, 3 / 30]}
    before = episodestream_threads()
    with (
        _pool(
            synthetic_av1, datasets_cache_dir, delta_timestamps=deltas, decode_threads=0
        ) as inline,
        _pool(synthetic_av1, datasets_cache_dir, delta_timestamps=deltas) as threaded,
        EpisodeStreamDataset(
            synthetic_av1, delta_timestamps=deltas, cache_dir=datasets_cache_dir
        ) as reference,
    ):
        inline.set_epoch(1)
        threaded.set_epoch(1)
        iterator = iter(inline)
        first = next(iterator)
        started = sorted(t.name for t in episodestream_threads() - before)
        assert any("fetch" in name for name in started), started
        assert not [name for name in started if "pool" in name], started
        samples = [first, *iterator]
        assert [int(s["index"]) for s in samples] == [int(s["index"]) for s in threaded]
        assert sorted(int(s["index"]) for s in samples) == list(range(TOTAL_FRAMES))
        for sample in samples:
            _assert_same_sample(sample, reference[int(sample["index"])])
        seen = []
        loader = DataLoader(inline, batch_size=4, num_workers=2, collate_fn=_threads_collate)
        for batch in loader:
            assert not [n for n in batch["threads"] if n.startswith("episodestream-pool")]
            assert any(n.startswith("episodestream-fetch") for n in batch["threads"])
            for row, index in enumerate(batch["index"].tolist()):
                expected = reference[index]
                for camera in ("observation.images.cam_high", "observation.images.cam_left_wrist"):
                    assert torch.equal(batch[camera][row], expected[camera]), (index, camera)
                seen.append(index)
        assert sorted(seen) == list(range(TOTAL_FRAMES))

"""EpisodePoolDataset(unit="window"): windows decoded once, drawn from memory — every frame
exactly once per epoch across DataLoader workers and ranks, samples bit-identical to LeRobot's
(float32 and uint8, with and without delta_timestamps), resume mid-window (in process, through
a DataLoader, through StatefulDataLoader), a tight decoded budget never exceeded, one decoded
frame per sample, and the episode pool left as it was."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

from episodestream import EpisodePoolDataset
from episodestream.errors import BudgetError, ConfigError, SamplingError
from episodestream.sampling import WorkerSlot, split_budget
from tests.plugins.datasets import LeRobotReference

TOTAL_FRAMES = 244  # lerobot_sim5: 5 episodes, 3 cameras 96x128, AV1 g=2 written by LeRobot
FRAME_BYTES = 3 * 96 * 128 * 3  # one frame of every camera, uint8
WINDOW = 16
IMAGE_PREFIX = "observation.images."


def _windows(root: Path | str, cache_dir: Path, **kwargs: Any) -> EpisodePoolDataset:
    kwargs.setdefault("pool_size", 3)
    kwargs.setdefault("window_frames", WINDOW)
    kwargs.setdefault("decoded_budget", "12MiB")
    kwargs.setdefault("decode_threads", 1)
    kwargs.setdefault("fetch_workers", 2)
    return EpisodePoolDataset(root, unit="window", cache_dir=cache_dir, **kwargs)


def _bits(array: np.ndarray) -> np.ndarray:
    return array.view(np.dtype(f"u{array.dtype.itemsize}")) if array.dtype.kind == "f" else array


def _assert_reference(
    samples: dict[int, dict[str, Any]], reference: dict[str, np.ndarray], *, uint8: bool
) -> int:
    """Every reference sample equals ours bit for bit; returns how many were compared."""
    keys = LeRobotReference.keys(reference)
    for row, index in enumerate(reference["request_index"].tolist()):
        sample = samples[index]
        assert set(sample) == keys, f"index {index}: keys differ"
        for key in sorted(keys):
            expected, ours = reference[key][row], sample[key]
            where = f"index {index}, {key!r}"
            if key == "task":
                assert ours == str(expected), where
                continue
            if key.startswith(IMAGE_PREFIX) and not key.endswith("_is_pad") and not uint8:
                expected = expected.astype(np.float32) / np.float32(255)
            got = ours.numpy()
            assert got.dtype == expected.dtype and got.shape == expected.shape, where
            assert np.array_equal(_bits(got), _bits(np.array(expected))), where
    return len(reference["request_index"])


def _collect(dataset: EpisodePoolDataset, num_workers: int) -> list[dict[str, Any]]:
    if num_workers == 0:
        return list(dataset)
    return list(DataLoader(dataset, batch_size=None, num_workers=num_workers))


@pytest.mark.parametrize("num_workers", [0, 1, 2])
@pytest.mark.parametrize("deltas", [False, True], ids=["plain", "delta_timestamps"])
def test_every_frame_once_and_samples_equal_lerobot(
    lerobot_fixture_root: Path,
    lerobot_reference: LeRobotReference,
    datasets_cache_dir: Path,
    num_workers: int,
    deltas: bool,
) -> None:
    reference = lerobot_reference.samples_delta if deltas else lerobot_reference.samples
    uint8 = num_workers == 1  # both image dtypes, without tripling the runs
    with _windows(
        lerobot_fixture_root,
        datasets_cache_dir,
        delta_timestamps=lerobot_reference.delta_timestamps if deltas else None,
        return_uint8=uint8,
        decode_threads=2 if num_workers == 0 else 1,
    ) as dataset:
        assert len(dataset) == TOTAL_FRAMES
        samples = _collect(dataset, num_workers)
    indices = [int(s["index"]) for s in samples]
    assert len(indices) == TOTAL_FRAMES and sorted(indices) == list(range(TOTAL_FRAMES))
    by_index = {int(s["index"]): s for s in samples}
    assert _assert_reference(by_index, reference, uint8=uint8) == len(reference["request_index"])


def test_two_ranks_split_the_frames_and_keep_lerobot_samples(
    lerobot_fixture_root: Path, lerobot_reference: LeRobotReference, datasets_cache_dir: Path
) -> None:
    reference = lerobot_reference.samples_delta
    seen: dict[int, list[int]] = {}
    samples: dict[int, dict[str, Any]] = {}
    for rank in (0, 1):
        with _windows(
            lerobot_fixture_root,
            datasets_cache_dir,
            rank=rank,
            world_size=2,
            delta_timestamps=lerobot_reference.delta_timestamps,
        ) as dataset:
            dataset.set_epoch(1)
            got = _collect(dataset, 2)
            assert len(got) == len(dataset)
        seen[rank] = [int(s["index"]) for s in got]
        samples.update({int(s["index"]): s for s in got})
    assert not set(seen[0]) & set(seen[1])  # whole episodes per rank
    everything = seen[0] + seen[1]
    assert sorted(everything) == list(range(TOTAL_FRAMES))
    _assert_reference(samples, reference, uint8=False)


def test_in_process_resume_mid_window_yields_the_uninterrupted_tail(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    deltas = {"observation.images.cam_high": [-0.1, 0.0]}
    with _windows(
        lerobot_fixture_root, datasets_cache_dir, seed=4, delta_timestamps=deltas
    ) as reference:
        reference.set_epoch(2)
        full = [int(sample["index"]) for sample in reference]
        assert reference.metrics()["decoded_frames_per_sample"] > 1.0  # the margins
    assert sorted(full) == list(range(TOTAL_FRAMES))
    # 5 and 101 fall inside windows (3 resident windows of up to 16 frames are being drawn)
    for k in (5, 101, TOTAL_FRAMES - 1):
        with _windows(
            lerobot_fixture_root, datasets_cache_dir, seed=4, delta_timestamps=deltas
        ) as first:
            first.set_epoch(2)
            iterator = iter(first)
            head = [int(next(iterator)["index"]) for _ in range(k)]
            state = first.state_dict()
            iterator.close()
        assert head == full[:k]
        assert state["unit"] == "window" and state["samples_consumed"] == k
        with _windows(
            lerobot_fixture_root, datasets_cache_dir, seed=4, delta_timestamps=deltas
        ) as resumed:
            resumed.load_state_dict(state)
            assert [int(sample["index"]) for sample in resumed] == full[k:], f"after {k}"


def test_dataloader_resume_yields_the_uninterrupted_batches(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    with _windows(lerobot_fixture_root, datasets_cache_dir) as pool:
        full = [b["index"].tolist() for b in DataLoader(pool, batch_size=5, num_workers=2)]
        assert sorted(i for b in full for i in b) == list(range(TOTAL_FRAMES))
        for stop in (3, 8):
            head = []
            for batch in DataLoader(pool, batch_size=5, num_workers=2):
                head.append(batch["index"].tolist())
                if len(head) == stop:
                    break
            assert head == full[:stop]
            state = pool.state_dict(
                samples_consumed=sum(map(len, head)), num_workers=2, batch_size=5
            )
            with _windows(lerobot_fixture_root, datasets_cache_dir) as resumed:
                resumed.load_state_dict(state)
                tail = [
                    b["index"].tolist() for b in DataLoader(resumed, batch_size=5, num_workers=2)
                ]
            assert tail == full[stop:], f"after {stop} batches"


def test_stateful_dataloader_restores_each_worker_mid_window(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    with _windows(lerobot_fixture_root, datasets_cache_dir, seed=2) as pool:
        whole = [b["index"].tolist() for b in StatefulDataLoader(pool, batch_size=4, num_workers=2)]
        loader = StatefulDataLoader(pool, batch_size=4, num_workers=2)
        head = []
        for batch in loader:
            head.append(batch["index"].tolist())
            if len(head) == 7:
                state = loader.state_dict()
                break
    worker_states = [s["dataset_state"] for s in state["_snapshot"]["_worker_snapshots"].values()]
    assert {s["kind"] for s in worker_states} == {"worker"}
    assert all(s["unit"] == "window" for s in worker_states)
    assert head == whole[:7]
    with _windows(lerobot_fixture_root, datasets_cache_dir, seed=2) as resumed:
        loader = StatefulDataLoader(resumed, batch_size=4, num_workers=2)
        loader.load_state_dict(state)
        tail = [b["index"].tolist() for b in loader]
    assert tail == whole[7:]


def _decoded_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs in the DataLoader worker: attach its decoded peak and its share of the budget."""
    batch = torch.utils.data.default_collate(samples)
    info = get_worker_info()
    dataset: EpisodePoolDataset = info.dataset
    metrics = dataset.metrics()
    batch["peak"] = metrics["decoded_peak_bytes"]
    batch["share"] = split_budget(
        dataset.decoded_budget, WorkerSlot(worker=info.id, num_workers=info.num_workers)
    )
    return batch


def test_a_tight_decoded_budget_is_never_exceeded(
    lerobot_fixture_root: Path, lerobot_reference: LeRobotReference, datasets_cache_dir: Path
) -> None:
    deltas = lerobot_reference.delta_timestamps  # cam_high reads 3 frames before each sample
    probe = _windows(lerobot_fixture_root, datasets_cache_dir, delta_timestamps=deltas)
    window_bytes = probe.window_bytes
    probe.close()
    assert window_bytes == WINDOW * FRAME_BYTES + 3 * FRAME_BYTES // 3
    # two workers, each with room for exactly two windows (one resident, one decoding ahead)
    budget = 2 * (2 * window_bytes + window_bytes // 2)
    dataset = _windows(
        lerobot_fixture_root,
        datasets_cache_dir,
        delta_timestamps=deltas,
        decoded_budget=budget,
        decode_threads=2,
        max_pending_samples=16,
    )
    peaks, used = [], []
    for _ in dataset:  # in process: the whole budget (five windows)
        metrics = dataset.metrics()
        peaks.append(metrics["decoded_peak_bytes"])
        used.append(metrics["decoded_bytes"])
    assert len(peaks) == TOTAL_FRAMES
    assert 0 < max(used) <= max(peaks) <= budget
    assert metrics["resident_windows"] == 4 and metrics["windows_decoded"] >= 16
    seen = []
    for batch in DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=_decoded_collate):
        assert 0 < batch["peak"] <= batch["share"] <= budget // 2
        seen.extend(batch["index"].tolist())
    assert sorted(seen) == list(range(TOTAL_FRAMES))
    dataset.close()
    with pytest.raises(BudgetError, match="decoded_budget"):
        _windows(
            lerobot_fixture_root,
            datasets_cache_dir,
            delta_timestamps=deltas,
            decoded_budget=2 * window_bytes - 1,
        )


def test_each_frame_is_decoded_once_and_batches_mix_episodes(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    with _windows(lerobot_fixture_root, datasets_cache_dir, window_frames=8) as dataset:
        byte_peaks = [dataset.metrics()["cache"].peak_bytes for _ in dataset]
        assert len(byte_peaks) == TOTAL_FRAMES
        assert 0 < max(byte_peaks) <= dataset.options.byte_budget  # the compressed bytes' budget
        metrics = dataset.metrics()
    assert metrics["unit"] == "window" and metrics["samples"] == TOTAL_FRAMES
    # no delta_timestamps: every decoded frame is drawn exactly once
    assert metrics["decoded_frames"] == TOTAL_FRAMES
    assert metrics["decoded_frames_per_sample"] == 1.0
    assert metrics["unique_episodes"] == 5 and metrics["episodes_entered"] == 5
    assert metrics["unique_episodes_per_32_mean"] > 1  # resident windows of several episodes
    assert metrics["decoded_bytes"] == 0  # every window released at the end


def test_windows_and_episodes_do_not_share_resume_states(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    with (
        _windows(lerobot_fixture_root, datasets_cache_dir) as windows,
        EpisodePoolDataset(
            lerobot_fixture_root, pool_size=3, cache_dir=datasets_cache_dir
        ) as episodes,
    ):
        window_state = windows.state_dict(0, num_workers=1)
        episode_state = episodes.state_dict(0, num_workers=1)
        assert "unit" not in episode_state  # the episode pool's states are as before
        with pytest.raises(SamplingError, match="unit"):
            episodes.load_state_dict(window_state)
        with pytest.raises(SamplingError, match="unit"):
            windows.load_state_dict(episode_state)
    for field, kwargs in {
        "window_frames": {"window_frames": 8},
        "decoded_budget": {"decoded_budget": "16MiB"},
        "window_bytes": {"delta_timestamps": {"observation.images.cam_high": [-0.1, 0.0]}},
    }.items():
        with (
            _windows(lerobot_fixture_root, datasets_cache_dir, **kwargs) as other,
            pytest.raises(SamplingError, match=field),
        ):
            other.load_state_dict(window_state)


def test_bad_window_arguments_are_refused_by_name(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    for kwargs, name in (
        ({"unit": "windows"}, "unit"),
        ({"unit": "window", "window_frames": 0}, "window_frames"),
        ({"unit": "window", "window_frames": 1.5}, "window_frames"),
        ({"unit": "window", "decoded_budget": "lots"}, "decoded_budget"),
    ):
        with (
            pytest.raises(ConfigError, match=name)
            if name != "decoded_budget"
            else pytest.raises(BudgetError, match=name)
        ):
            EpisodePoolDataset(lerobot_fixture_root, cache_dir=datasets_cache_dir, **kwargs)


def test_closing_a_window_iteration_midway_stops_every_thread(
    lerobot_fixture_root: Path, datasets_cache_dir: Path
) -> None:
    def ours() -> set[str]:
        return {t.name for t in threading.enumerate() if t.name.startswith("episodestream")}

    before = ours()
    dataset = _windows(lerobot_fixture_root, datasets_cache_dir, decode_threads=2)
    iterator = iter(dataset)
    for _ in range(20):
        next(iterator)
    assert any("pool" in name for name in ours() - before)
    iterator.close()
    dataset.close()
    assert ours() - before == set()


def _threads_collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs in the DataLoader worker: the samples as they came, plus the worker's threads."""
    return {"samples": samples, "threads": sorted(t.name for t in threading.enumerate())}


def test_inline_decoding_in_workers_keeps_lerobot_samples(
    lerobot_fixture_root: Path, lerobot_reference: LeRobotReference, datasets_cache_dir: Path
) -> None:
    """decode_threads=0 decodes each window in the worker's own thread (one core per worker):
    every frame once, samples bit-identical to LeRobot's, and no decode thread in a worker."""
    with _windows(
        lerobot_fixture_root,
        datasets_cache_dir,
        delta_timestamps=lerobot_reference.delta_timestamps,
        decode_threads=0,
    ) as dataset:
        loader = DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=_threads_collate)
        samples: dict[int, dict[str, Any]] = {}
        indices: list[int] = []
        for batch in loader:
            assert not [n for n in batch["threads"] if n.startswith("episodestream-pool")]
            indices += [int(s["index"]) for s in batch["samples"]]
            samples.update({int(s["index"]): s for s in batch["samples"]})
    assert sorted(indices) == list(range(TOTAL_FRAMES))
    compared = _assert_reference(samples, lerobot_reference.samples_delta, uint8=False)
    assert compared == len(lerobot_reference.samples_delta["request_index"])

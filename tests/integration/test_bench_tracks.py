"""``bench``'s FLOOR track, DataLoader-worker scaling, episode subsets, range backends, rounds'
medians, HTTP failure figures and byte progress: each option runs through the CLI on a real
dataset and its table and JSON fields agree with what can be counted independently."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from episodestream.cli import main
from episodestream.errors import ConfigError, DecodeError
from episodestream.lerobot import load_dataset_meta
from episodestream.storage import HttpRangeReader, LocalRangeReader, RetryPolicy
from episodestream_tools.bench import BenchReport, format_report
from episodestream_tools.bench._bench import _cpu_ratios, _median
from episodestream_tools.bench._measure import Progress, process_figures, rotated_rounds
from episodestream_tools.bench._scaling import default_worker_counts, scaling_rows
from episodestream_tools.bench._tracks import _device_vs_cpu, failure_figures, http_figures
from tests.plugins.storage import Fault, FaultServer

pytestmark = pytest.mark.timeout(300)

SAMPLES = 48
WORKERS = (1, 2)
ROUNDS = 3
EPISODES = (0, 2, 4)


def _bench(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[BenchReport, str]:
    assert main(["bench", *argv, "--no-progress"]) == 0
    out = capsys.readouterr().out
    path = Path(out.rsplit("JSON report: ", 1)[1].strip())
    return BenchReport.read_json(path), out


def _bench_stream_epoch(
    root: str, work: Path, name: str, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[BenchReport, str]:
    """STREAM alone over the whole epoch (at most 1000 samples), no keep-up run, two samples
    of the decode measurement; the index cache in ``work/cache``, the report ``work/name.json``."""
    argv = [root, "--tracks", "stream", "--samples", "1000", "--keepup-samples", "0"]
    argv += ["--decode-samples", "2", "--cache-dir", str(work / "cache")]
    return _bench([*argv, "--json", str(work / f"{name}.json"), *extra], capsys)


@pytest.fixture(scope="module")
def lengths(lerobot_fixture_root: Path) -> dict[int, int]:
    with LocalRangeReader(lerobot_fixture_root) as reader:
        meta = load_dataset_meta(reader)
    table = meta.episodes
    return dict(zip(table.episode_index.tolist(), table.length.tolist(), strict=True))


@pytest.fixture(scope="module")
def floor_run(
    lerobot_fixture_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[BenchReport, str]:
    """FLOOR, LOCAL and STREAM in 3 rounds on three episodes, uint8, with 1 and 2 workers."""
    out = tmp_path_factory.mktemp("floor")
    argv = [
        "bench",
        str(lerobot_fixture_root),
        "--tracks",
        "floor,local,lerobot",
        "--episodes",
        ",".join(map(str, EPISODES)),
        "--samples",
        str(SAMPLES),
        "--rounds",
        str(ROUNDS),
        "--image-dtype",
        "uint8",
        "--num-workers",
        ",".join(map(str, WORKERS)),
        "--scaling-samples",
        "40",
        "--batch-size",
        "4",
        "--keepup-samples",
        "0",
        "--decode-samples",
        "4",
        "--cache-dir",
        str(out / "cache"),
        "--no-progress",
        "--json",
        str(out / "r.json"),
    ]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main(argv) == 0
    return BenchReport.read_json(out / "r.json"), printed.getvalue()


def test_floor_decodes_every_frame_of_the_sequence_once(
    floor_run: tuple[BenchReport, str],
) -> None:
    report, text = floor_run
    floor = report.tracks["floor"]
    cameras = len(report.dataset["cameras"])
    assert floor["samples"] == report.sequence["samples"] == SAMPLES
    # the CPU by default: no device comparison, and the header names no device
    assert floor["device"] == report.config["device"] == report.decode["device"] == "cpu"
    assert "device_vs_cpu" not in report.decode and " on cpu" not in text
    assert floor["decoded_frames"] == SAMPLES * cameras
    assert floor["image_dtype"] == "uint8"
    # uint8: one byte per channel value of every decoded frame
    assert (
        floor["decoded_bytes"]
        == SAMPLES * cameras * 3 * report.dataset["width"] * (report.dataset["height"])
    )
    # one decoder per touched file, opened once and kept
    assert floor["decoder_opens"] == floor["files"] > 0
    assert "| FLOOR |" in text and "CPU / FLOOR" in text
    # over rounds: the median of each round's own ratio, the figure the table shows
    floor_rounds = [r["cpu_ms_per_sample"] for r in floor["rounds"]]
    assert len(floor_rounds) == ROUNDS
    for name in ("stream", "local"):
        mine = [r["cpu_ms_per_sample"] for r in report.tracks[name]["rounds"]]
        expected = float(np.median([a / b for a, b in zip(mine, floor_rounds, strict=True)]))
        assert report.ratios[f"{name}_cpu_over_floor"] == pytest.approx(expected)
        row = next(line for line in text.splitlines() if line.startswith(f"| {name.upper()} |"))
        assert row.split("|")[8].strip() == f"{expected:.3f}"


def test_a_local_root_reads_each_episode_camera_once(floor_run: tuple[BenchReport, str]) -> None:
    """No size probes on a local disk: every read of the fetch phase is one episode-camera's
    span, and the report says one per episode-camera (not the reads less a probe per file)."""
    report, _ = floor_run
    fetch = report.fetch
    assert fetch["camera_jobs"] == len(EPISODES) * len(report.dataset["cameras"])
    assert fetch["range_requests_per_episode_camera"] == 1.0
    assert report.targets["range_requests_per_episode_camera"]["met"] is True


def test_rounds_report_the_median_round(floor_run: tuple[BenchReport, str]) -> None:
    report, text = floor_run
    for name in ("stream", "local", "floor"):
        track = report.tracks[name]
        rounds = track["rounds"]
        assert len(rounds) == ROUNDS, name
        for figure in ("samples_per_s", "steady_samples_per_s", "cpu_ms_per_sample"):
            assert track[figure] == pytest.approx(np.median([r[figure] for r in rounds]))
    assert "median" in text


def test_median_is_not_the_best_round() -> None:
    rounds = [
        {"samples_per_s": s, "steady_samples_per_s": s, "cpu_ms_per_sample": 10.0 / s, "tag": s}
        for s in (1.0, 9.0, 4.0)
    ]
    middle = _median(rounds)
    assert middle["tag"] == 4.0 and middle["samples_per_s"] == 4.0
    assert middle["cpu_ms_per_sample"] == pytest.approx(2.5)
    assert [r["samples_per_s"] for r in middle["rounds"]] == [1.0, 9.0, 4.0]


def test_cpu_ratios_pair_the_rounds() -> None:
    """Each ratio is the median of the rounds' own ratios: droid's rounds once gave STREAM over
    FLOOR 1.10, 1.15 and 0.98 while the ratio of the two medians said 0.981."""

    def track(*cpu: float) -> dict[str, object]:
        rounds = [{"cpu_ms_per_sample": c} for c in cpu]
        return {"cpu_ms_per_sample": float(np.median(cpu)), "samples_per_s": 1.0, "rounds": rounds}

    floor = track(3.733, 4.531, 4.544)
    stream = track(4.113, 5.197, 4.447)
    lerobot = track(8.0, 10.0, 9.0)
    ratios = _cpu_ratios({"floor": floor, "stream": stream, "lerobot": lerobot})
    paired = [4.113 / 3.733, 5.197 / 4.531, 4.447 / 4.544]
    assert ratios["stream_cpu_over_floor"] == pytest.approx(float(np.median(paired)))
    assert ratios["stream_cpu_over_floor"] == pytest.approx(1.1018, abs=1e-4)  # not 0.981
    assert ratios["stream_cpu_over_lerobot"] == pytest.approx(
        float(np.median([4.113 / 8.0, 5.197 / 10.0, 4.447 / 9.0]))
    )
    # without rounds in common (a track that ran once): the ratio of the two figures
    once = {"cpu_ms_per_sample": 5.0, "samples_per_s": 1.0}
    assert _cpu_ratios({"floor": floor, "local": once})["local_cpu_over_floor"] == pytest.approx(
        5.0 / 4.531
    )


def test_episode_subset_is_all_that_is_sampled(
    floor_run: tuple[BenchReport, str], lengths: dict[int, int]
) -> None:
    report, _ = floor_run
    assert report.config["episodes"] == list(EPISODES)
    assert report.dataset["shard_episodes"] == len(EPISODES)
    assert report.dataset["shard_frames"] == sum(lengths[e] for e in EPISODES)
    assert report.tracks["stream"]["sequence_matches"] is True  # the pool drew the same subset
    assert report.tracks["stream"]["episodes_fetched"] <= len(EPISODES)
    assert report.randomness["unique_episodes"] <= len(EPISODES)


def test_lerobot_track_says_why_it_did_not_run(floor_run: tuple[BenchReport, str]) -> None:
    report, _ = floor_run
    if importlib.util.find_spec("lerobot") is None:
        assert "lerobot" not in report.tracks
        assert any("LEROBOT skipped" in note for note in report.notes)
    else:  # an interpreter with LeRobot: it ran on the same samples
        assert report.tracks["lerobot"]["sequence_matches"] is True


def test_worker_scaling_table(floor_run: tuple[BenchReport, str]) -> None:
    report, text = floor_run
    scaling = report.scaling
    rows = scaling["rows"]
    assert [r["workers"] for r in rows] == list(WORKERS)
    assert "### DataLoader workers" in text
    section = text.split("### DataLoader workers", 1)[1].split("###", 1)[0]
    table_rows = [
        line for line in section.splitlines() if line.startswith("| ") and "---" not in line
    ]
    assert len(table_rows) == 1 + len(WORKERS)  # header + one row per worker count
    assert "| cores busy |" in table_rows[0]
    assert scaling["rounds"] == ROUNDS and f"median of {ROUNDS} interleaved rounds" in section
    base_rounds = rows[0]["round_samples_per_s"]
    for row in rows:
        n = row["workers"]
        # each count ran in every round; the row is its median round
        assert len(row["round_samples_per_s"]) == ROUNDS
        assert row["samples_per_s"] == sorted(row["round_samples_per_s"])[(ROUNDS - 1) // 2]
        paired = [r / b for r, b in zip(row["round_samples_per_s"], base_rounds, strict=True)]
        assert row["round_speedups"] == pytest.approx(paired)
        assert row["speedup"] == pytest.approx(float(np.median(paired)))
        assert row["worker_processes"] == n  # each worker was found and measured
        assert len(row["worker_rss_bytes"]) == len(row["worker_cpu_s"]) == n
        assert row["samples"] >= 40 and row["timed_samples"] > 0
        assert row["samples_per_s"] > 0 and row["cpu_ms_per_sample"] > 0
        assert all(cpu > 0 for cpu in row["worker_cpu_s"])  # the workers did the decoding
        base_workers = rows[0]["workers"]
        assert row["efficiency"] == pytest.approx(float(np.median(paired)) * base_workers / n)
        assert row["cores_busy"] == pytest.approx(row["cpu_s"] / row["seconds"])
        assert 0 < row["cores_busy"] <= 2 * (scaling["cpus"] + 1)  # /proc's ticks round up
        assert row["total_rss_bytes"] == row["parent_rss_bytes"] + sum(row["worker_rss_bytes"])
        assert 0 < row["worker_uss_mean_bytes"] <= row["worker_rss_mean_bytes"]
    assert rows[0]["efficiency"] == pytest.approx(1.0)
    assert scaling["image_dtype"] == "uint8"


def test_scaling_table_says_when_one_worker_fills_more_than_a_core(
    floor_run: tuple[BenchReport, str],
) -> None:
    report, _ = floor_run
    data = copy.deepcopy(report.to_dict())
    base = data["scaling"]["rows"][0]
    cpus = data["scaling"]["cpus"]
    assert data["scaling"]["decode_threads_per_worker"] > 0
    base["cores_busy"] = 1.6  # decode threads beside the worker's own
    text = format_report(BenchReport.from_dict(data))
    assert "already kept 1.60 cores busy" in text
    assert f"about {cpus / 1.6:.2f}x its samples/s" in text and "--decode-threads 0" in text
    data["scaling"]["decode_threads_per_worker"] = 0  # inline already: no advice to go inline
    text = format_report(BenchReport.from_dict(data))
    assert "already kept 1.60 cores busy" in text and "--decode-threads 0" not in text
    base["cores_busy"] = 1.05  # one worker, one core: nothing to explain
    assert "already kept" not in format_report(BenchReport.from_dict(data))
    # a report written before rows had cores busy and rounds still renders
    for row in data["scaling"]["rows"]:
        del row["cores_busy"]
    del data["scaling"]["rounds"]
    text = format_report(BenchReport.from_dict(data))
    assert "already kept" not in text and "interleaved rounds' ratios" not in text
    assert "| cores busy |" in text


def test_scaling_rounds_rotate_and_pair_each_round() -> None:
    """Counts run in every round, the order rotated a step per round; each row is its median
    round (the lower middle of an even count) and speed-up the median of the paired ratios;
    a round whose baseline timed nothing has no ratio."""
    assert rotated_rounds([1, 2], 4) == [[1, 2], [2, 1], [1, 2], [2, 1]]
    assert rotated_rounds([1, 2, 4], 4) == [[1, 2, 4], [2, 4, 1], [4, 1, 2], [1, 2, 4]]
    rates = {1: [10.0, 0.0, 12.0, 11.0], 2: [19.0, 30.0, 18.0, 23.0]}
    runs = {
        n: [{"workers": n, "samples_per_s": rate, "round": i} for i, rate in enumerate(rounds)]
        for n, rounds in rates.items()
    }
    one, two = scaling_rows(runs)
    assert one["samples_per_s"] == 10.0 and two["samples_per_s"] == 19.0  # lower middles
    assert one["round"] == 0 and two["round"] == 0  # a round that happened, not a blend
    assert two["round_samples_per_s"] == rates[2]
    assert two["round_speedups"] == [1.9, None, 1.5, pytest.approx(23 / 11)]
    assert two["speedup"] == pytest.approx(1.9)  # median of the three known ratios
    assert two["efficiency"] == pytest.approx(0.95)
    assert one["round_speedups"] == [1.0, None, 1.0, 1.0] and one["efficiency"] == 1.0


def test_default_worker_counts_reach_the_cores() -> None:
    assert default_worker_counts(1) == (1,)
    assert default_worker_counts(6) == (1, 2, 4, 6)
    assert default_worker_counts(8) == (1, 2, 4, 8)


def test_process_figures_read_this_process() -> None:
    before = process_figures(os.getpid())
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    after = process_figures(os.getpid())
    assert after.cpu_s > before.cpu_s
    assert after.rss_bytes > 0 and 0 < (after.uss_bytes or 0) <= after.rss_bytes


def test_num_episodes_takes_the_first(
    lerobot_fixture_root: Path,
    lengths: dict[int, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report, _ = _bench_stream_epoch(
        str(lerobot_fixture_root), tmp_path, "r", ["--num-episodes", "2"], capsys
    )
    first = sorted(lengths)[:2]
    # the whole epoch of the subset: exactly the first two episodes' frames
    assert report.sequence["samples"] == sum(lengths[e] for e in first)
    assert report.tracks["stream"]["samples"] == report.sequence["samples"]
    assert report.tracks["stream"]["episodes_fetched"] == 2


def test_unknown_episode_and_backend_mismatch_are_clear_errors(
    lerobot_fixture_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = [str(lerobot_fixture_root), "--cache-dir", str(tmp_path), "--no-progress"]
    assert main(["bench", *base, "--episodes", "1,99"]) == 2
    assert "episodes [99] are not in the dataset" in capsys.readouterr().err
    assert main(["bench", *base, "--range-backend", "fsspec"]) == 2
    assert "range_backend='fsspec'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", *base, "--episodes", "1", "--num-episodes", "2"])
    with pytest.raises(SystemExit):
        main(["bench", *base, "--num-workers", "0"])


def test_fsspec_range_backend_streams_the_same_bytes(
    lerobot_sim5_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = {}
    for backend in ("native", "fsspec"):
        report, text = _bench_stream_epoch(
            lerobot_sim5_url, tmp_path, backend, ["--range-backend", backend], capsys
        )
        assert f"{backend} range reader" in text
        assert "chunk wait" not in text  # the column nothing filled is gone
        runs[backend] = report
    native, fsspec = runs["native"], runs["fsspec"]
    assert fsspec.config["range_backend"] == "fsspec"
    assert fsspec.tracks["stream"]["sequence_matches"] is True
    assert fsspec.sequence["digest"] == native.sequence["digest"]
    assert fsspec.tracks["stream"]["bytes_fetched"] == native.tracks["stream"]["bytes_fetched"]
    assert fsspec.fetch["bytes"] == native.fetch["bytes"]
    # our reader keeps a failure log: the figures are there, and nothing failed
    http = native.http["stream"]
    assert http["failed_attempts"] == 0 and http["retry_sleep_s"] == 0.0
    assert http["failed_attempt_s"] == 0.0
    assert http["failures_by_cause"] == {}


def test_failure_figures_from_a_real_readers_log(fault_server: FaultServer, tmp_path: Path) -> None:
    data = bytes(range(256)) * 400
    fault_server.put("v.mp4", data)
    fault_server.inject(
        "v.mp4",
        Fault("status", status=503, retry_after="0"),
        Fault("status", status=503, retry_after="0"),
        Fault("reset", after_bytes=10),
    )
    log = tmp_path / "failures.jsonl"
    retry = RetryPolicy(max_attempts=5, backoff_initial_seconds=0.02, jitter=0.0)
    with HttpRangeReader(fault_server.url, retry=retry, failure_log=log, seed=0) as reader:
        assert reader.read("v.mp4", 0, 5000) == data[:5000]
        metrics = reader.metrics()
    records = [json.loads(line) for line in log.read_text().splitlines()]
    figures = failure_figures(log)
    assert figures["failed_attempts"] == len(records) >= 3
    assert figures["failures_by_cause"]["HTTP 503"] == 2
    assert sum(figures["failures_by_cause"].values()) == len(records)
    assert figures["failed_attempts_retried"] == len(records)  # every one was retried
    # the reader's counters: every backoff the log announced was slept, and failing took time
    http = http_figures(metrics)
    assert http["retry_sleep_s"] == pytest.approx(sum(r["delay_seconds"] for r in records))
    assert http["retry_sleep_s"] >= 0.02 * len(records)
    assert http["failed_attempt_s"] > 0
    assert failure_figures(None) == failure_figures(tmp_path / "absent.jsonl")


def test_progress_reports_bytes_done(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="episodestream_tools.bench._measure")
    with Progress(4, "fetch", unit="episodes") as bar:
        for _ in range(4):
            bar.update(1, 256 * 2**20)
    line = caplog.records[-1].getMessage()
    assert "fetch: 4/4 episodes" in line
    assert "1.000 GiB done" in line and "MiB/s" in line


def test_num_workers_alone_means_up_to_the_cores(tmp_path: Path) -> None:
    from episodestream.cli import build_parser
    from episodestream_tools.commands._bench import config_from_args

    parser = build_parser()
    bare = parser.parse_args(["bench", str(tmp_path), "--num-workers"])
    assert config_from_args(bare, bare.root).num_workers == default_worker_counts()
    assert default_worker_counts()[-1] == len(os.sched_getaffinity(0))
    listed = parser.parse_args(["bench", str(tmp_path), "--num-workers", "4,1,4"])
    assert config_from_args(listed, listed.root).num_workers == (4, 1)  # as given, once each
    absent = parser.parse_args(["bench", str(tmp_path)])
    assert config_from_args(absent, absent.root).num_workers == ()


def test_a_device_is_checked_before_anything_runs(
    lerobot_fixture_root: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from episodestream.cli import build_parser
    from episodestream_tools.commands._bench import config_from_args

    parser = build_parser()
    args = parser.parse_args(["bench", str(tmp_path), "--device", "cpu"])
    assert config_from_args(args, args.root).device == "cpu"
    # as on a machine without a GPU, whatever this one has
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = parser.parse_args(["bench", str(tmp_path), "--device", "cuda:0"])
    with pytest.raises(ConfigError, match=r"device='cuda:0'.*sees no CUDA device"):
        config_from_args(args, args.root)
    base = [str(lerobot_fixture_root), "--cache-dir", str(tmp_path), "--no-progress"]
    for extra, message in (
        (["--device", "cuda"], "sees no CUDA device"),
        (["--device", "gpu"], "device must be 'cpu' or 'cuda[:N]'"),
        (["--device", "cuda", "--decoder", "pyav"], "PyAV backend decodes on the CPU only"),
        (["--device", "cuda", "--num-workers", "2"], "forked"),
        (["--device", "cuda", "--unit", "window"], "--unit window decodes on the CPU only"),
    ):
        assert main(["bench", *base, *extra]) == 2, extra
        assert message in capsys.readouterr().err, extra
    assert not list(tmp_path.iterdir())  # refused before a sidecar was built


def test_a_gpu_device_is_kept_as_written_or_made_each_ranks_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from episodestream_tools.bench import BenchConfig

    # as on a machine with two GPUs (nothing here touches one: only the names are checked)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert BenchConfig(root=str(tmp_path), device="cuda").device == "cuda"
    assert BenchConfig(root=str(tmp_path), device="cuda:1").device == "cuda:1"
    with pytest.raises(ConfigError, match=r"device='cuda:2': only 2 CUDA device\(s\) exist"):
        BenchConfig(root=str(tmp_path), device="cuda:2")
    monkeypatch.setenv("LOCAL_RANK", "1")  # torchrun: a bare "cuda" is this rank's GPU
    assert BenchConfig(root=str(tmp_path), device="cuda").device == "cuda:1"
    assert BenchConfig(root=str(tmp_path), device="cuda:0").device == "cuda:0"
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(ConfigError, match=r"device='cuda:2': only 2"):
        BenchConfig(root=str(tmp_path), device="cuda")


def test_device_frames_are_compared_with_the_cpus_level_by_level() -> None:
    """The decode table's comparison: every pick's frames on both devices, per camera and
    episode; the mean and largest absolute difference in levels over all of them."""
    from types import SimpleNamespace

    episodes = np.array([4, 7, 4, 7, 7])
    ds = SimpleNamespace(sequence=SimpleNamespace(episodes=episodes), cameras=("top", "side"))
    calls = []

    def frames_on(episode: int, camera: str, rows: np.ndarray, device: str) -> torch.Tensor:
        calls.append((episode, camera, rows.tolist(), device))
        frames = torch.full((len(rows), 3, 2, 2), 100, dtype=torch.uint8)
        if device == "cuda" and camera == "side":
            frames[:, 0, 0, 0] = 103 if episode == 7 else 99  # 3 and 1 levels off, one value each
        return frames

    picks = np.array([0, 1, 2, 3, 4])
    agreement = _device_vs_cpu(ds, picks, "cuda", frames_on)
    assert agreement["frames"] == 2 * 5  # two cameras, five samples
    assert agreement["max_abs_levels"] == 3
    # side: episode 4 has 2 frames 1 level off, episode 7 has 3 frames 3 levels off
    assert agreement["mean_abs_levels"] == pytest.approx((2 * 1 + 3 * 3) / (10 * 12))
    assert ("top", "cuda") in {(c, d) for _, c, _, d in calls}
    assert (7, "side", [1, 3, 4], "cpu") in calls

    def wrong_size(episode: int, camera: str, rows: np.ndarray, device: str) -> torch.Tensor:
        size = 4 if device == "cuda" else 2
        return torch.zeros((len(rows), 3, size, size), dtype=torch.uint8)

    with pytest.raises(DecodeError, match=r"episode 4 / top: cuda decoded frames of shape"):
        _device_vs_cpu(ds, picks, "cuda", wrong_size)


def test_decode_table_compares_a_devices_frames_with_fresh_cpu_decoders(
    lerobot_fixture_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The device path of the decode table, run here with the CPU standing in for the GPU:
    every picked sample's frames are decoded again on both "devices" from the resident clips
    (at the clips' own times), so the comparison finds them equal, frame for frame."""
    from episodestream.decode import open_decoder
    from episodestream_tools.bench import BenchConfig, _tracks
    from episodestream_tools.bench._sequence import open_bench_dataset

    devices: list[str] = []

    def open_on_the_cpu(*args, device: str = "cpu", **kwargs):
        devices.append(str(device))
        return open_decoder(*args, device="cpu", **kwargs)

    monkeypatch.setattr(_tracks, "open_decoder", open_on_the_cpu)
    monkeypatch.setattr(_tracks, "synchronize", lambda device: devices.append(f"sync {device}"))
    config = BenchConfig(
        root=str(lerobot_fixture_root),
        decode_samples=6,
        cache_dir=str(tmp_path),
        progress=False,
    )
    ds = open_bench_dataset(config)
    _, fetched = _tracks.run_fetch(config, ds, None)
    object.__setattr__(config, "device", "cuda")  # past the check: no GPU here
    try:
        decode = _tracks.run_decode(config, ds, fetched)
    finally:
        fetched.close()
    cameras = len(ds.cameras)
    assert decode["device"] == "cuda"
    assert decode["device_vs_cpu"] == {
        "frames": 6 * cameras,
        "mean_abs_levels": 0.0,
        "max_abs_levels": 0,
    }
    assert "sync cuda" in devices
    # the timed decoders on the device, compared with one fresh CPU decoder per clip picked
    picked_clips = len(np.unique(ds.sequence.episodes[: decode["samples"]])) * cameras
    assert devices.count("cuda") == decode["opens"]
    assert devices.count("cpu") == picked_clips > 0

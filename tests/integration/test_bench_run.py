"""``run_bench`` end to end on a tiny dataset behind nginx and the WAN emulator: every table and
JSON field is there, and the figures agree with what can be counted independently (bytes from
the manifest, requests from nginx's log, samples from the sequence)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from episodestream.lerobot import load_dataset_meta
from episodestream.manifest import build_manifest
from episodestream.storage import LocalRangeReader
from episodestream_tools.bench import BenchConfig, BenchReport, format_report, run_bench, write_plot
from episodestream_tools.serving import NginxServer, read_access_log

SAMPLES = 1000  # more than the dataset holds: the whole epoch
KEEPUP_SAMPLES = 40
NAIVE_SAMPLES = 10
BATCH = 8
TORCH_THREADS = torch.get_num_threads()


@pytest.fixture(scope="module")
def served_av1(synthetic_av1: Path, http_publish, wan_emulator_factory) -> str:
    emulator = wan_emulator_factory(rtt_ms=10, bandwidth_mibps=40)
    return emulator.rebase_url(http_publish(synthetic_av1, "bench-av1"))


@pytest.fixture(scope="module")
def bench_run(
    served_av1: str, http_server: NginxServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[BenchReport, int]:
    """One full run (every track) and the access-log offset it started from."""
    mark = http_server.log_mark()
    config = BenchConfig(
        root=served_av1,
        samples=SAMPLES,
        keepup_samples=KEEPUP_SAMPLES,
        naive_samples=NAIVE_SAMPLES,
        decode_samples=16,
        target_samples_s=40.0,
        pool_size=3,
        prefetch_episodes=2,
        batch_size=BATCH,
        access_log=str(http_server.access_log_path),
        cache_dir=str(tmp_path_factory.mktemp("bench-cache")),
        progress=False,
    )
    return run_bench(config), mark


@pytest.fixture(scope="module")
def manifest_bytes(synthetic_av1: Path) -> int:
    """Span bytes of every episode-camera, from a manifest built here from the local files."""
    with LocalRangeReader(synthetic_av1) as reader:
        meta = load_dataset_meta(reader)
        manifest = build_manifest(reader, meta, progress=False)
    return int(manifest.episode_bytes().sum())


def test_report_has_every_table(bench_run: tuple[BenchReport, int]) -> None:
    report, _ = bench_run
    text = format_report(report)
    for heading in (
        "### Tracks",
        "### Ratios",
        "### Targets",
        "### Fetch",
        "### HTTP",
        "### Decode",
        "### Randomness",
        "### Keep-up",
        "### Memory",
    ):
        assert heading in text
    for track in ("| STREAM |", "| LOCAL |", "| FLOOR |", "| NAIVE |", "| DOWNLOAD |"):
        assert track in text
    assert "nginx access log" in text  # server-side figures were read


def test_json_round_trip_has_every_section(
    bench_run: tuple[BenchReport, int], tmp_path: Path
) -> None:
    report, _ = bench_run
    path = report.write_json(tmp_path / "r.json")
    data = json.loads(path.read_text())
    for section in (
        "host",
        "config",
        "dataset",
        "sequence",
        "tracks",
        "fetch",
        "http",
        "decode",
        "randomness",
        "keepup",
        "memory",
        "ratios",
        "targets",
        "timeline",
    ):
        assert data[section], section
    # every default track that runs in this interpreter (LEROBOT needs lerobot and a complete
    # local copy; this root is served over HTTP)
    assert set(data["tracks"]) == {"stream", "local", "floor", "naive", "download"}
    assert data["host"]["shard_index"] == 0 and data["host"]["shard_count"] == 1
    # torch ran single-threaded inside the benchmark, as in DataLoader workers, and the
    # process's own setting came back afterwards
    assert data["host"]["torch_threads"] == 1
    assert torch.get_num_threads() == TORCH_THREADS
    assert BenchReport.read_json(path) == report
    for name in ("connect_ms", "headers_ms", "first_byte_ms", "body_ms", "retries", "failures"):
        assert name in data["http"]["fetch"]
    # nginx announces no quota: no 429s counted, no time waited for a window
    assert data["http"]["fetch"]["rate_limited"] == 0
    assert data["http"]["fetch"]["quota_wait_s"] == 0.0
    stages = data["fetch"]["ms_per_camera_job"]
    assert set(stages) == {"manifest_lookup", "range_fetch", "clip_write", "store"}
    assert stages["range_fetch"] > 0


def test_bytes_fetched_equal_the_manifest(
    bench_run: tuple[BenchReport, int], manifest_bytes: int
) -> None:
    report, _ = bench_run
    stream, fetch = report.tracks["stream"], report.fetch
    # the whole epoch touches every episode: both phases fetch exactly the span bytes
    assert stream["episodes_fetched"] == report.dataset["episodes"] == 6
    assert stream["bytes_fetched"] == manifest_bytes
    assert stream["manifest_bytes_fetched_episodes"] == manifest_bytes
    assert fetch["bytes"] == manifest_bytes
    assert report.dataset["episode_span_bytes"] == manifest_bytes
    assert report.dataset["index_episodes"] is None and fetch["index_episodes"] is None
    # the episodes' own frames are at most what was fetched, and most of it
    assert 1.0 <= report.ratios["bytes_fetched_over_video_bytes"] <= 1.2


def test_one_range_request_per_episode_camera(
    bench_run: tuple[BenchReport, int], http_server: NginxServer
) -> None:
    report, mark = bench_run
    jobs = 6 * 2  # episodes x cameras
    assert report.http["fetch_server"]["requests_by_kind"]["video_range"] == jobs
    assert report.http["stream_server"]["requests_by_kind"]["video_range"] == jobs
    for phase in ("stream_server", "fetch_server"):
        server = report.http[phase]
        assert server["episode_cameras_requested"] == jobs  # every request starts at a span
        assert server["video_range_requests_unmatched"] == 0
        assert server["episodes_requested"] == list(range(6))
    assert report.ratios["range_requests_per_episode_camera"] == 1.0
    assert report.targets["range_requests_per_episode_camera"]["met"] is True
    # nginx saw exactly what the report counted, all answered 206
    records, _ = read_access_log(http_server.access_log_path, mark)
    mine = [r for r in records if r.uri.startswith("/bench-av1/videos/")]
    ranged = [r for r in mine if r.range_header and not r.range_header.endswith("=0-0")]
    assert len(ranged) >= 2 * jobs  # STREAM's and FETCH's, then DOWNLOAD's and NAIVE's
    assert {r.status for r in ranged} == {206}
    assert report.http["fetch_server"]["status_counts"] == {"206": jobs}
    assert report.http["fetch_server"]["failed_requests"] == 0


def test_sample_counts_add_up(bench_run: tuple[BenchReport, int]) -> None:
    report, _ = bench_run
    frames = report.dataset["frames"]
    assert report.sequence["samples"] == frames  # capped at the epoch
    assert report.tracks["stream"]["samples"] == frames
    assert report.tracks["stream"]["sequence_matches"] is True
    assert report.tracks["local"]["samples"] == frames
    assert report.tracks["download"]["samples"] == frames
    assert report.tracks["naive"]["samples"] == NAIVE_SAMPLES
    r = report.randomness
    assert r["unique_episodes"] == 6
    assert r["samples_per_episode_mean"] * r["unique_episodes"] == pytest.approx(frames)
    assert 1 <= r["unique_episodes_per_batch_min"] <= r["unique_episodes_per_batch_mean"] <= BATCH
    k = report.keepup
    assert k["samples"] == KEEPUP_SAMPLES
    assert k["batches"] == math.ceil(KEEPUP_SAMPLES / BATCH)
    assert k["target_samples_s"] == 40.0 and k["target_from"] == "given"
    assert isinstance(k["kept_up"], bool)
    # every point of the time series is ordered and ends with every sample
    timeline = report.timeline
    assert [p["t_s"] for p in timeline] == sorted(p["t_s"] for p in timeline)
    assert timeline[-1]["samples"] == frames


def test_ratios_and_rates_are_positive(bench_run: tuple[BenchReport, int]) -> None:
    report, _ = bench_run
    memory = report.memory["stream"]
    # RSS growth is a difference, not a rate: STREAM may run wholly in pages the earlier tracks
    # left to the allocator, so its peak can equal its start (CI saw exactly 0.0). It must be
    # the figure the memory table reports, and never negative.
    growth = report.ratios["peak_rss_delta_over_budget"]
    grown = memory["rss_peak_bytes"] - memory["rss_start_bytes"]
    assert growth == grown / report.memory["byte_budget"]
    assert growth >= 0
    for name, value in report.ratios.items():
        if name == "peak_rss_delta_over_budget":
            continue
        assert value is not None and np.isfinite(value) and value > 0, name
    for name, track in report.tracks.items():
        assert track["samples_per_s"] > 0, name
        assert track["time_to_first_sample_s"] > 0, name
    assert report.decode["open_ms_mean"] > 0
    assert report.decode["open_cpu_ms_median"] > 0
    assert report.tracks["local"]["open_cpu_ms_median"] > 0
    assert report.decode["random_decode_samples_per_s"] > 0
    assert report.fetch["mib_per_s"] > 0 and report.fetch["episodes_per_s"] > 0
    assert (
        report.fetch["estimated_s_whole_dataset"] >= report.fetch["estimated_s_benchmark_episodes"]
    )
    assert memory["rss_peak_bytes"] >= max(memory["rss_start_bytes"], memory["rss_end_bytes"])
    assert 0 < report.memory["stream_peak_cache_bytes"] <= report.memory["byte_budget"]


def test_download_fetches_the_touched_files_whole(
    bench_run: tuple[BenchReport, int], synthetic_av1: Path
) -> None:
    report, _ = bench_run
    files = sorted(synthetic_av1.glob("videos/**/*.mp4")) + sorted(
        synthetic_av1.glob("data/**/*.parquet")
    )
    download = report.tracks["download"]
    assert download["files"] == len(files)
    assert download["bytes"] == sum(f.stat().st_size for f in files)
    assert download["seconds"] == pytest.approx(download["download_s"] + download["decode_s"])


def test_plot_is_a_png(bench_run: tuple[BenchReport, int], tmp_path: Path) -> None:
    report, _ = bench_run
    path = write_plot(report, tmp_path / "plot.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000


def test_http_figures_count_quota_429s_and_waits() -> None:
    from episodestream_tools.bench._tracks import http_figures

    figures = http_figures(
        {"requests": 40, "rate_limited": 3, "quota_wait_seconds": 31.5, "status_429": 3}
    )
    assert figures["rate_limited"] == 3 and figures["quota_wait_s"] == 31.5
    assert figures["status_counts"] == {"429": 3}

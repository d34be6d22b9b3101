"""Distributed bench: two ranks through the CLI, their JSON reports aggregated by
``bench-summary``; shard detection and configuration errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from episodestream.cli import main
from episodestream.errors import EpisodeStreamError
from episodestream_tools.bench import BenchConfig, detect_shard, summarize_ranks

MIB = 2**20


@pytest.fixture(scope="module")
def rank_reports(
    synthetic_av1: Path, http_publish, wan_emulator_factory, tmp_path_factory
) -> list[Path]:
    url = wan_emulator_factory(rtt_ms=10, bandwidth_mibps=40).rebase_url(
        http_publish(synthetic_av1, "bench-ranks")
    )
    out = tmp_path_factory.mktemp("ranks")
    paths = []
    for rank in (0, 1):
        path = out / f"rank{rank}.json"
        status = main(
            [
                "bench",
                url,
                "--shard-index",
                str(rank),
                "--shard-count",
                "2",
                "--tracks",
                "stream",
                "--samples",
                "1000",
                "--keepup-samples",
                "16",
                "--target-samples-s",
                "100",
                "--batch-size",
                "4",
                "--pool-size",
                "2",
                "--decode-samples",
                "4",
                "--cache-dir",
                str(out / "cache"),
                "--no-progress",
                "--json",
                str(out / "rank{rank}.json"),  # the shard index fills in {rank}
            ]
        )
        assert status == 0
        assert path.is_file()
        paths.append(path)
    return paths


def test_ranks_split_the_dataset(rank_reports: list[Path]) -> None:
    reports = [json.loads(p.read_text()) for p in rank_reports]
    assert [r["host"]["shard_index"] for r in reports] == [0, 1]
    assert all(r["host"]["shard_count"] == 2 for r in reports)
    frames = reports[0]["dataset"]["frames"]
    shard_frames = [r["dataset"]["shard_frames"] for r in reports]
    assert sum(shard_frames) == frames
    # each rank streams its whole shard (the sample count is capped at it)
    assert [r["tracks"]["stream"]["samples"] for r in reports] == shard_frames
    assert sum(r["dataset"]["shard_episodes"] for r in reports) == 6
    assert all(r["tracks"]["stream"]["sequence_matches"] for r in reports)
    assert set(reports[0]["tracks"]) == {"stream"}  # only the asked tracks ran


def test_summary_aggregates_the_ranks(
    rank_reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    reports = [json.loads(p.read_text()) for p in rank_reports]
    out = tmp_path / "summary.json"
    status = main(["bench-summary", *map(str, rank_reports), "--json", str(out)])
    assert status == 0
    printed = capsys.readouterr().out
    assert "aggregate MiB/s" in printed and "| rank |" in printed
    summary = json.loads(out.read_text())
    total = sum(r["fetch"]["bytes"] for r in reports)
    slowest = max(r["fetch"]["seconds"] for r in reports)
    assert summary["ranks"] == 2 and summary["missing_shards"] == []
    assert summary["total_bytes"] == total
    assert summary["total_gib"] == pytest.approx(total / 2**30)
    assert summary["aggregate_mib_per_s"] == pytest.approx(total / MIB / slowest)
    assert summary["summed_mib_per_s"] == pytest.approx(
        sum(r["fetch"]["mib_per_s"] for r in reports)
    )
    assert summary["summed_samples_per_s"] == pytest.approx(
        sum(r["tracks"]["stream"]["samples_per_s"] for r in reports)
    )
    assert summary["all_kept_up"] == all(r["keepup"]["kept_up"] for r in reports)
    assert [row["shard_index"] for row in summary["rows"]] == [0, 1]
    # each rank's decoding device, from its report (a GPU run shows which GPU each rank used)
    assert [row["device"] for row in summary["rows"]] == [r["config"]["device"] for r in reports]
    assert "| device |" in printed


def test_summary_aggregates_decode_keepup_cpu_and_memory(
    rank_reports: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    reports = [json.loads(p.read_text()) for p in rank_reports]
    summary = summarize_ranks(rank_reports)
    assert summary.summed_decode_samples_per_s == pytest.approx(
        sum(r["decode"]["random_decode_samples_per_s"] for r in reports)
    )
    assert summary.keepup_ranks == 2
    assert summary.summed_keepup_actual_samples_s == pytest.approx(
        sum(r["keepup"]["actual_samples_s"] for r in reports)
    )
    assert summary.summed_keepup_target_samples_s == pytest.approx(2 * 100.0)
    streams = [r["tracks"]["stream"] for r in reports]
    assert summary.cpu_ms_per_sample == pytest.approx(
        1000.0 * sum(s["cpu_s"] for s in streams) / sum(s["samples"] for s in streams)
    )
    peaks = [s["memory"]["rss_peak_bytes"] for s in streams]
    assert summary.peak_rss_max_bytes == max(peaks)
    assert summary.peak_rss_mean_bytes == pytest.approx(sum(peaks) / 2)
    assert [row.stream_cpu_ms_per_sample for row in summary.rows] == [
        s["cpu_ms_per_sample"] for s in streams
    ]
    assert main(["bench-summary", *map(str, rank_reports)]) == 0
    printed = capsys.readouterr().out
    assert "summed resident decode samples/s" in printed and "(2 ranks)" in printed


def test_summary_of_one_rank_names_the_missing_one(rank_reports: list[Path]) -> None:
    summary = summarize_ranks([rank_reports[1]])
    assert summary.ranks == 1 and summary.missing_shards == [0]
    assert summary.aggregate_mib_per_s == pytest.approx(summary.summed_mib_per_s)


def test_summary_refuses_foreign_and_mismatched_reports(
    rank_reports: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    foreign = tmp_path / "foreign.json"
    foreign.write_text('{"hello": 1}')
    assert main(["bench-summary", str(rank_reports[0]), str(foreign)]) == 2
    assert "not an episodestream bench JSON report" in capsys.readouterr().err
    other = json.loads(rank_reports[0].read_text())
    other["host"]["shard_count"] = 4
    mismatched = tmp_path / "four.json"
    mismatched.write_text(json.dumps(other))
    with pytest.raises(EpisodeStreamError, match="different sizes"):
        summarize_ranks([rank_reports[1], mismatched])
    with pytest.raises(EpisodeStreamError, match="no such bench report"):
        summarize_ranks([tmp_path / "absent.json"])


def test_shard_from_torchrun_environment() -> None:
    assert detect_shard({}) == (0, 1)
    assert detect_shard({"RANK": "3", "WORLD_SIZE": "4"}) == (3, 4)
    with pytest.raises(ValueError, match="RANK=4"):
        detect_shard({"RANK": "4", "WORLD_SIZE": "4"})
    config = BenchConfig(root="/x", shard_index=1, shard_count=2)
    assert config.shard() == (1, 2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tracks": ("stream", "fast")}, "unknown track"),
        ({"samples": 0}, "samples must be"),
        ({"shard_index": 1}, "both shard_index and shard_count"),
        ({"shard_index": 2, "shard_count": 2}, r"shard_index must lie in \[0, shard_count\)"),
        ({"byte_budget": "lots"}, "not a size"),
        ({"target_samples_s": 0.0}, "target_samples_s"),
        ({"decoder": "ffmpeg"}, "decoder"),
    ],
)
def test_config_errors_name_the_field(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BenchConfig(root="/x", **kwargs)


def test_cli_rejects_half_a_shard(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "/nowhere", "--shard-index", "0"]) == 2
    assert "both --shard-index and --shard-count" in capsys.readouterr().err


def test_a_rank_without_episodes_is_a_clear_error(
    lerobot_fixture_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["bench", str(lerobot_fixture_root), "--shard-index", "5", "--shard-count", "8"]
    assert main([*argv, "--cache-dir", str(tmp_path), "--no-progress"]) == 2
    assert "rank 5 of 8 owns no episodes" in capsys.readouterr().err


def test_missing_work_dir_is_a_clear_cli_error(tmp_path, capsys):
    from episodestream.cli import main

    status = main(["bench", str(tmp_path), "--work-dir", str(tmp_path / "absent")])
    assert status == 2
    assert "is not an existing folder" in capsys.readouterr().err

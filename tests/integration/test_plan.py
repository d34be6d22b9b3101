"""The cluster plan: predicted requests and bytes against nginx's access log of a real epoch,
the pure arithmetic, and every option of ``episodestream plan``."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch.utils.data

from episodestream import EpisodePoolDataset
from episodestream.cli import main
from episodestream.errors import ConfigError, ConfigTypeError
from episodestream.lerobot import EpisodeRowReader, load_dataset_meta
from episodestream.plan import (
    HUB_RESOLVER_LIMITS,
    ClusterSpec,
    ColumnChunk,
    DataFile,
    DatasetLayout,
    HubLimits,
    PoolSpec,
    coalesce_ranges,
    format_plan,
    plan_cluster,
    pool_size_for_unique,
    read_plan_layout,
    unique_episodes_per_batch,
)
from episodestream.sampling import PoolParams, PoolSchedule, WorkerSlot, plan_shards
from episodestream.storage import DEFAULT_LIMITS, Limits, open_reader
from episodestream_tools.serving import AccessLogRecord, NginxServer, summarize_access

POOL = 3
PREFETCH = 2

# -- plan vs. measured: nginx's access log of a real epoch over HTTP ---------------------------


def _measure_epoch(
    http_server: NginxServer, dataset: EpisodePoolDataset, num_workers: int
) -> tuple[int, int, int]:
    """(samples, requests, body bytes) nginx logged while ``dataset`` ran one epoch."""
    mark = http_server.log_mark()
    if num_workers:
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, num_workers=num_workers)
        samples = sum(int(batch["index"].numel()) for batch in loader)
    else:
        samples = sum(1 for _ in dataset)
    summary = summarize_access(http_server.access_records(since=mark))
    assert summary.status_counts == {206: summary.requests}  # every read a range reply
    return samples, summary.requests, summary.body_bytes


@pytest.mark.parametrize(
    ("fixture", "world_size", "rank", "num_workers", "limits"),
    [
        ("synthetic_av1", 1, 0, 0, DEFAULT_LIMITS),  # 2 cameras, 2 data files
        ("synthetic_many", 2, 1, 0, DEFAULT_LIMITS),  # one rank of two
        ("synthetic_many", 1, 0, 2, DEFAULT_LIMITS),  # two DataLoader workers
        # ranges split into parts (clips and footers alike), as a per-connection cap wants
        ("synthetic_av1", 1, 0, 0, Limits(split_threshold_bytes=2048, split_part_bytes=1024)),
    ],
    ids=["av1-one-process", "many-rank-1-of-2", "many-two-workers", "av1-split-ranges"],
)
def test_plan_predicts_the_access_log(
    request: pytest.FixtureRequest,
    http_server: NginxServer,
    http_publish: Any,
    datasets_cache_dir: Path,
    fixture: str,
    world_size: int,
    rank: int,
    num_workers: int,
    limits: Limits,
) -> None:
    url = http_publish(request.getfixturevalue(fixture))
    options = {
        "cache_dir": datasets_cache_dir,
        "pool_size": POOL,
        "prefetch_episodes": PREFETCH,
        "reader_options": {"limits": limits},
    }
    with EpisodePoolDataset(url, **options) as planner:
        layout = read_plan_layout(planner)
    plan = plan_cluster(
        layout,
        cluster=ClusterSpec(nodes=1, gpus_per_node=world_size, workers=num_workers),
        pool=PoolSpec(params=PoolParams(pool_size=POOL), prefetch_episodes=PREFETCH),
        limits=limits,
    )
    with EpisodePoolDataset(url, rank=rank, world_size=world_size, **options) as dataset:
        samples, requests, body_bytes = _measure_epoch(http_server, dataset, num_workers)

    assert samples == int(plan.slot_frames[rank].sum())
    predicted_requests = int(plan.slot_requests[rank].sum())
    predicted_bytes = int(plan.slot_bytes[rank].sum())
    assert abs(predicted_requests - requests) <= 0.05 * requests, (predicted_requests, requests)
    assert abs(predicted_bytes - body_bytes) <= 0.05 * body_bytes, (predicted_bytes, body_bytes)
    # the parts are real: clips alone would be one request per episode-camera
    assert int(plan.slot_video_requests[rank].sum()) >= int(plan.slot_episodes[rank].sum())
    if limits.split_threshold_bytes == 2048:
        assert int(plan.slot_video_requests[rank].sum()) > 2 * int(plan.slot_episodes[rank].sum())


def _settled_records(
    server: NginxServer, since: int, quiet_s: float = 0.2
) -> list[AccessLogRecord]:
    """The access log's records after ``since`` once no line came for ``quiet_s`` (at most
    5 s of waiting): the lines of requests already answered that nginx had yet to write."""
    records = server.access_records(since)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        again = server.access_records(since)
        if len(again) == len(records):
            break
        records = again
    return records


def test_opening_cost_is_what_the_planner_paid(
    http_server: NginxServer, http_publish: Any, synthetic_av1: Path, tmp_path: Path
) -> None:
    url = http_publish(synthetic_av1)
    # a fresh cache: no sidecar yet, so opening indexes every video file's moov
    options = {"cache_dir": tmp_path / "cache", "pool_size": POOL}
    mark = http_server.log_mark()
    with EpisodePoolDataset(url, **options) as planner:
        # every reply is in; nginx logs each just after sending it, so read the log once it
        # has stopped growing (before read_plan_layout, which reads more)
        opened = summarize_access(_settled_records(http_server, mark))
        layout = read_plan_layout(planner)
    assert layout.open_requests == opened.requests
    # nginx also counts the body of the 404 for the unpublished sidecar, the reader does not
    assert abs(layout.open_bytes - opened.body_bytes) <= 0.05 * opened.body_bytes
    assert layout.open_requests > 0
    assert layout.index_origin == "built"  # every rank elsewhere would pay the same
    assert "publish it" in format_plan(plan_cluster(layout, cluster=ClusterSpec()))


def test_rows_read_together_read_the_footer_once(
    http_server: NginxServer, http_publish: Any, wan_emulator_factory: Any, synthetic_many: Path
) -> None:
    # the plan counts one probe and one footer per data file: two threads that first need the
    # same file at once (the pool prefetches rows on two) must not both fetch it; 40 ms round
    # trips keep both inside the first one's read
    url = wan_emulator_factory(rtt_ms=40).rebase_url(http_publish(synthetic_many))
    with open_reader(url) as reader:
        meta = load_dataset_meta(reader)
        rows = EpisodeRowReader(reader, meta)
        episodes = [e for e in range(4) if meta.episode_data_path(e) == meta.episode_data_path(0)]
        mark = http_server.log_mark()
        with ThreadPoolExecutor(max_workers=len(episodes)) as pool:
            results = list(pool.map(rows.rows, episodes))
        logged = http_server.access_records(since=mark)
    assert [int(r["episode_index"][0]) for r in results] == episodes
    probes = [r for r in logged if r.range_header == "bytes=0-0"]
    assert len(probes) == 1
    # then one footer read and one read per row group (one episode each)
    assert len(logged) == 1 + 1 + len(episodes)


# -- the arithmetic --------------------------------------------------------------------------


def _layout(
    *,
    episodes: int = 8,
    frames: int = 10,
    span_bytes: int = 1000,
    decoded_bytes: int = 100,
    row_cache_bytes: int = 1 << 20,
    groups_per_file: int = 2,
) -> DatasetLayout:
    """A hand-made layout: one camera, episodes ``frames`` long, two episodes per row group."""
    groups = episodes // 2
    return DatasetLayout(
        episode_ids=np.arange(episodes, dtype=np.int64),
        frame_counts=np.full(episodes, frames, dtype=np.int64),
        fps=30.0,
        cameras=("cam",),
        span_bytes=np.full((episodes, 1), span_bytes, dtype=np.int64),
        clip_nbytes=np.full(episodes, span_bytes + 500, dtype=np.int64),
        episode_groups=tuple((e // 2,) for e in range(episodes)),
        group_file=tuple(g // groups_per_file for g in range(groups)),
        group_columns=tuple(
            (
                ColumnChunk("action", ((100 * g + 4, 40),), decoded_bytes),
                ColumnChunk("index", ((100 * g + 44, 40),), decoded_bytes),
            )
            for g in range(groups)
        ),
        data_files=tuple(
            DataFile(f"data/file-{f}.parquet", 5000, (5000,))
            for f in range(-(-groups // groups_per_file))
        ),
        open_requests=7,
        open_bytes=7000,
        row_cache_bytes=row_cache_bytes,
    )


def test_counts_of_a_hand_made_layout() -> None:
    plan = plan_cluster(_layout(), cluster=ClusterSpec(samples_per_s=40.0))
    # 8 clips; 2 data files: probe + footer each; 4 row groups, one coalesced read each
    assert int(plan.slot_video_requests.sum()) == 8
    assert int(plan.slot_video_bytes.sum()) == 8000
    assert int(plan.slot_row_requests.sum()) == 1 * 2 + 1 * 2 + 4
    assert int(plan.slot_row_bytes.sum()) == 2 * (1 + 5000) + 4 * 80
    assert plan.epoch_s == pytest.approx(80 / 40.0)
    assert plan.node_bytes_per_s == pytest.approx((8000 + 10002 + 320) / 2.0)
    assert plan.cluster_requests_per_s == pytest.approx(16 / 2.0)
    assert plan.requests_per_window == pytest.approx(8.0 * 300)


def test_row_groups_too_big_for_the_row_cache_are_read_again() -> None:
    # each column's decoded array is larger than the reader's LRU: never cached, so both
    # episodes of each row group read it
    plan = plan_cluster(
        _layout(decoded_bytes=2 << 20, row_cache_bytes=1 << 20), cluster=ClusterSpec()
    )
    assert int(plan.slot_row_requests.sum()) == 4 + 8


def test_ranks_and_workers_split_the_traffic_like_the_shards() -> None:
    layout = _layout(episodes=16)
    cluster = ClusterSpec(nodes=2, gpus_per_node=2, workers=2, samples_per_s=10.0)
    plan = plan_cluster(layout, cluster=cluster, pool=PoolSpec(epoch=3))
    shard = plan_shards(
        layout.episode_ids, layout.frame_counts, world_size=4, num_workers=2, seed=0, epoch=3
    )
    assert plan.slot_frames.shape == (4, 2)
    assert np.array_equal(plan.slot_frames, shard.frames_per_slot)
    for rank in range(4):
        for worker in range(2):
            owned = shard.episodes_for(WorkerSlot(rank, 4, worker, 2)).size
            assert plan.slot_video_requests[rank, worker] == owned
    assert int(plan.slot_video_bytes.sum()) == 16 * 1000
    # every rank reaches the host at samples_per_s: two ranks per node
    per_rank = plan.slot_bytes.sum(axis=1) / (plan.slot_frames.sum(axis=1) / 10.0)
    assert plan.node_bytes_per_s == pytest.approx(max(per_rank[:2].sum(), per_rank[2:].sum()))
    assert plan.startup_requests >= 4 * layout.open_requests


def test_the_binding_limit_is_the_lowest_cap() -> None:
    layout = _layout(span_bytes=10 << 20)
    # 80 MiB of clips in 80 frames: 1 GiB/s at 1000 samples/s
    cluster = ClusterSpec(samples_per_s=1000.0, link_gbps=1.0)
    hub = HubLimits(resolver_requests_per_window=10**9, host_ceiling_bytes_per_s=270 << 20)
    plan = plan_cluster(layout, cluster=cluster, hub=hub)
    link = 1e9 / 8
    assert plan.caps["link"] == pytest.approx(1000.0 * link / plan.node_bytes_per_s)
    assert plan.caps["host_ceiling"] == pytest.approx(1000.0 * (270 << 20) / plan.node_bytes_per_s)
    assert plan.binding == "link"  # 1 Gb/s is below 270 MiB/s
    quota = plan_cluster(layout, cluster=cluster, hub=HubLimits(resolver_requests_per_window=1))
    assert quota.binding == "resolver_quota"
    slow = plan_cluster(layout, cluster=ClusterSpec(samples_per_s=1e-3))
    assert slow.binding is None
    assert "nothing binds" in format_plan(slow)
    assert "resolver_quota binds" in format_plan(quota)


def test_budgets_hold_the_pool_and_its_prefetch() -> None:
    layout = _layout()  # every clip 1500 bytes
    pool = PoolSpec(params=PoolParams(pool_size=2), prefetch_episodes=3)
    plan = plan_cluster(layout, cluster=ClusterSpec(workers=2), pool=pool)
    assert plan.byte_budget_min == 2 * (2 * 1500 + 2 * 1500)
    assert plan.byte_budget_prefetch == 2 * (4 * 1500 + 2 * 1500)


def test_time_to_first_sample_grows_with_the_round_trip() -> None:
    layout = _layout()
    near = plan_cluster(layout, cluster=ClusterSpec(rtt_s=0.0))
    far = plan_cluster(layout, cluster=ClusterSpec(rtt_s=0.1))
    # opening's requests run one after another, then at least a fetch's two round trips
    assert far.time_to_first_sample_s - near.time_to_first_sample_s >= 0.1 * (7 + 2) - 1e-9


def test_coalescing_follows_pyarrows_hole_and_size_limits() -> None:
    ranges = [(0, 10), (15, 20), (40, 50), (48, 60)]
    assert coalesce_ranges(ranges, hole_bytes=5, limit_bytes=100) == [(0, 20), (40, 60)]
    assert coalesce_ranges(ranges, hole_bytes=100, limit_bytes=100) == [(0, 60)]
    assert coalesce_ranges(ranges, hole_bytes=100, limit_bytes=30) == [(0, 20), (40, 60)]
    assert coalesce_ranges([(5, 5)], hole_bytes=0, limit_bytes=10) == []


def test_unique_episodes_per_batch_follow_the_schedule() -> None:
    rng = np.random.default_rng(3)
    ids = np.arange(60, dtype=np.int64)
    counts = rng.integers(30, 90, size=60).astype(np.int64)
    params = PoolParams(pool_size=8, seed=4)
    slot = WorkerSlot(0, 1, 0, 1)
    measured = unique_episodes_per_batch(ids, counts, params=params, batch_size=16, slot=slot)
    # the same figure, drawn one by one from the schedule the pool runs
    draws = [e for e, _ in PoolSchedule(ids, counts, params=params, slot=slot).iter_draws()]
    full = len(draws) // 16 * 16
    by_hand = np.mean([len(set(draws[i : i + 16])) for i in range(0, full, 16)])
    assert measured == pytest.approx(by_hand)
    # draws follow frames left, so a batch holds fewer episodes than an even spread would
    assert 1 < measured < 8 * (1 - (7 / 8) ** 16)
    assert unique_episodes_per_batch(ids, counts, params=PoolParams(pool_size=1), batch_size=16) < (
        measured
    )


def test_pool_size_for_a_target_of_distinct_episodes() -> None:
    ids = np.arange(60, dtype=np.int64)
    counts = np.full(60, 50, dtype=np.int64)
    params = PoolParams(seed=1)

    def unique(pool_size: int) -> float:
        return unique_episodes_per_batch(
            ids, counts, params=replace(params, pool_size=pool_size), batch_size=32
        )

    pool = pool_size_for_unique(8, ids, counts, params=params, batch_size=32)
    assert unique(pool) >= 8 > unique(pool - 1)
    with pytest.raises(ConfigError, match="cannot exceed batch_size"):
        pool_size_for_unique(40, ids, counts, params=params, batch_size=32)
    with pytest.raises(ConfigError, match="out of reach: with all 3 episodes"):
        pool_size_for_unique(20, ids[:3], counts[:3], params=params, batch_size=32)
    # the plan picks it when asked for a target
    plan = plan_cluster(
        _layout(episodes=60, frames=50),
        cluster=ClusterSpec(),
        pool=PoolSpec(params=params, unique_per_batch=8),
    )
    assert plan.pool.params.pool_size == pool and plan.unique_per_batch >= 8


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: ClusterSpec(nodes=0), ConfigError, "nodes"),
        (lambda: ClusterSpec(samples_per_s=0), ConfigError, "samples_per_s"),
        (lambda: ClusterSpec(link_gbps=-1.0), ConfigError, "link_gbps"),
        (lambda: ClusterSpec(workers=1.5), ConfigTypeError, "workers"),
        (lambda: PoolSpec(byte_budget=0), ConfigError, "byte_budget"),
        (lambda: HubLimits(window_s=0), ConfigError, "window_s"),
        (lambda: replace(_layout(), clip_nbytes=np.ones(2)), ConfigError, "clip_nbytes"),
        (lambda: replace(_layout(), span_bytes=np.ones((8, 2))), ConfigError, "span_bytes"),
    ],
)
def test_bad_arguments_are_config_errors(make: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        make()


# -- episodestream plan ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_plan(synthetic_many: Path, datasets_cache_dir: Path) -> Any:
    def run(*options: str, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
        argv = ["plan", str(synthetic_many), "--cache-dir", str(datasets_cache_dir), "--json"]
        if "--samples-per-s" not in options:
            argv += ["--samples-per-s", "100"]
        assert main([*argv, *options]) == 0
        return json.loads(capsys.readouterr().out)

    return run


def test_cli_defaults(run_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    plan = run_plan(capsys=capsys)
    assert plan["cluster"]["ranks"] == 1 and plan["cluster"]["workers_per_rank"] == 1
    assert (plan["dataset"]["episodes"], plan["dataset"]["cameras"]) == (48, 1)
    assert plan["epoch"]["video_requests"] == 48  # one range per episode-camera
    assert plan["assumptions"]["resolver_requests_per_window"] == HUB_RESOLVER_LIMITS["free"]
    assert plan["pool"]["pool_episodes"] == 16


def test_cli_nodes_and_gpus_per_node(run_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    one = run_plan(capsys=capsys)
    many = run_plan("--nodes", "3", "--gpus-per-node", "2", capsys=capsys)
    assert many["cluster"]["ranks"] == 6 and len(many["slots"]["frames"]) == 6
    assert many["epoch"]["video_bytes"] == one["epoch"]["video_bytes"]  # each episode once
    assert many["rates"]["cluster_bytes_per_s"] > 3 * one["rates"]["cluster_bytes_per_s"]


def test_cli_workers(run_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    plan = run_plan("--workers", "4", capsys=capsys)
    assert plan["cluster"]["workers_per_rank"] == 4
    assert len(plan["slots"]["frames"][0]) == 4 and min(plan["slots"]["episodes"][0]) > 0
    assert run_plan("--workers", "0", capsys=capsys)["cluster"]["workers_per_rank"] == 1


def test_cli_samples_per_s(run_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    slow = run_plan("--samples-per-s", "10", capsys=capsys)
    fast = run_plan("--samples-per-s", "40", capsys=capsys)
    assert fast["rates"]["node_bytes_per_s"] == pytest.approx(4 * slow["rates"]["node_bytes_per_s"])
    assert fast["epoch"]["seconds"] == pytest.approx(slow["epoch"]["seconds"] / 4)
    with pytest.raises(SystemExit) as exited:
        main(["plan", "x"])  # required
    assert exited.value.code == 2


def test_cli_pool_episodes_and_prefetch(run_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    small = run_plan("--pool-episodes", "2", "--prefetch-episodes", "0", capsys=capsys)
    large = run_plan("--pool-episodes", "8", "--prefetch-episodes", "4", capsys=capsys)
    assert small["pool"]["pool_episodes"] == 2 and large["pool"]["prefetch_episodes"] == 4
    low, high = small["randomness"], large["randomness"]
    assert low["byte_budget_min_per_rank"] < high["byte_budget_min_per_rank"]
    assert low["byte_budget_with_prefetch_per_rank"] == low["byte_budget_min_per_rank"]
    assert high["byte_budget_with_prefetch_per_rank"] > high["byte_budget_min_per_rank"]
    assert low["unique_episodes_per_batch"] < high["unique_episodes_per_batch"]


def test_cli_unique_per_batch_and_batch_size(
    run_plan: Any, capsys: pytest.CaptureFixture[str], synthetic_many: Path
) -> None:
    plan = run_plan("--unique-per-batch", "5", "--batch-size", "16", capsys=capsys)
    assert plan["pool"]["batch_size"] == 16
    assert plan["pool"]["unique_per_batch_target"] == 5
    chosen = plan["pool"]["pool_episodes"]
    assert plan["randomness"]["unique_episodes_per_batch"] >= 5
    smaller = run_plan("--pool-episodes", str(chosen - 1), "--batch-size", "16", capsys=capsys)
    assert smaller["randomness"]["unique_episodes_per_batch"] < 5
    # more distinct episodes than a batch holds: refused, naming the option
    argv = ["plan", str(synthetic_many), "--samples-per-s", "1", "--batch-size", "16"]
    assert main([*argv, "--unique-per-batch", "40"]) == 2
    assert "unique_per_batch=40.0 cannot exceed batch_size=16" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # one way of choosing the pool at a time
        main([*argv, "--unique-per-batch", "4", "--pool-episodes", "3"])


def test_cli_byte_budget(
    run_plan: Any,
    capsys: pytest.CaptureFixture[str],
    synthetic_many: Path,
    datasets_cache_dir: Path,
) -> None:
    plan = run_plan("--byte-budget", "1MiB", capsys=capsys)
    assert plan["pool"]["byte_budget"] == 1 << 20
    argv = [
        "plan",
        str(synthetic_many),
        "--cache-dir",
        str(datasets_cache_dir),
        "--samples-per-s",
        "10",
        "--byte-budget",
        "10KiB",
    ]
    assert main(argv) == 0
    assert "cannot hold the pool and its prefetch" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main([*argv[:-1], "lots"])


def test_cli_seed_and_epoch(run_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    base = run_plan("--nodes", "2", capsys=capsys)
    moved = run_plan("--nodes", "2", "--seed", "5", "--epoch", "3", capsys=capsys)
    assert (moved["pool"]["seed"], moved["pool"]["epoch"]) == (5, 3)
    assert base["epoch"]["video_bytes"] == moved["epoch"]["video_bytes"]
    # another seed and epoch hand episodes to other ranks: their byte shares move
    assert base["slots"]["bytes"] != moved["slots"]["bytes"]


def test_cli_link_and_host_ceiling(run_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    plan = run_plan(
        "--link-gbps",
        "0.001",
        "--host-ceiling-mibps",
        "1",
        "--resolver-limit",
        "1000000000",
        "--samples-per-s",
        "10000",
        capsys=capsys,
    )
    caps, node = plan["caps_samples_per_s_per_rank"], plan["rates"]["node_bytes_per_s"]
    assert caps["link"] == pytest.approx(10000 * 0.001e9 / 8 / node)
    assert caps["host_ceiling"] == pytest.approx(10000 * (1 << 20) / node)
    assert plan["binding"] == "link"
    assert "link" not in run_plan(capsys=capsys)["caps_samples_per_s_per_rank"]


def test_cli_hub_tier_resolver_limit_and_window(
    run_plan: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    pro = run_plan("--hub-tier", "pro", capsys=capsys)
    assert pro["assumptions"]["resolver_requests_per_window"] == 12_000
    custom = run_plan("--resolver-limit", "777", "--window-s", "60", capsys=capsys)
    assert custom["assumptions"]["resolver_requests_per_window"] == 777
    assert custom["assumptions"]["hub_tier"] == "custom"
    rates = custom["rates"]
    assert rates["requests_per_window"] == pytest.approx(rates["cluster_requests_per_s"] * 60)
    assert custom["caps_samples_per_s_per_rank"]["resolver_quota"] == pytest.approx(
        100 * 777 / rates["requests_per_window"]
    )


def test_cli_rtt(run_plan: Any, capsys: pytest.CaptureFixture[str]) -> None:
    near = run_plan("--rtt-ms", "0", capsys=capsys)["time_to_first_sample_s"]
    far = run_plan("--rtt-ms", "200", capsys=capsys)["time_to_first_sample_s"]
    assert far - near >= 0.2 * 2


def test_cli_cache_dir_holds_the_index(
    synthetic_av1: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "plan-cache"
    argv = ["plan", str(synthetic_av1), "--samples-per-s", "5", "--cache-dir", str(cache)]
    assert main(argv) == 0
    assert list(cache.rglob("index.arrow"))  # the sidecar the planner built went there
    table = capsys.readouterr().out
    assert "one epoch" in table and "time to first sample" in table
    assert "resolvers (free: 5000 / 300 s)" in table


def test_cli_runs_as_a_command(synthetic_av1: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "episodestream.cli",
            "plan",
            str(synthetic_av1),
            "--nodes",
            "2",
            "--gpus-per-node",
            "4",
            "--workers",
            "2",
            "--samples-per-s",
            "500",
            "--json",
            "--cache-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["cluster"]["ranks"] == 8
    assert plan["epoch"]["requests"] == sum(map(sum, plan["slots"]["requests"]))
    assert all(v is None or math.isfinite(v) for v in plan["caps_samples_per_s_per_rank"].values())

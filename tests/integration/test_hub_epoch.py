"""A streamed epoch over ``hf://datasets/...`` through the Hub stand-in (per-range signed,
expiring CDN URLs on two hosts with differing validators; quotas announced only in
``RateLimit`` headers): samples equal LeRobot's reference, and the requests are counted."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from episodestream import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.cli import main
from tests.plugins.storage import HubStandIn

REPO = "org/lerobot_sim5"
EPISODE_CAMERAS = 5 * 3  # lerobot_sim5: 5 episodes x 3 cameras


@pytest.fixture
def hub(hub_standin: HubStandIn, lerobot_fixture_root: Path) -> HubStandIn:
    files = {
        str(path.relative_to(lerobot_fixture_root)): path.read_bytes()
        for path in sorted(lerobot_fixture_root.rglob("*"))
        if path.is_file()
    }
    hub_standin.commit(REPO, files)
    return hub_standin


def _pool(hub: HubStandIn, cache_dir: Path, **reader: object) -> EpisodePoolDataset:
    return EpisodePoolDataset(
        f"hf://datasets/{REPO}",
        pool_size=2,
        seed=1,
        cache_dir=cache_dir,
        reader_options={"endpoint": hub.endpoint, "token": hub.token, **reader},
    )


def _video_ranges(hub: HubStandIn, root: Path) -> list:
    """CDN answers with bytes of an MP4 file (the CDN names blobs by content hash)."""
    blobs = {hashlib.sha256(p.read_bytes()).hexdigest() for p in root.rglob("*.mp4")}
    return [r for r in hub.cdn_requests if r.status == 206 and r.path.split("/")[-1] in blobs]


def test_streamed_epoch_through_the_hub(
    hub: HubStandIn, lerobot_reference, lerobot_fixture_root: Path, tmp_path: Path
):
    with _pool(hub, tmp_path) as pool:
        cold = {int(s["index"]): s for s in pool}
    lerobot_reference.assert_whole_epoch(cold)
    cdn = hub.cdn_requests
    # the CDN never sees the token; a range-bound URL is refused at most once per CDN host
    assert not [r for r in cdn if r.header("Authorization")]
    refused = [r for r in cdn if r.status == 403]
    assert len(refused) <= len(hub.cdn_urls)
    # cold start (the index is built from each MP4's moov; sizes come from one tree listing
    # per folder, not a probe per file): at most 2 Hub resolves per episode-camera in all
    assert len(hub.video_resolves()) <= 2 * EPISODE_CAMERAS
    assert not [r for r in hub.video_resolves() if r.header("Range") == "bytes=0-0"]

    # a second user with the index in hand: exactly one range per episode-camera
    hub.hub_requests.clear()
    hub.cdn_requests.clear()
    with _pool(hub, tmp_path) as pool:
        warm = {int(s["index"]): s for s in pool}
    lerobot_reference.assert_whole_epoch(warm)
    assert len(_video_ranges(hub, lerobot_fixture_root)) == EPISODE_CAMERAS
    assert len(hub.video_resolves()) == EPISODE_CAMERAS
    assert not [r for r in hub.cdn_requests if r.header("Authorization")]


@pytest.mark.slow
def test_epoch_under_a_tight_quota_and_expiring_urls(
    hub: HubStandIn, lerobot_reference, tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    # build the index first (a cold start is not what this test is about)
    with _pool(hub, tmp_path) as pool:
        pool.dataset.reader.close()
    hub.ttl_seconds = 2.0  # CDN URLs expire every 2 s
    hub.limit_rate(quota=16, window_seconds=30)  # the Hub says so only in RateLimit headers
    caplog.set_level(logging.INFO, logger="episodestream")
    with _pool(hub, tmp_path) as pool:
        samples = {int(s["index"]): s for s in pool}
        metrics = pool.metrics()["reader"]
    lerobot_reference.assert_whole_epoch(samples)
    statuses = [r.status for r in hub.hub_requests]
    assert statuses.count(429) >= 1  # the quota bit
    waits = [r for r in caplog.records if "rate-limits us" in r.getMessage()]
    assert waits, "the wait for the quota window was not logged"
    assert len(waits) <= 2  # once per window, not once per request or thread
    assert metrics["rate_limited"] >= 1


def _split(hub_standin: HubStandIn, lerobot_fixture_root: Path) -> None:
    """lerobot_sim5's meta/ in a repo at tag v1.0, its data/ and videos/ in a bucket."""
    hub_standin.split_dataset(lerobot_fixture_root, "org/sim5-meta", "org/sim5-data", ref="v1.0")


def test_split_roots_metadata_from_a_repo_revision_data_from_a_bucket(
    hub_standin: HubStandIn, lerobot_fixture_root: Path, lerobot_reference, tmp_path: Path
):
    _split(hub_standin, lerobot_fixture_root)
    reader_options = {"endpoint": hub_standin.endpoint, "token": hub_standin.token}

    def pool() -> EpisodePoolDataset:
        return EpisodePoolDataset(
            "hf://datasets/org/sim5-meta@v1.0",
            data_root="hf://buckets/org/sim5-data",
            pool_size=2,
            cache_dir=tmp_path,
            reader_options=reader_options,
        )

    with pool() as dataset:
        samples = {int(s["index"]): s for s in dataset}
    lerobot_reference.assert_whole_epoch(samples)
    repo_paths = [r.path for r in hub_standin.hub_requests if "/org/sim5-meta/" in r.path]
    bucket_paths = [r.path for r in hub_standin.hub_requests if "/org/sim5-data/" in r.path]
    assert repo_paths and all("/videos/" not in p and "/data/" not in p for p in repo_paths)
    assert sum(p.endswith(".mp4") for p in bucket_paths) > 0

    # a second user with the index in hand: one range per episode-camera, from the bucket
    hub_standin.hub_requests.clear()
    hub_standin.cdn_requests.clear()
    with pool() as dataset:
        again = {int(s["index"]): s for s in dataset}
    lerobot_reference.assert_whole_epoch(again)
    resolves = hub_standin.video_resolves()
    assert len(resolves) == EPISODE_CAMERAS
    assert all("/buckets/org/sim5-data/" in r.path for r in resolves)


def test_index_cli_with_a_data_root_serves_the_next_training_run(
    hub_standin: HubStandIn,
    lerobot_fixture_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    _split(hub_standin, lerobot_fixture_root)
    hub_standin.serve_as_the_hub(monkeypatch)
    root, data_root = "hf://datasets/org/sim5-meta@v1.0", "hf://buckets/org/sim5-data"
    argv = ["index", root, "--data-root", data_root, "--cache-dir", str(tmp_path)]
    assert main([*argv, "--no-progress"]) == 0
    assert Path(capsys.readouterr().out.strip()).is_file()
    hub_standin.hub_requests.clear()
    with EpisodeStreamDataset(root, data_root=data_root, cache_dir=tmp_path) as dataset:
        dataset[100]
    # the index the CLI wrote was found: no moov was read, only the episode's own ranges
    resolves = hub_standin.video_resolves()
    assert len(resolves) == 3 * 2  # episode 2 (frames 94-149) and the next, prefetched

"""The Hub reader against per-range signed, expiring CDN URLs on two CDN hosts whose ETags
differ: targets belong to the request that got them, at most one wasted 403 per CDN host,
identity from the Hub (X-Linked-Etag / X-Linked-Size), never from a CDN edge."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from episodestream import StaleSourceError, StorageError
from episodestream.storage import HubRangeReader, Limits, ReadRequest, RetryPolicy
from episodestream.storage.http._redirects import REDIRECT_HOSTS, HostMode
from tests.plugins.storage import Fault, HubStandIn

pytestmark = pytest.mark.timeout(60)

VIDEO = "videos/cam/file-000.mp4"
OTHER = "videos/cam/file-001.mp4"
V1 = random.Random(1).randbytes(400_000)
V2 = random.Random(2).randbytes(300_000)
FAST = RetryPolicy(max_attempts=4, backoff_initial_seconds=0.01)
ONE_RANGE_PER_REQUEST = Limits(coalesce_gap_bytes=-1, split_threshold_bytes=0)


@pytest.fixture
def hub(hub_standin: HubStandIn) -> HubStandIn:
    hub_standin.commit("org/robot", {VIDEO: V1, OTHER: V2, "meta/info.json": b"{}"})
    return hub_standin


@pytest.fixture
def reusable_hub() -> Iterator[HubStandIn]:
    """CDN URLs valid for any range until they expire (CloudFront / presigned S3 style)."""
    REDIRECT_HOSTS.forget()
    standin = HubStandIn(range_bound=False)
    standin.commit("org/robot", {VIDEO: V1, OTHER: V2})
    try:
        yield standin
    finally:
        standin.close()


def _open(hub: HubStandIn, root: str = "hf://datasets/org/robot", **options) -> HubRangeReader:
    return hub.open_reader(root, **{"retry": FAST, "limits": ONE_RANGE_PER_REQUEST, **options})


def _resolves(hub: HubStandIn) -> list:
    return [r for r in hub.hub_requests if "/resolve/" in r.path]


def _ranges(count: int, seed: int = 0) -> list[ReadRequest]:
    rng = random.Random(seed)
    requests = []
    for _ in range(count):
        path, data = (VIDEO, V1) if rng.random() < 0.5 else (OTHER, V2)
        offset = rng.randrange(len(data) - 5000)
        requests.append(ReadRequest(path, offset, rng.randrange(1, 5000)))
    return requests


def _expected(request: ReadRequest) -> bytes:
    data = V1 if request.path == VIDEO else V2
    return data[request.offset : request.end]


def test_cdn_hosts_with_differing_etags_are_not_a_changed_file(hub):
    with _open(hub) as reader:
        for request in _ranges(20):
            assert reader.read(request.path, request.offset, request.length) == _expected(request)
        info = reader.file_info(VIDEO)
    # both CDN hosts served, each with its own ETag for the same bytes
    hosts = {(r.header("Host") or "").partition(":")[0] for r in hub.cdn_requests}
    assert hosts == {"127.0.0.2", "127.0.0.3"}
    # the file's identity is the Hub's linked ETag and size, the same whichever host served
    blob = next(b for b, data in hub._blobs.items() if data == V1)
    assert (info.size, info.etag) == (len(V1), f'"{blob}"')
    assert all(r.header("If-Range") is None for r in hub.cdn_requests)
    assert all(r.header("Authorization") is None for r in hub.cdn_requests)


def test_at_most_one_wasted_refusal_per_cdn_host_under_concurrency(hub):
    requests = _ranges(96, seed=3)
    with _open(hub, limits=Limits(max_concurrency=16, coalesce_gap_bytes=-1)) as reader:
        assert reader.read_many(requests) == [_expected(r) for r in requests]
        assert reader.read_many(requests[:20]) == [_expected(r) for r in requests[:20]]
        metrics = reader.metrics()
    wasted = hub.wasted_cdn_requests()
    assert all(count <= 1 for count in wasted.values()), wasted
    assert metrics["target_refusals"] == sum(wasted.values())
    served = [r for r in hub.cdn_requests if r.status == 206]
    assert len(served) == 116  # one CDN request per range, no repeats
    assert len(_resolves(hub)) == len(served)  # a probe reuses a target: no resolve
    for host in hub.cdn_urls:
        if host.partition("//")[2].partition(":")[0] in wasted:
            assert REDIRECT_HOSTS.mode(host) is HostMode.RANGE_BOUND


def test_reusable_cdn_targets_are_reused_until_they_expire(reusable_hub):
    hub = reusable_hub
    with _open(hub) as reader:
        for offset in range(0, 100_000, 10_000):
            assert reader.read(VIDEO, offset, 100) == V1[offset : offset + 100]
        assert len(_resolves(hub)) == 1  # learnt reusable: one resolve for ten ranges
        hub.expire_signatures()
        assert reader.read(VIDEO, 123, 100) == V1[123:223]
        assert reader.read(VIDEO, 999, 100) == V1[999:1099]
        assert reader.metrics()["reresolves"] == 1
    assert len(_resolves(hub)) == 2
    assert [r.status for r in hub.cdn_requests].count(403) == 1  # the expired one


def test_expired_own_target_is_resolved_again(hub):
    hub.ttl_seconds = 1.0
    # the CDN asks us to come back in 2 s: by then the signature for this range has expired
    hub.inject_cdn(Fault("status", status=503, retry_after="2"))
    with _open(hub) as reader:
        assert reader.read(VIDEO, 1000, 5000) == V1[1000:6000]
        assert reader.metrics()["reresolves"] == 1
    assert [r.status for r in hub.cdn_requests] == [503, 403, 206]
    assert len(_resolves(hub)) == 2


def test_refusals_are_bounded_and_reset_after_success(hub):
    with _open(hub) as reader:
        hub.ttl_seconds = -10.0  # every URL the Hub hands out is already expired
        with pytest.raises(StorageError, match="403"):
            reader.read(VIDEO, 0, 100)
        refused = len(hub.cdn_requests)
        assert refused == 4  # the first answer and three fresh resolves, then the error
        hub.ttl_seconds = 3600.0
        for offset in (0, 50_000, 100_000):
            assert reader.read(VIDEO, offset, 100) == V1[offset : offset + 100]


def test_resumed_short_body_is_resolved_for_its_own_range(hub):
    with _open(hub) as reader:
        for offset in (0, 10_000, 20_000, 30_000):  # learn both CDN hosts
            reader.read(VIDEO, offset, 10)
        wasted = sum(hub.wasted_cdn_requests().values())
        hub.inject_cdn(Fault("truncate", after_bytes=7_000))
        assert reader.read(VIDEO, 50_000, 100_000) == V1[50_000:150_000]
        assert reader.metrics()["resumes"] == 1
    assert sum(hub.wasted_cdn_requests().values()) == wasted  # no new refusal
    last = hub.cdn_requests[-1]
    assert last.status == 206 and last.header("Range") == "bytes=57000-149999"


def test_bucket_file_replaced_is_stale_by_the_hubs_word(hub_standin):
    hub_standin.put_bucket_file("org/bkt", "a.bin", V1)
    with _open(hub_standin, "hf://buckets/org/bkt") as reader:
        for offset in (0, 10_000, 20_000):
            assert reader.read("a.bin", offset, 10) == V1[offset : offset + 10]
        hub_standin.put_bucket_file("org/bkt", "a.bin", V1[::-1])  # same size, new content
        with pytest.raises(StaleSourceError, match="ETag"):
            reader.read("a.bin", 30_000, 10)


def test_dataset_pinned_to_a_commit_survives_a_push(hub):
    with _open(hub) as reader:
        assert reader.read(VIDEO, 0, 10) == V1[:10]
        hub.commit("org/robot", {VIDEO: V2})  # main moves; the reader stays on its commit
        assert reader.read(VIDEO, 20_000, 10) == V1[20_000:20_010]

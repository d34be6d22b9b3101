"""The Hub reader under the Hub's quotas: 429s that carry only ``RateLimit`` /
``RateLimit-Policy`` (no ``Retry-After``) are waited out, once per window for all threads,
logged once, never counted as failed attempts, and given up on only when the announced window
is beyond ``RetryPolicy.rate_limit_max_seconds``."""

from __future__ import annotations

import logging
import random

import pytest

from episodestream import StorageError
from episodestream.storage import HubRangeReader, Limits, ReadRequest, RetryPolicy
from tests.plugins.storage import HubStandIn

pytestmark = pytest.mark.timeout(90)

VIDEO = "videos/cam/file-000.mp4"
DATA = random.Random(5).randbytes(300_000)
# without the quota handling, four 429s in a row would end the read
FEW = RetryPolicy(max_attempts=4, backoff_initial_seconds=0.01, max_elapsed_seconds=5.0)


@pytest.fixture
def hub(hub_standin: HubStandIn) -> HubStandIn:
    hub_standin.commit("org/robot", {VIDEO: DATA})
    return hub_standin


def _open(hub: HubStandIn, **options) -> HubRangeReader:
    options.setdefault("retry", FEW)
    return HubRangeReader(
        "hf://datasets/org/robot", token=hub.token, endpoint=hub.endpoint, **options
    )


def test_tight_quota_is_waited_out_by_all_threads_together(hub, caplog):
    caplog.set_level(logging.WARNING, logger="episodestream")
    rng = random.Random(1)
    requests = [ReadRequest(VIDEO, rng.randrange(290_000), 5000) for _ in range(40)]
    with _open(hub, limits=Limits(max_concurrency=8, coalesce_gap_bytes=-1)) as reader:
        hub.limit_rate(quota=15, window_seconds=1.0)
        got = reader.read_many(requests)
        metrics = reader.metrics()
    assert got == [DATA[r.offset : r.end] for r in requests]
    refused = [r for r in hub.hub_requests if r.status == 429]
    assert refused and all(r.header("Retry-After") is None for r in refused)
    assert metrics["rate_limited"] == metrics["status_429"] == len(refused)
    assert metrics["failures"] == 0 and metrics["quota_wait_seconds"] > 0
    waits = [r.getMessage() for r in caplog.records if "rate-limits us" in r.getMessage()]
    # once per window, not once per thread or per 429
    assert 1 <= len(waits) <= 5 and len(waits) < len(refused) + 1
    assert "quota 'resolvers' (15 requests per 1 s) exhausted" in waits[0]


def test_a_window_beyond_the_bound_fails_at_once_naming_it(hub):
    with _open(hub, retry=RetryPolicy(rate_limit_max_seconds=10.0)) as reader:
        reader.read(VIDEO, 0, 10)
        hub.limit_rate(quota=1, window_seconds=3600.0)
        reader.read(VIDEO, 100, 10)
        with pytest.raises(StorageError) as info:
            reader.read(VIDEO, 200, 10)
    message = str(info.value)
    assert "429" in message and "resolvers" in message
    assert "resets in 3601 s" in message and "rate_limit_max_seconds=10" in message


def test_the_stand_ins_429_as_huggingface_hub_reads_it(hub):
    import httpx
    from huggingface_hub.utils import _http as hub_http

    hub.limit_rate(quota=1, window_seconds=300.0)
    url = f"{hub.endpoint}/api/datasets/org/robot/revision/main"
    auth = {"Authorization": f"Bearer {hub.token}"}
    with httpx.Client() as client:
        assert client.get(url, headers=auth).status_code == 200
        refused = client.get(url, headers=auth)
    assert refused.status_code == 429 and "Retry-After" not in refused.headers
    info = hub_http.parse_ratelimit_headers(refused.headers)
    assert (info.resource_type, info.remaining, info.limit, info.window_seconds) == (
        "resolvers",
        0,
        1,
        300,
    )
    assert 290 <= info.reset_in_seconds <= 300

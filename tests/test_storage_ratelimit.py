"""Rate-limit headers parsed (pure), and the shared per-host gate (threads, no sockets)."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from episodestream.storage import RetryPolicy
from episodestream.storage._hostgate import HostGates
from episodestream.storage._ratelimit import RateLimit, parse_rate_limit

HUB_429 = {"RateLimit": '"api";r=0;t=55', "RateLimit-Policy": '"fixed window";"api";q=500;w=300'}


def test_the_hubs_headers():
    limit = parse_rate_limit(HUB_429)
    assert limit == RateLimit("api", 0, 55.0, 500, 300.0, None)
    assert limit.exhausted and limit.wait_seconds == 56.0  # t + 1, as huggingface_hub waits
    assert limit.describe() == "quota 'api' (500 requests per 300 s) exhausted"


def test_field_names_are_case_insensitive_and_spaces_allowed():
    limit = parse_rate_limit({"ratelimit": '"resolvers" ; r = 0 ; t = 7'})
    assert (limit.name, limit.remaining, limit.reset_seconds, limit.wait_seconds) == (
        "resolvers",
        0,
        7.0,
        8.0,
    )


def test_several_quotas_the_exhausted_one_resetting_last_decides():
    headers = {
        "RateLimit": '"burst";r=3;t=1, "api";r=0;t=20, "daily";r=0;t=200',
        "RateLimit-Policy": '"burst";q=10;w=1, "api";q=500;w=300, "daily";q=9000;w=86400',
    }
    limit = parse_rate_limit(headers)
    assert (limit.name, limit.reset_seconds, limit.quota, limit.window_seconds) == (
        "daily",
        200.0,
        9000,
        86400.0,
    )


def test_quota_not_exhausted_and_retry_after():
    limit = parse_rate_limit({"RateLimit": '"api";r=12;t=30'})
    assert not limit.exhausted and limit.wait_seconds is None
    both = parse_rate_limit({"RateLimit": '"api";r=12;t=30', "Retry-After": "4"})
    assert both.wait_seconds == 4.0
    only = parse_rate_limit({"Retry-After": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480.0)
    assert only.retry_after_seconds == 10.0 and only.wait_seconds == 10.0


def test_older_draft_fields():
    limit = parse_rate_limit({"RateLimit-Remaining": "0", "RateLimit-Reset": "12"})
    assert limit.exhausted and limit.wait_seconds == 13.0


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"RateLimit": ""},
        {"RateLimit": "garbage"},
        {"RateLimit": '"api";r=x;t=y'},
        {"Retry-After": "soon"},
        {"RateLimit": '"api";r=0;t=nan'},
        {"Content-Type": "text/plain"},
    ],
)
def test_nothing_announced(headers):
    limit = parse_rate_limit(headers)
    assert limit is None or limit.wait_seconds is None


def test_agrees_with_huggingface_hub_where_installed():
    from huggingface_hub.utils import _http as hub_http

    for headers in (
        HUB_429,
        {
            "ratelimit": '"resolvers";r=0;t=7',
            "ratelimit-policy": '"fixed window";"resolvers";q=3000;w=300',
        },
        {"RateLimit": '"api";r=499;t=299'},
    ):
        theirs = hub_http.parse_ratelimit_headers(headers)
        ours = parse_rate_limit(headers)
        assert (ours.name, ours.remaining, ours.reset_seconds) == (
            theirs.resource_type,
            theirs.remaining,
            theirs.reset_in_seconds,
        )
        assert (ours.quota, ours.window_seconds) == (theirs.limit, theirs.window_seconds)


def test_retry_policy_bounds_the_wait():
    assert RetryPolicy().rate_limit_max_seconds == 900.0
    with pytest.raises(ValueError, match="rate_limit_max_seconds"):
        RetryPolicy(rate_limit_max_seconds=-1)


def test_gate_is_shared_by_threads_and_logged_once(caplog):
    gates = HostGates()
    caplog.set_level(logging.WARNING, logger="episodestream.storage")
    stop = threading.Event()
    assert gates.wait("https://hub.example/x", stop) == 0.0
    assert gates.hold("https://hub.example/a", 0.5, "quota 'api' exhausted")
    assert not gates.hold("https://hub.example/b", 0.3, "again")  # same window: no new log
    assert gates.remaining("https://other.example/") == 0.0
    waited: list[float] = []

    def worker() -> None:
        waited.append(gates.wait("https://hub.example/c", stop, slice_seconds=0.05))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(waited) == 8 and all(0.3 < w < 3.0 for w in waited)
    assert gates.remaining("https://hub.example/") == 0.0
    records = [r for r in caplog.records if "rate-limits us" in r.getMessage()]
    assert len(records) == 1
    assert "hub.example" in records[0].getMessage() and "quota 'api'" in records[0].getMessage()
    assert "waits 0 s" in records[0].getMessage() or "waits 1 s" in records[0].getMessage()


def test_gate_wait_ends_when_stopped():
    gates = HostGates()
    gates.hold("http://h:8080/", 60.0, "long window")
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    began = time.monotonic()
    gates.wait("http://h:8080/x", stop, slice_seconds=5.0)
    assert time.monotonic() - began < 3.0
    assert gates.remaining("http://h:8080/") > 50

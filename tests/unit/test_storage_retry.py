"""RetryPolicy, Timeouts and Limits as values: no sockets, no sleeping."""

from __future__ import annotations

import email.utils
import random

import pytest

from episodestream.storage import (
    DEFAULT_RETRY,
    RETRYABLE_STATUSES,
    FileInfo,
    Limits,
    RetryPolicy,
    Timeouts,
)


def test_backoff_grows_exponentially_within_jitter_bounds():
    policy = RetryPolicy(backoff_initial_seconds=0.1, backoff_multiplier=2.0, jitter=0.5)
    rng = random.Random(7)
    for attempt in range(1, 8):
        base = min(policy.backoff_max_seconds, 0.1 * 2 ** (attempt - 1))
        delays = [policy.next_delay(attempt, rng) for _ in range(200)]
        assert all(0.5 * base <= d <= base for d in delays)
        # Jitter really spreads clients out.
        assert max(delays) - min(delays) > 0.3 * base


def test_backoff_is_capped_and_deterministic_for_a_seed():
    policy = RetryPolicy(backoff_max_seconds=2.0, jitter=0.0)
    assert policy.next_delay(50, random.Random(0)) == 2.0
    assert policy.next_delay(10_000, random.Random(0)) == 2.0
    seeded = [DEFAULT_RETRY.next_delay(a, random.Random(3)) for a in range(1, 6)]
    assert seeded == [DEFAULT_RETRY.next_delay(a, random.Random(3)) for a in range(1, 6)]


def test_retry_after_is_honoured_but_bounded():
    policy = RetryPolicy(backoff_initial_seconds=0.1, jitter=0.0, retry_after_max_seconds=5.0)
    rng = random.Random(1)
    assert policy.next_delay(1, rng, retry_after_seconds=3.0) == 3.0
    assert policy.next_delay(1, rng, retry_after_seconds=3600.0) == 5.0
    # A Retry-After shorter than the backoff does not shorten it.
    assert policy.next_delay(4, rng, retry_after_seconds=0.01) == pytest.approx(0.8)


def test_parse_retry_after_seconds_and_dates():
    assert RetryPolicy.parse_retry_after("7") == 7.0
    assert RetryPolicy.parse_retry_after(None) is None
    assert RetryPolicy.parse_retry_after("soon") is None
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert RetryPolicy.parse_retry_after(date, now=1_000_000) == pytest.approx(30.0)
    assert RetryPolicy.parse_retry_after(date, now=2_000_000) == 0.0


def test_should_retry_bounds_attempts_and_elapsed_time():
    policy = RetryPolicy(max_attempts=3, max_elapsed_seconds=10.0)
    assert policy.should_retry(1, 0.0, 1.0)
    assert policy.should_retry(2, 0.0, 1.0)
    assert not policy.should_retry(3, 0.0, 1.0)
    assert not policy.should_retry(1, 9.5, 1.0)
    assert not RetryPolicy(max_attempts=1).should_retry(1, 0.0, 0.0)


def test_retryable_statuses_are_exactly_the_transient_ones():
    assert {408, 425, 429, 500, 502, 503, 504} == RETRYABLE_STATUSES
    assert not any(DEFAULT_RETRY.is_retryable_status(s) for s in (200, 206, 403, 404, 416))


@pytest.mark.parametrize(
    "make",
    [
        lambda: RetryPolicy(max_attempts=0),
        lambda: RetryPolicy(jitter=1.5),
        lambda: RetryPolicy(backoff_multiplier=0.5),
        lambda: RetryPolicy(max_elapsed_seconds=float("inf")),
        lambda: Timeouts(read_seconds=0),
        lambda: Timeouts(connect_seconds=float("nan")),
        lambda: Limits(max_connections_per_host=0),
        lambda: Limits(split_part_bytes=0),
        lambda: Limits(coalesce_gap_bytes=-2),
    ],
)
def test_invalid_settings_are_refused(make):
    with pytest.raises(ValueError):
        make()


def test_attempts_are_numbered_from_one():
    with pytest.raises(ValueError):
        RetryPolicy().next_delay(0, random.Random(0))


def test_file_info_version_comparison():
    a = FileInfo(10, '"x"', "Mon, 01 Jan 2024 00:00:00 GMT")
    assert a.same_version(FileInfo(10, '"x"', "Tue, 02 Jan 2024 00:00:00 GMT"))
    assert not a.same_version(FileInfo(10, '"y"', a.last_modified))
    assert not a.same_version(FileInfo(11, '"x"', a.last_modified))
    assert a.same_version(FileInfo(10, None, a.last_modified))
    assert not a.same_version(FileInfo(10, None, "Tue, 02 Jan 2024 00:00:00 GMT"))
    assert a.same_version(FileInfo(10))

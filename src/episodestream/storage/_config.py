"""Typed settings of the network readers: timeouts, concurrency limits and the retry policy."""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from episodestream._checks import check_int, check_number
from episodestream.errors import ConfigTypeError

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_RETRY",
    "DEFAULT_TIMEOUTS",
    "RETRYABLE_STATUSES",
    "Limits",
    "RetryPolicy",
    "Timeouts",
]

MIB = 1024 * 1024

# Statuses that say "try again" rather than "you asked for the wrong thing" (RFC 9110, 6585, 8470).
RETRYABLE_STATUSES: frozenset[int] = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Time bounds of one HTTP exchange, in seconds.

    Args:
        connect_seconds: TCP (and TLS) connection set-up.
        read_seconds: longest wait for any bytes: the response headers, the first body byte,
            and every later chunk. A server slower than this counts as a failed attempt.
        pool_seconds: longest wait for a free connection when the per-host pool is full.
    """

    connect_seconds: float = 10.0
    read_seconds: float = 30.0
    pool_seconds: float = 120.0

    def __post_init__(self) -> None:
        for name in ("connect_seconds", "read_seconds", "pool_seconds"):
            check_number(f"Timeouts.{name}", getattr(self, name), above=0)


@dataclass(frozen=True, slots=True)
class Limits:
    """Concurrency and request shaping of a network reader.

    Args:
        max_connections_per_host: persistent connections kept (and at most open) per host.
        max_concurrency: worker threads running ``read_many`` requests and split parts.
        split_threshold_bytes: a single range longer than this is fetched as parallel
            sub-ranges (to beat a per-connection bandwidth cap); ``0`` disables splitting.
        split_part_bytes: size of each sub-range when splitting.
        coalesce_gap_bytes: in ``read_many``, ranges of one file separated by at most this many
            bytes are fetched as one request; ``-1`` disables coalescing (``0`` merges only
            adjacent or overlapping ranges).
        coalesce_max_bytes: a coalesced request never grows past this many bytes.
    """

    max_connections_per_host: int = 16
    max_concurrency: int = 16
    split_threshold_bytes: int = 16 * MIB
    split_part_bytes: int = 4 * MIB
    coalesce_gap_bytes: int = 64 * 1024
    coalesce_max_bytes: int = 8 * MIB

    def __post_init__(self) -> None:
        for name, minimum in (
            ("max_connections_per_host", 1),
            ("max_concurrency", 1),
            ("split_threshold_bytes", 0),
            ("split_part_bytes", 1),
            ("coalesce_gap_bytes", -1),
            ("coalesce_max_bytes", 0),
        ):
            check_int(f"Limits.{name}", getattr(self, name), minimum=minimum)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how long to wait before trying a failed request again.

    A value object: it never sleeps and holds no counters, so one instance is shared freely.
    Attempts are numbered from 1 (the first failed attempt). Retried: connection errors,
    timeouts, short bodies and the statuses in ``retry_statuses``; never 404, 416 or a changed
    validator.

    Args:
        max_attempts: attempts in all, the first included (``1`` disables retries).
        max_elapsed_seconds: no retry starts after this long since the first attempt.
        backoff_initial_seconds: delay after the first failure.
        backoff_multiplier: growth of the delay per further failure.
        backoff_max_seconds: cap of the computed delay.
        jitter: fraction of the delay drawn at random (``0.5``: uniform in [50 %, 100 %]), so
            clients that failed together do not retry together.
        retry_after_max_seconds: a server's ``Retry-After`` is honoured up to this long.
        retry_statuses: HTTP statuses worth retrying.
        rate_limit_max_seconds: a 429 that announces when its quota resets (``RateLimit``
            headers, or ``Retry-After``) is waited out, for every thread asking that host,
            without counting as a failed attempt, if the window ends within this long; a
            longer announced wait fails at once, naming it.
    """

    max_attempts: int = 8
    max_elapsed_seconds: float = 120.0
    backoff_initial_seconds: float = 0.1
    backoff_multiplier: float = 2.0
    backoff_max_seconds: float = 10.0
    jitter: float = 0.5
    retry_after_max_seconds: float = 30.0
    retry_statuses: frozenset[int] = field(default=RETRYABLE_STATUSES)
    rate_limit_max_seconds: float = 900.0

    def __post_init__(self) -> None:
        check_int("RetryPolicy.max_attempts", self.max_attempts, minimum=1)
        check_number("RetryPolicy.jitter", self.jitter, minimum=0.0, maximum=1.0)
        for name in (
            "max_elapsed_seconds",
            "backoff_initial_seconds",
            "backoff_max_seconds",
            "retry_after_max_seconds",
            "rate_limit_max_seconds",
        ):
            check_number(f"RetryPolicy.{name}", getattr(self, name), minimum=0.0)
        check_number("RetryPolicy.backoff_multiplier", self.backoff_multiplier, minimum=1.0)
        statuses = self.retry_statuses
        if isinstance(statuses, str | bytes) or not isinstance(statuses, Collection):
            raise ConfigTypeError(
                f"RetryPolicy.retry_statuses must be a set of HTTP statuses, got {statuses!r}"
            )
        for status in statuses:
            check_int("RetryPolicy.retry_statuses", status, minimum=100)
        object.__setattr__(self, "retry_statuses", frozenset(statuses))

    def is_retryable_status(self, status: int) -> bool:
        return status in self.retry_statuses

    def next_delay(
        self, attempt: int, rng: random.Random, retry_after_seconds: float | None = None
    ) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based).

        Exponential backoff capped at ``backoff_max_seconds``, with jitter drawn from ``rng``;
        a server's ``Retry-After`` (already parsed to seconds) raises the delay to at most
        ``retry_after_max_seconds``.
        """
        check_int("attempt", attempt, minimum=1)  # attempts are numbered from 1
        exponent = min(attempt - 1, 64)  # bounded so the power never overflows
        base = min(
            self.backoff_max_seconds,
            self.backoff_initial_seconds * self.backoff_multiplier**exponent,
        )
        delay = base * (1.0 - self.jitter * rng.random())
        if retry_after_seconds is not None and retry_after_seconds > 0:
            delay = max(delay, min(retry_after_seconds, self.retry_after_max_seconds))
        return delay

    def should_retry(self, attempt: int, elapsed_seconds: float, delay_seconds: float) -> bool:
        """Whether failed attempt ``attempt`` may be followed by another after the delay."""
        return (
            attempt < self.max_attempts
            and elapsed_seconds + delay_seconds <= self.max_elapsed_seconds
        )

    @staticmethod
    def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
        """A ``Retry-After`` header (delta-seconds or HTTP-date) as seconds from ``now``."""
        if not value:
            return None
        value = value.strip()
        if value.isdigit():
            return float(value)
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        current = time.time() if now is None else now
        return max(0.0, when.timestamp() - current)


DEFAULT_TIMEOUTS = Timeouts()
DEFAULT_LIMITS = Limits()
DEFAULT_RETRY = RetryPolicy()

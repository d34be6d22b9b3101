"""Typed settings of the network readers: timeouts, concurrency limits and the retry policy."""

from __future__ import annotations

import email.utils
import os
import random
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from episodestream._checks import (
    MAX_BYTES,
    MAX_CONNECTIONS,
    MAX_WAIT_SECONDS,
    Bound,
    check_int,
    check_number,
)
from episodestream._frozen import FrozenDict
from episodestream.errors import ConfigTypeError

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_RETRY",
    "DEFAULT_TIMEOUTS",
    "MAX_BACKOFF_MULTIPLIER",
    "MAX_HTTP_STATUS",
    "MAX_RETRY_ATTEMPTS",
    "MAX_SEED",
    "MAX_TIMEOUT_SECONDS",
    "RETRYABLE_STATUSES",
    "Limits",
    "ReaderOptions",
    "RetryPolicy",
    "Timeouts",
]

MIB = 1024 * 1024
# Upper bounds of the option records' numbers, named in the error that refuses a value above
# one (byte sizes: MAX_BYTES; connections and threads: MAX_CONNECTIONS; retry waits:
# MAX_WAIT_SECONDS, all in episodestream._checks). Each is far above any useful value.
# No timeout beyond this (eleven days): sockets refuse a timeout past 2**31 s or so, and a
# longer one is a typo, not a wish.
MAX_TIMEOUT_SECONDS = Bound("MAX_TIMEOUT_SECONDS", 1e6, "about 11 days; a socket wait must end")
MAX_RETRY_ATTEMPTS = Bound("MAX_RETRY_ATTEMPTS", 10_000, "attempts of one request")
# the delay grows by at most this factor per failure (its power stays a finite float)
MAX_BACKOFF_MULTIPLIER = Bound("MAX_BACKOFF_MULTIPLIER", 100.0, "growth of a retry's delay")
MAX_HTTP_STATUS = Bound("MAX_HTTP_STATUS", 599, "HTTP statuses are three digits, 1xx to 5xx")
MAX_SEED = Bound("MAX_SEED", 2**64 - 1, "a seed is a 64-bit unsigned int")

# Statuses that say "try again" rather than "you asked for the wrong thing" (RFC 9110, 6585, 8470).
RETRYABLE_STATUSES: frozenset[int] = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Time bounds of the network readers, in seconds.

    Args:
        connect_seconds: TCP (and TLS) connection set-up.
        read_seconds: longest wait for any bytes: the response headers, the first body byte,
            and every later chunk. A server slower than this counts as a failed attempt. An
            exchange as a whole (1xx replies, head and body) may take this long plus the time
            its bytes take at 64 KiB/s, no longer.
        pool_seconds: longest wait for a free connection when the per-host pool is full.
        open_seconds: opening a dataset: reading its metadata (``meta/info.json``, the
            episodes, tasks and stats files) — every request, retry and wait of it together.
            Past it, a :class:`~episodestream.StorageTimeout` naming it.
    """

    connect_seconds: float = 10.0
    read_seconds: float = 30.0
    pool_seconds: float = 120.0
    open_seconds: float = 600.0

    def __post_init__(self) -> None:
        for name in ("connect_seconds", "read_seconds", "pool_seconds", "open_seconds"):
            check_number(
                f"Timeouts.{name}", getattr(self, name), above=0, maximum=MAX_TIMEOUT_SECONDS
            )


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
            maximum = MAX_CONNECTIONS if name.startswith("max_") else MAX_BYTES
            check_int(f"Limits.{name}", getattr(self, name), minimum=minimum, maximum=maximum)


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
        check_int(
            "RetryPolicy.max_attempts", self.max_attempts, minimum=1, maximum=MAX_RETRY_ATTEMPTS
        )
        check_number("RetryPolicy.jitter", self.jitter, minimum=0.0, maximum=1.0)
        for name in (
            "max_elapsed_seconds",
            "backoff_initial_seconds",
            "backoff_max_seconds",
            "retry_after_max_seconds",
            "rate_limit_max_seconds",
        ):
            check_number(
                f"RetryPolicy.{name}", getattr(self, name), minimum=0.0, maximum=MAX_WAIT_SECONDS
            )
        check_number(
            "RetryPolicy.backoff_multiplier",
            self.backoff_multiplier,
            minimum=1.0,
            maximum=MAX_BACKOFF_MULTIPLIER,
        )
        statuses = self.retry_statuses
        if isinstance(statuses, str | bytes) or not isinstance(statuses, Collection):
            raise ConfigTypeError(
                f"RetryPolicy.retry_statuses must be a set of HTTP statuses, got {statuses!r}"
            )
        for status in statuses:
            check_int("RetryPolicy.retry_statuses", status, minimum=100, maximum=MAX_HTTP_STATUS)
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


@dataclass(frozen=True, slots=True)
class ReaderOptions:
    """How a reader reaches its store: the typed form of :func:`open_reader`'s options.

    Every field defaults to ``None``, meaning the backend's own default; each backend takes
    the fields that apply to it and refuses the others when they are set (local paths take
    none). ``storage_options`` is the one pass-through: given to fsspec as it is.

    Attributes:
        token: Hub or HTTP bearer token (``False``: never send one); never in ``repr``.
        headers: extra request headers, treated as credentials (HTTP); never in ``repr``.
        endpoint: the Hub endpoint (``hf://``; default ``HF_ENDPOINT`` or the Hub).
        timeouts, limits, retry: :class:`Timeouts`, :class:`Limits`, :class:`RetryPolicy`.
        verify: TLS verification: ``True``, ``False`` or a CA bundle path (HTTP).
        failure_log: JSONL file of failed or retried attempts (HTTP).
        max_skip_bytes: how far past a range a server that ignores ``Range`` may be read.
        storage_options: fsspec's filesystem options (``{"anon": True}`` for public S3).
        max_concurrency: ranges in flight at once in ``read_many`` (fsspec).
        seed: seeds the backoff jitter (tests).
        transport: makes the HTTP client (see ``storage/http/_transport.py``; default our wire).

    A value: ``headers`` and ``storage_options`` are kept as read-only copies
    (``FrozenDict``; the caller's later changes do not leak in), equal options compare and hash
    equal (the mappings hashed by their contents), and it pickles, copies and goes through
    ``dataclasses.asdict``.
    """

    token: str | bool | None = field(default=None, repr=False)
    headers: Mapping[str, str] | None = field(default=None, repr=False)
    endpoint: str | None = None
    timeouts: Timeouts | None = None
    limits: Limits | None = None
    retry: RetryPolicy | None = None
    verify: bool | str | None = None
    failure_log: str | os.PathLike[str] | None = None
    max_skip_bytes: int | None = None
    storage_options: Mapping[str, Any] | None = field(default=None, repr=False)
    max_concurrency: int | None = None
    seed: int | None = None
    transport: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        for name, kind in (("timeouts", Timeouts), ("limits", Limits), ("retry", RetryPolicy)):
            value = getattr(self, name)
            if value is not None and not isinstance(value, kind):
                raise ConfigTypeError(
                    f"{name} must be a {kind.__name__}, got {type(value).__name__}"
                )
        for name in ("headers", "storage_options"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, Mapping):
                raise ConfigTypeError(f"{name} must be a dict, got {type(value).__name__}")
            if value is not None:  # a read-only copy: the caller's later changes do not leak in
                object.__setattr__(self, name, FrozenDict(value))
        for key, value in (self.headers or {}).items():
            if not isinstance(key, str) or not isinstance(value, str):
                # the names only: a header's value may be a credential
                raise ConfigTypeError(
                    f"headers must map str names to str values, got {type(key).__name__} -> "
                    f"{type(value).__name__}"
                )
        if self.token is not None and not isinstance(self.token, str | bool):
            raise ConfigTypeError(f"token must be a str or bool, got {type(self.token).__name__}")
        if self.endpoint is not None and not isinstance(self.endpoint, str):
            raise ConfigTypeError(f"endpoint must be a str URL, got {type(self.endpoint).__name__}")
        if self.verify is not None and not isinstance(self.verify, bool | str | os.PathLike):
            raise ConfigTypeError(
                f"verify must be True, False or a CA bundle path, got {type(self.verify).__name__}"
            )
        if self.failure_log is not None and not isinstance(self.failure_log, str | os.PathLike):
            raise ConfigTypeError(
                f"failure_log must be a file path, got {type(self.failure_log).__name__}"
            )
        if self.seed is not None:
            check_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        if self.max_skip_bytes is not None:
            check_int("max_skip_bytes", self.max_skip_bytes, minimum=0, maximum=MAX_BYTES)
        if self.max_concurrency is not None:
            check_int("max_concurrency", self.max_concurrency, minimum=1, maximum=MAX_CONNECTIONS)
        if self.transport is not None and not callable(self.transport):
            raise ConfigTypeError(
                f"transport must make a transport (a callable), got {type(self.transport).__name__}"
            )

    def __hash__(self) -> int:
        return hash(tuple(_hashable(getattr(self, f.name)) for f in fields(self)))

    def given(self) -> dict[str, Any]:
        """The fields that were set, by name (what a backend's constructor is called with)."""
        return {
            f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None
        }

    @classmethod
    def coerce(
        cls, value: ReaderOptions | Mapping[str, Any] | None, *, what: str = "reader_options"
    ) -> ReaderOptions:
        """``value`` as ReaderOptions: as it is, from a dict of its fields, or empty for None.

        Raises:
            ConfigTypeError: not a ReaderOptions or a dict, or a key that is no field (listing
                those there are).
        """
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise ConfigTypeError(
                f"{what} must be a ReaderOptions or a dict, got {type(value).__name__}"
            )
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(value) - set(names))
        if unknown:
            raise ConfigTypeError(
                f"{what}: unknown option(s) {', '.join(map(str, unknown))}; "
                f"it takes {', '.join(sorted(names))}"
            )
        return cls(**value)


def _hashable(value: Any) -> Any:
    """``value`` in a hashable form that equal values share (mappings and sequences by
    their contents; an unhashable leaf by its type, which equal values share too)."""
    if isinstance(value, Mapping):
        return frozenset((key, _hashable(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        return tuple(_hashable(item) for item in value)
    if isinstance(value, set | frozenset):
        return frozenset(_hashable(item) for item in value)
    try:
        hash(value)
    except TypeError:
        return type(value).__name__
    return value

"""Hostile values and locations at the storage layer (issue 26): each is a typed error before
it is used, and before any request where a server is involved.

- every numeric field of the option records (``Timeouts``, ``Limits``, ``RetryPolicy``,
  ``ReaderOptions``) and of the fsspec reader's arguments: negative, NaN, infinite, a bool, an
  absurd size (``1e300``, ``2**70``, ``10**5000``): a :class:`ConfigError` naming the field,
  the value shortened and, for a value too large, the named bound that refused it;
- fsspec filesystems that cannot be made (an unknown protocol, ``ftp://`` to a host that does
  not answer, a bad option): a :class:`LocationError`, not fsspec's own exception;
- a path or URL of 100,000 characters: every storage error shows it shortened (head and tail);
- a Hub repo name the Hub refuses (over 96 characters, ``--``, ``..``, ``.git``, characters
  outside ``[A-Za-z0-9._-]``): a :class:`LocationError` before any request.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from episodestream import ConfigError, ConfigTypeError, LocationError, StorageError
from episodestream.storage import (
    FsspecRangeReader,
    HttpRangeReader,
    Limits,
    LocalRangeReader,
    Location,
    ReaderOptions,
    RetryPolicy,
    Timeouts,
    open_reader,
)
from tests.plugins.storage import FaultServer, HubStandIn

# a refusal's message stays readable whatever it refuses
MESSAGE_BOUND_CHARS = 1000
# what a long path or URL may take in a message (it is shown shortened, head and tail)
SHOWN_PATH_CHARS = 400
BIG = 2**70
HUGE_INT = 10**5000
LONG = 100_000


def _error(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except Exception as error:  # what comes out, typed or not, is the subject
        return error
    raise AssertionError("accepted")


def _check_message(error: BaseException, names: tuple[str, ...]) -> None:
    message = str(error)
    for name in names:
        assert name in message, f"{message!r} does not name {name!r}"
    assert len(message) < MESSAGE_BOUND_CHARS, f"a message of {len(message)} characters"


# -- the option records: (record, field, value, error, names the message holds) ---------------

LIMIT_FIELDS = (
    ("max_connections_per_host", "MAX_CONNECTIONS"),
    ("max_concurrency", "MAX_CONNECTIONS"),
    ("split_threshold_bytes", "MAX_BYTES"),
    ("split_part_bytes", "MAX_BYTES"),
    ("coalesce_gap_bytes", "MAX_BYTES"),
    ("coalesce_max_bytes", "MAX_BYTES"),
)
RETRY_SECONDS = (
    "max_elapsed_seconds",
    "backoff_initial_seconds",
    "backoff_max_seconds",
    "retry_after_max_seconds",
    "rate_limit_max_seconds",
)
TIMEOUT_FIELDS = ("connect_seconds", "read_seconds", "pool_seconds", "open_seconds")

RECORD_CASES: list[tuple[str, type, dict[str, Any], type[Exception], tuple[str, ...]]] = []
for name, bound in LIMIT_FIELDS:
    RECORD_CASES += [
        (f"Limits.{name} 2**70", Limits, {name: BIG}, ConfigError, (f"Limits.{name}", bound)),
        (f"Limits.{name} 10**5000", Limits, {name: HUGE_INT}, ConfigError, ("an int of", bound)),
        (f"Limits.{name} -5", Limits, {name: -5}, ConfigError, (f"Limits.{name}", "-5")),
        (f"Limits.{name} True", Limits, {name: True}, ConfigTypeError, (f"Limits.{name}",)),
        (f"Limits.{name} 1e300", Limits, {name: 1e300}, ConfigTypeError, (f"Limits.{name}",)),
    ]
for name in RETRY_SECONDS:
    RECORD_CASES += [
        (
            f"RetryPolicy.{name} 1e300",
            RetryPolicy,
            {name: 1e300},
            ConfigError,
            (f"RetryPolicy.{name}", "MAX_WAIT_SECONDS", "1e+300"),
        ),
        (f"RetryPolicy.{name} NaN", RetryPolicy, {name: math.nan}, ConfigError, ("finite",)),
        (f"RetryPolicy.{name} -inf", RetryPolicy, {name: -math.inf}, ConfigError, ("finite",)),
        (f"RetryPolicy.{name} -1", RetryPolicy, {name: -1.0}, ConfigError, (name,)),
        (f"RetryPolicy.{name} True", RetryPolicy, {name: True}, ConfigTypeError, (name,)),
        (f"RetryPolicy.{name} 10**5000", RetryPolicy, {name: HUGE_INT}, ConfigError, ("finite",)),
    ]
RECORD_CASES += [
    (
        "RetryPolicy.max_attempts 2**70",
        RetryPolicy,
        {"max_attempts": BIG},
        ConfigError,
        ("RetryPolicy.max_attempts", "MAX_RETRY_ATTEMPTS"),
    ),
    (
        "RetryPolicy.max_attempts 0",
        RetryPolicy,
        {"max_attempts": 0},
        ConfigError,
        ("max_attempts",),
    ),
    (
        "RetryPolicy.max_attempts True",
        RetryPolicy,
        {"max_attempts": True},
        ConfigTypeError,
        ("max_attempts",),
    ),
    (
        "RetryPolicy.backoff_multiplier 1e300",
        RetryPolicy,
        {"backoff_multiplier": 1e300},
        ConfigError,
        ("RetryPolicy.backoff_multiplier", "MAX_BACKOFF_MULTIPLIER"),
    ),
    (
        "RetryPolicy.backoff_multiplier inf",
        RetryPolicy,
        {"backoff_multiplier": math.inf},
        ConfigError,
        ("backoff_multiplier", "finite"),
    ),
    (
        "RetryPolicy.backoff_multiplier NaN",
        RetryPolicy,
        {"backoff_multiplier": math.nan},
        ConfigError,
        ("backoff_multiplier", "finite"),
    ),
    ("RetryPolicy.jitter NaN", RetryPolicy, {"jitter": math.nan}, ConfigError, ("jitter",)),
    ("RetryPolicy.jitter 2", RetryPolicy, {"jitter": 2.0}, ConfigError, ("jitter",)),
    (
        "RetryPolicy.retry_statuses 2**70",
        RetryPolicy,
        {"retry_statuses": {BIG}},
        ConfigError,
        ("retry_statuses", "MAX_HTTP_STATUS"),
    ),
    (
        "RetryPolicy.retry_statuses True",
        RetryPolicy,
        {"retry_statuses": {True}},
        ConfigTypeError,
        ("retry_statuses",),
    ),
]
for name in TIMEOUT_FIELDS:
    RECORD_CASES += [
        (
            f"Timeouts.{name} 1e300",
            Timeouts,
            {name: 1e300},
            ConfigError,
            (f"Timeouts.{name}", "MAX_TIMEOUT_SECONDS"),
        ),
        (f"Timeouts.{name} NaN", Timeouts, {name: math.nan}, ConfigError, ("finite",)),
        (f"Timeouts.{name} inf", Timeouts, {name: math.inf}, ConfigError, ("finite",)),
        (f"Timeouts.{name} -1", Timeouts, {name: -1.0}, ConfigError, (name,)),
        (f"Timeouts.{name} True", Timeouts, {name: True}, ConfigTypeError, (name,)),
    ]
RECORD_CASES += [
    (
        "ReaderOptions.max_skip_bytes 2**70",
        ReaderOptions,
        {"max_skip_bytes": BIG},
        ConfigError,
        ("max_skip_bytes", "MAX_BYTES"),
    ),
    (
        "ReaderOptions.max_skip_bytes -1",
        ReaderOptions,
        {"max_skip_bytes": -1},
        ConfigError,
        ("max_skip_bytes",),
    ),
    (
        "ReaderOptions.max_skip_bytes 1e300",
        ReaderOptions,
        {"max_skip_bytes": 1e300},
        ConfigTypeError,
        ("max_skip_bytes",),
    ),
    (
        "ReaderOptions.max_concurrency 2**70",
        ReaderOptions,
        {"max_concurrency": BIG},
        ConfigError,
        ("max_concurrency", "MAX_CONNECTIONS"),
    ),
    (
        "ReaderOptions.max_concurrency True",
        ReaderOptions,
        {"max_concurrency": True},
        ConfigTypeError,
        ("max_concurrency",),
    ),
    (
        "ReaderOptions.seed 2**70",
        ReaderOptions,
        {"seed": BIG},
        ConfigError,
        ("seed", "MAX_SEED"),
    ),
    (
        "ReaderOptions.seed 10**5000",
        ReaderOptions,
        {"seed": HUGE_INT},
        ConfigError,
        ("seed", "an int of"),
    ),
    ("ReaderOptions.seed -1", ReaderOptions, {"seed": -1}, ConfigError, ("seed",)),
]


@pytest.mark.parametrize(
    ("case", "record", "kwargs", "error", "names"), RECORD_CASES, ids=[c[0] for c in RECORD_CASES]
)
def test_an_option_record_refuses_a_hostile_number(
    case: str,
    record: type,
    kwargs: dict[str, Any],
    error: type[Exception],
    names: tuple[str, ...],
) -> None:
    refusal = _error(lambda: record(**kwargs))
    assert isinstance(refusal, error), f"{case}: {refusal!r}"
    _check_message(refusal, names)


# -- the fsspec reader's own arguments ---------------------------------------------------------

FSSPEC_ARGUMENT_CASES: list[tuple[str, dict[str, Any], type[Exception], tuple[str, ...]]] = [
    ("max_concurrency 2**70", {"max_concurrency": BIG}, ConfigError, ("MAX_CONNECTIONS",)),
    ("max_concurrency 0", {"max_concurrency": 0}, ConfigError, ("max_concurrency",)),
    ("max_concurrency True", {"max_concurrency": True}, ConfigTypeError, ("max_concurrency",)),
    ("max_concurrency 1e300", {"max_concurrency": 1e300}, ConfigTypeError, ("max_concurrency",)),
    ("storage_options a list", {"storage_options": [1]}, ConfigTypeError, ("storage_options",)),
    ("limits an int", {"limits": 5}, ConfigTypeError, ("limits",)),
    ("timeouts None", {"timeouts": None}, ConfigTypeError, ("timeouts",)),
]


@pytest.mark.parametrize(
    ("case", "kwargs", "error", "names"),
    FSSPEC_ARGUMENT_CASES,
    ids=[c[0] for c in FSSPEC_ARGUMENT_CASES],
)
def test_the_fsspec_reader_refuses_a_hostile_argument(
    case: str, kwargs: dict[str, Any], error: type[Exception], names: tuple[str, ...]
) -> None:
    refusal = _error(lambda: FsspecRangeReader("memory://hostile", **kwargs))
    assert isinstance(refusal, error), f"{case}: {refusal!r}"
    _check_message(refusal, names)


# -- fsspec filesystems that cannot be made ----------------------------------------------------


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


FILESYSTEM_CASES: list[tuple[str, Callable[[], str], dict[str, Any], tuple[str, ...]]] = [
    ("unknown protocol", lambda: "nosuchproto://bucket/data", {}, ("nosuchproto",)),
    ("ftp, nobody listening", lambda: f"ftp://127.0.0.1:{_closed_port()}/data", {}, ("ftp",)),
    (
        "ftp, a port that is no number",
        lambda: "ftp://127.0.0.1/data",
        {"port": "not-a-port"},
        ("ftp",),
    ),
    ("a protocol missing its arguments", lambda: "github://data", {}, ("github",)),
    (
        "s3 config_kwargs not a dict",
        lambda: "s3://bucket/data",
        {"anon": True, "config_kwargs": 5},
        ("s3",),
    ),
]


@pytest.mark.parametrize(
    ("case", "url", "storage_options", "names"),
    FILESYSTEM_CASES,
    ids=[c[0] for c in FILESYSTEM_CASES],
)
def test_a_filesystem_that_cannot_be_made_is_a_location_error(
    case: str,
    url: Callable[[], str],
    storage_options: dict[str, Any],
    names: tuple[str, ...],
) -> None:
    with open_reader(url(), storage_options=storage_options) as reader:
        refusal = _error(lambda: reader.size("meta/info.json"))
    assert isinstance(refusal, LocationError), f"{case}: {refusal!r}"
    _check_message(refusal, names)


# -- long paths and URLs in messages -----------------------------------------------------------


def _assert_shortened(error: BaseException, head: str, tail: str) -> None:
    message = str(error)
    assert len(message) < MESSAGE_BOUND_CHARS, f"a message of {len(message)} characters"
    assert head in message, f"{message!r} lost the path's head"
    assert tail in message, f"{message!r} lost the path's tail"


LONG_LOCATION_CASES: list[tuple[str, str, str]] = [
    # (case, root, what its message must still show of the end)
    ("hub, long revision", "hf://datasets/org/name@" + "r" * LONG + " x/tail-end", "tail-end"),
    ("hub, long repo type", "hf://" + "d" * LONG + "tail-end/org/name", "org/name"),
    ("hub, long name", "hf://datasets/org/" + "n" * LONG + "tail-end", "tail-end"),
    ("file URL, remote host", "file://" + "h" * LONG + "tail-end/x", "tail-end/x"),
    ("http, long query", "https://host.example/" + "x" * LONG + "?q=tail-end", "xxxx"),
    ("s3, password", "s3://user:pw@" + "b" * LONG + "tail-end", "tail-end"),
    ("http, bad port", "http://127.0.0.1:99999999/" + "p" * LONG + "tail-end", "tail-end"),
]


@pytest.mark.parametrize(
    ("case", "root", "tail"), LONG_LOCATION_CASES, ids=[c[0] for c in LONG_LOCATION_CASES]
)
def test_a_long_location_is_shortened_in_its_error(case: str, root: str, tail: str) -> None:
    refusal = _error(lambda: Location.parse(root))
    assert isinstance(refusal, LocationError), f"{case}: {refusal!r}"
    _assert_shortened(refusal, root[: root.index("//") + 2], tail)


def test_a_long_path_is_shortened_in_a_local_error(tmp_path: Path) -> None:
    with LocalRangeReader(tmp_path) as reader:
        refusal = _error(lambda: reader.size("a" * LONG + "/tail-end"))
    assert isinstance(refusal, StorageError), repr(refusal)
    _assert_shortened(refusal, "aaaa", "tail-end")


def test_a_long_path_is_shortened_in_an_fsspec_error() -> None:
    with FsspecRangeReader("memory://" + "b" * LONG + "-root") as reader:
        refusal = _error(lambda: reader.size("p" * LONG + "/tail-end"))
    assert isinstance(refusal, StorageError), repr(refusal)
    _assert_shortened(refusal, "memory://bbbb", "tail-end")


def test_a_long_url_is_shortened_in_an_http_error(fault_server: FaultServer) -> None:
    base = fault_server.url + "/" + "u" * (LONG // 10)
    with HttpRangeReader(base, retry=RetryPolicy(max_attempts=1)) as reader:
        refusal = _error(lambda: reader.size("p" * (LONG // 10) + "/tail-end"))
    assert isinstance(refusal, StorageError), repr(refusal)
    _assert_shortened(refusal, fault_server.url, "tail-end")
    assert len(fault_server.requests) == 1  # the one that found nothing


def test_a_long_url_is_shortened_when_the_reader_refuses_it() -> None:
    refusal = _error(lambda: HttpRangeReader("ftp://" + "h" * LONG + "/tail-end"))
    assert isinstance(refusal, StorageError), repr(refusal)
    _assert_shortened(refusal, "ftp://hhhh", "tail-end")


# -- Hub repo names the Hub refuses ------------------------------------------------------------

HUB_NAME_CASES: list[tuple[str, str]] = [
    ("name of 97 characters", "org/" + "n" * 97),
    ("namespace of 97 characters", "o" * 97 + "/name"),
    ("name of 100,000 characters", "org/" + "n" * LONG),
    ("double dash", "org/na--me"),
    ("double dot", "org/na..me"),
    ("ends in .git", "org/name.git"),
    ("ends in a dash", "org/name-"),
    ("ends in a dot", "org/name."),
    ("starts with a dot", "org/.name"),
    ("a space", "org/na me"),
    ("a non-ASCII letter", "org/nämé"),
    ("a percent sign", "org/na%2Fme"),
    ("a control character", "org/na\x1bme"),
]


@pytest.mark.parametrize(("case", "repo_id"), HUB_NAME_CASES, ids=[c[0] for c in HUB_NAME_CASES])
def test_a_hub_name_the_hub_refuses_is_refused_before_any_request(
    case: str, repo_id: str, hub_standin: HubStandIn
) -> None:
    refusal = _error(lambda: hub_standin.open_reader(f"hf://datasets/{repo_id}"))
    assert isinstance(refusal, LocationError), f"{case}: {refusal!r}"
    _check_message(refusal, ("hf://datasets/",))
    assert hub_standin.hub_requests == [], f"{case}: requests were made"
    assert hub_standin.cdn_requests == []


def test_a_name_of_96_characters_is_accepted(hub_standin: HubStandIn) -> None:
    repo_id = "o" * 96 + "/" + "n" * 96
    hub_standin.commit(repo_id, {"meta/info.json": b"{}"})
    with hub_standin.open_reader(f"hf://datasets/{repo_id}") as reader:
        assert reader.size("meta/info.json") == 2

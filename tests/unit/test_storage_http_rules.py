"""The HTTP reader's socket-free rules (storage/http/_rules.py), one table per rule.

Each row is an input a server (honest, broken or hostile) may send and what the rule decides;
no server, no socket, no clock.
"""

from __future__ import annotations

import ast
import inspect

import pytest

from episodestream.storage.http import _rules as _httprules
from episodestream.storage.http._rules import (
    AnswerError,
    ContentRange,
    Identity,
    body_encoding,
    check_partial,
    check_partial_framing,
    coalesce_ranges,
    declared_length,
    describe_error,
    if_range_validator,
    parse_content_range,
    pin_identity,
    redirect_target,
    split_range,
    target_is_fresh,
    unsatisfied_total,
)

# ------------------------------------------------------------------ Content-Range (206)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes 0-0/1", ContentRange(0, 0, 1)),
        ("bytes 10-19/100", ContentRange(10, 19, 100)),
        ("BYTES 10-19/100", ContentRange(10, 19, 100)),  # the unit is case-insensitive
        ("  bytes 10-19/100  ", ContentRange(10, 19, 100)),
        ("bytes 10-19/*", ContentRange(10, 19, None)),  # total unknown
        ("bytes 0-99999999999/100000000000", ContentRange(0, 99999999999, 100000000000)),
        (None, None),
        ("", None),
        ("bytes */100", None),  # a 416's form, not a 206's
        ("bytes 10-/100", None),
        ("bytes -10/100", None),
        ("bytes 10-19", None),
        ("items 10-19/100", None),
        ("bytes 10-19/100, bytes 30-39/100", None),  # two ranges: multipart is never asked
        ("bytes 1e3-19/100", None),
        ("bytes 0x10-19/100", None),
        ("bytes 10-19/100\r\nX-Injected: 1", None),
    ],
)
def test_parse_content_range(value: str | None, expected: ContentRange | None) -> None:
    assert parse_content_range(value) == expected


@pytest.mark.parametrize(
    ("value", "start", "end", "expected"),
    [
        ("bytes 10-19/100", 10, 20, ContentRange(10, 19, 100)),
        ("bytes 10-14/100", 10, 20, ContentRange(10, 14, 100)),  # short: resumed from 15
        ("bytes 10-19/*", 10, 20, ContentRange(10, 19, None)),
        ("bytes 90-99/100", 90, 200, ContentRange(90, 99, 100)),  # ends at the file's end
    ],
)
def test_check_partial_accepts(value: str, start: int, end: int, expected: ContentRange) -> None:
    assert check_partial(value, start, end) == expected
    assert check_partial(value, start, end).length == expected.last - expected.first + 1


@pytest.mark.parametrize(
    ("value", "start", "end", "message"),
    [
        (None, 10, 20, "206 with Content-Range ''"),
        ("garbage", 10, 20, "206 with Content-Range 'garbage'"),
        ("bytes 0-9/100", 10, 20, "server answered"),  # another range
        ("bytes 11-19/100", 10, 20, "server answered"),  # starts late
        ("bytes 10-20/100", 10, 20, "server answered"),  # one byte too many
        ("bytes 10-9/100", 10, 20, "server answered"),  # inverted
        ("bytes 10-19/15", 10, 20, "server answered"),  # past the total it announces
    ],
)
def test_check_partial_refuses(value: str | None, start: int, end: int, message: str) -> None:
    with pytest.raises(AnswerError, match=message):
        check_partial(value, start, end)


@pytest.mark.parametrize(
    ("headers", "expected", "ok"),
    [
        ({}, 10, True),  # no Content-Length: the Content-Range decides
        ({"Content-Length": "10"}, 10, True),
        ({"Content-Length": " 10 "}, 10, True),
        ({"Content-Length": "11"}, 10, False),
        ({"Content-Length": "9"}, 10, False),
        ({"Content-Length": "ten"}, 10, False),
        ({"Content-Length": "10, 10"}, 10, False),
    ],
)
def test_check_partial_framing(headers: dict[str, str], expected: int, ok: bool) -> None:
    if ok:
        check_partial_framing(headers, expected)
    else:
        with pytest.raises(AnswerError, match="does not match Content-Range"):
            check_partial_framing(headers, expected)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"Content-Encoding": "identity"}, None),
        ({"Content-Encoding": ""}, None),
        ({"Content-Encoding": "IDENTITY "}, None),
        ({"Content-Encoding": "gzip"}, "gzip"),
        ({"Content-Encoding": "GZip"}, "gzip"),
        ({"Content-Encoding": "br"}, "br"),
    ],
)
def test_body_encoding(headers: dict[str, str], expected: str | None) -> None:
    assert body_encoding(headers) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("100", 100),
        (" 100 ", 100),
        ("0", 0),
        (None, None),
        ("-1", None),
        ("1e3", None),
        ("100, 100", None),
        ("", None),
    ],
)
def test_declared_length(value: str | None, expected: int | None) -> None:
    headers = {} if value is None else {"Content-Length": value}
    assert declared_length(headers) == expected


# ------------------------------------------------------------------ 416


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("bytes */100", 100),
        ("bytes */0", 0),  # an empty file
        ("Bytes  */100 ", 100),
        ("bytes */*", None),
        ("bytes 0-9/100", None),
        ("*/100", None),
        (None, None),
        ("", None),
    ],
)
def test_unsatisfied_total(value: str | None, expected: int | None) -> None:
    assert unsatisfied_total(value) == expected


# ------------------------------------------------------------------ identity pinning

KNOWN = Identity(100, '"v1"', "Mon, 01 Jan 2024 00:00:00 GMT")


@pytest.mark.parametrize(
    ("known", "seen", "trusted", "pinned", "changes"),
    [
        # first sight pins every field the answer has
        (Identity(), Identity(100, '"v1"', "d1"), True, Identity(100, '"v1"', "d1"), ()),
        (Identity(), Identity(100), True, Identity(100), ()),
        # the same file again: nothing changes
        (KNOWN, KNOWN, True, KNOWN, ()),
        # an answer that says less (no validators, unknown total) is no change
        (KNOWN, Identity(), True, KNOWN, ()),
        (KNOWN, Identity(None, '"v1"'), True, KNOWN, ()),
        # validators learned later are added, pinned ones never replaced
        (Identity(100), Identity(100, '"v1"'), True, Identity(100, '"v1"'), ()),
        # a changed size, ETag, or both
        (KNOWN, Identity(120, '"v1"'), True, KNOWN, ("size 100 -> 120",)),
        (KNOWN, Identity(100, '"v2"'), True, KNOWN, ('ETag "v1" -> "v2"',)),
        (KNOWN, Identity(120, '"v2"'), True, KNOWN, ("size 100 -> 120", 'ETag "v1" -> "v2"')),
        # Last-Modified decides only when there are no two ETags to compare
        (
            Identity(100, None, "d1"),
            Identity(100, None, "d2"),
            True,
            Identity(100, None, "d1"),
            ("Last-Modified d1 -> d2",),
        ),
        (KNOWN, Identity(100, '"v1"', "d2"), True, KNOWN, ()),  # same ETag: a touched mtime
        (
            Identity(100, None, "d1"),
            Identity(100, '"v1"', "d2"),
            True,
            Identity(100, None, "d1"),
            ("Last-Modified d1 -> d2",),
        ),
        # an untrusted host (a CDN): validators ignored, the size alone checked
        (KNOWN, Identity(100, '"cdn-etag"', "d9"), False, KNOWN, ()),
        (Identity(), Identity(100, '"cdn-etag"', "d9"), False, Identity(100), ()),
        # empty header values pin nothing
        (Identity(), Identity(100, "", ""), True, Identity(100), ()),
    ],
)
def test_pin_identity(
    known: Identity, seen: Identity, trusted: bool, pinned: Identity, changes: tuple[str, ...]
) -> None:
    verdict = pin_identity(known, seen, trusted=trusted)
    assert verdict.pinned == pinned
    assert verdict.changes == changes
    assert verdict.foreign_size is None


def test_an_untrusted_size_mismatch_is_a_bad_answer_not_a_change() -> None:
    verdict = pin_identity(KNOWN, Identity(120, '"v2"'), trusted=False)
    assert verdict.foreign_size == 120
    assert verdict.changes == ()
    assert verdict.pinned == KNOWN


@pytest.mark.parametrize(
    ("etag", "last_modified", "expected"),
    [
        ('"v1"', "d1", '"v1"'),  # a strong ETag first
        ('W/"v1"', "d1", "d1"),  # never a weak one (RFC 9110 13.1.5)
        ('W/"v1"', None, None),
        (None, "d1", "d1"),
        (None, None, None),
        ("", "", None),
    ],
)
def test_if_range_validator(
    etag: str | None, last_modified: str | None, expected: str | None
) -> None:
    assert if_range_validator(etag, last_modified) == expected


# ------------------------------------------------------------------ splitting


@pytest.mark.parametrize(
    ("offset", "length", "threshold", "part", "expected"),
    [
        (0, 100, 0, 10, [(0, 100)]),  # threshold 0: never split
        (0, 100, 100, 10, [(0, 100)]),  # at the threshold: one piece
        (5, 100, 99, 50, [(5, 50), (55, 50)]),
        (0, 101, 100, 50, [(0, 34), (34, 34), (68, 33)]),  # even parts, no straggler
        (0, 10, 1, 1, [(i, 1) for i in range(10)]),
        (7, 3, 2, 100, [(7, 3)]),  # one part of at most `part` bytes
    ],
)
def test_split_range(
    offset: int, length: int, threshold: int, part: int, expected: list[tuple[int, int]]
) -> None:
    parts = split_range(offset, length, threshold, part)
    assert parts == expected
    assert sum(size for _, size in parts) == length
    assert len(parts) == 1 or all(size <= part for _, size in parts)
    # contiguous and in order
    assert [start for start, _ in parts] == [
        offset + sum(s for _, s in parts[:i]) for i in range(len(parts))
    ]


# ------------------------------------------------------------------ coalescing


@pytest.mark.parametrize(
    ("spans", "gap", "ceiling", "expected"),
    [
        ([], 0, 100, []),
        ([(0, 10)], 0, 100, [(0, 10, [0])]),
        ([(0, 10), (10, 20)], 0, 100, [(0, 20, [0, 1])]),  # touching
        ([(0, 10), (11, 20)], 0, 100, [(0, 10, [0]), (11, 20, [1])]),  # one byte apart
        ([(0, 10), (11, 20)], 1, 100, [(0, 20, [0, 1])]),  # within the gap
        ([(0, 10), (5, 8)], 0, 100, [(0, 10, [0, 1])]),  # contained
        ([(20, 30), (0, 10), (10, 20)], 0, 100, [(0, 30, [1, 2, 0])]),  # any order
        ([(0, 60), (60, 120)], 0, 100, [(0, 60, [0]), (60, 120, [1])]),  # ceiling
        ([(0, 10), (10, 20)], -1, 100, [(0, 10, [0]), (10, 20, [1])]),  # gap < 0: off
        ([(0, 10), (0, 10)], -1, 100, [(0, 10, [0]), (0, 10, [1])]),  # duplicates kept apart
        ([(0, 10), (0, 10)], 0, 100, [(0, 10, [0, 1])]),
    ],
)
def test_coalesce_ranges(
    spans: list[tuple[int, int]],
    gap: int,
    ceiling: int,
    expected: list[tuple[int, int, list[int]]],
) -> None:
    merged = coalesce_ranges(spans, gap, ceiling)
    assert merged == expected
    # every member lies inside its group
    for start, end, members in merged:
        assert all(start <= spans[m][0] and spans[m][1] <= end for m in members)
    assert sorted(m for _, _, members in merged for m in members) == list(range(len(spans)))


# ------------------------------------------------------------------ redirects

ORIGIN = "https://hub.example/datasets/x/resolve/main/a.mp4"


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("https://cdn.example/a?sig=1", "https://cdn.example/a?sig=1"),
        ("/other/a.mp4", "https://hub.example/other/a.mp4"),  # relative to the origin
        ("b.mp4", "https://hub.example/datasets/x/resolve/main/b.mp4"),
        ("//cdn.example/a", "https://cdn.example/a"),  # scheme-relative
        ("http://plain.example/a", "http://plain.example/a"),  # a downgrade is the caller's call
        ("https://cdn.example/a%20b", "https://cdn.example/a%20b"),
    ],
)
def test_redirect_target_resolves(location: str, expected: str) -> None:
    assert redirect_target(ORIGIN, location) == expected


@pytest.mark.parametrize(
    ("location", "message"),
    [
        (None, "without Location"),
        ("", "without Location"),
        ("https://cdn.example/a\r\nX-Injected: 1", "control characters"),
        ("https://cdn.example/a\nb", "control characters"),
        ("https://cdn.example/a\tb", "control characters"),  # urljoin would drop the tab
        ("https://cdn.example/a b", "control characters"),
        ("https://cdn.example/a\x00", "control characters"),
        ("https://cdn.example/a\x7f", "control characters"),
        ("file:///etc/passwd", "non-HTTP"),
        ("ftp://cdn.example/a", "non-HTTP"),
        ("javascript:alert(1)", "non-HTTP"),
        ("https://[::1/a", "invalid URL"),  # an unterminated IPv6 literal
        ("http://127.0.0.1:99999/", "invalid port"),  # urllib would raise ValueError later
        ("http://cdn.example:port/a", "invalid port"),
        ("https://[::1]:70000/a", "invalid port"),
        ("http://:80/a", "without a host"),
    ],
)
def test_redirect_target_refuses(location: str | None, message: str) -> None:
    with pytest.raises(AnswerError, match=message):
        redirect_target(ORIGIN, location)


def test_a_refused_location_never_shows_its_signature() -> None:
    with pytest.raises(AnswerError) as caught:
        redirect_target(ORIGIN, "ftp://cdn.example/a?X-Amz-Signature=SECRET123")
    assert "SECRET123" not in str(caught.value)


NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("target", "fresh"),
    [
        ("https://cdn.example/a", True),  # announces no expiry
        (f"https://cdn.example/a?expires={int(NOW) + 60}", True),
        (f"https://cdn.example/a?Expires={int(NOW) + 60}", True),
        (f"https://cdn.example/a?expires={int(NOW) + 1}", False),  # inside the margin
        (f"https://cdn.example/a?expires={int(NOW) - 1}", False),
        ("https://cdn.example/a?X-Amz-Date=20231114T221320Z&X-Amz-Expires=3600", True),
        ("https://cdn.example/a?X-Amz-Date=20231114T211320Z&X-Amz-Expires=60", False),
        ("https://cdn.example/a?expires=soon", True),  # unrecognised: tried, a 403 re-resolves
    ],
)
def test_target_is_fresh(target: str, fresh: bool) -> None:
    assert target_is_fresh(target, NOW) is fresh


# ------------------------------------------------------------------ error text


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (TimeoutError(), "TimeoutError"),
        (ConnectionResetError("reset by peer"), "ConnectionResetError: reset by peer"),
        (OSError("cannot reach https://cdn.example/a?sig=SECRET"), "OSError: cannot reach <url>"),
    ],
)
def test_describe_error_drops_urls(error: BaseException, expected: str) -> None:
    assert describe_error(error) == expected


def test_the_rules_module_stays_socket_free() -> None:
    """No sockets, threads, clock or transport: every rule is a function of its arguments."""
    tree = ast.parse(inspect.getsource(_httprules))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    forbidden = {"socket", "ssl", "select", "threading", "time", "asyncio", "os"}
    assert not imported & forbidden
    assert not any(name.endswith(("_wire", "_http", "_transport")) for name in imported)

"""Pure bookkeeping of redirect targets: the per-host book and presigned-URL expiry parsing."""

from __future__ import annotations

import calendar
import threading

import pytest

from episodestream.storage.http._redirects import HostMode, RedirectBook, signed_url_expiry

A = "https://cas-bridge.example/a?x=1"
A_OTHER = "https://cas-bridge.example/b?x=2"
B = "https://cdn-lfs.example/a"


def test_one_probe_per_host_then_a_final_verdict():
    book = RedirectBook()
    assert book.mode(A) is HostMode.UNKNOWN
    assert book.may_reuse(A)  # this caller holds the probe
    assert book.mode(A) is HostMode.PROBING
    assert not book.may_reuse(A_OTHER)  # everyone else goes through the origin meanwhile
    assert book.may_reuse(B)  # another host has its own probe
    assert book.report(A, refused=True)
    assert book.mode(A_OTHER) is HostMode.RANGE_BOUND
    assert not book.may_reuse(A_OTHER)
    assert not book.report(A, refused=False)  # a final verdict does not change
    assert book.report(B, refused=False)
    assert book.may_reuse(B) and book.may_reuse(B)
    # a refusal on a host known reusable is an expired target: nothing learnt
    assert not book.report(B, refused=True)
    assert book.mode(B) is HostMode.REUSABLE


def test_a_probe_without_verdict_is_released():
    book = RedirectBook()
    assert book.may_reuse(A)
    book.release(A)
    assert book.mode(A) is HostMode.UNKNOWN
    assert book.may_reuse(A)
    book.forget()
    assert book.mode(A) is HostMode.UNKNOWN


def test_hosts_are_told_apart_by_scheme_and_port():
    book = RedirectBook()
    assert book.may_reuse("https://h/x")
    book.report("https://h/x", refused=True)
    assert book.mode("https://h:443/y") is HostMode.RANGE_BOUND
    assert book.mode("http://h/x") is HostMode.UNKNOWN
    assert book.mode("https://h:8443/x") is HostMode.UNKNOWN


def test_many_threads_get_exactly_one_probe():
    book = RedirectBook()
    barrier = threading.Barrier(16)
    granted: list[bool] = []

    def ask() -> None:
        barrier.wait()
        granted.append(book.may_reuse(A))

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(granted) == [False] * 15 + [True]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://s3.example/k?X-Amz-Algorithm=AWS4&X-Amz-Date=20250102T030405Z"
            "&X-Amz-Expires=3600&X-Amz-Signature=ab",
            calendar.timegm((2025, 1, 2, 3, 4, 5)) + 3600,
        ),
        (
            "https://storage.googleapis.com/b/o?X-Goog-Date=20250102T030405Z&X-Goog-Expires=60",
            calendar.timegm((2025, 1, 2, 3, 4, 5)) + 60,
        ),
        ("https://cdn-lfs.example/x?Expires=1735787045&Signature=s&Key-Pair-Id=k", 1735787045),
        ("http://127.0.0.2:1/blobs/ab?expires=1700000000&signature=f", 1700000000),
        ("https://h/x", None),
        ("https://h/x?Expires=soon", None),
        ("https://h/x?X-Amz-Date=garbage&X-Amz-Expires=60", None),
    ],
)
def test_signed_url_expiry(url, expected):
    assert signed_url_expiry(url) == expected

"""Rate-limit headers parsed (pure), and the shared per-host gate (threads, no sockets)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time

import pytest

from episodestream.storage import RetryPolicy
from episodestream.storage.http._hostgate import HostGates
from episodestream.storage.http._ratelimit import RateLimit, parse_rate_limit

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


# Windows here are long (minutes) and ended by the test itself, so no assertion depends on
# how fast a loaded machine runs: what is asserted is order (who returned before what).
LONG_WINDOW_SECONDS = 600.0
# Bounds on waits for something the test causes; reached only when the code under test fails.
NEVER_SECONDS = 60.0


class _WatchedStop(threading.Event):
    """A stop event that counts the threads blocked in ``wait`` on it: the test knows when
    every worker is inside its gate wait, without sleeping to guess."""

    def __init__(self) -> None:
        super().__init__()
        self._count_lock = threading.Lock()
        self.waiting: set[int] = set()

    def wait(self, timeout: float | None = None) -> bool:
        with self._count_lock:
            self.waiting.add(threading.get_ident())
        return super().wait(timeout)

    def until_waiting(self, count: int) -> None:
        deadline = time.monotonic() + NEVER_SECONDS
        while len(self.waiting) < count:
            assert time.monotonic() < deadline, f"only {len(self.waiting)} of {count} waiting"
            time.sleep(0.01)


def test_gate_is_shared_by_threads_and_logged_once(caplog):
    gates = HostGates()
    caplog.set_level(logging.WARNING, logger="episodestream.storage")
    stop = _WatchedStop()
    assert gates.wait("https://hub.example/x", stop) == 0.0
    assert not stop.waiting  # an open gate returns at once
    assert gates.hold("https://hub.example/a", LONG_WINDOW_SECONDS, "quota 'api' exhausted")
    assert not gates.hold("https://hub.example/b", 0.3, "again")  # same window: no new log
    assert gates.remaining("https://other.example/") == 0.0
    returned: list[tuple[float, float]] = []  # (seconds waited, when it returned)

    def worker() -> None:
        waited = gates.wait("https://hub.example/c", stop, slice_seconds=0.05)
        returned.append((waited, time.monotonic()))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    stop.until_waiting(8)  # every thread is held by the gate another URL of its host closed
    assert not returned
    assert gates.remaining("https://hub.example/") > LONG_WINDOW_SECONDS / 2
    opened = time.monotonic()
    gates.forget()  # the window ends now
    for thread in threads:
        thread.join(NEVER_SECONDS)
    assert len(returned) == 8
    assert all(waited > 0 and when >= opened for waited, when in returned)
    assert not stop.is_set()  # they returned because the gate opened, not because of stop
    assert gates.remaining("https://hub.example/") == 0.0
    records = [r for r in caplog.records if "rate-limits us" in r.getMessage()]
    assert len(records) == 1
    assert "hub.example" in records[0].getMessage() and "quota 'api'" in records[0].getMessage()
    assert f"waits {LONG_WINDOW_SECONDS:.0f} s" in records[0].getMessage()


def test_gate_wait_ends_when_stopped():
    gates = HostGates()
    gates.hold("http://h:8080/", LONG_WINDOW_SECONDS, "long window")
    stop = _WatchedStop()
    returned = threading.Event()

    def worker() -> None:
        # one slice longer than the window: only stop can end this wait early
        gates.wait("http://h:8080/x", stop, slice_seconds=2 * LONG_WINDOW_SECONDS)
        returned.set()

    thread = threading.Thread(target=worker)
    thread.start()
    stop.until_waiting(1)
    assert not returned.is_set()
    stop.set()
    thread.join(NEVER_SECONDS)
    assert returned.is_set()
    # it returned before the window's end: most of the window is still ahead
    assert gates.remaining("http://h:8080/") > LONG_WINDOW_SECONDS / 2


# ---------------------------------------------------------------- shared across processes
# Two HostGates on one folder stand for two processes (the subprocess and DataLoader tests
# are in test_storage_ratelimit_workers.py).

HUB = "https://hub.example/api/resolve"


def test_a_window_held_by_one_process_closes_the_others_gate(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="episodestream.storage")
    first, second = HostGates(tmp_path), HostGates(tmp_path)
    assert second.remaining(HUB) == 0.0
    window = 300.0  # its end is never waited for: the test ends it
    assert first.hold(HUB, window, "quota 'api' (500 requests per 300 s) exhausted")
    [window_file] = tmp_path.glob("*.json")
    assert window_file.name == "https_hub.example_443.json"
    record = json.loads(window_file.read_text())
    assert record["reason"] == "quota 'api' (500 requests per 300 s) exhausted"
    assert record["pid"] == os.getpid() and record["seconds"] == window
    assert window / 2 < second.remaining(HUB) <= window  # most of the window, from the file
    assert second.remaining("https://other.example/") == 0.0
    stop = _WatchedStop()
    waited: list[float] = []
    waiter = threading.Thread(
        target=lambda: waited.append(second.wait(HUB, stop, slice_seconds=0.05))
    )
    waiter.start()
    stop.until_waiting(1)  # the second process waits for the window the first one learned
    assert not waited
    second.forget()  # the window ends (for the second process, and the file is gone)
    waiter.join(NEVER_SECONDS)
    assert len(waited) == 1 and waited[0] > 0 and second.remaining(HUB) == 0.0
    learned = [r.getMessage() for r in caplog.records if "learned by process" in r.getMessage()]
    assert len(learned) == 1  # logged once, with the reason and the time left
    assert "quota 'api'" in learned[0] and "waits" in learned[0]


def test_an_unchanged_window_file_is_not_reread(tmp_path, monkeypatch):
    from episodestream.storage.http import _hostgate

    reads: list[object] = []
    real = _hostgate._read_window
    monkeypatch.setattr(_hostgate, "_read_window", lambda path: reads.append(path) or real(path))
    first, second = HostGates(tmp_path), HostGates(tmp_path)
    for _ in range(50):
        assert second.remaining(HUB) == 0.0  # no file: a stat, no read
    assert reads == []
    first.hold(HUB, 0.05, "quota exhausted")
    reads.clear()
    time.sleep(0.1)  # the window has passed; its file stays
    for _ in range(50):
        assert second.remaining(HUB) == 0.0
    assert len(reads) == 1
    first.hold(HUB, 30.0, "quota exhausted again")  # a new window: the file changes
    assert second.remaining(HUB) > 29.0


def test_a_later_window_is_never_shortened_by_an_earlier_one(tmp_path):
    first, second, third = HostGates(tmp_path), HostGates(tmp_path), HostGates(tmp_path)
    first.hold(HUB, 30.0, "long")
    second.hold(HUB, 1.0, "short")  # its own gate: 1 s; the shared one stays 30 s
    assert third.remaining(HUB) > 29.0
    assert json.loads(next(tmp_path.glob("*.json")).read_text())["reason"] == "long"


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "{}",
        '{"until_wall": "x", "seconds": 5, "reason": "r", "pid": 1}',
        # beyond MAX_SHARED_WAIT_SECONDS: a corrupt file or a clock far ahead never stalls us
        json.dumps({"until_wall": time.time() + 10**6, "seconds": 10**6, "reason": "r", "pid": 1}),
    ],
)
def test_a_broken_or_unbounded_window_file_is_ignored(tmp_path, content):
    (tmp_path / "https_hub.example_443.json").write_text(content)
    assert HostGates(tmp_path).remaining(HUB) == 0.0


def test_a_window_from_a_clock_set_ahead_is_bounded_by_its_length(tmp_path):
    record = {"until_wall": time.time() + 800, "seconds": 200.0, "reason": "r", "pid": 1}
    (tmp_path / "https_hub.example_443.json").write_text(json.dumps(record))
    # the file's length (200 s) bounds it, not its end 800 s ahead; most of it is left
    assert 100 < HostGates(tmp_path).remaining(HUB) <= 200.0


def test_an_unwritable_folder_leaves_each_process_its_own_gate(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="episodestream.storage")
    blocker = tmp_path / "file"
    blocker.write_text("")
    gates = HostGates(blocker / "ratelimit")  # a folder under a file: cannot be created
    assert gates.hold(HUB, 50.0, "quota exhausted")
    gates.hold(HUB, 80.0, "again")
    assert gates.remaining(HUB) > 50.0  # this process still waits (the window moved later)
    warnings = [r.getMessage() for r in caplog.records if "cannot share" in r.getMessage()]
    assert len(warnings) == 1 and "EPISODESTREAM_RATE_LIMIT_DIR" in warnings[0]


def test_without_a_folder_nothing_is_shared(tmp_path):
    HostGates(None).hold(HUB, 5.0, "quota exhausted")
    assert list(tmp_path.iterdir()) == [] and HostGates(tmp_path).remaining(HUB) == 0.0


def test_the_folder_from_the_environment(monkeypatch, tmp_path):
    from episodestream.storage.http._hostgate import RATE_LIMIT_DIR_ENV, rate_limit_dir

    monkeypatch.setenv(RATE_LIMIT_DIR_ENV, str(tmp_path / "shared"))
    assert rate_limit_dir() == tmp_path / "shared"
    for off in ("off", "", "0", "None"):
        monkeypatch.setenv(RATE_LIMIT_DIR_ENV, off)
        assert rate_limit_dir() is None
    monkeypatch.delenv(RATE_LIMIT_DIR_ENV)
    monkeypatch.setenv("EPISODESTREAM_CACHE", str(tmp_path / "cache"))
    assert rate_limit_dir() == tmp_path / "cache" / "ratelimit"  # beside the sidecar cache
    monkeypatch.delenv("EPISODESTREAM_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert rate_limit_dir() == tmp_path / "home" / ".cache" / "episodestream" / "ratelimit"


def test_share_rate_limits_is_validated_and_reaches_child_processes(monkeypatch, tmp_path):
    from episodestream import ConfigError, ConfigTypeError
    from episodestream.storage import share_rate_limits
    from episodestream.storage.http._hostgate import HOST_GATES, RATE_LIMIT_DIR_ENV

    monkeypatch.setenv(RATE_LIMIT_DIR_ENV, str(HOST_GATES.shared_dir))  # restored afterwards
    previous = HOST_GATES.shared_dir
    try:
        with pytest.raises(ConfigTypeError, match="share_rate_limits"):
            share_rate_limits(5)  # type: ignore[arg-type]
        (tmp_path / "plain").write_text("")
        with pytest.raises(ConfigError, match=r"plain.*not a folder"):
            share_rate_limits(tmp_path / "plain")
        with pytest.raises(ConfigError, match="None turns sharing off"):
            share_rate_limits("off")
        assert share_rate_limits(tmp_path / "new") == tmp_path / "new"
        assert (tmp_path / "new").is_dir() and HOST_GATES.shared_dir == tmp_path / "new"
        # a spawned child (a spawn DataLoader worker, a rank) finds it in its environment
        child = subprocess.run(
            [
                sys.executable,
                "-c",
                "from episodestream.storage.http._hostgate import HOST_GATES; "
                "print(HOST_GATES.shared_dir)",
            ],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        assert child.stdout.strip() == str(tmp_path / "new")
        assert share_rate_limits(None) is None
        assert HOST_GATES.shared_dir is None and os.environ[RATE_LIMIT_DIR_ENV] == "off"
    finally:
        HOST_GATES.share_through(previous)


def test_a_process_does_not_learn_its_own_window_again_once_its_gate_opens(tmp_path, caplog):
    """The window file's wall-clock end lies a few ms after the gate's monotonic one: reading
    it back must not close the gate again (nor log a second wait for the same window)."""
    gates = HostGates(tmp_path)
    caplog.set_level(logging.INFO, logger="episodestream")
    gates.hold(HUB, 0.2, "quota")
    time.sleep(0.25)
    assert gates.remaining(HUB) == 0.0
    assert not [r for r in caplog.records if "learned by process" in r.getMessage()]
    other = HostGates(tmp_path)  # another process still sees a live window as its own rule
    gates.hold(HUB, 30.0, "quota")
    assert other.remaining(HUB) > 29.0

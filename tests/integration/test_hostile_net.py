"""Hostile servers through the whole dataset path (issue 26: hangs, a redirect to an invalid
port, credentials in the root URL).

Each case serves a copy of synthetic_av1 from :class:`HostileServer` misbehaving one way, then
opens it with :class:`EpisodeStreamDataset` and streams episode 0 under the harness of
test_reliability_hostile (``stream``: a thread joined with a deadline, RSS sampled every
10 ms; ``check_case``: the outcome allowed, the RSS bound, no file written outside the
cache). Each case's deadline is its bound: what the reader options it runs with allow
(attempts, read timeout, minimum rate, the open deadline), plus slack for a loaded machine —
never a measure of this machine's speed.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeAlias

import pytest

from episodestream import (
    DatasetFormatError,
    EpisodeStreamDataset,
    InvalidResponse,
    StorageTimeout,
)
from episodestream.storage import RetryPolicy, Timeouts
from tests.integration import test_reliability_hostile as hostile
from tests.integration.test_reliability_hostile import check_case, copy_of, snapshot, stream
from tests.support.hostile_server import HostileServer, Hostility

# Tight per-exchange bounds, so that a case that is bounded ends in seconds: a read timeout of
# 1 s, two attempts within 2 s, and an open deadline of 6 s.
TIGHT_TIMEOUTS = Timeouts(connect_seconds=1.0, read_seconds=1.0, pool_seconds=5.0, open_seconds=6.0)
TIGHT_RETRY = RetryPolicy(max_attempts=2, max_elapsed_seconds=2.0, backoff_initial_seconds=0.05)
TIGHT = {"reader_options": {"timeouts": TIGHT_TIMEOUTS, "retry": TIGHT_RETRY}}
# what every hang case is joined with: the longest a bounded case takes under TIGHT (the open
# deadline, or two attempts of one read timeout each), with generous slack
HANG_BOUND_S = 20.0
# (case, bound, outcome, seconds to it, RSS rise, error): printed at the end (RELIABILITY.md)
MEASURED: list[tuple[str, float, str, float, int, str]] = []


@pytest.fixture
def reference(synthetic_av1_samples: dict[int, Any]) -> dict[int, Any]:
    return synthetic_av1_samples


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # as test_reliability_hostile's: a default cache that must stay unused
    monkeypatch.setenv("EPISODESTREAM_CACHE", str(tmp_path / "default-cache-must-stay-unused"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


Serve: TypeAlias = Callable[[Hostility], HostileServer]


@pytest.fixture
def serve(synthetic_av1: Path, workspace: Path) -> Iterator[Serve]:
    """``serve(hostility)``: a copy of synthetic_av1 served by a HostileServer (closed after
    the test: every connection it holds shut down, every thread joined)."""
    servers: list[HostileServer] = []

    def start(hostility: Hostility) -> HostileServer:
        server = HostileServer(copy_of(synthetic_av1, workspace), hostility)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def run_case(
    name: str,
    server: HostileServer,
    workspace: Path,
    reference: dict[int, Any],
    monkeypatch: pytest.MonkeyPatch,
    *,
    allowed: set[str],
    bound_s: float = HANG_BOUND_S,
    root: str | None = None,
    names: str | None = None,
    options: dict[str, Any] | None = None,
) -> hostile.Outcome:
    """Stream episode 0 from ``server`` within ``bound_s`` and check the outcome."""
    monkeypatch.setattr(hostile, "CASE_TIME_BOUND_S", bound_s)
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(
        root or server.url, workspace / "cache", reference, episodes=[0], **(options or TIGHT)
    )
    error = "" if outcome.error is None else str(outcome.error)
    MEASURED.append((name, bound_s, outcome.label, outcome.seconds, outcome.rss_peak_delta, error))
    check_case(name, outcome, allowed, workspace, before, names=names)
    return outcome


@pytest.fixture(scope="module", autouse=True)
def _print_measured() -> Iterator[None]:
    yield
    for name, bound, label, seconds, rss, error in MEASURED:
        print(
            f"[hostile-net] {name}: {label} in {seconds:.2f} s (bound {bound:.0f} s), "
            f"RSS +{rss / 2**20:.1f} MiB" + (f"\n    {error[:300]}" if error else "")
        )


# -- hangs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("paths", ["meta/info.json", "videos/*"])
def test_endless_early_hints(
    paths: str,
    serve: Serve,
    workspace: Path,
    reference: dict[int, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Endless ``103 Early Hints`` (one every 5 ms): their number is capped and they count
    against the response deadline — a typed error, not a wait past every bound."""
    server = serve(Hostility("early_hints", paths=paths, interval_s=0.005))
    outcome = run_case(
        f"endless 103 Early Hints on {paths}",
        server,
        workspace,
        reference,
        monkeypatch,
        allowed={"typed"},
        names=paths.rstrip("*"),
    )
    assert isinstance(outcome.error, InvalidResponse), repr(outcome.error)
    assert "interim" in str(outcome.error)


@pytest.mark.parametrize(
    ("kind", "paths"),
    [
        ("trickle_head", "meta/info.json"),
        ("trickle_body", "meta/info.json"),
        ("trickle_head", "videos/*"),
        ("trickle_body", "videos/*"),
    ],
)
def test_one_byte_at_a_time(
    kind: str,
    paths: str,
    serve: Serve,
    workspace: Path,
    reference: dict[int, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A head or a body sent one byte every 0.3 s: each byte comes well within the read
    timeout, yet the exchange as a whole must end within its deadline (the read timeout,
    longer only at the minimum rate) — a StorageTimeout, at open or at the sample."""
    server = serve(Hostility(kind, paths=paths, interval_s=0.3))
    outcome = run_case(
        f"{kind.replace('_', ' ')} (1 byte / 0.3 s) on {paths}",
        server,
        workspace,
        reference,
        monkeypatch,
        allowed={"typed"},
        names=paths.rstrip("*"),
    )
    assert isinstance(outcome.error, StorageTimeout), repr(outcome.error)


def test_open_deadline_bounds_what_each_read_allows(
    serve: Serve, workspace: Path, reference: dict[int, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Per-read bounds that would allow minutes (30 s read timeout, the default retries) and
    an episodes file trickled one byte every 0.1 s: opening still ends at the open deadline
    (3 s here), with a StorageTimeout naming it."""
    server = serve(Hostility("trickle_body", paths="meta/episodes/*", interval_s=0.1))
    loose = {"timeouts": Timeouts(read_seconds=30.0, open_seconds=3.0)}
    outcome = run_case(
        "meta/episodes trickled, open deadline 3 s",
        server,
        workspace,
        reference,
        monkeypatch,
        allowed={"typed"},
        bound_s=15.0,
        options={"reader_options": loose},
    )
    assert isinstance(outcome.error, StorageTimeout), repr(outcome.error)
    assert "open_seconds=3" in str(outcome.error)


def test_zero_row_episodes_files_everywhere(
    serve: Serve, workspace: Path, reference: dict[int, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every meta/episodes/chunk-*/file-*.parquet, at any index, is a valid Parquet with no
    rows: the walk over file indices (plain HTTP cannot list) ends at a bound and refuses the
    folder — not an endless loop of requests growing memory."""
    server = serve(Hostility("zero_rows"))
    outcome = run_case(
        "zero-row meta/episodes files at every index",
        server,
        workspace,
        reference,
        monkeypatch,
        allowed={"typed"},
        names="meta/episodes",
    )
    assert isinstance(outcome.error, DatasetFormatError), repr(outcome.error)
    asked = [r for r in server.requests if r.path.startswith("meta/episodes/")]
    assert len(asked) <= 2 * 10  # a probe and a read of at most ten files


# -- answers that lie ------------------------------------------------------------------------


def test_redirect_to_an_invalid_port(
    serve: Serve, workspace: Path, reference: dict[int, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve(
        Hostility("redirect", paths="meta/info.json", location="http://127.0.0.1:99999/x")
    )
    outcome = run_case(
        "redirect to http://127.0.0.1:99999/",
        server,
        workspace,
        reference,
        monkeypatch,
        allowed={"typed"},
        names="meta/info.json",
    )
    assert isinstance(outcome.error, InvalidResponse), repr(outcome.error)
    assert "port" in str(outcome.error)


def test_lying_content_range(
    serve: Serve, workspace: Path, reference: dict[int, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve(Hostility("lying_content_range", paths="videos/*"))
    outcome = run_case(
        "Content-Range off by one on videos",
        server,
        workspace,
        reference,
        monkeypatch,
        allowed={"typed"},
        names="videos/",
    )
    assert isinstance(outcome.error, InvalidResponse), repr(outcome.error)


@pytest.mark.parametrize("paths", ["meta/info.json", "meta/episodes/*", "meta/tasks.parquet"])
def test_huge_metadata_file(
    paths: str,
    serve: Serve,
    workspace: Path,
    reference: dict[int, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A metadata file a terabyte long (its real bytes, then zeros): refused by size before
    its body is read, or read by its footer — typed, memory bounded."""
    server = serve(Hostility("huge", paths=paths, huge_bytes=1 << 40))
    outcome = run_case(
        f"{paths} 1 TiB long", server, workspace, reference, monkeypatch, allowed={"typed"}
    )
    assert outcome.error is not None


def test_huge_video_file(
    serve: Serve, workspace: Path, reference: dict[int, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A video file a terabyte long after its real bytes (moov at the front): only the ranges
    of the episodes asked for are read — the same samples, memory bounded."""
    server = serve(Hostility("huge", paths="videos/*", huge_bytes=1 << 40))
    outcome = run_case(
        "videos 1 TiB long", server, workspace, reference, monkeypatch, allowed={"complete"}
    )
    assert outcome.samples == 20


# -- credentials in the root URL -------------------------------------------------------------


def test_password_in_the_root_url_is_sent_never_kept(
    serve: Serve, workspace: Path, reference: dict[int, Any]
) -> None:
    """``http://user:password@host/...``: the credentials go to that origin as Basic auth and
    nowhere else — not in ``ds.root``, ``repr(ds)``, ``ds.meta``, the sidecar's identity or
    any cached file."""
    password = "pa55-w0rd-in-url-7f3c"
    server = serve(Hostility())
    root = server.url.replace("http://", f"http://trainer:{password}@")
    cache = workspace / "cache"
    started = time.perf_counter()
    with EpisodeStreamDataset(root, cache_dir=cache, episodes=[0], image_dtype="uint8") as ds:
        assert len(ds) == 20
        ds[0]
        shown = [str(ds.root), repr(ds), ds.repo_id, str(ds.meta.root)]
        shown.append(ds.meta.dataset_meta.root)
        shown.append(ds.dataset.root)
        shown.append(repr(ds.dataset.reader))
        shown.append(ds.dataset.reader.root)
        shown.append(ds.dataset.manifest.identity.root)
    seconds = time.perf_counter() - started
    MEASURED.append(("password in the root URL", 0.0, "complete", seconds, 0, ""))
    for text in shown:
        assert password not in text and "trainer" not in text, text
    cached = [p for p in cache.rglob("*") if p.is_file()]
    assert cached
    encoded = base64.b64encode(f"trainer:{password}".encode()).decode()
    for path in cached:
        data = path.read_bytes()
        assert password.encode() not in data and encoded.encode() not in data, path
    sent = {r.header("authorization") for r in server.requests}
    assert sent == {f"Basic {encoded}"}

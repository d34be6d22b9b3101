"""The Hub's control plane through huggingface_hub: token discovery, revision -> commit, its
errors translated into ours (with the Hub's message, naming repo and revision, never a token),
retries and quota waits around its calls, proxies, fork safety, and the extra it needs."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import random
import socket
import sys
import threading
import traceback
from collections.abc import Callable

import httpx
import huggingface_hub as hf
import pytest
from huggingface_hub.utils import get_session, hf_raise_for_status

from episodestream import (
    ConfigError,
    EpisodeStreamDataset,
    InvalidResponse,
    NotFound,
    ProxyError,
    StorageError,
    StorageTimeout,
)
from episodestream.storage import HubRangeReader, RetryPolicy, Timeouts, hub_token
from episodestream.storage.hub._api import call_hub, translate_hub_error
from episodestream_tools.serving import WanEmulator
from tests.plugins.proxy import ConnectProxy
from tests.plugins.storage import HubStandIn
from tests.support.hf_env import reread_hf_environment

pytestmark = pytest.mark.timeout(60)

VIDEO = "videos/cam/file-000.mp4"
DATA = bytes(range(256)) * 400
FAST = RetryPolicy(max_attempts=3, backoff_initial_seconds=0.01, backoff_max_seconds=0.05)
SECRET = "hf_control_plane_secret_0123456789"


@pytest.fixture
def hub(hub_standin: HubStandIn) -> HubStandIn:
    hub_standin.commit("org/robot", {VIDEO: DATA, "meta/info.json": b"{}"})
    return hub_standin


def _open(hub: HubStandIn, root: str = "hf://datasets/org/robot", **options) -> HubRangeReader:
    return hub.open_reader(root, **{"retry": FAST, **options})


def _hf_error(status: int, headers: dict[str, str], url: str, body: bytes = b"") -> Exception:
    """The exception huggingface_hub itself raises for this answer (its own classification)."""
    response = httpx.Response(
        status, headers=headers, content=body, request=httpx.Request("GET", url)
    )
    with pytest.raises(hf.errors.HfHubHTTPError) as raised:
        hf_raise_for_status(response)
    return raised.value


# ------------------------------------------------------------------ errors, translated


API = "https://huggingface.co/api/datasets/org/robot/revision/main"
RESOLVE = "https://huggingface.co/datasets/org/robot/resolve/main/meta/info.json"
GATED = (
    "Access to dataset org/robot is restricted and you are not in the authorized list. "
    "Visit https://huggingface.co/datasets/org/robot to ask for access."
)


@pytest.mark.parametrize(
    ("status", "headers", "url", "hf_type", "ours", "said"),
    [
        (
            403,
            {"X-Error-Code": "GatedRepo", "X-Error-Message": GATED},
            RESOLVE,
            "GatedRepoError",
            StorageError,
            f"HTTP 403, gated: access not granted — the Hub says: GatedRepo: {GATED}",
        ),
        (
            404,
            {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Repository not found"},
            API,
            "RepositoryNotFoundError",
            NotFound,
            "HTTP 404, no such repo (or private without a valid token) — the Hub says: "
            "RepoNotFound: Repository not found",
        ),
        (
            404,
            {"X-Error-Code": "RevisionNotFound", "X-Error-Message": "Invalid rev id: nope"},
            API,
            "RevisionNotFoundError",
            NotFound,
            "HTTP 404, no such revision — the Hub says: RevisionNotFound: Invalid rev id: nope",
        ),
        (
            404,
            {"X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found"},
            RESOLVE,
            "RemoteEntryNotFoundError",
            NotFound,
            "HTTP 404, no such file — the Hub says: EntryNotFound: Entry not found",
        ),
        (
            401,
            {"X-Error-Message": "Invalid username or password."},
            API,
            "RepositoryNotFoundError",
            StorageError,
            "HTTP 401, access denied (a token may be missing or lack access) — the Hub says: "
            "Invalid username or password.",
        ),
        (
            401,
            {"X-Error-Message": "Invalid credentials in Authorization header"},
            API,
            "HfHubHTTPError",
            StorageError,
            "HTTP 401, access denied (a token may be missing or lack access) — the Hub says: "
            "Invalid credentials in Authorization header",
        ),
        (
            502,
            {"X-Error-Message": "Bad gateway"},
            API,
            "HfHubHTTPError",
            StorageError,  # unavailable, not wrong: a status worth retrying
            "HTTP 502 — the Hub says: Bad gateway",
        ),
        (
            501,
            {"X-Error-Message": "Not implemented"},
            API,
            "HfHubHTTPError",
            InvalidResponse,
            "unexpected HTTP 501 — the Hub says: Not implemented",
        ),
    ],
)
def test_huggingface_hub_errors_become_ours_with_the_hubs_message(
    status, headers, url, hf_type, ours, said
):
    raw = _hf_error(status, headers, url)
    assert type(raw).__name__ == hf_type  # huggingface_hub classified it so
    error = translate_hub_error(raw, "Hub dataset 'org/robot' at revision 'main'", [])
    assert type(error) is ours
    assert str(error) == f"Hub dataset 'org/robot' at revision 'main': {said}"


def _call_hub_failing(
    failure: BaseException | Callable[[], None], *, secrets: list[str]
) -> StorageError:
    """The StorageError ``call_hub`` (retry FAST) raises for dataset 'org/robot' when its
    call raises ``failure`` (or is ``failure``, a callable that raises)."""

    def raising() -> None:
        raise failure  # type: ignore[misc]

    call = failure if callable(failure) else raising
    with pytest.raises(StorageError) as info:
        call_hub(
            call,
            what="Hub dataset 'org/robot'",
            secrets=secrets,
            retry=FAST,
            stop=threading.Event(),
            rng=random.Random(0),
        )
    return info.value


def test_a_hub_message_that_echoes_the_token_is_not_shown():
    raw = _hf_error(401, {"X-Error-Message": f"token {SECRET} is invalid"}, API)
    error = translate_hub_error(raw, "Hub dataset 'org/robot'", [SECRET])
    assert "HTTP 401" in str(error) and SECRET not in str(error)

    error = _call_hub_failing(raw, secrets=[SECRET])
    # huggingface_hub's own error repeats the message: it is not chained, so no traceback
    # shows it
    assert error.__cause__ is None
    assert SECRET not in "".join(traceback.format_exception(error))
    clean = _hf_error(401, {"X-Error-Message": "Invalid username or password."}, API)
    assert _call_hub_failing(clean, secrets=[SECRET]).__cause__ is clean


def test_a_status_still_failing_after_retries_says_how_often_it_was_retried():
    calls: list[int] = []
    unavailable = _hf_error(503, {"X-Error-Message": "Service unavailable"}, API)
    throttled = _hf_error(429, {}, API)  # a 429 that announces no quota window

    def call() -> None:
        calls.append(1)
        raise unavailable if len(calls) <= 3 else throttled

    for expected in (
        "HTTP 503 (retried 2 times) — the Hub says: Service unavailable",
        "HTTP 429 (retried 2 times)",
    ):
        error = _call_hub_failing(call, secrets=[])  # FAST: 3 attempts
        assert type(error) is StorageError
        assert str(error).startswith(f"Hub dataset 'org/robot': {expected}")
    assert len(calls) == 6


def test_a_status_retried_by_a_custom_policy_says_so_when_it_gives_up():
    # 409 is not one of the default retry statuses: retried because the policy says so,
    # giving up must say it was retried, not call the answer unexpected
    conflict = _hf_error(409, {"X-Error-Message": "busy"}, API)
    calls: list[int] = []

    def call() -> None:
        calls.append(1)
        raise conflict

    policy = RetryPolicy(
        max_attempts=3,
        backoff_initial_seconds=0.01,
        backoff_max_seconds=0.05,
        retry_statuses=frozenset({409}),
    )
    with pytest.raises(StorageError) as info:
        call_hub(
            call,
            what="Hub dataset 'org/robot'",
            secrets=[],
            retry=policy,
            stop=threading.Event(),
            rng=random.Random(0),
        )
    assert len(calls) == 3
    assert type(info.value) is StorageError
    assert str(info.value).startswith("Hub dataset 'org/robot': HTTP 409 (retried 2 times)")
    # without the policy's word, a 409 stays an unexpected answer
    assert isinstance(_call_hub_failing(conflict, secrets=[]), InvalidResponse)


def test_transport_errors_become_ours():
    request = httpx.Request("GET", API)
    what = "Hub dataset 'org/robot'"
    timeout = translate_hub_error(httpx.ReadTimeout("slow", request=request), what, [])
    assert isinstance(timeout, StorageTimeout) and isinstance(timeout, TimeoutError)
    refused = translate_hub_error(httpx.ConnectError("refused", request=request), what, [])
    assert type(refused) is StorageError and "ConnectError" in str(refused)
    proxy = translate_hub_error(httpx.ProxyError("407", request=request), what, [])
    assert isinstance(proxy, ProxyError)
    offline = translate_hub_error(hf.errors.OfflineModeIsEnabled("offline"), what, [])
    assert "HF_HUB_OFFLINE" in str(offline)


# ------------------------------------------------------------------ through the stand-in


def test_revision_lookup_errors_name_repo_and_revision_and_keep_the_hubs_message(hub):
    with pytest.raises(NotFound) as missing:
        _open(hub, "hf://datasets/org/robot@nope")
    assert str(missing.value).startswith("Hub dataset 'org/robot' at revision 'nope': HTTP 404")
    assert "RevisionNotFound: Revision not found" in str(missing.value)
    assert isinstance(missing.value.__cause__, hf.errors.RevisionNotFoundError)
    with pytest.raises(StorageError) as denied:
        _open(hub, token=SECRET)
    text = str(denied.value)
    assert "'org/robot' at revision 'main': HTTP 401" in text
    assert "Invalid credentials in Authorization header" in text
    assert SECRET not in text and SECRET not in repr(denied.value)


def test_revision_lookup_goes_through_huggingface_hub(hub):
    with _open(hub, "hf://datasets/org/robot@main") as reader:
        assert reader.commit == hub._refs[("org/robot", "main")]
        assert reader.read(VIDEO, 10, 20) == DATA[10:30]
    lookup = [r for r in hub.hub_requests if "/revision/" in r.path]
    assert len(lookup) == 1
    assert lookup[0].header("Authorization") == f"Bearer {hub.token}"
    # huggingface_hub's user agent, naming us as the library that asked
    assert "episodestream" in (lookup[0].header("User-Agent") or "")
    assert "hf_hub/" in (lookup[0].header("User-Agent") or "")
    # the data plane is ours: resolves carry our user agent, not huggingface_hub's
    resolves = [r for r in hub.hub_requests if "/resolve/" in r.path]
    assert resolves and all("hf_hub/" not in (r.header("User-Agent") or "") for r in resolves)


def test_stored_login_and_legacy_variable_are_found_by_huggingface_hub(hub, tmp_path, monkeypatch):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HOME", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_TOKEN_PATH", str(tmp_path / "stored-token"))
    reread_hf_environment(monkeypatch)
    assert hub_token() is None
    (tmp_path / "stored-token").write_text(f"  {hub.token}\n")
    assert hub_token() == hub.token
    with _open(hub, token=None) as reader:  # the ambient login, at the Hub
        assert reader.read(VIDEO, 0, 5) == DATA[:5]
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_legacy")
    assert hub_token() == "hf_legacy"  # the environment wins over the stored login


def test_a_quota_announced_on_the_revision_lookup_is_waited_out(hub, caplog):
    caplog.set_level(logging.WARNING, logger="episodestream.storage.hub._api")
    _open(hub).close()
    hub.limit_rate(quota=1, window_seconds=2.0)
    _open(hub).close()  # the window's one request
    with _open(hub) as reader:  # 429 with RateLimit only: waited, then answered
        assert reader.commit == hub._refs[("org/robot", "main")]
    # the stand-in answers 200 again only once the window has reset: the one retry came after
    # the wait, not before it (an early retry would have met a second 429)
    statuses = [r.status for r in hub.hub_requests if "/revision/" in r.path]
    assert statuses[-2:] == [429, 200]
    assert any("rate-limited" in r.getMessage() for r in caplog.records)


def test_a_quota_beyond_the_bound_fails_at_once_naming_it(hub):
    hub.limit_rate(quota=1, window_seconds=3600.0)
    _open(hub).close()
    sent = len(hub.hub_requests)
    with pytest.raises(StorageError, match="rate_limit_max_seconds=5"):
        _open(hub, retry=RetryPolicy(max_attempts=3, rate_limit_max_seconds=5.0))
    # refused on the first 429: no wait for the hour-long window, no second request
    assert [r.status for r in hub.hub_requests[sent:]] == [429]


def test_an_unreachable_or_silent_hub_is_a_bounded_typed_error():
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    with pytest.raises(StorageError, match=r"Connect(ion)?Error") as refused:
        HubRangeReader(
            "hf://datasets/org/robot", endpoint=f"http://127.0.0.1:{port}", retry=FAST, token="x"
        )
    assert "gave up after 3 attempt(s)" in str(refused.value)
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        with pytest.raises(StorageTimeout) as silent_error:
            HubRangeReader(
                "hf://datasets/org/robot",
                endpoint=f"http://127.0.0.1:{port}",
                retry=RetryPolicy(max_attempts=2, backoff_initial_seconds=0.01),
                timeouts=Timeouts(connect_seconds=0.3, read_seconds=0.3),
                token="x",
            )
        # bounded by the policy: two attempts, each within the read timeout, then the error
        assert "gave up after 2 attempt(s)" in str(silent_error.value)


def test_the_revision_lookup_honours_http_proxy_as_huggingface_hub_does(hub, monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    with ConnectProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        # huggingface_hub reads proxies when it makes its session; a fresh process would
        hf.close_session()
        try:
            with _open(hub) as reader:
                assert reader.read(VIDEO, 0, 10) == DATA[:10]
            targets = [r.target for r in proxy.records]
        finally:
            hf.close_session()  # the next test's session does not go through this proxy
    lookup = f"{hub.endpoint}/api/datasets/org/robot/revision/main"
    assert lookup in targets  # the control plane went through the proxy...
    assert any("/resolve/" in t for t in targets)  # ...and so did our data plane


def test_missing_huggingface_hub_is_a_config_error_naming_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # `import` now fails
    with pytest.raises(ConfigError, match=r"pip install 'episodestream\[hub\]'") as info:
        HubRangeReader("hf://datasets/org/robot@" + "0" * 40, token=False)
    assert isinstance(info.value.__cause__, ImportError)
    with pytest.raises(ConfigError, match="episodestream\\[hub\\]"):
        EpisodeStreamDataset("hf://datasets/org/robot", cache_dir=tmp_path)


def test_a_forked_child_gets_its_own_huggingface_hub_session(hub):
    """A DataLoader worker forked after the parent asked the Hub: huggingface_hub closes the
    inherited session in the child (its fork hook) and opens its own; the parent's keeps
    working."""
    _open(hub).close()
    parent_session = get_session()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanups
        code = 1
        with contextlib.suppress(BaseException):
            fresh = get_session()
            with _open(hub) as reader:
                ok = reader.read(VIDEO, 5, 5) == DATA[5:10]
            code = 0 if (parent_session.is_closed and fresh is not parent_session and ok) else 2
        os.write(write_end, bytes([code]))
        os._exit(0)
    os.close(write_end)
    answer = threading.Event()
    result: list[bytes] = []

    def collect() -> None:
        result.append(os.read(read_end, 1))
        answer.set()

    reader_thread = threading.Thread(target=collect, daemon=True)
    reader_thread.start()
    try:
        assert answer.wait(30), "the forked child did not answer"
    finally:
        os.waitpid(pid, 0) if answer.is_set() else os.kill(pid, 9)
        reader_thread.join(timeout=5)
        os.close(read_end)
    assert result == [b"\x00"]
    assert not parent_session.is_closed and get_session() is parent_session
    with _open(hub) as reader:  # the parent's session still answers
        assert reader.commit == hub._refs[("org/robot", "main")]


def test_tree_pages_stay_on_the_endpoint_we_talk_to(hub):
    """The listing kept on our client (docs/HTTP_CLIENTS.md, "Control plane"): every page goes
    to the endpoint the reader was given, even when the Hub's ``Link`` names its own origin;
    huggingface_hub's ``list_repo_tree`` follows the ``Link``, token included, and takes no
    timeout — the reasons it is not used for listings."""
    files = {f"data/file-{i:02d}.parquet": b"x" * i for i in range(10)}  # 4 pages of 3
    hub.commit("org/many", files)
    with WanEmulator(hub.endpoint) as front:  # a mirror-like front on another origin
        front_host = front.url.removeprefix("http://")
        with HubRangeReader("hf://datasets/org/many", endpoint=front.url, token=hub.token) as r:
            assert r.list_files("data") == sorted(files)
        ours = [x for x in hub.hub_requests if "/tree/" in x.path]
        assert len(ours) == 4 and all(x.header("Host") == front_host for x in ours)
        api = hf.HfApi(endpoint=front.url, token=hub.token)
        listed = list(api.list_repo_tree("org/many", "data", repo_type="dataset"))
        assert len(listed) == len(files)
    theirs = [x for x in hub.hub_requests if "/tree/" in x.path][4:]
    assert theirs[0].header("Host") == front_host
    assert {x.header("Host") for x in theirs[1:]} == {hub.endpoint.removeprefix("http://")}
    assert all(x.header("Authorization") == f"Bearer {hub.token}" for x in theirs)
    assert "timeout" not in inspect.signature(hf.HfApi.list_repo_tree).parameters

"""Hub errors, tokens and endpoints as huggingface_hub handles them: X-Error-Message in 401/403
errors (gated repos), HF_HUB_DISABLE_IMPLICIT_TOKEN, token=True, HF_ENDPOINT mirrors that
redirect back to the Hub, the staging switch."""

from __future__ import annotations

import json
import random

import pytest

from episodestream import ConfigError, StorageError
from episodestream.storage import HubRangeReader, RetryPolicy, hub_token
from episodestream.storage._messages import MAX_MESSAGE_CHARS, server_message
from episodestream.storage._urls import origin_of
from episodestream.storage.hub import _reader as hub_module
from tests.plugins.storage import Fault, FaultServer, HubStandIn
from tests.support.hf_env import reread_hf_environment

pytestmark = pytest.mark.timeout(60)

VIDEO = "videos/cam/file-000.mp4"
DATA = random.Random(3).randbytes(50_000)
FAST = RetryPolicy(max_attempts=2, backoff_initial_seconds=0.01)
SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub(hub_standin: HubStandIn) -> HubStandIn:
    hub_standin.commit("org/robot", {VIDEO: DATA})
    return hub_standin


def test_gated_repo_error_carries_the_hubs_message_and_no_token(hub):
    hub.gated.add("org/robot")
    with (
        HubRangeReader(
            "hf://datasets/org/robot", token=hub.token, endpoint=hub.endpoint, retry=FAST
        ) as reader,
        pytest.raises(StorageError) as info,
    ):
        reader.read(VIDEO, 0, 10)
    message = str(info.value)
    assert "HTTP 403" in message and "GatedRepo: Access to dataset org/robot" in message
    assert "ask for access" in message and hub.token not in message


def test_wrong_token_error_says_what_the_hub_said(hub):
    with pytest.raises(StorageError) as info:
        HubRangeReader("hf://datasets/org/robot", token="hf_wrong", endpoint=hub.endpoint)
    assert "Invalid credentials in Authorization header" in str(info.value)
    assert "hf_wrong" not in str(info.value)


def test_server_messages_are_cleaned_bounded_and_never_echo_a_secret():
    assert server_message({}, None) is None
    assert server_message({"x-error-message": "Gated.", "X-Error-Code": "GatedRepo"}, b"") == (
        "GatedRepo: Gated."
    )
    assert server_message({}, b'{"error": "Repository not found"}') == "Repository not found"
    assert server_message({}, b'{"error": ["a", "b"]}') == "a; b"
    assert server_message({}, b"<html>nope</html>") is None
    assert server_message({"X-Error-Message": "bad\r\nX-Injected: 1"}, None) == (
        "bad X-Injected: 1"
    )
    assert len(server_message({"X-Error-Message": "x" * 5000}, None)) == MAX_MESSAGE_CHARS
    assert server_message({"X-Error-Message": "your token hf_abc is bad"}, None, ["hf_abc"]) is None


def test_implicit_token_switch_and_token_true(hub, tmp_path, monkeypatch):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty"))
    reread_hf_environment(monkeypatch)
    with pytest.raises(ConfigError, match=r"token=True.*HF_TOKEN.*hf auth login"):
        hub_token(True)
    monkeypatch.setenv("HF_TOKEN", hub.token)
    assert hub_token() == hub.token and hub_token(True) == hub.token
    for value in ("1", "true", "YES", "on"):
        monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", value)
        reread_hf_environment(monkeypatch)
        assert hub_token() is None
        assert hub_token(True) == hub.token  # asked for explicitly: still sent
        assert hub_token("explicit") == "explicit"
    # the implicit token is not sent: the stand-in refuses the anonymous request
    with pytest.raises(StorageError, match="401"):
        HubRangeReader("hf://datasets/org/robot", endpoint=hub.endpoint, retry=FAST)
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "0")
    reread_hf_environment(monkeypatch)
    assert hub_token() == hub.token


def test_endpoint_from_the_environment_and_the_staging_switch(monkeypatch):
    monkeypatch.delenv("HUGGINGFACE_CO_STAGING", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://hf-mirror.example/")
    reread_hf_environment(monkeypatch)
    assert hub_module.hub_endpoint() == "https://hf-mirror.example"
    root = f"hf://datasets/org/robot@{SHA}"  # a commit: no request at all
    assert HubRangeReader(root, token=False).base_url == "https://hf-mirror.example"
    monkeypatch.setenv("HUGGINGFACE_CO_STAGING", "1")
    reread_hf_environment(monkeypatch)
    assert HubRangeReader(root, token=False).base_url == "https://hub-ci.huggingface.co"
    monkeypatch.delenv("HF_ENDPOINT")
    monkeypatch.delenv("HUGGINGFACE_CO_STAGING")
    reread_hf_environment(monkeypatch)
    assert HubRangeReader(root, token=False).base_url == "https://huggingface.co"


def _mirror(fault_server: FaultServer, hub: HubStandIn, sha: str, *, api: str) -> None:
    """The mirror redirects every resolve to the Hub itself; the revision API it either
    redirects too (``api="redirect"``) or answers itself, as a proxying mirror does
    (``api="serve"``: huggingface_hub, which asks it, drops the token on a redirect to
    another origin)."""
    revision = "/api/datasets/org/robot/revision/main"
    paths = [f"/datasets/org/robot/resolve/{sha}/{VIDEO}"] * 2
    if api == "redirect":
        paths.insert(0, revision)
    else:
        fault_server.put(revision, json.dumps({"id": "org/robot", "sha": sha}).encode())
    for path in paths:
        fault_server.inject(path, Fault("redirect", location=hub.endpoint + path))


def test_mirror_redirecting_back_to_the_hub_keeps_the_token_there_only(
    hub, fault_server, monkeypatch
):
    sha = hub._refs[("org/robot", "main")]
    monkeypatch.setattr(
        hub_module, "HUB_ORIGINS", hub_module.HUB_ORIGINS | {origin_of(hub.endpoint)}
    )
    _mirror(fault_server, hub, sha, api="serve")
    with HubRangeReader(
        "hf://datasets/org/robot", token=hub.token, endpoint=fault_server.url, retry=FAST
    ) as reader:
        assert reader.commit == sha
        assert reader.read(VIDEO, 100, 1000) == DATA[100:1100]
        assert reader.read(VIDEO, 5000, 10) == DATA[5000:5010]
    assert all(r.header("Authorization") == f"Bearer {hub.token}" for r in hub.hub_requests)
    assert all(r.header("Authorization") is None for r in hub.cdn_requests)


def test_a_mirror_redirecting_elsewhere_gets_no_token(hub, fault_server):
    sha = hub._refs[("org/robot", "main")]
    _mirror(fault_server, hub, sha, api="redirect")  # the Hub is not a known Hub host here
    with pytest.raises(StorageError, match="401"):
        HubRangeReader(
            "hf://datasets/org/robot", token=hub.token, endpoint=fault_server.url, retry=FAST
        )
    assert all(r.header("Authorization") is None for r in hub.hub_requests)

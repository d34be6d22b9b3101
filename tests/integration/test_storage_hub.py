"""The Hub reader against the local stand-in: redirects, token scope, signatures, revisions."""

from __future__ import annotations

import pickle
import random

import pytest

from episodestream import NotFound, StaleSourceError, StorageError
from episodestream.storage import HubRangeReader, ReadRequest, RetryPolicy, hub_token, open_reader
from tests.plugins.storage import HubStandIn
from tests.support.hf_env import reread_hf_environment

pytestmark = pytest.mark.timeout(60)

VIDEO = "videos/observation.images.cam/chunk-000/file-000.mp4"
V1 = random.Random(1).randbytes(300_000)
V2 = random.Random(2).randbytes(300_000)
FAST = RetryPolicy(max_attempts=3, backoff_initial_seconds=0.01)


@pytest.fixture
def hub(hub_standin: HubStandIn) -> HubStandIn:
    hub_standin.commit("org/robot", {VIDEO: V1, "meta/info.json": b"{}"})
    return hub_standin


def _open(hub: HubStandIn, root: str = "hf://datasets/org/robot", **options) -> HubRangeReader:
    return hub.open_reader(root, **{"retry": FAST, **options})


def test_redirect_followed_and_token_only_on_the_hub_host(hub):
    with _open(hub) as reader:
        assert reader.read(VIDEO, 10, 1000) == V1[10:1010]
        assert reader.read(VIDEO, 5000, 10) == V1[5000:5010]
        assert reader.read(VIDEO, 9000, 10) == V1[9000:9010]
        assert reader.read(VIDEO, 7000, 10) == V1[7000:7010]
    # CDN URLs are signed per range, on two CDN hosts used in turn: the first reuse on each
    # host is refused (learned), then every range is resolved through the Hub
    resolves = [r for r in hub.hub_requests if "/resolve/" in r.path]
    assert len(resolves) == 4  # one per range
    assert [r.status for r in hub.cdn_requests] == [206, 403, 206, 403, 206, 206]
    assert hub.wasted_cdn_requests() == {"127.0.0.2": 1, "127.0.0.3": 1}
    assert all(r.header("Authorization") == f"Bearer {hub.token}" for r in hub.hub_requests)
    assert all(r.header("Authorization") is None for r in hub.cdn_requests)
    assert all(r.header("If-Range") is None for r in hub.cdn_requests)
    assert all((r.header("Host") or "").startswith("127.0.0.") for r in hub.cdn_requests)
    assert not any((r.header("Host") or "").startswith("127.0.0.1:") for r in hub.cdn_requests)


def test_expired_signature_is_resolved_again_once(hub):
    with _open(hub) as reader:
        assert reader.read(VIDEO, 0, 100) == V1[:100]
        hub.expire_signatures()
        assert reader.read(VIDEO, 100, 100) == V1[100:200]
        assert reader.metrics()["reresolves"] == 1
    assert [r.status for r in hub.cdn_requests] == [206, 403, 206]
    assert len([r for r in hub.hub_requests if "/resolve/" in r.path]) == 2


def test_revision_is_pinned_to_a_commit_when_opened(hub):
    first = hub._refs[("org/robot", "main")]
    with _open(hub) as reader:
        assert reader.commit == first
        hub.commit("org/robot", {VIDEO: V2, "meta/info.json": b"{}"})  # a push during the run
        assert reader.read(VIDEO, 0, 1000) == V1[:1000]
        assert reader.list_files("") == ["meta/info.json", VIDEO]
    with _open(hub) as fresh:
        assert fresh.commit != first
        assert fresh.read(VIDEO, 0, 1000) == V2[:1000]
    with _open(hub, f"hf://datasets/org/robot@{first}") as by_sha:
        assert by_sha.read(VIDEO, 0, 10) == V1[:10]
    revision_calls = [r for r in hub.hub_requests if "/revision/" in r.path]
    assert len(revision_calls) == 2  # a sha needs no lookup


def test_tags_and_unknown_revisions(hub):
    tag = hub.commit("org/robot", {VIDEO: V2}, ref="v2.0")
    with _open(hub, "hf://datasets/org/robot@v2.0") as reader:
        assert reader.commit == tag
        assert reader.read(VIDEO, 7, 7) == V2[7:14]
    with pytest.raises(NotFound, match="revision"):
        _open(hub, "hf://datasets/org/robot@nope")
    with pytest.raises(NotFound):
        _open(hub, "hf://datasets/org/absent")


def test_listing_follows_pagination_and_subfolders(hub_standin):
    files = {
        f"data/chunk-{c:03d}/file-{f:03d}.parquet": b"x" * (c + f)
        for c in range(3)
        for f in range(4)
    }
    files["meta/info.json"] = b"{}"
    hub_standin.commit("org/many", files)
    with _open(hub_standin, "hf://datasets/org/many") as reader:
        assert reader.list_files("") == sorted(files)
        assert reader.list_files("data/chunk-001") == [
            f"data/chunk-001/file-{f:03d}.parquet" for f in range(4)
        ]
        assert reader.list_files("nothing") == []
    with _open(hub_standin, "hf://datasets/org/many/data") as sub:
        assert sub.list_files("chunk-002") == [f"chunk-002/file-{f:03d}.parquet" for f in range(4)]
        assert sub.size("chunk-002/file-003.parquet") == 5
    pages = [r for r in hub_standin.hub_requests if "/tree/" in r.path]
    assert len(pages) > 5  # 3 entries a page: the listing really was paginated


def test_a_file_at_the_root_is_probed_never_the_whole_repo_listed(hub_standin):
    files = {f"data/file-{f:03d}.parquet": b"x" * f for f in range(6)}
    files["README.md"] = b"# robot"
    hub_standin.commit("org/many", files)
    with _open(hub_standin, "hf://datasets/org/many") as reader:
        assert reader.file_info("README.md").size == 7
        assert not [r for r in hub_standin.hub_requests if "/tree/" in r.path]
        assert reader.size("data/file-005.parquet") == 5  # a folder is still listed once
        trees = [r.path for r in hub_standin.hub_requests if "/tree/" in r.path]
        assert trees and all("/data" in path for path in trees)


def test_buckets_read_list_and_detect_replacement(hub_standin):
    hub_standin.put_bucket_file("org/bkt", "runs/a.bin", V1)
    hub_standin.put_bucket_file("org/bkt", "runs/b.bin", b"b")
    with _open(hub_standin, "hf://buckets/org/bkt/runs") as reader:
        assert reader.commit is None
        assert reader.list_files("") == ["a.bin", "b.bin"]
        assert reader.read("a.bin", 3, 30) == V1[3:33]
        hub_standin.put_bucket_file("org/bkt", "runs/a.bin", V2)  # buckets are mutable
        hub_standin.expire_signatures()  # the next read re-resolves and lands on the new blob
        with pytest.raises(StaleSourceError):
            reader.read("a.bin", 0, 30)
    assert any(r.path == "/buckets/org/bkt/resolve/runs/a.bin" for r in hub_standin.hub_requests)


def test_token_from_environment_and_login_file(hub, tmp_path, monkeypatch):
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    reread_hf_environment(monkeypatch)
    assert hub_token() is None
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    reread_hf_environment(monkeypatch)
    (tmp_path / "token").write_text(hub.token + "\n")
    assert hub_token() == hub.token
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    reread_hf_environment(monkeypatch)
    with open_reader("hf://datasets/org/robot", retry=FAST) as reader:
        assert reader.read(VIDEO, 0, 10) == V1[:10]
    monkeypatch.setenv("HF_TOKEN", "from-env")
    assert hub_token() == "from-env"
    assert hub_token("explicit") == "explicit"
    assert hub_token(False) is None


def test_missing_or_wrong_token_is_a_clear_error_without_the_token(hub, tmp_path):
    with pytest.raises(StorageError) as missing:
        _open(hub, token=False)
    assert "401" in str(missing.value) and "token" in str(missing.value)
    log = tmp_path / "failures.jsonl"
    wrong = "hf_wrong_secret_value"
    with pytest.raises(StorageError) as denied:
        _open(hub, token=wrong, failure_log=log)
    assert wrong not in str(denied.value) and wrong not in repr(denied.value)


def test_secrets_never_leak_into_messages_logs_or_metrics(hub, tmp_path):
    log = tmp_path / "failures.jsonl"
    with _open(hub, failure_log=log) as reader:
        reader.read(VIDEO, 0, 10)
        hub.expire_signatures()
        reader.read(VIDEO, 0, 10)
        with pytest.raises(NotFound) as missing:
            reader.read("videos/absent.mp4", 0, 10)
        texts = [repr(reader), str(missing.value), str(reader.metrics())]
    texts.append(log.read_text() if log.exists() else "")
    for text in texts:
        assert hub.token not in text
        assert "signature=" not in text


def test_pickled_hub_reader_keeps_its_commit(hub):
    with _open(hub) as reader:
        reader.read(VIDEO, 0, 10)
        clone = pickle.loads(pickle.dumps(reader))
    revision_calls = len([r for r in hub.hub_requests if "/revision/" in r.path])
    hub.commit("org/robot", {VIDEO: V2})
    with clone:
        assert clone.commit == reader.commit
        assert clone.read_many([ReadRequest(VIDEO, 0, 5), ReadRequest(VIDEO, 99, 1)]) == [
            V1[:5],
            V1[99:100],
        ]
    assert len([r for r in hub.hub_requests if "/revision/" in r.path]) == revision_calls


def test_pull_request_and_convert_refs_are_resolved_to_their_commits(hub):
    pr = hub.commit("org/robot", {VIDEO: V2, "meta/info.json": b"{}"}, ref="refs/pr/1")
    parquet = hub.commit(
        "org/robot", {"default/train/0000.parquet": b"PAR1"}, ref="refs/convert/parquet"
    )
    with _open(hub, "hf://datasets/org/robot@refs/pr/1") as reader:
        assert reader.commit == pr
        assert reader.read(VIDEO, 0, 100) == V2[:100]
    with _open(hub, "hf://datasets/org/robot@refs/convert/parquet/default") as reader:
        assert reader.commit == parquet
        assert reader.list_files("") == ["train/0000.parquet"]
        assert reader.read_file("train/0000.parquet") == b"PAR1"
    revision_paths = [r.path for r in hub.hub_requests if "/revision/" in r.path]
    assert revision_paths == [
        "/api/datasets/org/robot/revision/refs/pr/1",
        "/api/datasets/org/robot/revision/refs/convert/parquet",
    ]

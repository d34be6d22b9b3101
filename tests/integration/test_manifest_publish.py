"""``episodestream index ROOT --publish``: the sidecar goes where others find it (a Hub repo's
branch or a pull request, S3, a local root), checked first; a second user's cold start then
costs one sidecar request, and refusals keep the local copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from episodestream import EpisodePoolDataset, EpisodeStreamDataset, ManifestError, PublishError
from episodestream.lerobot import load_dataset_meta
from episodestream.manifest import (
    PUBLISHED_SIDECAR_PATH,
    build_manifest,
    load_sidecar,
    publish_sidecar,
    write_sidecar,
)
from episodestream.storage import LocalRangeReader, open_reader
from tests.plugins.datasets import LeRobotReference
from tests.plugins.storage import HubStandIn, S3Stand

pytestmark = pytest.mark.timeout(300)

REPO = "org/lerobot_sim5"
EPISODE_CAMERAS = 5 * 3  # lerobot_sim5: 5 episodes x 3 cameras
SIDECAR_NAME = PUBLISHED_SIDECAR_PATH.rsplit("/", 1)[-1]


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def hub(
    hub_standin: HubStandIn, lerobot_fixture_root: Path, monkeypatch: pytest.MonkeyPatch
) -> HubStandIn:
    hub_standin.commit(REPO, _files(lerobot_fixture_root))
    hub_standin.serve_as_the_hub(monkeypatch)
    return hub_standin


def _sidecar_resolves(hub: HubStandIn) -> list:
    return [r for r in hub.hub_requests if r.path.endswith(SIDECAR_NAME) and r.method == "GET"]


def _index(*argv: str) -> subprocess.CompletedProcess[str]:
    """``episodestream index`` as a user runs it: a process of its own, whose huggingface_hub
    reads HF_ENDPOINT / HF_TOKEN (set by the test) when it starts."""
    return subprocess.run(
        [sys.executable, "-m", "episodestream.cli", "index", *argv, "--no-progress"],
        capture_output=True,
        text=True,
        timeout=240,
        env=dict(os.environ),
        check=False,
    )


def _cold_epoch(hub: HubStandIn, root: str, cache_dir: Path, **options: object) -> dict[int, dict]:
    """A second user's first run (fresh cache): the whole epoch, with the requests counted."""
    hub.hub_requests.clear()
    hub.cdn_requests.clear()
    with EpisodePoolDataset(
        root,
        pool_size=2,
        seed=3,
        cache_dir=cache_dir,
        reader_options={"endpoint": hub.endpoint, "token": hub.token},
        **options,
    ) as pool:
        assert pool.dataset.manifest.origin == "published"
        return {int(s["index"]): s for s in pool}


def test_publish_to_a_hub_repo_then_a_cold_start_costs_one_sidecar_request(
    hub: HubStandIn, lerobot_reference: LeRobotReference, tmp_path: Path
):
    root = f"hf://datasets/{REPO}"
    before = hub._refs[(REPO, "main")]
    run = _index(root, "--cache-dir", str(tmp_path / "publisher"), "--publish")
    assert run.returncode == 0, run.stderr
    local = Path(run.stdout.strip())
    assert local.is_file()  # the local copy stays
    # one commit on main holding the sidecar, on top of the commit that was indexed
    assert [(repo, ref) for repo, ref, _ in hub.write_commits] == [(REPO, "main")]
    head = hub._refs[(REPO, "main")]
    assert head != before and hub.write_commits[0][2] == head
    commit_line = [r for r in hub.hub_requests if r.method == "POST" and "/commit/" in r.path]
    header = json.loads(commit_line[0].body.splitlines()[0])
    assert header["value"]["parentCommit"] == before
    published = hub._blobs[hub._commits[head][PUBLISHED_SIDECAR_PATH]]
    as_published = load_sidecar(pa.py_buffer(published))
    assert as_published.identity.revision is None  # keyed by content: it survives its commit
    assert as_published.identity.info_sha256 == load_sidecar(local).identity.info_sha256
    assert np.array_equal(as_published.spans.byte_end, load_sidecar(local).spans.byte_end)

    samples = _cold_epoch(hub, root, tmp_path / "second-user")
    lerobot_reference.assert_whole_epoch(samples)
    assert len(_sidecar_resolves(hub)) == 1  # the whole sidecar in one request
    sidecar_blob = hub._commits[head][PUBLISHED_SIDECAR_PATH]
    assert len([r for r in hub.cdn_requests if sidecar_blob in r.path]) == 1
    # no moov was read: one resolve per episode-camera, for its own bytes
    assert len(hub.video_resolves()) == EPISODE_CAMERAS

    # publishing the same sidecar again changes nothing (no empty commit)
    run = _index(root, "--cache-dir", str(tmp_path / "publisher"), "--publish")
    assert run.returncode == 0, run.stderr
    assert "already holds this sidecar" in run.stderr
    assert len(hub.write_commits) == 1


def test_a_contributor_is_refused_on_the_branch_and_opens_a_pull_request(
    hub: HubStandIn,
    lerobot_reference: LeRobotReference,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    contributor = "hf_contributor_token_0123456789"
    hub.contributor_tokens.add(contributor)
    monkeypatch.setenv("HF_TOKEN", contributor)
    root = f"hf://datasets/{REPO}"
    cache = tmp_path / "contributor"
    run = _index(root, "--cache-dir", str(cache), "--publish")
    assert run.returncode == 2, run.stderr
    err = run.stderr
    assert "403" in err and f"You don't have the rights to create a commit on dataset {REPO}" in err
    assert f"{root}/{PUBLISHED_SIDECAR_PATH}" in err and "--publish-pr" in err
    kept = err.split("the sidecar is kept at ")[1].split()[0]
    assert Path(kept).is_file() and Path(kept).is_relative_to(cache)
    assert not hub.write_commits
    assert contributor not in err  # the token never shows

    run = _index(root, "--cache-dir", str(cache), "--publish-pr")
    assert run.returncode == 0, run.stderr
    err = run.stderr
    assert f"{hub.endpoint}/datasets/{REPO}/discussions/1" in err
    assert [(repo, ref) for repo, ref, _ in hub.write_commits] == [(REPO, "refs/pr/1")]
    assert PUBLISHED_SIDECAR_PATH not in hub._commits[hub._refs[(REPO, "main")]]
    # whoever reads the pull request's revision finds it
    samples = _cold_epoch(hub, f"{root}@refs/pr/1", tmp_path / "reviewer")
    lerobot_reference.assert_whole_epoch(samples)
    assert len(_sidecar_resolves(hub)) == 1


def test_a_read_only_token_gets_a_typed_error_and_keeps_the_local_copy(
    hub: HubStandIn, tmp_path: Path
):
    reader_token = "hf_read_only_token_0123456789"
    hub.read_tokens.add(reader_token)
    options = {"endpoint": hub.endpoint, "token": reader_token}
    root = f"hf://datasets/{REPO}"
    with open_reader(root, **options) as reader:
        meta = load_dataset_meta(reader, root=root, revision=reader.commit)
        local = write_sidecar(build_manifest(reader, meta, progress=False), tmp_path / "i.arrow")
        for create_pr in (False, True):  # a read token may not open a pull request either
            with pytest.raises(PublishError) as refused:
                publish_sidecar(
                    local, reader, meta, root, reader_options=options, create_pr=create_pr
                )
            message = str(refused.value)
            assert "403" in message and "read role only" in message  # the Hub's own words
            assert f"{root}/{PUBLISHED_SIDECAR_PATH}" in message
            assert f"kept at {local}" in message
            assert reader_token not in message
        # a destination that cannot even be read (no such repo) is refused the same way
        elsewhere = "hf://datasets/org/missing"
        with pytest.raises(PublishError) as refused:
            publish_sidecar(local, reader, meta, elsewhere, reader_options=options)
        assert f"{elsewhere}/{PUBLISHED_SIDECAR_PATH}: cannot read" in str(refused.value)
        assert f"kept at {local}" in str(refused.value)
    assert local.is_file() and load_sidecar(local).num_episodes == 5
    assert not hub.write_commits


def test_a_branch_that_moved_after_indexing_is_not_written(hub: HubStandIn, tmp_path: Path):
    options = {"endpoint": hub.endpoint, "token": hub.token}
    root = f"hf://datasets/{REPO}"
    with open_reader(root, **options) as reader:
        meta = load_dataset_meta(reader, root=root, revision=reader.commit)
        local = write_sidecar(build_manifest(reader, meta, progress=False), tmp_path / "i.arrow")
        # someone pushes meanwhile: the index describes a commit that is no longer the head
        files = {path: hub._blobs[blob] for path, blob in hub._commits[meta.revision].items()}
        hub.commit(REPO, {**files, "README.md": b"# edited\n"})
        with pytest.raises(PublishError, match="the branch moved on since the index was built"):
            publish_sidecar(local, reader, meta, root, reader_options=options)
    assert not hub.write_commits


@pytest.fixture
def local_copy(lerobot_fixture_root: Path, tmp_path: Path) -> Path:
    root = tmp_path / "dataset"
    shutil.copytree(lerobot_fixture_root, root)
    return root


def test_publish_to_a_local_root_and_replace_another_datasets_sidecar(
    local_copy: Path,
    lerobot_reference: LeRobotReference,
    tmp_path: Path,
):
    target = local_copy / PUBLISHED_SIDECAR_PATH
    # a sidecar of another dataset is there already (one more key in info.json)
    other = tmp_path / "other"
    shutil.copytree(local_copy, other)
    info = json.loads((other / "meta/info.json").read_text())
    (other / "meta/info.json").write_text(json.dumps({**info, "robot_type": "another"}))
    with LocalRangeReader(other) as reader:
        write_sidecar(build_manifest(reader, load_dataset_meta(reader), progress=False), target)

    run = _index(str(local_copy), "--cache-dir", str(tmp_path / "c1"), "--publish")
    assert run.returncode == 0, run.stderr
    assert f"published {target}" in run.stderr
    replaced = [line for line in run.stderr.splitlines() if "replacing the sidecar" in line]
    assert len(replaced) == 1 and "meta/info.json changed" in replaced[0]
    assert not list(target.parent.glob("*.tmp"))  # renamed into place, nothing left behind

    with EpisodeStreamDataset(local_copy, cache_dir=tmp_path / "c2") as dataset:
        assert dataset.dataset.manifest.origin == "published"
        arrays = lerobot_reference.samples
        for row in (0, 12, len(arrays["request_index"]) - 1):
            index = int(arrays["request_index"][row])
            expected = arrays["observation.images.cam_high"][row].astype(np.float32) / 255
            assert np.array_equal(dataset[index]["observation.images.cam_high"].numpy(), expected)


def test_a_corrupt_or_mismatched_sidecar_is_refused_before_publishing(
    local_copy: Path, tmp_path: Path
):
    target = local_copy / PUBLISHED_SIDECAR_PATH
    with LocalRangeReader(local_copy) as reader:
        meta = load_dataset_meta(reader)
        local = write_sidecar(build_manifest(reader, meta, progress=False), tmp_path / "i.arrow")

        corrupt = tmp_path / "corrupt.arrow"
        corrupt.write_bytes(local.read_bytes()[: local.stat().st_size // 2])
        with pytest.raises(ManifestError, match=r"corrupt\.arrow"):
            publish_sidecar(corrupt, reader, meta, local_copy)

        info = json.loads((local_copy / "meta/info.json").read_text())
        (local_copy / "meta/info.json").write_text(json.dumps({**info, "robot_type": "x"}))
        changed_meta = load_dataset_meta(reader)
        with pytest.raises(ManifestError, match=r"meta/info\.json changed"):
            publish_sidecar(local, reader, changed_meta, local_copy)

        # a video that changed since the build (same metadata): stale, not published
        video = local_copy / meta.video_files(meta.video_keys[0])[0]
        video.write_bytes(video.read_bytes() + b"\0" * 16)
        with pytest.raises(ManifestError, match="stale sidecar"):
            publish_sidecar(local, reader, meta, local_copy)
    assert not target.exists()


def test_publish_to_s3_then_a_cold_start_finds_it(
    s3_server: S3Stand,
    lerobot_fixture_root: Path,
    lerobot_reference: LeRobotReference,
    tmp_path: Path,
):
    client = s3_server.client()
    client.create_bucket(Bucket="publish")
    for path, data in _files(lerobot_fixture_root).items():
        client.put_object(Bucket="publish", Key=f"sim5/{path}", Body=data)
    root = "s3://publish/sim5"
    options = {"storage_options": s3_server.storage_options}
    with open_reader(root, **options) as reader:
        meta = load_dataset_meta(reader, root=root)
        local = write_sidecar(build_manifest(reader, meta, progress=False), tmp_path / "i.arrow")
        result = publish_sidecar(local, reader, meta, root, reader_options=options)
        assert result.changed and result.destination == f"{root}/{PUBLISHED_SIDECAR_PATH}"
        again = publish_sidecar(local, reader, meta, root, reader_options=options)
        assert not again.changed
    body = client.get_object(Bucket="publish", Key=f"sim5/{PUBLISHED_SIDECAR_PATH}")["Body"]
    assert load_sidecar(pa.py_buffer(body.read())).identity.revision is None

    with EpisodeStreamDataset(root, cache_dir=tmp_path / "cold", reader_options=options) as ds:
        assert ds.dataset.manifest.origin == "published"
        arrays = lerobot_reference.samples
        for row in (5, 20):
            index = int(arrays["request_index"][row])
            expected = arrays["observation.images.cam_high"][row].astype(np.float32) / 255
            assert np.array_equal(ds[index]["observation.images.cam_high"].numpy(), expected)


def test_split_roots_publish_beside_the_metadata_then_a_cold_start(
    hub_standin: HubStandIn,
    lerobot_fixture_root: Path,
    lerobot_reference: LeRobotReference,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    hub_standin.split_dataset(lerobot_fixture_root, "org/sim5-meta", "org/sim5-data", ref="release")
    hub_standin.serve_as_the_hub(monkeypatch)
    root, data_root = "hf://datasets/org/sim5-meta@release", "hf://buckets/org/sim5-data"
    argv = [root, "--data-root", data_root, "--cache-dir", str(tmp_path / "a"), "--publish"]
    run = _index(*argv)
    assert run.returncode == 0, run.stderr
    # it went to the metadata repo's branch; the bucket holds data and videos only
    assert [(repo, ref) for repo, ref, _ in hub_standin.write_commits] == [
        ("org/sim5-meta", "release")
    ]
    head = hub_standin._refs[("org/sim5-meta", "release")]
    published = load_sidecar(
        pa.py_buffer(hub_standin._blobs[hub_standin._commits[head][PUBLISHED_SIDECAR_PATH]])
    )
    assert "hf://buckets/org/sim5-data" in published.identity.root  # built from both roots

    samples = _cold_epoch(hub_standin, root, tmp_path / "b", data_root=data_root)
    lerobot_reference.assert_whole_epoch(samples)
    sidecar_requests = _sidecar_resolves(hub_standin)
    assert len(sidecar_requests) == 1 and "/org/sim5-meta/" in sidecar_requests[0].path
    resolves = hub_standin.video_resolves()
    assert len(resolves) == EPISODE_CAMERAS
    assert all("/buckets/org/sim5-data/" in r.path for r in resolves)


def test_publish_to_a_bucket_through_xet_then_a_cold_start(
    hub_standin: HubStandIn,
    lerobot_fixture_root: Path,
    lerobot_reference: LeRobotReference,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
):
    bucket = "org/sim5-bucket"
    for path, data in _files(lerobot_fixture_root).items():
        hub_standin.put_bucket_file(bucket, path, data)
    root = f"hf://buckets/{bucket}"
    reader_token = "hf_read_only_token_0123456789"
    hub_standin.read_tokens.add(reader_token)
    hub_standin.serve_as_the_hub(monkeypatch)
    monkeypatch.setenv("HF_TOKEN", reader_token)  # the CLI runs in a process of its own
    run = _index(root, "--cache-dir", str(tmp_path / "reader"), "--publish")
    assert run.returncode == 2
    assert (
        "403" in run.stderr
        and f"You don't have the rights to write to bucket {bucket}" in run.stderr
    )
    assert "the sidecar is kept at " in run.stderr and not hub_standin.bucket_writes

    monkeypatch.setenv("HF_TOKEN", hub_standin.token)
    run = _index(root, "--cache-dir", str(tmp_path / "writer"), "--publish")
    assert run.returncode == 0, run.stderr
    assert hub_standin.bucket_writes == [(bucket, PUBLISHED_SIDECAR_PATH)]
    assert "Processing Files" not in run.stderr  # --no-progress quiets the Xet upload bars too
    local = load_sidecar(Path(run.stdout.strip()))
    samples = _cold_epoch(hub_standin, root, tmp_path / "second-user")
    lerobot_reference.assert_whole_epoch(samples)
    assert len(_sidecar_resolves(hub_standin)) == 1
    resolves = hub_standin.video_resolves()
    assert len(resolves) == EPISODE_CAMERAS
    with open_reader(root, endpoint=hub_standin.endpoint, token=hub_standin.token) as reader:
        published = load_sidecar(pa.py_buffer(reader.read_file(PUBLISHED_SIDECAR_PATH)))
    assert np.array_equal(published.spans.byte_start, local.spans.byte_start)


@pytest.mark.parametrize(
    ("root", "flag", "why"),
    [
        ("{local}", "--publish-pr", "pull requests and parent commits apply to Hub dataset repos"),
        ("hf://buckets/org/b", "--publish-pr", "pull requests and parent commits apply"),
        ("http://127.0.0.1:9/ds", "--publish", "plain HTTP(S) is read-only"),
        (f"hf://datasets/{REPO}@{'a' * 40}", "--publish", "a commit cannot change"),
    ],
)
def test_an_impossible_destination_is_refused_before_the_build(
    root: str, flag: str, why: str, local_copy: Path, tmp_path: Path
):
    run = _index(root.format(local=local_copy), "--cache-dir", str(tmp_path / "c"), flag)
    assert run.returncode == 2 and why in run.stderr and "Traceback" not in run.stderr
    assert "indexed" not in run.stderr  # nothing was built (nor read: the roots do not exist)
    assert not (tmp_path / "c").exists()

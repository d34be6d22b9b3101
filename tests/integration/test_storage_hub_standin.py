"""The Hub stand-in checked against huggingface_hub's own client: whatever the client needs of
the real Hub, the stand-in must give, so it can never be kinder than the service it stands for.

Xet downloads are switched off in the client (``HF_HUB_DISABLE_XET``): the stand-in serves Xet
files over the HTTP redirect path, not the Xet CAS protocol.
"""

from __future__ import annotations

import random

import httpx
import huggingface_hub as hf
import pytest
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors
from huggingface_hub import hf_api

from tests.plugins.storage import HubStandIn

pytestmark = pytest.mark.timeout(60)

REPO = "org/robot"
VIDEO = "videos/cam/file-000.mp4"
VIDEO_BYTES = random.Random(7).randbytes(200_000)
FILES = {
    VIDEO: VIDEO_BYTES,
    "meta/info.json": b'{"codebase_version": "v3.0"}',
    **{f"data/chunk-000/file-{i:03d}.parquet": b"PAR1" * (i + 1) for i in range(5)},
}


@pytest.fixture
def hub(hub_standin: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", True)
    hub_standin.commit(REPO, FILES)
    return hub_standin


def _url(hub: HubStandIn, path: str, revision: str = "main") -> str:
    return hf.hf_hub_url(REPO, path, repo_type="dataset", revision=revision, endpoint=hub.endpoint)


def test_file_metadata_as_the_client_reads_it(hub):
    sha = hub._refs[(REPO, "main")]
    meta = hf.get_hf_file_metadata(_url(hub, VIDEO), token=hub.token, endpoint=hub.endpoint)
    assert meta.commit_hash == sha
    assert meta.size == len(VIDEO_BYTES)
    assert meta.etag == next(b for b, d in hub._blobs.items() if d == VIDEO_BYTES)
    assert meta.location.startswith(tuple(hub.cdn_urls))  # redirected to a CDN host
    assert meta.xet_file_data is not None  # X-Xet-Hash and its refresh route
    small = hf.get_hf_file_metadata(
        _url(hub, "meta/info.json"), token=hub.token, endpoint=hub.endpoint
    )
    assert small.commit_hash == sha and small.size == len(FILES["meta/info.json"])
    assert small.location.startswith(hub.endpoint)  # a plain git file: no redirect
    assert hub.hub_requests[0].method == "HEAD"


def test_download_through_the_client(hub, tmp_path):
    for path in (VIDEO, "meta/info.json"):
        local = hf.hf_hub_download(
            REPO,
            path,
            repo_type="dataset",
            token=hub.token,
            endpoint=hub.endpoint,
            cache_dir=tmp_path,
        )
        with open(local, "rb") as handle:
            assert handle.read() == FILES[path]
    assert hub.cdn_requests and all(r.header("Authorization") is None for r in hub.cdn_requests)
    assert all(r.status == 200 for r in hub.cdn_requests)


def test_listing_revisions_and_pull_requests_through_the_client(hub):
    pr = hub.commit(REPO, {VIDEO: b"pr"}, ref="refs/pr/1")
    api = hf.HfApi(endpoint=hub.endpoint, token=hub.token)
    listed = api.list_repo_tree(REPO, repo_type="dataset", recursive=True)
    files = sorted(entry.path for entry in listed if isinstance(entry, hf_api.RepoFile))
    assert files == sorted(FILES)
    assert len([r for r in hub.hub_requests if "/tree/" in r.path]) > 2  # paginated
    assert api.dataset_info(REPO, revision="refs/pr/1").sha == pr
    with pytest.raises(hf_errors.RevisionNotFoundError):
        api.dataset_info(REPO, revision="nope")


def test_gated_and_unauthorised_errors_through_the_client(hub, tmp_path):
    hub.gated.add(REPO)
    with pytest.raises(hf_errors.GatedRepoError) as gated:
        hf.hf_hub_download(
            REPO,
            VIDEO,
            repo_type="dataset",
            token=hub.token,
            endpoint=hub.endpoint,
            cache_dir=tmp_path,
        )
    assert "ask for access" in str(gated.value)
    with pytest.raises(hf_errors.HfHubHTTPError) as denied:
        hf.get_hf_file_metadata(_url(hub, VIDEO), token="hf_wrong", endpoint=hub.endpoint)
    assert denied.value.response.status_code == 401


def test_cdn_urls_are_signed_per_range_and_refuse_authorization(hub):
    with httpx.Client(follow_redirects=False) as client:
        auth = {"Authorization": f"Bearer {hub.token}"}
        first = client.get(_url(hub, VIDEO), headers={**auth, "Range": "bytes=0-99"})
        assert first.status_code == 302
        target = first.headers["Location"]
        good = client.get(target, headers={"Range": "bytes=0-99"})
        assert good.status_code == 206 and good.content == VIDEO_BYTES[:100]
        assert client.get(target, headers={"Range": "bytes=100-199"}).status_code == 403
        assert client.get(target).status_code == 403  # no Range is another range too
        assert client.get(target, headers={**auth, "Range": "bytes=0-99"}).status_code == 400
        second = client.get(_url(hub, VIDEO), headers={**auth, "Range": "bytes=0-99"})
        again = client.get(second.headers["Location"], headers={"Range": "bytes=0-99"})
        # another CDN host, another validator for the same bytes
        assert again.content == good.content and again.headers["ETag"] != good.headers["ETag"]
        hub.expire_signatures()
        assert client.get(target, headers={"Range": "bytes=0-99"}).status_code == 403


BUCKET = "org/runs"
BUCKET_FILES = {
    "videos/cam/file-000.mp4": VIDEO_BYTES,
    "videos/cam/file-001.mp4": VIDEO_BYTES[::-1],
    "videos2/extra.bin": b"not under videos/",
    "meta/info.json": b"{}",
}


@pytest.fixture
def bucket(hub: HubStandIn) -> HubStandIn:
    for path, data in BUCKET_FILES.items():
        hub.put_bucket_file(BUCKET, path, data)
    return hub


def test_bucket_listing_parsed_by_the_client(bucket):
    api = hf.HfApi(endpoint=bucket.endpoint, token=bucket.token)
    listed = list(api.list_bucket_tree(BUCKET, recursive=True))
    files = {entry.path: entry for entry in listed if entry.type == "file"}
    assert sorted(files) == sorted(BUCKET_FILES)
    assert len([r for r in bucket.hub_requests if "/tree" in r.path]) > 1  # paginated
    entry = files["videos/cam/file-000.mp4"]
    assert entry.size == len(VIDEO_BYTES) and entry.mtime is not None and entry.uploaded_at
    # the Xet hash hf_xet itself computes for the bytes: the client downloads by it
    assert entry.xet_hash == bucket._buckets[BUCKET]["videos/cam/file-000.mp4"]
    assert len(entry.xet_hash) == 64
    # a prefix is a string prefix, as the Hub treats it: "videos" also lists "videos2/…"
    prefixed = [e.path for e in api.list_bucket_tree(BUCKET, prefix="videos", recursive=True)]
    assert "videos2/extra.bin" in prefixed and "meta/info.json" not in prefixed
    top = {e.path: e.type for e in api.list_bucket_tree(BUCKET)}
    assert top == {"videos": "directory", "videos2": "directory", "meta": "directory"}
    info = api.bucket_info(BUCKET)
    assert info.total_files == len(BUCKET_FILES)
    assert info.size == sum(map(len, BUCKET_FILES.values()))


def test_bucket_file_metadata_and_paths_info_through_the_client(bucket):
    api = hf.HfApi(endpoint=bucket.endpoint, token=bucket.token)
    path = "videos/cam/file-001.mp4"
    meta = api.get_bucket_file_metadata(BUCKET, path)
    assert meta.size == len(BUCKET_FILES[path])
    assert meta.xet_file_data.file_hash == bucket._buckets[BUCKET][path]
    assert meta.xet_file_data.refresh_route.endswith(f"/api/buckets/{BUCKET}/xet-read-token")
    resolve = [r for r in bucket.hub_requests if "/resolve/" in r.path][-1]
    assert resolve.method == "HEAD" and resolve.status == 302
    info = list(api.get_bucket_paths_info(BUCKET, [path, "missing.bin"]))
    assert [(i.path, i.size, i.xet_hash) for i in info] == [
        (path, meta.size, meta.xet_file_data.file_hash)
    ]
    with pytest.raises(hf_errors.HfHubHTTPError) as denied:
        hf.HfApi(endpoint=bucket.endpoint, token="hf_wrong").get_bucket_file_metadata(BUCKET, path)
    assert denied.value.response.status_code == 401


def test_our_bucket_reader_lists_only_the_folder_asked(bucket):
    from episodestream.storage import open_reader

    with open_reader(
        f"hf://buckets/{BUCKET}", {"endpoint": bucket.endpoint, "token": bucket.token}
    ) as reader:
        assert reader.list_files("videos") == [
            "videos/cam/file-000.mp4",
            "videos/cam/file-001.mp4",
        ]
        assert reader.read("videos/cam/file-001.mp4", 10, 5) == VIDEO_BYTES[::-1][10:15]


def test_bucket_download_through_the_client_and_xet(bucket, tmp_path):
    api = hf.HfApi(endpoint=bucket.endpoint, token=bucket.token)
    wanted = ["videos/cam/file-000.mp4", "meta/info.json"]
    api.download_bucket_files(
        BUCKET, [(path, tmp_path / path) for path in wanted], raise_on_missing_files=True
    )
    for path in wanted:
        assert (tmp_path / path).read_bytes() == BUCKET_FILES[path]
    tokens = [r for r in bucket.hub_requests if r.path.endswith("/xet-read-token")]
    assert tokens and all(r.header("Authorization") == f"Bearer {bucket.token}" for r in tokens)
    with pytest.raises(hf_errors.EntryNotFoundError):
        api.download_bucket_files(
            BUCKET, [("missing.bin", tmp_path / "m")], raise_on_missing_files=True
        )

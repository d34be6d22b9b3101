"""Location parsing and safe joins; relative path normalization."""

from __future__ import annotations

import os
import posixpath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from episodestream import ConfigError, LocationError, StorageError
from episodestream.storage import (
    FsspecRangeReader,
    HttpRangeReader,
    LocalRangeReader,
    Location,
    normalize_relative_path,
    open_reader,
    redact_url,
)


def test_local_paths_and_file_urls(tmp_path):
    assert Location.parse(str(tmp_path)) == Location("local", "file", str(tmp_path))
    assert Location.parse(tmp_path).path == str(tmp_path)
    assert Location.parse(f"file://{tmp_path}").path == str(tmp_path)
    assert Location.parse(f"file://localhost{tmp_path}").path == str(tmp_path)
    assert Location.parse("relative/dir").path == os.path.abspath("relative/dir")
    assert Location.parse("file:///a%20b/c").path == "/a b/c"
    with pytest.raises(LocationError, match="remote host"):
        Location.parse("file://otherhost/data")


def test_http_urls_are_normalized_and_never_carry_queries():
    location = Location.parse("HTTPS://Example.org:8443/data/set/")
    assert (location.kind, location.protocol) == ("http", "https")
    assert location.path == "HTTPS://Example.org:8443/data/set".replace("HTTPS", "https")
    assert not location.can_list
    with pytest.raises(LocationError, match="query"):
        Location.parse("https://h/data?token=secret")
    with pytest.raises(LocationError, match="no host"):
        Location.parse("http:///nohost")
    with pytest.raises(LocationError) as info:
        Location.parse("https://user:secret@h/x?sig=abc")
    assert "secret" not in str(info.value) and "abc" not in str(info.value)


def test_credentials_in_an_http_root_are_kept_apart_and_never_shown():
    location = Location.parse("https://trainer:p%40ss%3Aword@Example.org:8443/data/set/")
    assert location.path == location.url == "https://Example.org:8443/data/set"
    assert location.credentials == ("trainer", "p@ss:word")
    assert "p@ss" not in repr(location) and "trainer" not in repr(location)
    # where the data is, not who asks: equal to the same root without credentials
    assert location == Location.parse("https://Example.org:8443/data/set")
    assert location.join("meta/info.json").credentials == ("trainer", "p@ss:word")
    assert Location.parse("https://@h/x").credentials is None
    assert Location.parse("http://user@h/x").credentials == ("user", "")


def test_credentials_in_an_http_root_go_as_basic_auth_to_its_origin_only():
    reader = open_reader("http://trainer:s3cret@h.example/x")
    assert isinstance(reader, HttpRangeReader)
    assert reader.root == reader.base_url == "http://h.example/x"
    assert "s3cret" not in repr(reader)
    # "trainer:s3cret", base64
    assert reader._headers_for("http://h.example/x/a") == {
        "User-Agent": "episodestream/0.1",
        "Accept-Encoding": "identity",
        "Authorization": "Basic dHJhaW5lcjpzM2NyZXQ=",
    }
    assert "Authorization" not in reader._headers_for("http://cdn.example/a")
    direct = HttpRangeReader("http://trainer:s3cret@h.example/x")
    assert direct.root == "http://h.example/x"
    assert direct._headers_for("http://h.example/x/a")["Authorization"].startswith("Basic ")
    with pytest.raises(ConfigError, match="one of them") as info:
        HttpRangeReader("http://trainer:s3cret@h.example/x", token="tok")
    assert "s3cret" not in str(info.value)
    with pytest.raises(ConfigError, match="one of them"):
        open_reader("http://trainer:s3cret@h.example/x", headers={"authorization": "Bearer x"})


def test_a_password_in_an_fsspec_url_is_refused():
    with pytest.raises(LocationError, match="storage_options") as info:
        Location.parse("ftp://trainer:s3cret@files.example/data")
    assert "s3cret" not in str(info.value)
    # a user part without a password is how some stores name a container (adlfs)
    azure = Location.parse("abfs://container@account.dfs.core.windows.net/data")
    assert azure.path == "container@account.dfs.core.windows.net/data"


def test_an_http_reader_refuses_an_invalid_port_as_a_storage_error():
    with pytest.raises(StorageError, match="invalid port"):
        HttpRangeReader("http://127.0.0.1:99999/x")


def test_hub_datasets_and_buckets():
    location = Location.parse("hf://datasets/lerobot/aloha_sim@v2.1/sub/dir")
    assert location.kind == "hub"
    assert (location.repo_type, location.repo_id, location.revision, location.path) == (
        "datasets",
        "lerobot/aloha_sim",
        "v2.1",
        "sub/dir",
    )
    assert str(location) == "hf://datasets/lerobot/aloha_sim@v2.1/sub/dir"
    pr = Location.parse("hf://datasets/org/name@refs%2Fpr%2F3")
    assert pr.revision == "refs/pr/3" and pr.path == ""
    assert Location.parse(str(pr)) == pr
    bucket = Location.parse("hf://buckets/org/bucket/prefix/")
    assert (bucket.repo_type, bucket.repo_id, bucket.revision, bucket.path) == (
        "buckets",
        "org/bucket",
        None,
        "prefix",
    )
    assert Location.parse("hf://datasets/org/name").revision is None


@pytest.mark.parametrize(
    ("root", "revision", "path"),
    [
        # as huggingface_hub's hf:// grammar takes them: special refs keep their slashes
        ("hf://datasets/org/name@refs/pr/1", "refs/pr/1", ""),
        ("hf://datasets/org/name@refs/pr/12/meta/info.json", "refs/pr/12", "meta/info.json"),
        ("hf://datasets/org/name@refs/convert/parquet", "refs/convert/parquet", ""),
        (
            "hf://datasets/org/name@refs/convert/parquet/default/train",
            "refs/convert/parquet",
            "default/train",
        ),
        ("hf://datasets/org/name@refs/convert/duckdb.v1/x", "refs/convert/duckdb.v1", "x"),
        ("hf://datasets/org/name@refs%2Fpr%2F3/sub", "refs/pr/3", "sub"),
        # any other revision ends at the first slash and is percent-decoded
        ("hf://datasets/org/name@v1.0/videos", "v1.0", "videos"),
        ("hf://datasets/org/name@feature%2Fx/videos", "feature/x", "videos"),
        ("hf://datasets/org/name@" + "a" * 40, "a" * 40, ""),
        # a branch literally named "refs" followed by a folder that is no special ref
        ("hf://datasets/org/name@refs/heads/main", "refs", "heads/main"),
        ("hf://datasets/org/name@refs/pr/1x/y", "refs", "pr/1x/y"),
    ],
)
def test_hub_revisions_as_huggingface_hub_writes_them(root, revision, path):
    location = Location.parse(root)
    assert (location.repo_id, location.revision, location.path) == ("org/name", revision, path)
    again = Location.parse(location.url)
    assert again == location  # the URL it writes parses back to the same location


def test_hub_revision_urls_match_huggingface_hub_where_installed():
    from huggingface_hub.utils import _hf_uris as hf_uris

    for root in (
        "hf://datasets/org/name@refs/pr/1/a/b",
        "hf://datasets/org/name@refs/convert/parquet/default",
        "hf://datasets/org/name@v2.1/sub/dir",
        "hf://datasets/org/name@feature%2Fx/sub",
    ):
        theirs = hf_uris.parse_hf_uri(root)
        ours = Location.parse(root)
        assert (ours.repo_id, ours.revision, ours.path) == (
            theirs.id,
            theirs.revision,
            theirs.path_in_repo,
        )
        assert ours.url == theirs.to_uri()


def test_hub_revision_written_back():
    assert Location.parse("hf://datasets/o/n@refs/pr/7/x").url == "hf://datasets/o/n@refs/pr/7/x"
    assert Location.parse("hf://datasets/o/n@feature%2Fx").url == "hf://datasets/o/n@feature%2Fx"
    assert Location.parse("hf://datasets/o/n").join("a").url == "hf://datasets/o/n/a"


@pytest.mark.parametrize(
    "root",
    [
        "hf://models/org/name",
        "hf://org/name",
        "hf://datasets/org",
        "hf://datasets/org/name@",
        "hf://datasets/org/name@/x",
        "hf://datasets/org/name@a%20b",
        "hf://datasets/org/name@a%0Ab",
        "hf://buckets/org/name@main/x",
        "hf://datasets/org/../x",
        "hf://datasets/org/name/../../escape",
        "simplecache::s3://bucket/x",
        "s3://",
        "",
    ],
)
def test_bad_roots_are_location_errors(root):
    with pytest.raises(LocationError):
        Location.parse(root)


def test_fsspec_protocols():
    s3 = Location.parse("s3://bucket/prefix/")
    assert (s3.kind, s3.protocol, s3.path, s3.url) == (
        "fsspec",
        "s3",
        "bucket/prefix",
        "s3://bucket/prefix",
    )
    assert Location.parse("gs://b/p").protocol == "gs"
    assert Location.parse("memory://x/y").url == "memory://x/y"


def test_join_in_every_kind(tmp_path):
    assert Location.parse(tmp_path).join("a/b.mp4").path == str(tmp_path / "a" / "b.mp4")
    assert Location.parse("http://h/r").join("videos/a b#1.mp4").path == (
        "http://h/r/videos/a%20b%231.mp4"
    )
    assert Location.parse("hf://datasets/o/n@main").join("meta/info.json").path == "meta/info.json"
    assert Location.parse("hf://buckets/o/n/p").join("./x//y").path == "p/x/y"
    assert Location.parse("s3://b/p").join("x").url == "s3://b/p/x"
    root = Location.parse("s3://b/p")
    assert root.join("") is root and root.join(".") is root


@pytest.mark.parametrize(
    "bad", ["..", "../x", "a/../../x", "/etc/passwd", "a\\..\\b", "x\x00y", "http://evil/x"]
)
def test_join_refuses_escapes(bad):
    for root in ("/data", "http://h/r", "hf://datasets/o/n", "s3://b/p"):
        with pytest.raises(LocationError):
            Location.parse(root).join(bad)


@given(st.lists(st.sampled_from(["a", "b", "..", ".", "", "c.mp4"]), max_size=8))
def test_normalized_paths_never_climb_out(segments):
    path = "/".join(segments)
    try:
        clean = normalize_relative_path(path)
    except LocationError:
        # Refused exactly when absolute or when the lexical walk climbs above the root.
        depth, escaped = 0, path.startswith("/")
        for segment in segments:
            depth += -1 if segment == ".." else (0 if segment in ("", ".") else 1)
            escaped |= depth < 0
        assert escaped
        return
    assert not clean.startswith("/") and ".." not in clean.split("/")
    assert posixpath.normpath("/root/" + path) == posixpath.normpath("/root/" + clean)


def test_open_reader_picks_the_backend_by_scheme(tmp_path, fault_server):
    with open_reader(tmp_path) as local:
        assert isinstance(local, LocalRangeReader)
    with open_reader(fault_server.url + "/x") as http:
        assert isinstance(http, HttpRangeReader)
        assert http.base_url == fault_server.url + "/x"
    with open_reader("memory://episodestream-test") as other:
        assert isinstance(other, FsspecRangeReader)
    with pytest.raises(TypeError):
        open_reader(tmp_path, token="x")


def test_redact_url_drops_credentials_and_queries():
    assert redact_url("https://u:p@h:1/a/b?X-Amz-Signature=s#f") == "https://h:1/a/b?…"
    assert redact_url("http://h/a") == "http://h/a"

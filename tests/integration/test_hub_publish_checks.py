"""Inspecting against the Hub stand-in: with split roots ``inspect`` looks for the published
sidecar beside ``meta/`` (the metadata root), where ``index --publish`` writes it. (A
huggingface_hub without the bucket API is tested where one is installed: tests/lerobot_train.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from episodestream import PublishError
from episodestream.cli import main
from episodestream.manifest import PUBLISHED_SIDECAR_PATH
from episodestream.storage import publish_file
from tests.plugins.storage import HubStandIn

pytestmark = pytest.mark.timeout(300)

META_REPO, DATA_BUCKET = "org/sim5-meta", "org/sim5-data"
ROOT, DATA_ROOT = f"hf://datasets/{META_REPO}@release", f"hf://buckets/{DATA_BUCKET}"


def _split(hub: HubStandIn, fixture_root: Path) -> None:
    """lerobot_sim5's meta/ on a repo's branch ``release``, data/ and videos/ in a bucket."""
    hub.split_dataset(fixture_root, META_REPO, DATA_BUCKET, ref="release")


def _published_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("sidecar      published"))


def test_inspect_with_a_data_root_finds_the_sidecar_beside_meta(
    hub_standin: HubStandIn,
    lerobot_fixture_root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
):
    _split(hub_standin, lerobot_fixture_root)
    # a stray file where the data root would hold a sidecar: never the one reported
    hub_standin.put_bucket_file(DATA_BUCKET, PUBLISHED_SIDECAR_PATH, b"not an arrow file")
    hub_standin.serve_as_the_hub(monkeypatch)
    inspect = ["inspect", ROOT, "--data-root", DATA_ROOT, "--cache-dir", str(tmp_path / "u")]

    assert main(inspect) == 0
    assert _published_line(capsys.readouterr().out).startswith("sidecar      published absent")

    index = ["index", ROOT, "--data-root", DATA_ROOT, "--cache-dir", str(tmp_path / "w")]
    assert main([*index, "--no-progress", "--publish"]) == 0
    assert [(repo, ref) for repo, ref, _ in hub_standin.write_commits] == [(META_REPO, "release")]
    capsys.readouterr()
    hub_standin.hub_requests.clear()
    assert main(inspect) == 0
    out = capsys.readouterr().out
    assert _published_line(out).startswith("sidecar      published valid"), out
    looked = [r for r in hub_standin.hub_requests if r.path.endswith(PUBLISHED_SIDECAR_PATH)]
    assert looked and all(f"/{META_REPO}/" in r.path for r in looked)


def test_a_refused_bucket_write_is_translated_like_a_read(hub_standin: HubStandIn):
    reader_token = "hf_read_only_token_0123456789"
    hub_standin.read_tokens.add(reader_token)
    with pytest.raises(PublishError) as refused:
        publish_file(
            "hf://buckets/org/b",
            "meta/x.bin",
            b"x",
            endpoint=hub_standin.endpoint,
            token=reader_token,
        )
    message = str(refused.value)
    # the destination, the status, the Hub's own words, what to do; never the token
    assert message.startswith("hf://buckets/org/b/meta/x.bin: the Hub refused the write")
    assert "HTTP 403" in message and "rights to write to bucket org/b" in message
    assert "write token" in message and reader_token not in message
    assert reader_token not in str(refused.value.__cause__)
    assert not hub_standin.bucket_writes

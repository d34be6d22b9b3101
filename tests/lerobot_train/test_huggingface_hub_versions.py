"""Bucket publishing against the huggingface_hub LeRobot's environment really installs.

LeRobot 0.4.4 pins huggingface_hub 0.35 (no bucket API): publishing to a bucket is refused
before anything is built or requested, naming the installed version; repos (written through
``create_commit``, which 0.x has) are not refused. Under LeRobot 0.6 (huggingface_hub 1.x,
bucket API present) the same calls are accepted.
"""

from __future__ import annotations

from pathlib import Path

import huggingface_hub
import pytest

from episodestream import ConfigError
from episodestream.cli import main
from episodestream.storage import check_publishable, publish_file
from tests.plugins.storage import HubStandIn

pytestmark = pytest.mark.timeout(300)

BUCKET = "hf://buckets/org/b"
HAS_BUCKET_API = hasattr(huggingface_hub.HfApi, "batch_bucket_files")


def test_bucket_publishing_follows_the_installed_client(
    hub_standin: HubStandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    # repos are written through create_commit, which every supported release has
    assert check_publishable("hf://datasets/org/repo").repo_id == "org/repo"
    if HAS_BUCKET_API:
        assert check_publishable(BUCKET).repo_id == "org/b"
        return
    with pytest.raises(ConfigError) as refused:
        check_publishable(BUCKET)
    message = str(refused.value)
    assert BUCKET in message and huggingface_hub.__version__ in message
    assert "huggingface_hub 1.x" in message and "batch_bucket_files" in message
    with pytest.raises(ConfigError):
        publish_file(BUCKET, "x.bin", b"x", endpoint=hub_standin.endpoint, token=False)
    assert not hub_standin.hub_requests  # refused before asking anything
    # the CLI refuses before building (nor reading) anything
    cache = tmp_path / "cache"
    assert main(["index", BUCKET, "--publish", "--no-progress", "--cache-dir", str(cache)]) == 2
    err = capsys.readouterr().err
    assert "huggingface_hub 1.x" in err and "Traceback" not in err
    assert not cache.exists() and not hub_standin.hub_requests

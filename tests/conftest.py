"""Shared test configuration; fixtures live in tests/plugins/, one module per area."""

import os
from pathlib import Path

import pytest

pytest_plugins = [
    "tests.plugins.media",
    "tests.plugins.serving",
    "tests.plugins.synthetic",
    "tests.plugins.storage",
    "tests.plugins.datasets",
    "tests.plugins.proxy",
]

DATA_DIR = Path(__file__).parent / "data"

# LeRobot's own code runs only in its own environment (`make test-lerobot` sets this);
# `make test` runs both, so nothing here goes untested.
if os.environ.get("EPISODESTREAM_TEST_ENV") == "lerobot":
    collect_ignore = ["unit", "integration"]
else:
    collect_ignore = ["lerobot_train"]


@pytest.fixture(scope="session", autouse=True)
def _rate_limit_windows_of_this_session(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Rate-limit windows are shared through a folder of this session's own (spawned workers
    inherit it through the environment), never the user's ~/.cache: test servers on reused
    loopback ports must not inherit another run's windows."""
    from episodestream.storage.http._hostgate import HOST_GATES, RATE_LIMIT_DIR_ENV

    directory = tmp_path_factory.mktemp("ratelimit")
    os.environ[RATE_LIMIT_DIR_ENV] = str(directory)
    HOST_GATES.share_through(directory)


@pytest.fixture(scope="session")
def lerobot_fixture_root() -> Path:
    """The LeRobot-written 5-episode dataset (copied from shared/fixtures)."""
    return DATA_DIR / "lerobot_sim5"


@pytest.fixture(scope="session")
def lerobot_reference_dir() -> Path:
    """What LeRobot's own LeRobotDataset returned for lerobot_sim5."""
    return DATA_DIR / "lerobot_sim5_reference"

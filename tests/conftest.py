"""Shared test configuration; fixtures live in tests/plugins/, one module per area."""

from pathlib import Path

import pytest

pytest_plugins = [
    "tests.plugins.media",
    "tests.plugins.serving",
    "tests.plugins.synthetic",
    "tests.plugins.storage",
    "tests.plugins.datasets",
]

DATA_DIR = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def lerobot_fixture_root() -> Path:
    """The LeRobot-written 5-episode dataset (copied from shared/fixtures)."""
    return DATA_DIR / "lerobot_sim5"


@pytest.fixture(scope="session")
def lerobot_reference_dir() -> Path:
    """What LeRobot's own LeRobotDataset returned for lerobot_sim5."""
    return DATA_DIR / "lerobot_sim5_reference"

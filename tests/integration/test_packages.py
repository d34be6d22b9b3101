"""The two distributions: ``episodestream`` (the library, the user CLI) and
``episodestream-tools`` (bench, demo, serve, make-dataset), built from this repository.

Builds both wheels offline from copies of their sources, reads what each holds, and runs the
core wheel's CLI with the tools hidden; scans the tools' imports for private core names.
"""

from __future__ import annotations

import ast
import email
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS_ROOT = REPO_ROOT / "tools"
TOOLS_PACKAGES = ("bench", "serving", "synthetic")
TOOLS_COMMANDS = ("make-dataset", "serve", "demo", "bench", "bench-summary")
# the core's command line: the package, its commands (index, inspect, check, plan), shared options
CORE_CLI_MODULES = (
    "__init__",
    "__main__",
    "_check",
    "_index",
    "_inspect",
    "_options",
    "_plan",
    "_types",
)
INSTALL_HINT = "pip install 'episodestream[tools]'"
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")


def _project(pyproject: Path) -> dict:
    return tomllib.loads(pyproject.read_text())["project"]


def _build_wheel(source: Path, out: Path) -> Path:
    """The wheel of the project at ``source``, built offline from a copy (the tree stays clean)."""
    copy = out / f"{source.name}-source"
    copy.mkdir(parents=True)
    shutil.copy2(source / "pyproject.toml", copy)
    shutil.copy2(source / "README.md", copy)
    shutil.copytree(source / "src", copy / "src", ignore=_SKIP)
    wheels = out / "wheels"
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--no-index", "--disable-pip-version-check"),
            *("-w", str(wheels), str(copy)),
        ],
        check=True,
        capture_output=True,
        timeout=240,
    )
    name = _project(source / "pyproject.toml")["name"].replace("-", "_")
    (wheel,) = wheels.glob(f"{name}-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("wheels")
    return {"core": _build_wheel(REPO_ROOT, out), "tools": _build_wheel(TOOLS_ROOT, out)}


def _names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def _dist_info(wheel: Path, file: str) -> str:
    with zipfile.ZipFile(wheel) as archive:
        (path,) = [n for n in archive.namelist() if n.endswith(f".dist-info/{file}")]
        return archive.read(path).decode()


def test_versions_move_together() -> None:
    core = _project(REPO_ROOT / "pyproject.toml")
    tools = _project(TOOLS_ROOT / "pyproject.toml")
    assert tools["version"] == core["version"]
    assert f"episodestream=={core['version']}" in tools["dependencies"]
    assert core["optional-dependencies"]["tools"] == [f"episodestream-tools=={core['version']}"]


def test_core_wheel_holds_the_library_only(wheels: dict[str, Path]) -> None:
    names = _names(wheels["core"])
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"episodestream"}
    for package in TOOLS_PACKAGES:
        assert not [n for n in names if n.startswith(f"episodestream/{package}/")], package
    for module in ("plan/__init__.py", "helpers.py", "cli/__init__.py", "cli/arguments.py"):
        assert f"episodestream/{module}" in names
    commands = {Path(n).stem for n in names if n.startswith("episodestream/cli/_")}
    assert commands == set(CORE_CLI_MODULES)
    metadata = email.message_from_string(_dist_info(wheels["core"], "METADATA"))
    assert "tools" in metadata.get_all("Provides-Extra")
    assert any(
        r.startswith("episodestream-tools==") and 'extra == "tools"' in r
        for r in metadata.get_all("Requires-Dist")
    )


def test_tools_wheel_holds_the_tools(wheels: dict[str, Path]) -> None:
    names = _names(wheels["tools"])
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"episodestream_tools"}
    for package in (*TOOLS_PACKAGES, "commands"):
        assert f"episodestream_tools/{package}/__init__.py" in names
    assert "episodestream_tools/serving/nginx.conf" in names
    entry_points = _dist_info(wheels["tools"], "entry_points.txt")
    assert "[episodestream.commands]" in entry_points
    for command in TOOLS_COMMANDS:
        assert f"\n{command} = episodestream_tools.commands." in entry_points
    metadata = email.message_from_string(_dist_info(wheels["tools"], "METADATA"))
    core_version = _project(REPO_ROOT / "pyproject.toml")["version"]
    assert f"episodestream=={core_version}" in metadata.get_all("Requires-Dist")


def _loaded(statement: str) -> list[str]:
    code = (
        f"import sys; {statement}; "
        "print(' '.join(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('torch', 'episodestream_tools'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return out.stdout.split()


def test_import_loads_no_torch_and_no_tools() -> None:
    assert _loaded("import episodestream") == []
    assert _loaded("import episodestream.plan, episodestream.cli.arguments") != []  # torch
    assert not [m for m in _loaded("import episodestream.cli") if m.startswith("episodestream_")]
    dataset = _loaded("from episodestream import EpisodePoolDataset")
    assert "torch" in dataset
    assert not [m for m in dataset if m.startswith("episodestream_tools")]


def _imports(root: Path) -> list[tuple[Path, int, str]]:
    """(file, line, dotted name) of every ``episodestream...`` name imported under ``root``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            found += [(path, node.lineno, name) for name in names if name.startswith("episode")]
    return found


def _private_core(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "episodestream" and any(p.startswith("_") for p in parts[1:])


def test_tools_import_public_core_names_only() -> None:
    imports = _imports(TOOLS_ROOT / "src")
    assert len([i for i in imports if i[2].startswith("episodestream.")]) > 50  # the scan sees
    private = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {name}"
        for path, line, name in imports
        if _private_core(name)
    ]
    assert private == []


def test_core_cli_uses_public_faces_and_core_never_imports_tools() -> None:
    core = REPO_ROOT / "src" / "episodestream"
    for path, line, name in _imports(core / "cli"):
        if not name.startswith("episodestream.cli."):
            assert not _private_core(name), f"{path.name}:{line}: {name}"
    tools = [f"{p.relative_to(REPO_ROOT)}:{line}" for p, line, n in _imports(core) if "_tools" in n]
    assert tools == []


def _site_without_tools(tmp_path: Path, core_wheel: Path) -> str:
    """A PYTHONPATH holding the core wheel's files and this environment's third-party packages,
    but no episodestream-tools (nor the editable episodestream): run with ``python -S``."""
    core = tmp_path / "core"
    with zipfile.ZipFile(core_wheel) as archive:
        archive.extractall(core)
    packages = tmp_path / "third-party"
    packages.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not entry.name.lower().replace("-", "_").startswith(("episodestream", "__editable__")):
            (packages / entry.name).symlink_to(entry)
    return os.pathsep.join([str(core), str(packages)])


def _cli(args: list[str], *, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    flags = []
    if pythonpath is not None:
        env["PYTHONPATH"], flags = pythonpath, ["-S"]
    return subprocess.run(
        [sys.executable, *flags, "-m", "episodestream.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_cli_without_tools_says_how_to_install_them(
    wheels: dict[str, Path], tmp_path: Path, lerobot_fixture_root: Path
) -> None:
    pythonpath = _site_without_tools(tmp_path, wheels["core"])
    # the core comes from the wheel, and no episodestream_tools is importable
    probe = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import episodestream, importlib.util as u; "
            "print(episodestream.__file__, u.find_spec('episodestream_tools'))",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": pythonpath},
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.startswith(str(tmp_path / "core")) and probe.stdout.split()[-1] == "None"

    for command in TOOLS_COMMANDS:
        missing = _cli([command, "--samples", "3", "x"], pythonpath=pythonpath)
        assert missing.returncode == 2, (command, missing.stderr)
        assert missing.stdout == ""
        lines = missing.stderr.splitlines()
        assert len(lines) == 1 and INSTALL_HINT in lines[0] and command in lines[0], lines
    verbose = _cli(["-v", "--debug", "bench", "--help"], pythonpath=pythonpath)
    assert verbose.returncode == 2 and INSTALL_HINT in verbose.stderr

    listing = _cli(["--help"], pythonpath=pythonpath)
    assert listing.returncode == 0
    assert "bench" in listing.stdout and INSTALL_HINT in listing.stdout
    # the core's own commands still run
    inspected = _cli(["inspect", str(lerobot_fixture_root)], pythonpath=pythonpath)
    assert inspected.returncode == 0, inspected.stderr
    assert inspected.stdout.strip()


def test_cli_with_tools_finds_their_commands() -> None:
    for command in TOOLS_COMMANDS:
        shown = _cli([command, "--help"])
        assert shown.returncode == 0, (command, shown.stderr)
        assert f"usage: episodestream {command}" in shown.stdout
        assert INSTALL_HINT not in shown.stdout

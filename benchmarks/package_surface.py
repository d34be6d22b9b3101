"""What a training install costs: import time and modules of ``episodestream``, and the wheels.

    python benchmarks/package_surface.py                    # this checkout
    python benchmarks/package_surface.py --baseline OTHER   # and another checkout, interleaved

For each statement: ``python -X importtime -c STATEMENT`` run ``--runs`` times with the
checkout's ``src`` (and ``tools/src`` where present, unless ``--no-tools``) first on
``PYTHONPATH``, the checkouts' runs interleaved; the median of the
time from the first ``episodestream`` import to the end (cumulative microseconds of those
top-level imports), and how many ``episodestream`` / ``torch`` modules it loaded. Then each
wheel the checkout builds (``pip wheel --no-deps --no-build-isolation --no-index``, offline):
size and file count.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

STATEMENTS = (
    "import episodestream",
    "from episodestream import EpisodePoolDataset",
    "from episodestream.cli import build_parser; build_parser()",
)
_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def _pythonpath(repo: Path, tools: bool) -> str:
    paths = [repo / "src", *([repo / "tools" / "src"] if tools else [])]
    return os.pathsep.join(str(p) for p in paths if p.is_dir())


def _once(repo: Path, statement: str, tools: bool) -> tuple[float, int, int]:
    """(ms from the first episodestream import on, episodestream* modules, torch modules)."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": _pythonpath(repo, tools)},
        check=True,
    )
    total, started, modules = 0, False, []
    for match in _LINE.finditer(out.stderr):
        cumulative, indent, name = int(match[2]), match[3], match[4]
        modules.append(name)
        started = started or name.startswith("episodestream")
        if started and not indent:
            total += cumulative
    ours = sum(m.startswith("episodestream") for m in modules)
    return total / 1000, ours, sum(m.split(".")[0] == "torch" for m in modules)


def measure(repos: list[Path], statement: str, runs: int, tools: bool) -> list[str]:
    """One line per checkout: median ms, and the modules loaded (the most of any run)."""
    figures: dict[Path, list[tuple[float, int, int]]] = {repo: [] for repo in repos}
    for _ in range(runs):
        for repo in repos:
            figures[repo].append(_once(repo, statement, tools))
    lines = []
    for repo, rows in figures.items():
        median = statistics.median(row[0] for row in rows)
        lines.append(
            f"  {repo}: {median:.1f} ms (median of {runs}), "
            f"{max(row[1] for row in rows)} episodestream* modules, "
            f"{max(row[2] for row in rows)} torch modules"
        )
    return lines


def wheel(project: Path, out: Path) -> tuple[str, int, int]:
    copy = out / "source"
    copy.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(project / name, copy)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    shutil.copytree(project / "src", copy / "src", ignore=ignore)
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"),
            *("--no-build-isolation", "--no-index", "-w", str(out), str(copy)),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("*.whl")
    with zipfile.ZipFile(built) as archive:
        files = len(archive.namelist())
    return built.name, built.stat().st_size, files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-tools", action="store_true", help="leave tools/src off the path")
    parser.add_argument("--no-wheels", action="store_true", help="import times only")
    args = parser.parse_args()
    repos = [args.repo, *([args.baseline] if args.baseline else [])]
    for statement in STATEMENTS:
        print(f"{statement!r}:")
        print("\n".join(measure(repos, statement, args.runs, not args.no_tools)))
    if args.no_wheels:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for repo in repos:
            for project in (repo, repo / "tools"):
                if (project / "pyproject.toml").is_file():
                    out = Path(tmp) / str(len(list(Path(tmp).iterdir())))
                    name, size, files = wheel(project, out)
                    print(f"{project}: {name}: {size / 1024:.1f} KiB, {files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What a training install costs: import time and modules of ``episodestream``, and the wheels.

    python benchmarks/package_surface.py                 # this checkout
    python benchmarks/package_surface.py --repo OTHER    # another checkout (a baseline), same way

For each statement: ``python -X importtime -c STATEMENT`` run ``--runs`` times with the
checkout's ``src`` (and ``tools/src`` where present) first on ``PYTHONPATH``; the median of the
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


def _pythonpath(repo: Path) -> str:
    paths = [repo / "src", repo / "tools" / "src"]
    return os.pathsep.join(str(p) for p in paths if p.is_dir())


def measure(repo: Path, statement: str, runs: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": _pythonpath(repo)}
    totals, ours, torch = [], set(), set()
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", statement],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        total, started, modules = 0, False, []
        for match in _LINE.finditer(out.stderr):
            cumulative, indent, name = int(match[2]), match[3], match[4]
            modules.append(name)
            started = started or name.startswith("episodestream")
            if started and not indent:
                total += cumulative
        totals.append(total / 1000)
        ours.add(sum(m.startswith("episodestream") for m in modules))
        torch.add(sum(m.split(".")[0] == "torch" for m in modules))
    return {
        "median_ms": statistics.median(totals),
        "episodestream_modules": max(ours),
        "torch_modules": max(torch),
    }


def wheel(project: Path, out: Path) -> tuple[str, int, int]:
    copy = out / f"{project.name}-copy"
    copy.mkdir()
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
    built = max(out.glob("*.whl"), key=lambda p: p.stat().st_mtime)
    with zipfile.ZipFile(built) as archive:
        files = len(archive.namelist())
    return built.name, built.stat().st_size, files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(f"checkout: {args.repo}")
    for statement in STATEMENTS:
        figures = measure(args.repo, statement, args.runs)
        print(
            f"{statement!r}: {figures['median_ms']:.1f} ms (median of {args.runs}), "
            f"{figures['episodestream_modules']} episodestream modules, "
            f"{figures['torch_modules']} torch modules"
        )
    with tempfile.TemporaryDirectory() as tmp:
        for project in (args.repo, args.repo / "tools"):
            if (project / "pyproject.toml").is_file():
                name, size, files = wheel(project, Path(tmp))
                print(f"{name}: {size / 1024:.1f} KiB, {files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""RSS over many pool passes, as one figure: the least-squares slope per pass (issue 29).

    .venv/bin/python -m benchmarks.memory_passes [--passes 100] [--slope-from 10]
        [--episodes 3] [--budget 64MiB] [--json PATH]

One child process, default malloc settings (no ``MALLOC_*`` variables, no ``GLIBC_TUNABLES``),
runs ``benchmarks.rss``'s ``kept`` pass loop (the demo dataset's first ``--episodes`` through
``benchmarks.rss.demo_pool``, every pass to its end so the pool keeps its threads, as a training
loop over epochs does) for ``--passes`` passes and reports RSS after each. The report: RSS at a
few passes, and the slope of a least-squares line through RSS against the pass number from pass
``--slope-from`` on (MiB per pass; flat memory is about 0), with the growth that line predicts
over a thousand passes. ``python -m benchmarks.rss`` gives the side-by-side table of its modes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import add_json_option, put_out

__all__ = ["main", "measure", "slope_per_pass"]

_REPO = Path(__file__).resolve().parents[1]
_CHILD_TIMEOUT_S = 6 * 3600.0
#: passes whose RSS the table shows (1-based), besides --slope-from and the last
_SHOWN = (1, 2, 50)


def slope_per_pass(rss_mib: Sequence[float], first_pass: int) -> float:
    """Least-squares slope (MiB per pass) of RSS against the pass number, passes
    ``first_pass``.. (1-based) only."""
    y = np.asarray(rss_mib[first_pass - 1 :], dtype=np.float64)
    if y.size < 2:
        raise ValueError(f"a slope needs two passes from pass {first_pass}, got {y.size}")
    x = np.arange(first_pass, first_pass + y.size, dtype=np.float64)
    return float(np.polyfit(x, y, 1)[0])


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.pop("GLIBC_TUNABLES", None)
    import episodestream

    source = str(Path(episodestream.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), source, env.get("PYTHONPATH")) if p)
    return env


def measure(passes: int, episodes: int, budget: str) -> list[dict[str, Any]]:
    """``benchmarks.rss``'s ``kept`` child: one record per pass (``rss_after_mib`` ...)."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.rss",
        "--child",
        "kept",
        "--passes",
        str(passes),
        "--episodes",
        str(episodes),
        "--budget",
        budget,
    ]
    done = subprocess.run(
        command,
        cwd=_REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        text=True,
        timeout=_CHILD_TIMEOUT_S,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def render(result: dict[str, Any]) -> str:
    rss = result["rss_mib"]
    shown = sorted({n for n in (*_SHOWN, result["slope_from"], len(rss)) if n <= len(rss)})
    lines = [
        f"command: `{result['command']}`",
        "",
        f"RSS after pass n (MiB), {result['samples_per_pass']} samples a pass, default malloc "
        f"settings; slope: least squares over passes {result['slope_from']}..{len(rss)}",
        "",
        "| passes | " + " | ".join(f"RSS({n})" for n in shown) + " | slope MiB/pass "
        "| growth over 1000 passes, MiB |",
        "|---:|" + "---:|" * (len(shown) + 2),
        f"| {len(rss)} | "
        + " | ".join(f"{rss[n - 1]:.1f}" for n in shown)
        + f" | {result['slope_mib_per_pass']:+.4f} | {1000 * result['slope_mib_per_pass']:+.1f} |",
    ]
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", type=int, default=100)
    parser.add_argument(
        "--slope-from", type=int, default=10, help="first pass of the fit (1-based)"
    )
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--budget", default="64MiB")
    add_json_option(parser)
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if args.slope_from < 1 or args.passes < args.slope_from + 1:
        parser.error("--passes must reach at least one pass past --slope-from (>= 1)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    passes = measure(args.passes, args.episodes, args.budget)
    rss = [p["rss_after_mib"] for p in passes]
    python = os.path.relpath(sys.executable)
    if python.startswith(".."):
        python = sys.executable
    result = {
        "command": shlex.join([python, "-m", "benchmarks.memory_passes", *args.argv]),
        "passes": len(rss),
        "samples_per_pass": passes[0]["samples"],
        "slope_from": args.slope_from,
        "slope_mib_per_pass": slope_per_pass(rss, args.slope_from),
        "rss_mib": rss,
        "records": passes,
    }
    return put_out(result, args.json, render(result))


if __name__ == "__main__":
    sys.exit(main())

"""What the benchmark scripts share: their ``--json`` option and how a run's report is put out
(the table on stdout, the figures as JSON where ``--json`` names a file)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json PATH``: also write the figures as JSON there."""
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")


def put_out(report: Any, json_path: Path | None, text: str | None = None, **dump: Any) -> int:
    """Print ``text`` (the report as a table; nothing when None) and write ``report`` as JSON
    (indented; ``dump`` passed on to :func:`json.dumps`) to ``json_path`` when given.
    Returns the exit status, 0."""
    if text is not None:
        print(text)
    if json_path is not None:
        json_path.write_text(json.dumps(report, indent=2, **dump))
    return 0

"""What the benchmark scripts share: their ``--json`` option, how a run's report is put out
(the table on stdout, the figures as JSON where ``--json`` names a file), and the child
process that serves a dataset while the parent measures."""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
from collections.abc import Callable
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


class ServerProcess:
    """A child process (spawned) that serves while the benchmark measures from this one.

    ``target(*args, conn)`` runs in the child: it sends one message over ``conn`` once it
    serves (kept as :attr:`hello`), then waits for ``"stop"`` on it.
    """

    def __init__(self, target: Callable[..., None], args: tuple[Any, ...], what: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=target, args=(*args, child))
        self._process.start()
        if not self._conn.poll(60):
            self._process.kill()
            raise RuntimeError(f"{what} did not start within 60 s")
        self.hello: Any = self._conn.recv()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._conn.send("stop")
        self._process.join(timeout=30)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=10)

"""The library's own threads (all named ``episodestream-*``), for tests that check what a
dataset starts, keeps and joins: compare against the set taken before, since other tests'
session fixtures (a WAN emulator, say) may run threads of their own."""

from __future__ import annotations

import threading


def episodestream_threads() -> set[threading.Thread]:
    """The live threads whose names start with ``episodestream``."""
    return {t for t in threading.enumerate() if t.name.startswith("episodestream")}

"""Metadata mutators for the hostile suite: ``meta/info.json`` and the v2.x JSON Lines as a
hostile writer leaves them, byte for byte where the JSON module would not write it.

- :func:`deep_json`: a value nested ``depth`` arrays deep (the JSON parser recurses);
- :func:`set_raw_field`: one info.json field replaced by raw JSON text (a 5,000-digit
  integer, an int too large for a float);
- :func:`pad_template`: a path template whose field is zero-padded to ``width`` digits
  (the formatter allocates the width before anything else).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["deep_json", "pad_template", "set_raw_field"]

INFO = "meta/info.json"


def deep_json(depth: int) -> str:
    return "[" * depth + "]" * depth


def set_raw_field(root: Path, field: str, raw: str) -> None:
    """``info.json`` with ``field`` holding the JSON text ``raw`` verbatim."""
    path = root / INFO
    info = json.loads(path.read_text())
    marker = "__hostile_raw_value__"
    info[field] = marker
    path.write_text(json.dumps(info).replace(json.dumps(marker), raw, 1))


def pad_template(root: Path, field: str, name: str, width: str) -> str:
    """``info.json``'s template ``field`` with ``{name...}`` padded as ``{name:<width>d}``;
    returns the template written."""
    path = root / INFO
    info = json.loads(path.read_text())
    template = info[field]
    start = template.index("{" + name)
    end = template.index("}", start)
    info[field] = f"{template[:start]}{{{name}:{width}d}}{template[end + 1 :]}"
    path.write_text(json.dumps(info))
    return info[field]

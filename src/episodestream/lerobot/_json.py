"""JSON from files anyone may have written: every failure is a typed error.

``json.loads`` raises more than ``JSONDecodeError`` on hostile text: ``RecursionError`` for
arrays nested thousands deep, ``ValueError`` for an integer of more than 4,300 digits
(Python's limit on int conversion), ``UnicodeDecodeError`` for bytes in no encoding.
"""

from __future__ import annotations

from typing import Any

from episodestream.errors import DatasetFormatError, EpisodeStreamError

__all__ = ["parse_json", "shown_value"]

# characters of a value quoted in an error message
_SHOWN_CHARS = 100


def parse_json(
    data: bytes | str, *, where: str, error: type[EpisodeStreamError] = DatasetFormatError
) -> Any:
    """``json.loads(data)``; any failure as ``error`` naming ``where``.

    Raises:
        DatasetFormatError: (or ``error``) not JSON, nested deeper than the interpreter's
            recursion limit, an integer beyond Python's digit limit, or not text.
    """
    import json

    try:
        return json.loads(data)
    except RecursionError:
        raise error(f"{where}: invalid JSON: nested too deeply to parse") from None
    except (UnicodeDecodeError, ValueError) as problem:  # JSONDecodeError is a ValueError
        raise error(f"{where}: invalid JSON: {problem}") from problem


def shown_value(value: Any) -> str:
    """``repr(value)`` for a message, cut short (a hostile file's value may be megabytes, or
    an int too long to print)."""
    if isinstance(value, int) and value.bit_length() > 256:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]}... ({len(text)} chars)"

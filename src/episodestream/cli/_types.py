"""argparse value types the commands share: each refuses bad text with a message argparse
prints next to the option's name."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from episodestream.helpers import Bound
from episodestream.sampling import MAX_COUNT

__all__ = ["int_at_least", "int_list", "non_negative_float", "port", "positive_float"]

# how much of a refused argument a message shows
_SHOWN_CHARS = 60


def _shown(text: str) -> str:
    return repr(text) if len(text) <= _SHOWN_CHARS else f"{text[:_SHOWN_CHARS]!r}..."


def _integer(text: str, what: str = "an integer") -> int:
    # int() refuses more than 4,300 digits with a ValueError too
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {_shown(text)}") from None


def int_at_least(minimum: int, maximum: Bound = MAX_COUNT) -> Callable[[str], int]:
    """An integer in ``[minimum, maximum]`` (the bound named in the message): by default
    any count a 64-bit computation holds."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {_shown(text)}")
        if value > maximum.value:
            raise argparse.ArgumentTypeError(f"must be <= {maximum}, got {_shown(text)}")
        return value

    return parse


def int_list(
    name: str, minimum: int, maximum: Bound | None = None
) -> Callable[[str], tuple[int, ...]]:
    """Comma-separated integers, each in ``[minimum, maximum]``, at least one (``name`` says
    what they are in messages): ``"0,3,7"`` -> ``(0, 3, 7)``; empty items are skipped."""

    def parse(text: str) -> tuple[int, ...]:
        values = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                value = int(part)  # more than 4,300 digits: a ValueError too
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{name} are comma-separated integers, got {_shown(text)}"
                ) from None
            if value < minimum:
                raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {value}")
            if maximum is not None and value > maximum.value:
                raise argparse.ArgumentTypeError(f"{name} must be <= {maximum}, got {_shown(part)}")
            values.append(value)
        if not values:
            raise argparse.ArgumentTypeError(f"{name}: give at least one, got {_shown(text)}")
        return tuple(values)

    return parse


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {_shown(text)}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {_shown(text)}")
    return value


def positive_float(text: str) -> float:
    """A finite number ``> 0``."""
    value = _finite(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number ``>= 0``."""
    value = _finite(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def port(text: str) -> int:
    """A TCP port, 1..65535."""
    value = _integer(text, "a port number")
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"port must be in 1..65535, got {value}")
    return value

"""argparse value types the commands share: each refuses bad text with a message argparse
prints next to the option's name."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["int_at_least", "int_list", "non_negative_float", "port", "positive_float"]


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An integer ``>= minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def int_list(name: str, minimum: int) -> Callable[[str], tuple[int, ...]]:
    """Comma-separated integers, each ``>= minimum``, at least one (``name`` says what they
    are in messages): ``"0,3,7"`` -> ``(0, 3, 7)``; empty items are skipped."""

    def parse(text: str) -> tuple[int, ...]:
        values = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            try:
                value = int(part)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{name} are comma-separated integers, got {text!r}"
                ) from None
            if value < minimum:
                raise argparse.ArgumentTypeError(f"{name} must be >= {minimum}, got {value}")
            values.append(value)
        if not values:
            raise argparse.ArgumentTypeError(f"{name}: give at least one, got {text!r}")
        return tuple(values)

    return parse


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
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
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"port must be in 1..65535, got {value}")
    return value

"""Argument checks of configuration classes and constructors, shared by every layer.

Each failure is a :class:`~episodestream.errors.ConfigError` whose message names the
argument as the caller wrote it (``"Timeouts.read_seconds"``, ``"threads"``); a value of the
wrong type, or an option name that is not accepted, is a
:class:`~episodestream.errors.ConfigTypeError` (also a ``TypeError``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from episodestream.errors import ConfigError, ConfigTypeError

__all__ = ["check_choice", "check_int", "check_number", "check_options"]


def check_int(name: str, value: Any, *, minimum: int | None = None) -> int:
    """``value`` as a Python int; refuses bools, floats and values below ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigTypeError(f"{name} must be an int, got {value!r}")
    result = int(value)
    if minimum is not None and result < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {result}")
    return result


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
) -> float:
    """``value`` as a finite float in ``[minimum, maximum]`` and ``> above`` (each if given)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigTypeError(f"{name} must be a number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    if minimum is not None and result < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {value!r}")
    if above is not None and not result > above:
        raise ConfigError(f"{name} must be > {above}, got {value!r}")
    if maximum is not None and result > maximum:
        raise ConfigError(f"{name} must be <= {maximum}, got {value!r}")
    return result


def check_choice(name: str, value: Any, choices: Collection[Any]) -> Any:
    """``value`` if it is one of ``choices``; the error lists them."""
    try:
        accepted = value in choices
    except TypeError:  # unhashable
        accepted = False
    if not accepted:
        listed = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"{name} must be one of {listed}, got {value!r}")
    return value


def check_options(what: str, options: Mapping[str, Any], accepted: Iterable[str]) -> None:
    """Refuse option names ``what`` does not take, listing those it does."""
    allowed = sorted(accepted)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        takes = f"it takes {', '.join(allowed)}" if allowed else "it takes none"
        raise ConfigTypeError(f"{what}: unknown option(s) {', '.join(unknown)}; {takes}")

"""Argument checks of configuration classes and constructors, shared by every layer.

Each failure is a :class:`~episodestream.errors.ConfigError` whose message names the
argument as the caller wrote it (``"Timeouts.read_seconds"``, ``"threads"``); a value of the
wrong type, or an option name that is not accepted, is a
:class:`~episodestream.errors.ConfigTypeError` (also a ``TypeError``).

Upper limits are :class:`Bound` values: named module constants of the layer that owns the
setting, whose name the error quotes, so a refused value points at the limit that refused it.
Messages show a hostile value shortened (:func:`shown`): an argument of 200 MB or an int of
5,000 digits never ends up whole in an error.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from episodestream.errors import ConfigError, ConfigTypeError

__all__ = [
    "MAX_BYTES",
    "MAX_CONNECTIONS",
    "MAX_TOLERANCE_S",
    "MAX_WAIT_SECONDS",
    "Bound",
    "check_choice",
    "check_int",
    "check_number",
    "check_options",
    "check_reader_bounds",
    "shown",
]

# how much of a refused value a message shows
_SHOWN_CHARS = 80
_SHOWN_INT_BITS = 128


@dataclass(frozen=True, slots=True)
class Bound:
    """An upper limit on a setting, named in the error that refuses a value above it.

    Attributes:
        name: the constant's name (``"MAX_FETCH_WORKERS"``), as errors and docs quote it.
        value: the largest accepted value.
        why: what the limit protects, in a few words (for the error).
    """

    name: str
    value: int | float
    why: str

    def __str__(self) -> str:
        limit = self.value if isinstance(self.value, int) else f"{self.value:g}"
        return f"{limit} ({self.name}: {self.why})"


# Limits shared by several layers. Each is far above any useful value, and below where a
# number overflows (int64 sums, a socket's timeout) or a count of threads or connections
# exhausts the machine before the first sample.
MAX_BYTES = Bound("MAX_BYTES", 2**60, "1 EiB; byte sizes are summed in int64")
# the same number as storage's Timeouts cap (MAX_TIMEOUT_SECONDS)
MAX_WAIT_SECONDS = Bound("MAX_WAIT_SECONDS", 1e6, "about 11 days; a wait must end")
MAX_CONNECTIONS = Bound("MAX_CONNECTIONS", 1024, "connections and request threads of one reader")
MAX_TOLERANCE_S = Bound(
    "MAX_TOLERANCE_S", 60.0, "beyond, a frame a minute away would pass as the one asked"
)


def shown(value: Any) -> str:
    """``repr(value)`` cut to a readable length: huge ints by their size, long reprs by
    their start, so a hostile argument never makes a huge (or unprintable) message."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        bits = int(value).bit_length()
        if bits > _SHOWN_INT_BITS:
            return f"an int of {bits} bits"
    try:
        text = repr(value)
    except Exception:  # a hostile __repr__, or an int past Python's digit limit
        return f"a {type(value).__name__}"
    if len(text) > _SHOWN_CHARS:
        return f"{text[: _SHOWN_CHARS - 20]}... ({len(text)} characters)"
    return text


def _refuse_above(name: str, value: Any, maximum: int | float | Bound) -> None:
    limit = maximum.value if isinstance(maximum, Bound) else maximum
    if value > limit:
        raise ConfigError(f"{name} must be <= {maximum}, got {shown(value)}")


def check_int(
    name: str,
    value: Any,
    *,
    minimum: int | None = None,
    maximum: int | Bound | None = None,
) -> int:
    """``value`` as a Python int in ``[minimum, maximum]``; refuses bools and floats."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ConfigTypeError(f"{name} must be an int, got {shown(value)}")
    result = int(value)
    if minimum is not None and result < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {shown(result)}")
    if maximum is not None:
        _refuse_above(name, result, maximum)
    return result


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | Bound | None = None,
) -> float:
    """``value`` as a finite float in ``[minimum, maximum]`` and ``> above`` (each if given)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ConfigTypeError(f"{name} must be a number, got {shown(value)}")
    try:
        result = float(value)
    except (OverflowError, ValueError):  # an int (or Fraction) too large for a float
        raise ConfigError(f"{name} must be a finite number, got {shown(value)}") from None
    if not math.isfinite(result):
        raise ConfigError(f"{name} must be a finite number, got {shown(value)}")
    if minimum is not None and result < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {shown(value)}")
    if above is not None and not result > above:
        raise ConfigError(f"{name} must be > {above}, got {shown(value)}")
    if maximum is not None:
        _refuse_above(name, result, maximum)
    return result


def check_choice(name: str, value: Any, choices: Collection[Any]) -> Any:
    """``value`` if it is one of ``choices``; the error lists them."""
    try:
        accepted = value in choices
    except TypeError:  # unhashable
        accepted = False
    if not accepted:
        listed = ", ".join(repr(c) for c in choices)
        raise ConfigError(f"{name} must be one of {listed}, got {shown(value)}")
    return value


def check_options(what: str, options: Mapping[str, Any], accepted: Iterable[str]) -> None:
    """Refuse option names ``what`` does not take, listing those it does."""
    allowed = sorted(accepted)
    unknown = sorted(shown(name) if not isinstance(name, str) else name for name in options)
    unknown = [name for name in unknown if name not in allowed]
    if unknown:
        takes = f"it takes {', '.join(allowed)}" if allowed else "it takes none"
        raise ConfigTypeError(f"{what}: unknown option(s) {', '.join(unknown)}; {takes}")


def check_reader_bounds(what: str, options: Any) -> None:
    """Refuse reader settings a dataset could not live with: more connections or request
    threads than ``MAX_CONNECTIONS``, a retry wait beyond ``MAX_WAIT_SECONDS`` (a sleep
    cannot even hold 1e300 s). ``Timeouts`` bounds its own fields.

    ``options`` is a :class:`~episodestream.storage.ReaderOptions` (read by its field names:
    this module sits below storage). The storage layer checks each field's type and sign;
    these are the upper bounds set where the options enter a dataset or a check.
    """
    limits, retry = options.limits, options.retry
    if options.max_concurrency is not None:
        check_int(f"{what}.max_concurrency", options.max_concurrency, maximum=MAX_CONNECTIONS)
    if limits is not None:
        for name in ("max_connections_per_host", "max_concurrency"):
            check_int(f"{what}.limits.{name}", getattr(limits, name), maximum=MAX_CONNECTIONS)
        for name in ("split_threshold_bytes", "split_part_bytes", "coalesce_max_bytes"):
            check_int(f"{what}.limits.{name}", getattr(limits, name), maximum=MAX_BYTES)
    if options.max_skip_bytes is not None:
        check_int(f"{what}.max_skip_bytes", options.max_skip_bytes, maximum=MAX_BYTES)
    if retry is not None:
        for name in (
            "max_elapsed_seconds",
            "backoff_initial_seconds",
            "backoff_max_seconds",
            "retry_after_max_seconds",
            "rate_limit_max_seconds",
        ):
            check_number(f"{what}.retry.{name}", getattr(retry, name), maximum=MAX_WAIT_SECONDS)

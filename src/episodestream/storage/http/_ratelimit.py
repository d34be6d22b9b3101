"""Rate-limit announcements in response headers, parsed: pure functions, no I/O.

Servers announce quotas in one of these forms (all case-insensitive):

- ``RateLimit: "api";r=0;t=55`` and ``RateLimit-Policy: "fixed window";"api";q=500;w=300`` —
  the IETF httpapi draft (09) as the Hugging Face Hub sends it: ``r`` requests remain in the
  current window, which resets in ``t`` seconds; the policy allows ``q`` requests per ``w``
  seconds. Several comma-separated entries may be listed; the exhausted one that resets last
  decides.
- ``RateLimit-Remaining`` / ``RateLimit-Reset`` (seconds) — the draft's older, separate fields.
- ``Retry-After`` — seconds or an HTTP-date (RFC 9110).

What to do with them follows huggingface_hub's client: after a 429 whose quota is exhausted
(``r=0``), wait ``t + 1`` seconds; otherwise honour ``Retry-After``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from episodestream.storage._config import RetryPolicy

__all__ = ["MAX_QUOTA_WAITS", "RateLimit", "parse_rate_limit"]

# Rate-limited answers in a row for one request, each waited out, before it gives up.
MAX_QUOTA_WAITS = 64

# one rounding second, as huggingface_hub adds
_RESET_MARGIN_SECONDS = 1.0
_PARAMETER = re.compile(r"^\s*([A-Za-z][A-Za-z0-9_\-]*)\s*=\s*(.*?)\s*$")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """What one response says about the client's quota.

    Fields:
        name: the quota's name (``"api"``, ``"resolvers"``…) or ``None``.
        remaining: requests left in the current window (``None``: not announced).
        reset_seconds: seconds until the current window resets.
        quota: requests allowed per window (``RateLimit-Policy`` ``q``).
        window_seconds: the window's length (``RateLimit-Policy`` ``w``).
        retry_after_seconds: ``Retry-After`` in seconds from now.
    """

    name: str | None = None
    remaining: int | None = None
    reset_seconds: float | None = None
    quota: int | None = None
    window_seconds: float | None = None
    retry_after_seconds: float | None = None

    @property
    def exhausted(self) -> bool:
        return self.remaining == 0 and self.reset_seconds is not None

    @property
    def wait_seconds(self) -> float | None:
        """How long to wait before asking again after a 429; ``None``: nothing announced."""
        if self.exhausted:
            assert self.reset_seconds is not None
            return self.reset_seconds + _RESET_MARGIN_SECONDS
        return self.retry_after_seconds

    def describe(self) -> str:
        """A short account for log lines: ``quota 'api' (500 per 300 s) exhausted``."""
        name = f"quota {self.name!r}" if self.name else "quota"
        policy = ""
        if self.quota is not None and self.window_seconds is not None:
            policy = f" ({self.quota} requests per {self.window_seconds:g} s)"
        if self.exhausted:
            return f"{name}{policy} exhausted"
        if self.retry_after_seconds is not None:
            return f"{name}{policy}: Retry-After {self.retry_after_seconds:g} s"
        return f"{name}{policy}"


def parse_rate_limit(headers: Mapping[str, str], now: float | None = None) -> RateLimit | None:
    """The rate-limit announcement in ``headers``; ``None`` when there is none.

    ``now`` (epoch seconds) only matters for a ``Retry-After`` written as an HTTP-date.
    """
    fields = {name.lower(): value for name, value in headers.items()}
    retry_after = RetryPolicy.parse_retry_after(fields.get("retry-after"), now)
    entries = [_entry(item) for item in _split_list(fields.get("ratelimit", ""))]
    limits = [
        (name, params)
        for name, params in entries
        if _number(params.get("r")) is not None or _number(params.get("t")) is not None
    ]
    name: str | None = None
    remaining: int | None = None
    reset: float | None = None
    if limits:
        # the exhausted entry that resets last, else the first one
        def urgency(entry: tuple[str | None, dict[str, str]]) -> tuple[bool, float]:
            r, t = _number(entry[1].get("r")), _number(entry[1].get("t"))
            return (r == 0, t or 0.0)

        name, params = max(limits, key=urgency)
        r = _number(params.get("r"))
        remaining = None if r is None else int(r)
        reset = _number(params.get("t"))
    else:
        r = _number(fields.get("ratelimit-remaining"))
        remaining = None if r is None else int(r)
        reset = _number(fields.get("ratelimit-reset"))
    quota, window = _policy(fields.get("ratelimit-policy", ""), name)
    if remaining is None and reset is None and retry_after is None and quota is None:
        return None
    return RateLimit(name, remaining, reset, quota, window, retry_after)


def _policy(text: str, name: str | None) -> tuple[int | None, float | None]:
    """(q, w) of the policy named ``name`` (any quoted string of an entry), else the first."""
    chosen: tuple[int | None, float | None] | None = None
    for item in _split_list(text):
        labels = re.findall(r'"([^"]*)"', item)
        _, params = _entry(item)
        q, w = _number(params.get("q")), _number(params.get("w"))
        if q is None and w is None:
            continue
        found = (None if q is None else int(q), w)
        if name is not None and name in labels:
            return found
        if chosen is None:
            chosen = found
    return chosen or (None, None)


def _split_list(text: str) -> list[str]:
    """Top-level comma-separated members of a structured-field list (commas in quotes kept)."""
    members: list[str] = []
    current: list[str] = []
    quoted = False
    for char in text:
        if char == '"':
            quoted = not quoted
        if char == "," and not quoted:
            members.append("".join(current))
            current = []
        else:
            current.append(char)
    members.append("".join(current))
    return [member.strip() for member in members if member.strip()]


def _entry(item: str) -> tuple[str | None, dict[str, str]]:
    """(name, parameters) of one ``"name";k=v;k=v`` member (the last quoted label names it)."""
    name: str | None = None
    params: dict[str, str] = {}
    for part in re.findall(r'"[^"]*"|[^;]+', item):
        part = part.strip()
        if part.startswith('"') and part.endswith('"') and len(part) >= 2:
            name = part[1:-1]
            continue
        match = _PARAMETER.match(part)
        if match:
            params[match.group(1).lower()] = match.group(2).strip('"')
    return name, params


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    text = text.strip()
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0 <= value < float("inf") else None

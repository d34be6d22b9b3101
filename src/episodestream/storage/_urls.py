"""URL helpers shared by the network readers: redaction for messages, origins for auth."""

from __future__ import annotations

import urllib.parse

__all__ = ["origin_of", "redact_url"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def redact_url(url: str) -> str:
    """``url`` without user info, query or fragment: they may hold credentials or signatures."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc.rpartition("@")[2]
    suffix = "?…" if parts.query else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")) + suffix


def origin_of(url: str) -> tuple[str, str, int]:
    """(scheme, lower-case host, port) — the unit a credential belongs to."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    return scheme, (parts.hostname or "").lower(), port

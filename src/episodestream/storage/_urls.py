"""URL helpers shared by the network readers: redaction for messages, origins for auth,
credentials taken out of a URL before it is kept anywhere."""

from __future__ import annotations

import base64
import urllib.parse

__all__ = [
    "MAX_SHOWN_CHARS",
    "basic_authorization",
    "origin_of",
    "redact_url",
    "shorten",
    "shown_url",
    "split_userinfo",
]

_DEFAULT_PORTS = {"http": 80, "https": 443}
# A path or URL longer than this is shown by its head and tail in messages: what tells one
# file from another is usually at one end (the host and root, the file name)
MAX_SHOWN_CHARS = 300
_SHOWN_TAIL_CHARS = 120


def redact_url(url: str) -> str:
    """``url`` without user info, query or fragment: they may hold credentials or signatures."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc.rpartition("@")[2]
    suffix = "?…" if parts.query else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")) + suffix


def shorten(text: str, limit: int = MAX_SHOWN_CHARS) -> str:
    """``text`` as a message shows it: whole up to ``limit`` characters, else its head and
    tail around how many characters were left out."""
    text = str(text)
    if len(text) <= limit:
        return text
    tail = min(_SHOWN_TAIL_CHARS, limit // 2)
    head = limit - tail
    return f"{text[:head]}…({len(text) - head - tail} characters)…{text[-tail:]}"


def shown_url(url: str) -> str:
    """``url`` as a message shows it: redacted (:func:`redact_url`), then shortened."""
    return shorten(redact_url(url))


def origin_of(url: str) -> tuple[str, str, int]:
    """(scheme, lower-case host, port) — the unit a credential belongs to."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    return scheme, (parts.hostname or "").lower(), port


def split_userinfo(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its ``user:password@`` part, and that pair percent-decoded (``None``
    when the URL has none, or an empty one). The query and fragment are kept as they are.

    Credentials in a root URL are for the request only: what is kept — roots, labels, cache
    keys, sidecar identities, messages — is the URL this returns.
    """
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    userinfo, _, host = parts.netloc.rpartition("@")
    clean = urllib.parse.urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    user, _, password = userinfo.partition(":")
    if not user and not password:
        return clean, None
    return clean, (urllib.parse.unquote(user), urllib.parse.unquote(password))


def basic_authorization(user: str, password: str) -> str:
    """An ``Authorization`` value for HTTP Basic auth (RFC 7617, UTF-8)."""
    pair = f"{user}:{password}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")

"""What a server says about why it refused a request, made safe to show: pure, no I/O.

The Hugging Face Hub explains refusals in an ``X-Error-Message`` header (a gated repo: "Access
to dataset … is restricted … ask for access") and an ``X-Error-Code`` (``GatedRepo``,
``RepoNotFound``…), and often repeats the message as JSON ``{"error": …}``; huggingface_hub
shows both. We show the message (header first, then the JSON body), cleaned of control
characters and bounded in length, and never one that echoes a credential.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping

__all__ = ["MAX_MESSAGE_CHARS", "server_message"]

MAX_MESSAGE_CHARS = 500
_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def server_message(
    headers: Mapping[str, str], body: bytes | None, secrets: Iterable[str] = ()
) -> str | None:
    """``"GatedRepo: Access to dataset … ask for access."``, or ``None`` when the server gave
    no reason (or one that contains any of ``secrets``)."""
    fields = {name.lower(): value for name, value in headers.items()}
    message = fields.get("x-error-message") or _from_json(body)
    if not message:
        return None
    message = _CONTROL.sub(" ", message).strip()
    if not message:
        return None
    if any(secret and secret in message for secret in secrets):
        return None
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    code = _CONTROL.sub("", fields.get("x-error-code", "")).strip()[:64]
    return f"{code}: {message}" if code else message


def _from_json(body: bytes | None) -> str | None:
    if not body or len(body) > 64 * 1024:
        return None
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    for key in ("error", "message"):
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list):
            texts = [item for item in value if isinstance(item, str) and item.strip()]
            if texts:
                return "; ".join(texts)
    return None

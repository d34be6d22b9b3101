"""The Hub's control plane through huggingface_hub, and its errors translated into ours.

huggingface_hub is the library the Hub's own team keeps in step with the Hub, so we ask it what
it already knows: the token to send (``HF_TOKEN``, the stored login and its OAuth refresh, OIDC
in CI, Colab secrets, ``HF_HUB_DISABLE_IMPLICIT_TOKEN``, ``token=True``), the endpoint
(``HF_ENDPOINT``, the staging switch) and a revision's commit (``dataset_info``). Like
huggingface_hub, these environment variables are read once, when it is imported.

Its errors (``RepositoryNotFoundError``, ``GatedRepoError``, ``RevisionNotFoundError``,
``EntryNotFoundError``, ``HfHubHTTPError``, its HTTP library's transport errors: httpx from 1.0,
requests before) become our typed errors at :func:`call_hub`, keeping the Hub's
``X-Error-Message`` and naming the repo and revision, never a token. huggingface_hub does not
retry these calls; :func:`call_hub` retries them under our :class:`RetryPolicy` and waits out a
quota the Hub announces in ``RateLimit``.

huggingface_hub is the ``hub`` extra (0.34 to 1.x: LeRobot 0.4 pins 0.35, LeRobot 0.6 1.x):
imported when an ``hf://`` location is first opened, and a :class:`ConfigError` naming
``pip install 'episodestream[hub]'`` when it is missing. DataLoader workers never share the
parent's connections through it: from 1.0 huggingface_hub closes its session in a forked child
(``os.register_at_fork(after_in_child=close_session)``); before, it keeps one session per
process id and thread.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

from episodestream.errors import (
    ConfigError,
    InvalidResponse,
    NotFound,
    ProxyError,
    StorageError,
    StorageTimeout,
)
from episodestream.storage._config import RETRYABLE_STATUSES, RetryPolicy
from episodestream.storage._messages import MAX_MESSAGE_CHARS, server_message
from episodestream.storage.http._ratelimit import MAX_QUOTA_WAITS, parse_rate_limit

__all__ = [
    "HUB_EXTRA",
    "call_hub",
    "chainable",
    "hub_commit",
    "hub_endpoint",
    "hub_error_status",
    "hub_error_types",
    "hub_token",
    "load_hf",
    "translate_hub_error",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

HUB_EXTRA = "pip install 'episodestream[hub]'"
_COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
_LIBRARY_NAME = "episodestream"


def load_hf() -> ModuleType:
    """huggingface_hub, imported on first use; a :class:`ConfigError` naming the extra when it
    is not installed."""
    try:
        import huggingface_hub
    except ImportError as error:
        raise ConfigError(
            f"hf:// locations need huggingface_hub, which is not installed: {HUB_EXTRA}"
        ) from error
    return huggingface_hub


def hub_token(token: str | bool | None = None) -> str | None:
    """The Hub token to send, decided by huggingface_hub (``get_token_to_send``).

    - a str: that token; ``False``: none;
    - ``None``: the ambient login, unless ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` is set (then none);
    - ``True``: the ambient login, and a :class:`ConfigError` saying how to provide one when
      there is none.

    The ambient login is whatever huggingface_hub finds: ``HF_TOKEN``, the token stored by
    ``hf auth login`` (``HF_TOKEN_PATH`` or ``HF_HOME``; refreshed when it is an expiring OAuth
    token), an OIDC exchange when ``HF_OIDC_RESOURCE`` is set, a Colab secret.
    """
    load_hf()
    from huggingface_hub.errors import LocalTokenNotFoundError
    from huggingface_hub.utils import get_token_to_send

    try:
        return get_token_to_send(token)
    except LocalTokenNotFoundError as error:
        raise ConfigError(
            "token=True but no Hub token found: set HF_TOKEN, log in with `hf auth login`, "
            "or pass the token itself (token=None reads public repos without one)"
        ) from error


def hub_endpoint() -> str:
    """The Hub endpoint huggingface_hub uses: ``HF_ENDPOINT`` (default
    ``https://huggingface.co``), the staging Hub when ``HUGGINGFACE_CO_STAGING`` is set."""
    load_hf()
    from huggingface_hub import constants

    return str(constants.ENDPOINT).rstrip("/")


def hub_commit(
    repo_id: str,
    revision: str,
    *,
    endpoint: str,
    token: str | None,
    timeout_seconds: float,
    retry: RetryPolicy,
    stop: threading.Event,
    rng: random.Random,
) -> str:
    """The commit sha a dataset revision (branch, tag, ``refs/pr/N``, ``refs/convert/…``, sha)
    points at now: one ``dataset_info`` call."""
    load_hf()
    from huggingface_hub import HfApi

    api = HfApi(
        endpoint=endpoint,
        token=token or False,
        library_name=_LIBRARY_NAME,
        library_version=_library_version(),
    )
    what = f"Hub dataset {repo_id!r} at revision {revision!r}"
    info = call_hub(
        lambda: api.dataset_info(repo_id, revision=revision, timeout=timeout_seconds),
        what=what,
        secrets=[token] if token else [],
        retry=retry,
        stop=stop,
        rng=rng,
    )
    sha = info.sha
    if not isinstance(sha, str) or not _COMMIT_SHA.match(sha):
        raise InvalidResponse(f"{what}: the Hub's answer has no commit sha (got {sha!r})")
    return sha


def _library_version() -> str | None:
    """Our version for huggingface_hub's User-Agent (None when run from a source tree)."""
    try:
        return importlib.metadata.version(_LIBRARY_NAME)
    except importlib.metadata.PackageNotFoundError:
        return None


def call_hub(
    call: Callable[[], T],
    *,
    what: str,
    secrets: Iterable[str],
    retry: RetryPolicy,
    stop: threading.Event,
    rng: random.Random,
) -> T:
    """Run one huggingface_hub call; retry what may pass (timeouts, connection errors, the
    policy's statuses) with backoff, wait out an announced quota, translate the rest.

    Args:
        call: the huggingface_hub call.
        what: names the repo (and revision or file) in messages.
        secrets: strings no message may contain (the token).
        retry: attempts, backoff, and the longest quota window waited out.
        stop: set when the reader closes: a wait ends at once.
        rng: backoff jitter.
    """
    caught = hub_error_types()
    secrets = [s for s in secrets if s]
    attempt = 0
    quota_waits = 0
    started = time.monotonic()
    while True:
        if stop.is_set():
            raise StorageError(f"{what}: the reader was closed")
        try:
            return call()
        except caught as raw:
            error = translate_hub_error(raw, what, secrets)
            cause = chainable(raw, secrets)
            response = _response_of(raw)
            status = response.status_code if response is not None else None
            headers = response.headers if response is not None else {}
            quota = parse_rate_limit(headers) if status == 429 else None
            if quota is not None and quota.wait_seconds is not None:
                wait = quota.wait_seconds
                quota_waits += 1
                if wait > retry.rate_limit_max_seconds:
                    raise StorageError(
                        f"{error}: {quota.describe()}; the quota resets in {wait:.0f} s, beyond "
                        f"retry.rate_limit_max_seconds={retry.rate_limit_max_seconds:g}"
                    ) from cause
                if quota_waits > MAX_QUOTA_WAITS:
                    # a Hub that answers 429 window after window: bounded like the data plane
                    raise StorageError(
                        f"{error}: {quota.describe()}; still rate-limited after "
                        f"{MAX_QUOTA_WAITS} quota windows waited out"
                    ) from cause
                logger.warning(
                    "%s: rate-limited (%s); waiting %.0f s", what, quota.describe(), wait
                )
                if stop.wait(wait):
                    raise StorageError(f"{what}: the reader was closed") from cause
                continue
            retryable = _retryable(raw, status, retry)
            attempt += 1
            retry_after = RetryPolicy.parse_retry_after(headers.get("Retry-After"))
            delay = retry.next_delay(attempt, rng, retry_after)
            elapsed = time.monotonic() - started
            if not retryable or not retry.should_retry(attempt, elapsed, delay):
                if retryable and status is not None:
                    error = translate_hub_error(raw, what, secrets, retried=attempt - 1)
                elif retryable:
                    error.args = (f"{error} — gave up after {attempt} attempt(s)",)
                raise error from cause
            logger.debug("%s: retrying in %.2f s: %s", what, delay, error)
            if stop.wait(delay):
                raise StorageError(f"{what}: the reader was closed") from cause


def hub_error_types() -> tuple[type[BaseException], ...]:
    """What a huggingface_hub call raises that :func:`translate_hub_error` translates: its HTTP
    errors, offline mode, and its HTTP library's transport errors."""
    hf = load_hf()
    return (hf.errors.HfHubHTTPError, hf.errors.OfflineModeIsEnabled, *_transport().any_error)


def hub_error_status(error: BaseException) -> int | None:
    """The HTTP status of the Hub's answer behind ``error`` (None when there was none)."""
    response = _response_of(error)
    return None if response is None else int(response.status_code)


def chainable(error: BaseException, secrets: Iterable[str]) -> BaseException | None:
    """``error`` as the cause to chain to ours, or None when its text holds a secret
    (huggingface_hub's own messages repeat what the server said)."""
    return None if any(secret and secret in str(error) for secret in secrets) else error


def translate_hub_error(
    error: BaseException, what: str, secrets: Iterable[str], *, retried: int | None = None
) -> StorageError:
    """Our typed error for an error from huggingface_hub or its HTTP library, with the Hub's
    message (never one holding a secret) and ``what`` (the repo, revision or file).

    A status worth retrying (429 without a quota window, 408, 5xx) is a :class:`StorageError`
    — the Hub was unavailable, not wrong — saying how many times it was ``retried``."""
    hf = load_hf()
    transport = _transport()

    errors = hf.errors
    response = _response_of(error)
    if response is None:
        if isinstance(error, errors.OfflineModeIsEnabled):
            return StorageError(f"{what}: HF_HUB_OFFLINE is set, so the Hub is not asked")
        if isinstance(error, transport.proxy_error):
            return ProxyError(f"{what}: the proxy refused or failed ({type(error).__name__})")
        if isinstance(error, transport.timeout_error):
            return StorageTimeout(f"{what}: timed out ({type(error).__name__})")
        said = _first_line(error, secrets)
        return StorageError(
            f"{what}: {type(error).__name__} talking to the Hub" + (f": {said}" if said else "")
        )
    status = response.status_code
    said = server_message(response.headers, _body_of(response), secrets)
    reason = f" — the Hub says: {said}" if said else ""
    if isinstance(error, errors.GatedRepoError):
        return StorageError(f"{what}: HTTP {status}, gated: access not granted{reason}")
    if isinstance(error, errors.RevisionNotFoundError):
        return NotFound(f"{what}: HTTP {status}, no such revision{reason}")
    if isinstance(error, errors.EntryNotFoundError):
        return NotFound(f"{what}: HTTP {status}, no such file{reason}")
    if status in (401, 403):
        hint = " (a token may be missing or lack access)" if status == 401 else ""
        return StorageError(f"{what}: HTTP {status}, access denied{hint}{reason}")
    if isinstance(error, errors.RepositoryNotFoundError) or status in (404, 410):
        return NotFound(
            f"{what}: HTTP {status}, no such repo (or private without a valid token){reason}"
        )
    if status in RETRYABLE_STATUSES or retried is not None:
        # retried given: the caller's retry policy held this status worth retrying (its
        # statuses may go beyond the defaults, 409 say), so giving up says so too
        tries = f" (retried {retried} times)" if retried else ""
        return StorageError(f"{what}: HTTP {status}{tries}{reason}")
    return InvalidResponse(f"{what}: unexpected HTTP {status}{reason}")


@dataclass(frozen=True, slots=True)
class _Transport:
    """The exception types of the HTTP library under huggingface_hub: httpx from 1.0 (2.x's
    httpx2 under the same name in ``huggingface_hub.utils``), requests before (0.x, which
    LeRobot 0.4 pins)."""

    any_error: tuple[type[BaseException], ...]
    transport_error: tuple[type[BaseException], ...]  # no answer: may pass on a retry
    timeout_error: tuple[type[BaseException], ...]
    proxy_error: tuple[type[BaseException], ...]
    body_not_read: tuple[type[BaseException], ...]


@functools.cache
def _transport() -> _Transport:
    hf = load_hf()
    if int(hf.__version__.split(".")[0]) >= 1:
        try:
            from huggingface_hub.utils import httpx  # 1.30 and later
        except ImportError:
            import httpx
        return _Transport(
            any_error=(httpx.HTTPError, httpx.InvalidURL),
            transport_error=(httpx.TransportError,),
            timeout_error=(httpx.TimeoutException,),
            proxy_error=(httpx.ProxyError,),
            body_not_read=(httpx.ResponseNotRead,),
        )
    import requests

    return _Transport(
        any_error=(requests.RequestException,),
        transport_error=(requests.ConnectionError, requests.Timeout),
        timeout_error=(requests.Timeout,),
        proxy_error=(requests.exceptions.ProxyError,),
        body_not_read=(),
    )


def _response_of(error: BaseException) -> Any:
    """The HTTP response a huggingface_hub error carries (an ``httpx.Response`` from 1.0, a
    ``requests.Response`` before), if any."""
    hf = load_hf()
    if isinstance(error, hf.errors.HfHubHTTPError):
        return error.response  # None when huggingface_hub raised before any answer
    return None


def _first_line(error: BaseException, secrets: Iterable[str]) -> str:
    """The first line of ``error``'s text, cut to a message's length; empty if it holds a
    secret."""
    lines = str(error).strip().splitlines()
    line = lines[0].strip() if lines else ""
    if any(secret and secret in line for secret in secrets):
        return ""
    return line[:MAX_MESSAGE_CHARS]


def _body_of(response: Any) -> bytes | None:
    try:
        return bytes(response.content)
    except _transport().body_not_read:
        return None


def _retryable(error: BaseException, status: int | None, retry: RetryPolicy) -> bool:
    transport = _transport()
    if status is not None:
        return retry.is_retryable_status(status)
    return isinstance(error, transport.transport_error) and not isinstance(
        error, transport.proxy_error
    )

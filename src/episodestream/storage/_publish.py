"""Write one small file under a dataset root for others to read: the writing side of storage.

Each backend writes so that a reader sees the old file or the new one, never half:

- local: a temporary file beside the target, fsync, rename, fsync of the folder;
- fsspec (``s3://`` …): one ``pipe_file`` (a single ``PutObject`` on S3, atomic there);
- Hub dataset repo: one commit through ``huggingface_hub`` (``HfApi.create_commit``), or a
  pull request with ``create_pr``; ``parent_commit`` makes the Hub refuse the commit when the
  branch moved since the caller read it;
- Hub bucket: ``HfApi.batch_bucket_files`` (the file goes to Xet storage, then one batch call
  adds it).

Refusals (the Hub's 401/403, S3's AccessDenied, a moved branch) raise :class:`PublishError`
with the destination and the service's own message (never the token); ``huggingface_hub``
errors go through the same translation as reads (``hub/_api.translate_hub_error``).
Bucket writes need huggingface_hub's bucket API (``HfApi.batch_bucket_files``, from the 1.x
line; the ``hub`` extra also allows 0.x, which LeRobot 0.4 pins): without it,
:func:`check_publishable` refuses before anything is built.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from episodestream.errors import ConfigError, PublishError
from episodestream.storage._base import normalize_relative_path
from episodestream.storage._config import DEFAULT_TIMEOUTS
from episodestream.storage._location import Location
from episodestream.storage.hub._api import (
    chainable,
    hub_error_status,
    hub_error_types,
    load_hf,
    translate_hub_error,
)

__all__ = ["DEFAULT_PUBLISH_MESSAGE", "PublishResult", "check_publishable", "publish_file"]

logger = logging.getLogger(__name__)

_COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")
DEFAULT_PUBLISH_MESSAGE = "Publish the episodestream sidecar index"
# huggingface_hub's bucket write (1.x only; 0.x has no buckets at all)
_BUCKET_WRITE_API = "batch_bucket_files"
# raised by huggingface_hub before any request (a bad argument) or by the Xet client's
# transfer: no Hub answer, translated all the same (type and first line)
_CLIENT_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, RuntimeError)


@dataclass(frozen=True, slots=True)
class PublishResult:
    """Where a file was written and what the write made.

    Fields:
        destination: the file's URL (``hf://…``, ``s3://…``) or local path.
        commit: the Hub commit that holds it (repos only).
        pull_request: the pull request's URL when one was opened (``create_pr``).
    """

    destination: str
    commit: str | None = None
    pull_request: str | None = None


def publish_file(
    root: str | os.PathLike[str] | Location,
    relative_path: str,
    data: bytes,
    *,
    token: str | bool | None = None,
    endpoint: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    create_pr: bool = False,
    parent_commit: str | None = None,
    commit_message: str = DEFAULT_PUBLISH_MESSAGE,
) -> PublishResult:
    """Write ``data`` at ``relative_path`` under ``root``, whole or not at all.

    Args:
        root: the dataset root (as :meth:`Location.parse` takes it). A Hub repo is written on
            its revision (default ``main``), which must be a branch: a commit cannot change.
        relative_path: the file's path under ``root`` (``/``-separated).
        data: its bytes.
        token: Hub only: a token, ``False`` for none, ``None`` for the ambient login.
        endpoint: Hub only: the Hub's base URL (default ``HF_ENDPOINT`` or huggingface.co).
        storage_options: fsspec only: passed to the filesystem as is (credentials, …).
        create_pr: Hub repos only: open a pull request against the revision instead of
            committing to it (for users who may not write to the branch).
        parent_commit: Hub repos only: the commit the caller read; the Hub refuses the commit
            if the branch moved on since.
        commit_message: Hub repos only: the commit's title.

    A Hub upload (``create_commit``, ``batch_bucket_files``) has no time bound: huggingface_hub
    takes none for it, and one cannot be cancelled from outside; it is logged at INFO when it
    starts and when it ends.

    Raises:
        PublishError: the destination refused the write (the service's message included).
        ConfigError: an option that does not apply to this kind of root, or a Hub root pinned
            to a commit.
    """
    location = check_publishable(root, create_pr=create_pr, parent_commit=parent_commit)
    clean = normalize_relative_path(relative_path)
    if location.kind == "local":
        return _publish_local(location, clean, data)
    if location.kind == "fsspec":
        return _publish_fsspec(location, clean, data, storage_options or {})
    if location.repo_type == "buckets":
        return _publish_bucket(location, clean, data, token=token, endpoint=endpoint)
    return _publish_repo(
        location,
        clean,
        data,
        token=token,
        endpoint=endpoint,
        create_pr=create_pr,
        parent_commit=parent_commit,
        commit_message=commit_message,
    )


def check_publishable(
    root: str | os.PathLike[str] | Location,
    *,
    create_pr: bool = False,
    parent_commit: str | None = None,
) -> Location:
    """``root`` parsed, if :func:`publish_file` can write there with these options (so a
    caller can refuse before hours of work rather than after).

    Raises:
        ConfigError: plain HTTP(S) (read-only), a pull request or parent commit anywhere but
            a Hub dataset repo, a Hub repo pinned to a commit (which cannot change), a Hub
            root without huggingface_hub, or a bucket with a huggingface_hub that cannot
            write to buckets (0.x).
    """
    location = Location.parse(root)
    if location.kind == "http":
        raise ConfigError(
            f"cannot publish to {location.url!r}: plain HTTP(S) is read-only; publish to the "
            "store behind it (a local path, s3://…, hf://…)"
        )
    is_repo = location.kind == "hub" and location.repo_type == "datasets"
    if not is_repo and (create_pr or parent_commit is not None):
        raise ConfigError(
            f"pull requests and parent commits apply to Hub dataset repos, not {location.url!r}"
        )
    if is_repo and _COMMIT_SHA.match(location.revision or ""):
        raise ConfigError(
            f"{location.url}: a commit cannot change; publish to the branch it is on "
            "(hf://datasets/ORG/NAME@BRANCH)"
        )
    if location.kind == "hub":
        hf = load_hf()  # a ConfigError naming the extra when it is missing
        if location.repo_type == "buckets" and not hasattr(hf.HfApi, _BUCKET_WRITE_API):
            raise ConfigError(
                f"cannot publish to {location.url}: writing to a Hub bucket needs "
                f"huggingface_hub 1.x with buckets (HfApi.{_BUCKET_WRITE_API}), but "
                f"huggingface_hub {hf.__version__} is installed: pip install -U huggingface_hub "
                "(or publish from an environment that has it)"
            )
    return location


def _publish_local(location: Location, clean: str, data: bytes) -> PublishResult:
    target = os.path.join(location.path, *clean.split("/"))
    folder = os.path.dirname(target)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, temporary = tempfile.mkstemp(
            prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=folder
        )
    except OSError as error:
        raise PublishError(f"{target}: cannot write: {error}") from error
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
        # the rename itself survives a crash only once the folder is on disk too
        directory = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError as error:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise PublishError(f"{target}: cannot write: {error}") from error
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    return PublishResult(target)


def _publish_fsspec(
    location: Location, clean: str, data: bytes, storage_options: Mapping[str, Any]
) -> PublishResult:
    import fsspec

    target = f"{location.path}/{clean}"
    url = f"{location.protocol}://{target}"
    try:
        filesystem = fsspec.filesystem(location.protocol, **dict(storage_options))
        # one PUT of the whole body: S3 makes an object visible whole or not at all
        filesystem.pipe_file(target, data)
    except PermissionError as error:
        raise PublishError(
            f"{url}: the store refused the write (no write access?): {error}"
        ) from error
    except (OSError, ValueError) as error:
        raise PublishError(f"{url}: cannot write: {error}") from error
    return PublishResult(url)


def _hub_api(token: str | bool | None, endpoint: str | None) -> tuple[Any, str | None]:
    from huggingface_hub import HfApi

    from episodestream.storage.hub._reader import hub_endpoint, hub_token

    resolved = hub_token(token)
    return HfApi(endpoint=(endpoint or hub_endpoint()).rstrip("/"), token=resolved), resolved


def _hub_refusal(
    destination: str, error: BaseException, token: str | None, *, pull_requests: bool
) -> PublishError:
    """``error`` from huggingface_hub as a :class:`PublishError` naming ``destination``: the
    read side's translation (status, the Hub's message, never the token), then what to do."""
    translated = translate_hub_error(
        error, f"{destination}: the Hub refused the write", [token] if token else []
    )
    status = hub_error_status(error)
    if status in (401, 403):
        hint = "the token may read but not write here: log in with a write token "
        hint += "(HF_TOKEN / `hf auth login`)"
        if pull_requests:
            hint += ", or open a pull request instead (--publish-pr)"
        return PublishError(f"{translated}; {hint}")
    if status == 412:
        return PublishError(
            f"{translated}; the branch moved on since the index was built: run the index "
            "again on the new revision"
        )
    return PublishError(str(translated))


def _raise_refusal(
    destination: str, error: BaseException, token: str | None, *, pull_requests: bool
) -> NoReturn:
    refusal = _hub_refusal(destination, error, token, pull_requests=pull_requests)
    raise refusal from chainable(error, [token] if token else [])


def _publish_repo(
    location: Location,
    clean: str,
    data: bytes,
    *,
    token: str | bool | None,
    endpoint: str | None,
    create_pr: bool,
    parent_commit: str | None,
    commit_message: str,
) -> PublishResult:
    """One commit adding the file (or a pull request with ``create_pr``).

    Not time-bounded: ``HfApi.create_commit`` takes no timeout (its preupload, LFS/Xet upload
    and commit calls have none we can set), and a thread wrapped around it could only be
    abandoned, never cancelled — it would leak and might still commit later. An INFO line
    says when the upload starts and ends, so a stalled publish shows where it stands.
    """
    from huggingface_hub import CommitOperationAdd

    revision = location.revision or "main"
    path_in_repo = f"{location.path}/{clean}" if location.path else clean
    destination = location.join(clean).url
    api, resolved_token = _hub_api(token, endpoint)
    assert location.repo_id is not None
    logger.info(
        "publishing %s (%d bytes) as a commit%s; huggingface_hub's upload has no time bound",
        destination,
        len(data),
        " (pull request)" if create_pr else "",
    )
    try:
        info = api.create_commit(
            location.repo_id,
            [CommitOperationAdd(path_in_repo=path_in_repo, path_or_fileobj=data)],
            commit_message=commit_message,
            repo_type="dataset",
            revision=revision,
            create_pr=create_pr,
            parent_commit=parent_commit,
            token=resolved_token if resolved_token is not None else False,
        )
    except (*hub_error_types(), *_CLIENT_ERRORS) as error:
        _raise_refusal(destination, error, resolved_token, pull_requests=not create_pr)
    logger.info("published %s: commit %s", destination, info.oid)
    return PublishResult(destination, commit=info.oid, pull_request=info.pr_url)


def _check_bucket_write(api: Any, bucket_id: str, token: str | None) -> None:
    """Ask the Hub for the Xet write token first: the Xet client reports a refusal without the
    Hub's message, huggingface_hub's HTTP layer keeps it (``HfHubHTTPError``)."""
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    headers = build_hf_headers(token=token if token is not None else False)
    url = f"{api.endpoint}/api/buckets/{bucket_id}/xet-write-token"
    # huggingface_hub's client has no timeout of its own: a silent Hub must not hold a publish
    timeout = DEFAULT_TIMEOUTS.read_seconds  # a float both of its HTTP stacks take
    hf_raise_for_status(get_session().get(url, headers=headers, timeout=timeout))


def _publish_bucket(
    location: Location,
    clean: str,
    data: bytes,
    *,
    token: str | bool | None,
    endpoint: str | None,
) -> PublishResult:
    """The file added to a bucket: its Xet upload, then one batch call.

    The write-token check is bounded by the read timeout; ``HfApi.batch_bucket_files`` is
    not (it takes no timeout, and a thread around it would leak rather than cancel it). An
    INFO line says when the upload starts and ends.
    """
    path_in_bucket = f"{location.path}/{clean}" if location.path else clean
    destination = location.join(clean).url
    api, resolved_token = _hub_api(token, endpoint)
    assert location.repo_id is not None
    try:
        _check_bucket_write(api, location.repo_id, resolved_token)
        logger.info(
            "publishing %s (%d bytes) to a bucket; huggingface_hub's upload has no time bound",
            destination,
            len(data),
        )
        api.batch_bucket_files(
            location.repo_id,
            add=[(data, path_in_bucket)],
            token=resolved_token if resolved_token is not None else False,
        )
    except (*hub_error_types(), *_CLIENT_ERRORS) as error:
        _raise_refusal(destination, error, resolved_token, pull_requests=False)
    logger.info("published %s", destination)
    return PublishResult(destination)

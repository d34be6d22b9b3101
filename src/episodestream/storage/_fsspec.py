"""Range reader over any fsspec filesystem (``s3://``, ``gs://``, ``memory://``, …).

One store request per range — ``cat_file(path, start, end)`` — never a buffered file object, so
there is no read-ahead. ``storage_options`` pass through to the filesystem untyped (that is
fsspec's contract); everything this layer controls is typed.

S3 (s3fs) gets more: its client's connection pool is sized to our connection limit (botocore's
``max_pool_connections``, default 10, would queue a batch of 16 ranges), and every object is
pinned at first contact — its ETag from the first answer (``HeadObject`` or a ranged
``GetObject``) — and every later range is a ``GetObject`` with ``IfMatch`` on that ETag, so a
replaced object answers 412 and the read raises :class:`StaleSourceError` naming the file;
bytes of two versions are never mixed. ``IfMatch`` rather than reading a pinned ``VersionId``:
it works on unversioned buckets, and a replaced object is an error rather than old bytes
silently served. Each answer's own ETag and size are checked against the pin as well (a
store that ignored ``IfMatch`` would still be caught).
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

from episodestream._checks import MAX_CONNECTIONS, check_int
from episodestream.errors import (
    ConfigTypeError,
    InvalidResponse,
    LocationError,
    NotFound,
    StaleSourceError,
    StorageError,
    StorageTimeout,
)
from episodestream.storage._base import (
    DEFAULT_READ_FILE_MAX_BYTES,
    BaseRangeReader,
    FileInfo,
    ReaderStats,
    ReadRequest,
    normalize_relative_path,
)
from episodestream.storage._config import DEFAULT_TIMEOUTS, Limits, Timeouts
from episodestream.storage._deadline import body_deadline_seconds
from episodestream.storage._location import Location
from episodestream.storage._runner import TrackedPool, shut_down
from episodestream.storage._urls import redact_url, shorten, shown_url

__all__ = ["FsspecRangeReader"]

_EXTRA_FOR = {"s3": "s3", "s3a": "s3", "gs": "gcs (gcsfs)", "gcs": "gcs (gcsfs)"}
_S3_PROTOCOLS = frozenset({"s3", "s3a"})
_CONTENT_RANGE_TOTAL = re.compile(r"/(\d+)\s*$")


class FsspecRangeReader(BaseRangeReader):
    """Exact byte ranges of the files under an fsspec URL.

    Args:
        location: e.g. ``"s3://bucket/prefix"`` (str or :class:`Location`).
        storage_options: passed to the fsspec filesystem as is (credentials, endpoint_url, …).
            A public S3 bucket needs no credentials: ``storage_options={"anon": True}`` sends
            unsigned requests (without it, s3fs looks for credentials the way boto does and
            fails where there are none). ``{"version_aware": True}`` lets paths name versions.
        max_concurrency: ranges in flight at once in ``read_many`` (threads for filesystems
            that are not async; async ones, such as s3fs, run the batch on fsspec's own event
            loop). Default: ``limits.max_concurrency``, else 16.
        limits: the connection limit for S3: ``limits.max_connections_per_host`` becomes the
            s3fs client's ``max_pool_connections`` (through ``config_kwargs``; one given there
            explicitly wins). Without ``limits``, the pool holds ``max_concurrency``
            connections. Other fields of :class:`Limits` do not apply here.
        timeouts: bound every wait on the store: one request may take a pool wait, a connect,
            a read timeout and its bytes at the minimum rate (64 KiB/s); a batch, one such
            round per ``max_concurrency`` ranges and all its bytes at that rate. Past the
            bound, :class:`StorageTimeout` names the file and range (async filesystems, such
            as s3fs, cancel the request; a thread of a blocking one finishes on its own).
            :meth:`close` joins its threads for at most a connect and a read timeout.

    S3 objects are pinned at first contact and read with ``IfMatch`` (see the module's
    docstring): a replaced object raises :class:`StaleSourceError`. Other filesystems: sizes
    and validators as the store reports them, unpinned.
    """

    def __init__(
        self,
        location: str | Location,
        *,
        storage_options: dict[str, Any] | None = None,
        max_concurrency: int | None = None,
        limits: Limits | None = None,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        parsed = Location.parse(location)
        # http(s) is allowed too: fsspec's HTTP filesystem is the escape hatch for what the
        # native reader does not do.
        if parsed.kind not in ("fsspec", "http"):
            raise LocationError(f"not an fsspec or http(s) location: {shown_url(parsed.url)!r}")
        if limits is not None and not isinstance(limits, Limits):
            raise ConfigTypeError(f"limits must be a Limits, got {type(limits).__name__}")
        if not isinstance(timeouts, Timeouts):
            raise ConfigTypeError(f"timeouts must be a Timeouts, got {type(timeouts).__name__}")
        if storage_options is not None and not isinstance(storage_options, Mapping):
            raise ConfigTypeError(
                f"storage_options must be a dict, got {type(storage_options).__name__}"
            )
        self._timeouts = timeouts
        if max_concurrency is None:
            max_concurrency = limits.max_concurrency if limits is not None else 16
        max_concurrency = check_int(
            "max_concurrency", max_concurrency, minimum=1, maximum=MAX_CONNECTIONS
        )
        self._location = parsed
        self._storage_options = dict(storage_options or {})
        self._max_concurrency = max_concurrency
        self._connections = (
            limits.max_connections_per_host if limits is not None else max_concurrency
        )
        # S3 objects pinned at first contact (travel with pickles and forks, like the HTTP
        # reader's validators); changed only under the lock
        self._pins: dict[str, FileInfo] = {}
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._track_forks()
        self._lock = threading.Lock()
        self._fs: Any = None
        self._root = ""
        self._closed = False
        self._executor: TrackedPool | None = None
        self._counters: dict[str, int] = {
            "requests": 0,
            "bytes": 0,
            "reads": 0,
            "lookups": 0,
            "failures": 0,
        }

    def __getstate__(self) -> dict[str, Any]:
        with self._lock:
            pins = dict(self._pins)
        return {
            "_location": self._location,
            "_storage_options": self._storage_options,
            "_max_concurrency": self._max_concurrency,
            "_connections": self._connections,
            "_timeouts": self._timeouts,
            "_pins": pins,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    def _after_fork_in_child(self) -> None:
        """In a forked child (a DataLoader worker): a fresh filesystem and thread pool.

        fsspec's async filesystems refuse to run in a forked child ("not fork-safe"), and the
        parent's thread pool has no threads here (work submitted to it would never run).
        """
        closed = self._closed
        self._init_runtime()
        self._closed = closed

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._location.url!r})"

    @property
    def location(self) -> Location:
        return self._location

    @property
    def root(self) -> str:
        return self._location.url

    @property
    def timeouts(self) -> Timeouts:
        return self._timeouts

    def _filesystem(self) -> tuple[Any, str]:
        with self._lock:
            if self._closed:
                raise StorageError(f"{self!r} is closed")
            if self._fs is None:
                import fsspec

                protocol = self._location.protocol
                try:
                    self._fs = self._make_filesystem(fsspec, protocol)
                except ImportError as error:
                    extra = _EXTRA_FOR.get(protocol)
                    hint = f" (pip install 'episodestream[{extra}]')" if extra else ""
                    raise StorageError(
                        f"no fsspec filesystem for {shorten(protocol)}://{hint}: "
                        f"{shorten(str(error))}"
                    ) from error
                except ValueError as error:
                    if "protocol" not in str(error).lower():
                        raise self._unmade(protocol, error) from error
                    raise LocationError(f"unknown fsspec protocol {shorten(protocol)!r}") from error
                except Exception as error:  # fsspec's or the backend's own: one typed error
                    raise self._unmade(protocol, error) from error
                self._root = self._fs._strip_protocol(self._location.url).rstrip("/")
            return self._fs, self._root

    def _make_filesystem(self, fsspec: Any, protocol: str) -> Any:
        """A private filesystem for the location (closing this reader touches no one else's):
        what the URL says (a host and port for ``ftp://``) under the caller's options."""
        cls = fsspec.get_filesystem_class(protocol)
        options = {**cls._get_kwargs_from_urls(self._location.url), **self._storage_options}
        if protocol in _S3_PROTOCOLS:
            config = options.get("config_kwargs")
            if config is not None and not isinstance(config, Mapping):
                raise ConfigTypeError(
                    f"storage_options['config_kwargs'] must be a dict, got {type(config).__name__}"
                )
            config = dict(config or {})
            config.setdefault("max_pool_connections", self._connections)
            options["config_kwargs"] = config
        return fsspec.filesystem(protocol, skip_instance_cache=True, **options)

    def _unmade(self, protocol: str, error: BaseException) -> LocationError:
        """The error for a filesystem fsspec could not make (a bad option, a host that does not
        answer): the location and what fsspec said, shortened."""
        said = shorten(f"{type(error).__name__}: {error}")
        return LocationError(
            f"cannot open {shown_url(self._location.url)!r} with fsspec's {shorten(protocol)!r} "
            f"filesystem (check the URL and storage_options): {said}"
        )

    def _full(self, path: str) -> tuple[Any, str, str]:
        self._check_deadline()  # an operation's deadline (opening a dataset), if any
        fs, root = self._filesystem()
        clean = normalize_relative_path(path)
        return fs, (f"{root}/{clean}" if clean else root), clean

    def _count(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self._counters[name] = self._counters.get(name, 0) + amount

    def _where(self, clean: str, offset: int | None = None, length: int | None = None) -> str:
        where = shorten(f"{redact_url(self._location.url)}/{clean}")
        if offset is not None and length is not None:
            where += f" bytes {offset}-{offset + length - 1}"
        return where

    def _translate(self, error: BaseException, where: str) -> StorageError:
        self._count("failures")
        if isinstance(error, StorageError):
            return error
        if isinstance(error, FileNotFoundError):
            return NotFound(f"{where}: no such file")
        if isinstance(error, TimeoutError):
            said = str(error)
            return StorageTimeout(f"{where}: timed out" + (f": {said}" if said else ""))
        if isinstance(error, PermissionError):
            return StorageError(f"{where}: access denied: {error}")
        return StorageError(f"{where}: {type(error).__name__}: {error}")

    def _bound_seconds(self, nbytes: int, requests: int = 1) -> float:
        """The longest ``requests`` store requests of ``nbytes`` in all may take (see the
        ``timeouts`` argument): one round of pool wait, connect and read timeout per
        ``max_concurrency`` requests, and every byte at the minimum rate."""
        timeouts = self._timeouts
        rounds = max(1, math.ceil(requests / self._max_concurrency))
        per_round = timeouts.pool_seconds + timeouts.connect_seconds + timeouts.read_seconds
        bound = rounds * per_round + body_deadline_seconds(timeouts.read_seconds, nbytes)
        deadline = self._deadline
        if deadline is not None:  # never past an operation's deadline (opening a dataset)
            bound = max(0.001, min(bound, deadline.remaining()))
        return bound

    def _sync(self, fs: Any, where: str, seconds: float, function: Any, *args: Any) -> Any:
        """Run coroutine ``function(*args)`` on the filesystem's event loop (fsspec's own
        thread) and wait for it at most ``seconds`` (then it is cancelled)."""
        import fsspec.asyn

        try:
            return fsspec.asyn.sync(fs.loop, function, *args, timeout=seconds)
        except fsspec.asyn.FSTimeoutError as error:
            self._check_deadline()  # the operation's deadline cut it short: say so
            raise StorageTimeout(
                f"{where}: no answer from the store within {seconds:.0f} s"
            ) from error

    def _timeout_kwargs(self, fs: Any, seconds: float) -> dict[str, float]:
        """``timeout=`` for a call of an async filesystem's blocking method (fsspec's
        ``sync`` takes it); nothing for a blocking filesystem, whose calls take none."""
        return {"timeout": seconds} if getattr(fs, "async_impl", False) else {}

    def file_info(self, path: str) -> FileInfo:
        """Size and validators as the store reports them (S3: ETag and LastModified, pinned
        at first contact: later calls return the pinned ones without a request)."""
        fs, full, clean = self._full(path)
        s3 = self._is_s3(fs)
        if s3:
            with self._lock:
                pinned = self._pins.get(clean)
            if pinned is not None:
                return pinned
        try:
            info = fs.info(full, **self._timeout_kwargs(fs, self._bound_seconds(0)))
        except Exception as error:
            raise self._translate(error, self._where(clean)) from error
        self._count("requests")
        self._count("lookups")
        if info.get("type") == "directory":
            raise NotFound(f"{self._where(clean)}: is a folder, not a file")
        etag = info.get("ETag") or info.get("etag")
        modified = info.get("LastModified") or info.get("last_modified") or info.get("mtime")
        found = FileInfo(int(info["size"]), etag, _http_date(modified))
        return self._pin(clean, found, self._where(clean)) if s3 else found

    def size(self, path: str) -> int:
        return self.file_info(path).size

    def read(self, path: str, offset: int, length: int) -> bytes:
        ReadRequest(path, offset, length)
        fs, full, clean = self._full(path)
        self._count("reads")
        return self._read_range(fs, full, clean, offset, length)

    def _read_range(self, fs: Any, full: str, clean: str, offset: int, length: int) -> bytes:
        """One range in one store request (the caller counted the read)."""
        if length == 0:
            return b""
        where = self._where(clean, offset, length)
        seconds = self._bound_seconds(length)
        try:
            if self._is_s3(fs):
                stop = offset + length
                data = self._sync(fs, where, seconds, self._s3_get, fs, full, clean, offset, stop)
            else:
                timeout = self._timeout_kwargs(fs, seconds)
                data = fs.cat_file(full, start=offset, end=offset + length, **timeout)
        except Exception as error:
            raise self._translate(error, where) from error
        return self._checked(data, length, where)

    def read_file(self, path: str, *, max_bytes: int = DEFAULT_READ_FILE_MAX_BYTES) -> bytes:
        """The whole file in one store request; larger than ``max_bytes`` is an error."""
        fs, full, clean = self._full(path)
        self._count("reads")
        where = self._where(clean)
        try:
            # One byte more than allowed tells "too large" apart without a size request.
            if self._is_s3(fs):
                data = self._s3_whole(fs, full, clean, max_bytes + 1)
            else:
                timeout = self._timeout_kwargs(fs, self._bound_seconds(max_bytes + 1))
                data = fs.cat_file(full, start=0, end=max_bytes + 1, **timeout)
        except Exception as error:
            raise self._translate(error, where) from error
        self._count("requests")
        self._count("bytes", len(data))
        if len(data) > max_bytes:
            raise InvalidResponse(
                f"{where}: file larger than read_file's max_bytes={max_bytes}; read it by ranges"
            )
        self._count("bytes_returned", len(data))
        return bytes(data)

    def _checked(self, data: Any, length: int, where: str) -> bytes:
        self._count("requests")
        if not isinstance(data, bytes | bytearray):
            raise InvalidResponse(f"{where}: store returned {type(data).__name__}, not bytes")
        self._count("bytes", len(data))
        if len(data) != length:
            raise InvalidResponse(
                f"{where}: store returned {len(data)} of {length} bytes (file shorter than the "
                "range?)"
            )
        self._count("bytes_returned", length)
        return bytes(data)

    def read_many(self, requests: Sequence[ReadRequest]) -> list[bytes]:
        """All ``requests``, one store request each, concurrently; results in order."""
        requests = list(requests)
        if not requests:
            return []
        fs, _ = self._filesystem()
        fulls = [self._full(r.path) for r in requests]
        self._count("reads", len(requests))
        wanted = [i for i, r in enumerate(requests) if r.length]
        results: list[bytes] = [b""] * len(requests)
        seconds = self._bound_seconds(sum(requests[i].length for i in wanted), len(wanted))
        if self._is_s3(fs) and wanted:
            jobs = [(fulls[i][1], fulls[i][2], requests[i].offset, requests[i].end) for i in wanted]
            where = self._batch_where(requests, fulls, wanted)
            batch = partial(self._sync, fs, where, seconds, self._s3_batch, fs, jobs)
            return self._take_batch(batch, requests, fulls, wanted, results)
        if getattr(fs, "async_impl", False) and len(wanted) > 1:
            batch = partial(
                fs.cat_ranges,
                [fulls[i][1] for i in wanted],
                [requests[i].offset for i in wanted],
                [requests[i].end for i in wanted],
                on_error="return",
                batch_size=self._max_concurrency,
                timeout=seconds,
            )
            return self._take_batch(batch, requests, fulls, wanted, results)
        if len(wanted) <= 1:
            for i in wanted:  # counted above: read() would count the range again
                r = requests[i]
                results[i] = self._read_range(fs, fulls[i][1], fulls[i][2], r.offset, r.length)
            return results
        with self._lock:
            if self._closed:  # closed since _filesystem(): a pool made now would never shut
                raise StorageError(f"{self!r} is closed")
            if self._executor is None:
                self._executor = TrackedPool(self._max_concurrency, "episodestream-fsspec")
            executor = self._executor
        futures = [
            executor.submit(fs.cat_file, fulls[i][1], start=requests[i].offset, end=requests[i].end)
            for i in wanted
        ]
        first_error: tuple[BaseException, str] | None = None
        deadline = time.monotonic() + seconds
        for i, future in zip(wanted, futures, strict=True):
            r = requests[i]
            where = self._where(fulls[i][2], r.offset, r.length)
            try:
                try:
                    answer = future.result(timeout=max(0.0, deadline - time.monotonic()))
                except TimeoutError as error:
                    if future.done():  # the store's own timeout
                        raise
                    raise StorageTimeout(
                        f"{where}: no answer from the store within {seconds:.0f} s "
                        f"({len(wanted)} ranges in the batch)"
                    ) from error
                results[i] = self._checked(answer, r.length, where)
            except Exception as error:
                if first_error is None:
                    first_error = (error, where)
                    for other in futures:
                        other.cancel()
        if first_error is not None:
            error, where = first_error
            raise self._translate(error, where) from error
        return results

    def _batch_where(
        self, requests: list[ReadRequest], fulls: list[tuple[Any, str, str]], wanted: list[int]
    ) -> str:
        """A batch's ranges named for a message: the first, and how many more."""
        first = wanted[0]
        where = self._where(fulls[first][2], requests[first].offset, requests[first].length)
        return where if len(wanted) == 1 else f"{where} and {len(wanted) - 1} more range(s)"

    def _take_batch(
        self,
        batch: Callable[[], list[Any]],
        requests: list[ReadRequest],
        fulls: list[tuple[Any, str, str]],
        wanted: list[int],
        results: list[bytes],
    ) -> list[bytes]:
        """Run ``batch`` (one answer, bytes or its error, per ``wanted`` request, in order) and
        check each answer into ``results``; the first error is raised."""
        try:
            answers = batch()
        except Exception as error:
            raise self._translate(error, self._batch_where(requests, fulls, wanted)) from error
        for i, answer in zip(wanted, answers, strict=True):
            r = requests[i]
            where = self._where(fulls[i][2], r.offset, r.length)
            if isinstance(answer, BaseException):
                raise self._translate(answer, where) from answer
            results[i] = self._checked(answer, r.length, where)
        return results

    # ------------------------------------------------------------------ S3: pinned objects

    def _is_s3(self, fs: Any) -> bool:
        return self._location.protocol in _S3_PROTOCOLS and hasattr(fs, "_call_s3")

    def _pin(self, clean: str, seen: FileInfo, where: str) -> FileInfo:
        """Pin ``seen`` at first contact; later answers must agree (else StaleSourceError)."""
        with self._lock:
            pinned = self._pins.get(clean)
            if pinned is None:
                self._pins[clean] = seen
                return seen
        problems = []
        if pinned.size != seen.size:
            problems.append(f"size {pinned.size} -> {seen.size}")
        if pinned.etag and seen.etag and pinned.etag != seen.etag:
            problems.append(f"ETag {pinned.etag} -> {seen.etag}")
        if problems:
            raise StaleSourceError(f"{where}: the object changed: " + ", ".join(problems))
        return pinned

    async def _s3_get(self, fs: Any, full: str, clean: str, start: int, stop: int) -> bytes:
        """Bytes ``[start, stop)`` of an S3 object (fewer at its end) in one ``GetObject``,
        with ``IfMatch`` on the pinned ETag; the first answer pins the object."""
        bucket, key, version = fs.split_path(full)
        with self._lock:
            pinned = self._pins.get(clean)
        request: dict[str, Any] = {"Bucket": bucket, "Key": key}
        request["Range"] = f"bytes={start}-{stop - 1}"
        if version:
            request["VersionId"] = version
        if pinned is not None and pinned.etag:
            request["IfMatch"] = pinned.etag
        where = self._where(clean, start, stop - start)
        try:
            response = await fs._call_s3("get_object", **request)
        except Exception as error:
            if pinned is not None and _s3_error_code(error) in ("PreconditionFailed", "412"):
                raise StaleSourceError(
                    f"{where}: the object changed since it was first read: it no longer has "
                    f"ETag {pinned.etag} (replaced or rewritten)"
                ) from error
            raise
        body = response["Body"]
        try:
            data = await body.read()
        finally:
            body.close()
        match = _CONTENT_RANGE_TOTAL.search(response.get("ContentRange") or "")
        if match is not None:
            seen = FileInfo(
                int(match.group(1)),
                response.get("ETag"),
                _http_date(response.get("LastModified")),
            )
            self._pin(clean, seen, where)
        return data

    async def _s3_batch(
        self, fs: Any, jobs: list[tuple[str, str, int, int]]
    ) -> list[bytes | BaseException]:
        """Every job's bytes (or its error), at most ``max_concurrency`` in flight."""
        gate = asyncio.Semaphore(self._max_concurrency)

        async def one(full: str, clean: str, start: int, stop: int) -> bytes:
            async with gate:
                return await self._s3_get(fs, full, clean, start, stop)

        return await asyncio.gather(*(one(*job) for job in jobs), return_exceptions=True)

    def _s3_whole(self, fs: Any, full: str, clean: str, limit: int) -> bytes:
        """The object's first ``limit`` bytes (all of a smaller one); an empty object, which
        no range can address, through its pinned size."""
        where = self._where(clean)
        try:
            return self._sync(
                fs, where, self._bound_seconds(limit), self._s3_get, fs, full, clean, 0, limit
            )
        except OSError as error:
            if _s3_error_code(error) not in ("InvalidRange", "416"):
                raise
        if self.file_info(clean).size == 0:
            return b""
        raise InvalidResponse(f"{self._where(clean)}: range refused for a non-empty object")

    def list_files(self, prefix: str) -> list[str]:
        """Relative paths of all files under folder ``prefix``, sorted; [] when absent."""
        fs, full, _ = self._full(prefix)
        _, root = self._filesystem()
        try:
            found = fs.find(full, **self._timeout_kwargs(fs, self._bound_seconds(0)))
        except FileNotFoundError:
            return []
        except Exception as error:
            raise self._translate(error, self._where(prefix)) from error
        self._count("requests")
        out = []
        for item in found:
            item = item.rstrip("/")
            if item.startswith(root + "/"):
                out.append(item[len(root) + 1 :])
        return sorted(out)

    def stats(self) -> ReaderStats:
        with self._lock:
            return ReaderStats.from_counters(self._counters)

    def close(self) -> None:
        """Cancel queued ranges and join the worker threads for at most a connect and a read
        timeout (a thread still in a store call then is logged and left); idempotent."""
        with self._lock:
            self._closed = True
            executor, self._executor = self._executor, None
            self._fs = None
        if executor is not None:
            join_seconds = self._timeouts.connect_seconds + self._timeouts.read_seconds
            shut_down(executor, join_seconds, repr(self))


def _s3_error_code(error: BaseException) -> str | None:
    """The S3 error code (``PreconditionFailed``, ``InvalidRange``…) behind an exception that
    s3fs translated (the botocore ``ClientError`` is its cause), or None."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        response = getattr(current, "response", None)
        if isinstance(response, dict):
            code = response.get("Error", {}).get("Code")
            if code:
                return str(code)
        current = current.__cause__ or current.__context__
    return None


def _http_date(value: Any) -> str | None:
    """A modification time as an HTTP-date string (what FileInfo holds), or None."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return email.utils.format_datetime(value.astimezone(UTC), usegmt=True)
    return None if value is None or value == "" else str(value)

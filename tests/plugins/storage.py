"""pytest fixtures: storage — a fault-injecting HTTP server, a Hugging Face Hub stand-in, moto S3.

All servers are real HTTP servers on loopback threads. The Hub stand-in binds its CDN on a
different address (127.0.0.2) so "another host" is literally another host.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import email.utils
import functools
import hashlib
import hmac
import io
import json
import math
import os
import re
import shutil
import socket
import struct
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.support.hf_env import reread_hf_environment

# A handler never sleeps longer than this, whatever a test asks, so a server thread cannot hang.
MAX_STALL_SECONDS = 5.0
# a stall released by a test's event: long enough that a loaded machine never ends it first
MAX_RELEASE_WAIT_SECONDS = 30.0
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
# a POST body larger than this is cut (the stand-ins take small commits only)
MAX_POST_BYTES = 64 << 20


@dataclass
class RecordedRequest:
    """One request as the server saw it."""

    path: str
    query: str
    headers: dict[str, str]
    status: int | None = None
    fault: str | None = None
    method: str = "GET"
    raw_path: str = ""  # the path as sent, still percent-encoded
    body: bytes = b""  # a POST's body

    def header(self, name: str) -> str | None:
        for key, value in self.headers.items():
            if key.lower() == name.lower():
                return value
        return None


@dataclass
class Fault:
    """One misbehaviour, applied to the next request for a path.

    kinds: ``status`` (answer ``status`` with optional ``retry_after``), ``reset`` (send
    ``after_bytes`` of the body, then a TCP reset), ``truncate`` (promise the full length, send
    ``after_bytes``, close cleanly), ``stall`` (wait before the headers, then answer normally),
    ``stall_body`` (send the head and ``after_bytes`` of the body, wait, then the rest),
    ``wrong_range`` (answer bytes shifted by ``shift`` with a matching Content-Range),
    ``ignore_range`` (200 with the whole file), ``replace`` (the file is replaced by ``data``
    before this request is answered), ``conflicting_length`` (a second, different
    Content-Length field). A stall waits ``delay_seconds``, or until ``release`` is set when
    one is given; never longer than ``MAX_STALL_SECONDS`` (``MAX_RELEASE_WAIT_SECONDS`` with
    an event). Legal but unusual framings:
    ``chunked`` (the body in chunks of ``after_bytes`` or 1000), ``no_length`` (HTTP/1.0-style:
    no length, the body ends when the server closes), ``informational`` (a ``103 Early Hints``
    first), ``redirect`` (302 to ``location``).
    """

    kind: Literal[
        "status",
        "reset",
        "truncate",
        "stall",
        "stall_body",
        "conflicting_length",
        "wrong_range",
        "ignore_range",
        "replace",
        "chunked",
        "no_length",
        "informational",
        "redirect",
    ]
    status: int = 503
    retry_after: str | None = None
    after_bytes: int = 0
    delay_seconds: float = 0.0
    shift: int = 1
    data: bytes | None = None
    location: str | None = None
    release: threading.Event | None = None

    def wait(self) -> None:
        """The stall: until ``release`` is set, else ``delay_seconds``; bounded either way."""
        if self.release is not None:
            self.release.wait(MAX_RELEASE_WAIT_SECONDS)
        else:
            time.sleep(min(self.delay_seconds, MAX_STALL_SECONDS))


@dataclass
class _File:
    data: bytes
    etag: str | None
    last_modified: str | None


def _serve_bytes(
    handler: BaseHTTPRequestHandler,
    entry: _File,
    fault: Fault | None,
    record: RecordedRequest,
    *,
    extra_headers: dict[str, str] | None = None,
) -> None:
    """Answer a GET for ``entry`` honouring Range and If-Range, with ``fault`` applied."""
    data = entry.data
    size = len(data)
    range_header = handler.headers.get("Range")
    if_range = handler.headers.get("If-Range")
    if fault is not None and fault.kind == "stall":
        fault.wait()
    headers: dict[str, str] = {"Accept-Ranges": "bytes", **(extra_headers or {})}
    if entry.etag:
        headers["ETag"] = entry.etag
    if entry.last_modified:
        headers["Last-Modified"] = entry.last_modified
    match = _RANGE.match(range_header or "")
    use_range = match is not None and not (fault is not None and fault.kind == "ignore_range")
    if use_range and if_range is not None and if_range not in (entry.etag, entry.last_modified):
        use_range = False  # the validator does not match: the whole (new) file
    if use_range:
        assert match is not None
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else size - 1
        last = min(last, size - 1)
        if first >= size or first > last:
            headers["Content-Range"] = f"bytes */{size}"
            _send_head(handler, 416, {**headers, "Content-Length": "0"}, record)
            return
        if fault is not None and fault.kind == "wrong_range":
            first = min(first + fault.shift, size - 1)
            last = min(last + fault.shift, size - 1)
        body = data[first : last + 1]
        headers["Content-Range"] = f"bytes {first}-{last}/{size}"
        status = 206
    else:
        body = data
        status = 200
    if fault is not None and fault.kind == "informational":
        handler.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n")
    if fault is not None and fault.kind == "chunked":
        headers["Transfer-Encoding"] = "chunked"
        _send_head(handler, status, headers, record)
        size = fault.after_bytes or 1000
        for low in range(0, len(body), size):
            piece = body[low : low + size]
            handler.wfile.write(f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n")
        handler.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")
        return
    if fault is not None and fault.kind == "no_length":
        headers["Connection"] = "close"
        _send_head(handler, status, headers, record)
        handler.wfile.write(body)
        handler.close_connection = True
        return
    headers["Content-Length"] = str(len(body))
    repeated = []
    if fault is not None and fault.kind == "conflicting_length":
        repeated.append(("Content-Length", str(len(body) + 1)))
    _send_head(handler, status, headers, record, repeated)
    if fault is not None and fault.kind == "stall_body":
        handler.wfile.write(body[: fault.after_bytes])
        handler.wfile.flush()
        fault.wait()
        handler.wfile.write(body[fault.after_bytes :])
        return
    if fault is not None and fault.kind in ("reset", "truncate"):
        handler.wfile.write(body[: fault.after_bytes])
        handler.wfile.flush()
        handler.close_connection = True
        if fault.kind == "reset":
            # SO_LINGER 0: close() sends RST instead of FIN.
            handler.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
            )
            handler.connection.close()
        return
    handler.wfile.write(body)


def _send_head(
    handler: BaseHTTPRequestHandler,
    status: int,
    headers: dict[str, str],
    record: RecordedRequest,
    repeated: list[tuple[str, str]] | None = None,
) -> None:
    """Status line and ``headers``, then ``repeated`` fields (a name sent a second time)."""
    record.status = status
    handler.send_response(status)
    for name, value in [*headers.items(), *(repeated or [])]:
        handler.send_header(name, value)
    handler.end_headers()
    if handler.command == "HEAD":
        handler.wfile = io.BytesIO()  # type: ignore[assignment] # restored by do_HEAD


def _send_status_fault(
    handler: BaseHTTPRequestHandler, fault: Fault, record: RecordedRequest
) -> None:
    """A ``status`` fault's answer: its status, no body, its Retry-After when it has one."""
    headers = {"Content-Length": "0"}
    if fault.retry_after is not None:
        headers["Retry-After"] = fault.retry_after
    _send_head(handler, fault.status, headers, record)


def _send_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    payload: Any,
    record: RecordedRequest,
    headers: dict[str, str] | None = None,
    *,
    chunked: bool = False,
) -> None:
    body = json.dumps(payload).encode()
    framing = {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(len(body))}
    _send_head(
        handler, status, {"Content-Type": "application/json", **framing, **(headers or {})}, record
    )
    if chunked:
        # Like a real API server streaming a listing: several chunks, then the last one.
        for low in range(0, len(body), 64):
            piece = body[low : low + 64]
            handler.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        handler.wfile.write(b"0\r\n\r\n")
    else:
        handler.wfile.write(body)


def _xet_hash(data: bytes) -> str:
    """The Xet hash of ``data``, computed by hf_xet itself (as the Hub's CAS names files)."""
    from hf_xet import hash_files

    with tempfile.TemporaryDirectory(prefix="hub-standin-hash-") as folder:
        path = os.path.join(folder, "file")
        with open(path, "wb") as handle:
            handle.write(data)
        return str(hash_files([path])[0].hash)


def _iso_time(seconds: float) -> str:
    """A time as the Hub's API writes it: ISO 8601, milliseconds, UTC ``Z``."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))
    return f"{whole}.{int(seconds * 1000) % 1000:03d}Z"


class _QuietServer(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: with two workers' 16 threads connecting at
    # once the kernel dropped SYNs, and their retransmissions (1 s, then 3 s later) arrived as
    # if sent later (a CI run saw requests 2 s after a 429 sent before it). The Hub's front
    # ends accept far more; so does nginx (511).
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients reset connections on purpose (an abandoned body); not worth a traceback.
        pass


class _LoopbackServer:
    """A threaded HTTP/1.1 server on ``host`` whose requests go to ``app(handler, record)``."""

    def __init__(
        self,
        host: str,
        app: Callable[[BaseHTTPRequestHandler, RecordedRequest], None],
        log: list[RecordedRequest],
        lock: threading.Lock,
    ) -> None:
        connections: set[socket.socket] = set()
        self._connections = connections
        self._lock = lock

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 10  # an idle keep-alive connection is dropped, so no thread waits forever

            def setup(self) -> None:
                super().setup()
                with lock:
                    connections.add(self.connection)
                # Headers and body go out as separate writes: without this, Nagle + delayed ACK
                # add 40 ms to every small response.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def _record_and_answer(self, body: bytes = b"") -> None:
                parts = urllib.parse.urlsplit(self.path)
                record = RecordedRequest(
                    urllib.parse.unquote(parts.path),
                    parts.query,
                    dict(self.headers.items()),
                    method=self.command,
                    raw_path=parts.path,
                    body=body,
                )
                with lock:
                    log.append(record)
                try:
                    app(self, record)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    self.close_connection = True

            def do_GET(self) -> None:
                self._record_and_answer()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self._record_and_answer(self.rfile.read(min(length, MAX_POST_BYTES)))

            def do_HEAD(self) -> None:
                # the GET answer's head only: the body the app writes goes nowhere
                wfile = self.wfile
                try:
                    self.do_GET()
                finally:
                    self.wfile = wfile

            def finish(self) -> None:
                with lock:
                    connections.discard(self.connection)
                super().finish()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _QuietServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.host = host
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def drop_connections(self) -> None:
        """Close every open client connection from the server side (idle keep-alives too)."""
        with self._lock:
            open_now = list(self._connections)
        for connection in open_now:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


class FaultServer:
    """Serves in-memory files with byte ranges; faults are queued per path."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, _File] = {}
        self._faults: dict[str, collections.deque[Fault]] = {}
        self._versions = 0
        self.requests: list[RecordedRequest] = []
        self._server = _LoopbackServer("127.0.0.1", self._handle, self.requests, self._lock)
        self.url = self._server.url

    def put(
        self,
        path: str,
        data: bytes,
        *,
        validators: Literal["etag", "last_modified", "none"] = "etag",
    ) -> None:
        """Serve ``data`` at ``/path`` with a fresh validator."""
        with self._lock:
            self._store(path, data, validators)

    def _store(self, path: str, data: bytes, validators: str) -> None:
        self._versions += 1
        digest = hashlib.sha256(data).hexdigest()[:16]
        etag = f'"{digest}-{self._versions}"' if validators == "etag" else None
        # Each version one second apart, so Last-Modified tells versions apart.
        modified = (
            email.utils.formatdate(1_700_000_000 + self._versions, usegmt=True)
            if validators in ("etag", "last_modified")
            else None
        )
        self._files[path.lstrip("/")] = _File(data, etag, modified)

    def replace(self, path: str, data: bytes) -> None:
        with self._lock:
            old = self._files[path.lstrip("/")]
            kind = "etag" if old.etag else ("last_modified" if old.last_modified else "none")
            self._store(path, data, kind)

    def inject(self, path: str, *faults: Fault) -> None:
        """Apply ``faults``, in order, to the next requests for ``path``."""
        with self._lock:
            self._faults.setdefault(path.lstrip("/"), collections.deque()).extend(faults)

    def drop_connections(self) -> None:
        """Close all client connections server-side, as an idle keep-alive timeout would."""
        self._server.drop_connections()

    def requests_for(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == "/" + path.lstrip("/")]

    def _handle(self, handler: BaseHTTPRequestHandler, record: RecordedRequest) -> None:
        path = record.path.lstrip("/")
        with self._lock:
            queue = self._faults.get(path)
            fault = queue.popleft() if queue else None
            if fault is not None and fault.kind == "replace":
                old = self._files[path]
                kind = "etag" if old.etag else "last_modified"
                assert fault.data is not None
                self._store(path, fault.data, kind)
            entry = self._files.get(path)
        record.fault = fault.kind if fault else None
        if fault is not None and fault.kind == "status":
            _send_status_fault(handler, fault, record)
            return
        if fault is not None and fault.kind == "redirect":
            assert fault.location is not None
            _send_head(handler, 302, {"Location": fault.location, "Content-Length": "0"}, record)
            return
        if entry is None:
            _send_head(handler, 404, {"Content-Length": "0"}, record)
            return
        _serve_bytes(handler, entry, fault, record)

    def close(self) -> None:
        self._server.close()


class _HeaderAdder:
    """A request handler that adds ``extra`` headers to whatever head it sends."""

    def __init__(self, handler: BaseHTTPRequestHandler, extra: dict[str, str]) -> None:
        self._handler = handler
        self._extra = extra

    def end_headers(self) -> None:
        for name, value in self._extra.items():
            self._handler.send_header(name, value)
        self._handler.end_headers()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._handler, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("_handler", "_extra"):
            object.__setattr__(self, name, value)
        else:
            setattr(self._handler, name, value)


class HubStandIn:
    """A local Hugging Face Hub: API + ``resolve`` on 127.0.0.1, Xet-like CDN hosts on
    127.0.0.2, 127.0.0.3, … — as unkind as the real service, and checked against
    huggingface_hub's own client (tests/integration/test_storage_hub_standin.py).

    - Hub requests need ``Authorization: Bearer <token>`` (401 with ``X-Error-Message``
      otherwise), except for repos in ``public``. Repos in ``gated`` answer ``resolve`` with 403,
      ``X-Error-Code: GatedRepo`` and the Hub's ``X-Error-Message``.
    - ``GET``/``HEAD /datasets/{repo}/resolve/{rev}/{path}`` and ``/buckets/{id}/resolve/{path}``:
      small text files (``inline_suffixes``) are served by the Hub itself (byte ranges, a stable
      ``ETag``); every other file answers 302 to one of the CDN hosts (in turn) with
      ``X-Linked-Size``, ``X-Linked-Etag``, ``X-Xet-Hash`` (and ``X-Repo-Commit`` for repos).
    - The CDN URL is signed (HMAC, ``?expires=…&signature=…``, lifetime ``ttl_seconds``) for the
      blob, the CDN host *and* the exact ``Range`` header of the request that was redirected
      (``range_bound``): the same URL with any other Range is refused with 403, as Xet's
      are. Each CDN host sends its own ``ETag`` for the same bytes. A CDN request that carries
      ``Authorization`` is refused with 400 (one auth mechanism only, as presigned S3/CloudFront
      URLs answer).
    - ``/api/datasets/{repo}/revision/{rev}`` gives the commit sha; ``/api/datasets/{repo}/tree/
      {rev}/{path}?recursive=true`` and ``/api/buckets/{id}/tree/{path}`` list files,
      ``page_size`` entries per page with a ``Link: <…>; rel="next"`` header.
    - Writes, as huggingface_hub's ``create_commit`` makes them: ``POST /api/datasets/{repo}/
      preupload/{rev}`` (each file's upload mode: ``regular`` up to ``inline_max_bytes``, and
      the ``oid`` of the file there now) and ``POST /api/datasets/{repo}/commit/{rev}`` (NDJSON:
      a header line, then ``file`` lines with base64 content); ``?create_pr=1`` makes the commit
      on a new ``refs/pr/N`` instead of the branch. A header's ``parentCommit`` that is not the
      branch's head is refused with 412. Only ``token`` may commit to a branch; tokens in
      ``contributor_tokens`` may read and open pull requests (403 on a branch, as for a user
      who is not a member of the repo's organization); tokens in ``read_tokens`` may only read
      (403 on every write, with ``X-Error-Message``).
    - Bucket reads, as huggingface_hub's bucket client makes them: ``GET /api/buckets/{id}``
      (``BucketInfo``), ``/api/buckets/{id}/tree[/{prefix}]`` (``BucketFile`` entries: ``path``,
      ``size``, ``xetHash`` — the real Xet hash, computed by hf_xet — ``mtime``,
      ``uploadedAt``; recursive listings match the prefix as a string, as the Hub does),
      ``POST /api/buckets/{id}/paths-info``, ``HEAD /buckets/{id}/resolve/{path}`` (no
      ``X-Linked-Etag``: a bucket file has no git or LFS id) and ``GET /api/buckets/{id}/
      xet-read-token`` (a ``local://`` Xet store holding the bucket's files, so
      ``download_bucket_files`` downloads through the real Xet client).
    - Bucket writes, as huggingface_hub's ``batch_bucket_files`` makes them: ``GET /api/buckets/
      {id}/xet-write-token`` gives a Xet CAS (hf_xet's own ``local://`` store, so the real Xet
      client uploads the bytes) and ``POST /api/buckets/{id}/batch`` adds the uploaded files by
      Xet hash; only ``token`` may write (403 otherwise).
    """

    inline_suffixes = (".json", ".jsonl", ".md", ".txt")
    # a file this large goes to the CDN whatever its name (the Hub's limit for plain git files)
    inline_max_bytes = 10 * 1024 * 1024

    def __init__(
        self,
        token: str = "hf_standin_secret_token_0123456789",
        *,
        cdn_hosts: int = 2,
        range_bound: bool = True,
    ) -> None:
        self.token = token
        self.ttl_seconds = 3600.0
        self.page_size = 3
        self.range_bound = range_bound
        self.public: set[str] = set()
        self.gated: set[str] = set()
        self.read_tokens: set[str] = set()
        self.contributor_tokens: set[str] = set()
        self._clock_offset = 0.0
        self._key = b"standin-signing-key"
        self._lock = threading.Lock()
        self._blobs: dict[str, bytes] = {}
        self._commits: dict[str, dict[str, str]] = {}  # sha -> path -> blob id
        self._refs: dict[tuple[str, str], str] = {}  # (repo, branch/tag) -> sha
        self._repo_of_commit: dict[str, str] = {}
        self._buckets: dict[str, dict[str, str]] = {}  # bucket -> path -> Xet hash
        self._bucket_times: dict[tuple[str, str], float] = {}  # (bucket, path) -> upload time
        self._next_cdn = 0
        self._cdn_faults: collections.deque[Fault] = collections.deque()
        self._quota: tuple[str, int, float] | None = None  # (name, requests, window seconds)
        self._window: tuple[float, int] = (0.0, 0)  # (start, requests counted)
        self.write_commits: list[tuple[str, str, str]] = []  # (repo, ref, sha) made by POSTs
        self.bucket_writes: list[tuple[str, str]] = []  # (bucket, path) added by batch POSTs
        self._xet_dir = tempfile.mkdtemp(prefix="hub-standin-xet-")
        self.hub_requests: list[RecordedRequest] = []
        self.cdn_requests: list[RecordedRequest] = []
        self._hub = _LoopbackServer("127.0.0.1", self._handle_hub, self.hub_requests, self._lock)
        self._cdns = [
            _LoopbackServer(
                f"127.0.0.{2 + index}",
                functools.partial(self._handle_cdn, index),
                self.cdn_requests,
                self._lock,
            )
            for index in range(cdn_hosts)
        ]
        self.endpoint = self._hub.url
        self.cdn_urls = [cdn.url for cdn in self._cdns]
        self.cdn_url = self.cdn_urls[0]

    # -- content

    def _blob(self, data: bytes) -> str:
        blob = hashlib.sha256(data).hexdigest()
        self._blobs[blob] = data
        return blob

    def commit(self, repo_id: str, files: dict[str, bytes], *, ref: str = "main") -> str:
        """Make a commit of ``files`` (the whole tree) on ``ref``; returns its sha."""
        with self._lock:
            tree = {path: self._blob(data) for path, data in files.items()}
            return self._record_commit(repo_id, ref, tree)

    def _record_commit(self, repo_id: str, ref: str, tree: dict[str, str]) -> str:
        """Store ``tree`` (path -> blob) as a new commit that ``ref`` now points to; returns
        its sha. Called with ``_lock`` held."""
        sha = hashlib.sha1(
            json.dumps([repo_id, ref, sorted(tree.items()), len(self._commits)]).encode()
        ).hexdigest()
        self._commits[sha] = tree
        self._repo_of_commit[sha] = repo_id
        self._refs[(repo_id, ref)] = sha
        return sha

    def video_resolves(self) -> list[RecordedRequest]:
        """The Hub requests (resolves) for MP4 files so far, in arrival order."""
        return [r for r in self.hub_requests if r.path.endswith(".mp4")]

    def open_reader(self, root: str = "hf://datasets/org/robot", **options: Any) -> Any:
        """A ``HubRangeReader`` on ``root`` through this stand-in, with its write token unless
        ``options`` name another ``token``."""
        from episodestream.storage import HubRangeReader

        options.setdefault("token", self.token)
        return HubRangeReader(root, endpoint=self.endpoint, **options)

    def put_bucket_file(self, bucket_id: str, path: str, data: bytes) -> None:
        """Store ``data`` at ``path`` in the bucket, named by its real Xet hash (what the Hub
        lists as ``xetHash`` and sends as ``X-Xet-Hash``), stamped with the upload time."""
        xet_hash = _xet_hash(data)
        stamp = time.time()
        with self._lock:
            self._blobs[xet_hash] = data
            self._buckets.setdefault(bucket_id, {})[path] = xet_hash
            self._bucket_times[(bucket_id, path)] = stamp

    def split_dataset(self, root: Path, repo_id: str, bucket_id: str, *, ref: str) -> None:
        """The local dataset at ``root`` split as a Hub user may keep it: ``meta/`` committed
        to ``repo_id`` on ``ref``, ``data/`` and ``videos/`` in the bucket ``bucket_id``."""
        files = {
            str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
        }
        self.commit(repo_id, {p: d for p, d in files.items() if p.startswith("meta/")}, ref=ref)
        for path, data in files.items():
            if not path.startswith("meta/"):
                self.put_bucket_file(bucket_id, path, data)

    def serve_as_the_hub(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """``HF_ENDPOINT`` and ``HF_TOKEN`` name this stand-in and its token for the rest of
        the test, read again as a freshly started process would (the CLI finds the Hub and
        the token as huggingface_hub does)."""
        monkeypatch.setenv("HF_ENDPOINT", self.endpoint)
        monkeypatch.setenv("HF_TOKEN", self.token)
        reread_hf_environment(monkeypatch)

    def expire_signatures(self) -> None:
        """Move the CDN's clock past every signature issued so far."""
        with self._lock:
            self._clock_offset += self.ttl_seconds + 1

    def limit_rate(self, quota: int, window_seconds: float, name: str = "resolvers") -> None:
        """From now on, ``quota`` Hub requests per fixed window of ``window_seconds``; beyond
        it, 429 with only ``RateLimit`` / ``RateLimit-Policy`` (no ``Retry-After``), as the Hub
        answers. Every Hub answer carries ``RateLimit``."""
        with self._lock:
            self._quota = (name, quota, window_seconds)
            self._window = (time.monotonic(), 0)

    def _count_request(self) -> tuple[bool, dict[str, str]]:
        """(allowed, RateLimit headers) for one Hub request under the quota."""
        with self._lock:
            if self._quota is None:
                return True, {}
            name, quota, window = self._quota
            start, used = self._window
            now = time.monotonic()
            if now - start >= window:
                start, used = start + window * ((now - start) // window), 0
            allowed = used < quota
            used += 1 if allowed else 0
            self._window = (start, used)
        reset = max(1, math.ceil(start + window - now))
        headers = {
            "RateLimit": f'"{name}";r={quota - used};t={reset}',
            "RateLimit-Policy": f'"fixed window";"{name}";q={quota};w={window:g}',
        }
        return allowed, headers

    def inject_cdn(self, *faults: Fault) -> None:
        """Apply ``faults`` to the next validly signed CDN answers, whatever the host."""
        with self._lock:
            self._cdn_faults.extend(faults)

    def wasted_cdn_requests(self) -> dict[str, int]:
        """Refused CDN requests (403) per CDN host."""
        with self._lock:
            counts = collections.Counter(
                (r.header("Host") or "?").partition(":")[0]
                for r in self.cdn_requests
                if r.status == 403
            )
        return dict(counts)

    # -- signing

    def _sign(self, blob: str, expires: int, cdn: int, range_header: str) -> str:
        signed = range_header if self.range_bound else "*"
        message = f"{blob}:{expires}:{cdn}:{signed}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def _signed_url(self, blob: str, range_header: str) -> str:
        with self._lock:
            now = time.time() + self._clock_offset
            cdn = self._next_cdn
            self._next_cdn = (cdn + 1) % len(self._cdns)
        expires = int(now + self.ttl_seconds)
        query = urllib.parse.urlencode(
            {"expires": expires, "signature": self._sign(blob, expires, cdn, range_header)}
        )
        return f"{self.cdn_urls[cdn]}/blobs/{blob}?{query}"

    # -- hub host

    def _handle_hub(self, handler: BaseHTTPRequestHandler, record: RecordedRequest) -> None:
        allowed, quota_headers = self._count_request()
        if not allowed:
            message = "You have exceeded the rate limit for resolvers; wait for the window to reset"
            _send_json(handler, 429, {"error": message}, record, quota_headers)
            return
        if quota_headers:
            handler = _HeaderAdder(handler, quota_headers)  # type: ignore[assignment]
        # matched percent-encoded, so a revision "refs%2Fpr%2F1" stays one path segment
        path = record.raw_path
        query = urllib.parse.parse_qs(record.query)
        match = re.match(r"^/(?:api/)?(datasets|buckets)/([^/]+/[^/]+)/", path)
        repo = match.group(2) if match else ""
        authorization = record.header("Authorization")
        known = {self.token, *self.read_tokens, *self.contributor_tokens}
        if authorization not in {f"Bearer {t}" for t in known} and not (
            repo in self.public and authorization is None
        ):
            message = (
                "Invalid credentials in Authorization header"
                if authorization
                else "Invalid username or password."
            )
            _send_json(handler, 401, {"error": message}, record, {"X-Error-Message": message})
            return
        if record.method == "POST":
            self._handle_write(handler, record, path, query, authorization)
            return
        routes: list[tuple[str, Callable[..., None]]] = [
            (
                r"^/api/buckets/([^/]+/[^/]+)/xet-write-token/?$",
                lambda bucket: self._xet_write_token(handler, record, bucket, authorization),
            ),
            (
                r"^/api/buckets/([^/]+/[^/]+)/xet-read-token/?$",
                lambda bucket: self._xet_read_token(handler, record, bucket),
            ),
            (
                r"^/api/datasets/([^/]+/[^/]+)/revision/(.+)$",
                lambda repo, revision: self._revision(handler, record, repo, revision),
            ),
            (
                r"^/api/datasets/([^/]+/[^/]+)/tree/([^/]+)/?(.*)$",
                lambda repo, revision, folder: self._list(
                    handler,
                    record,
                    self._commits.get(self._lookup(repo, revision) or ""),
                    urllib.parse.unquote(folder),
                    query,
                ),
            ),
            (
                r"^/api/buckets/([^/]+/[^/]+)/tree/?(.*)$",
                lambda bucket, prefix: self._list_bucket(
                    handler, record, bucket, urllib.parse.unquote(prefix), query
                ),
            ),
            (
                r"^/api/buckets/([^/]+/[^/]+)/?$",
                lambda bucket: self._bucket_info(handler, record, bucket),
            ),
            (
                r"^/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$",
                lambda repo, revision, file: self._resolve_file(
                    handler, record, repo, file, revision
                ),
            ),
            (
                r"^/buckets/([^/]+/[^/]+)/resolve/(.+)$",
                lambda bucket, file: self._resolve_file(handler, record, bucket, file, None),
            ),
        ]
        for pattern, route in routes:
            match = re.match(pattern, path)
            if match:
                route(*match.groups())
                return
        _send_json(handler, 404, {"error": "Not found"}, record)

    def _revision(
        self, handler: BaseHTTPRequestHandler, record: RecordedRequest, repo_id: str, revision: str
    ) -> None:
        sha = self._lookup(repo_id, revision)
        if sha is None:
            _send_json(
                handler,
                404,
                {"error": "Revision not found"},
                record,
                {"X-Error-Code": "RevisionNotFound"},
            )
        else:
            _send_json(handler, 200, {"id": repo_id, "sha": sha}, record)

    def _resolve_file(
        self,
        handler: BaseHTTPRequestHandler,
        record: RecordedRequest,
        repo_id: str,
        file: str,
        revision: str | None,
    ) -> None:
        """Resolve ``file`` (percent-encoded) in dataset ``repo_id`` at ``revision``, or in
        bucket ``repo_id`` when ``revision`` is None."""
        if self._refuse_gated(handler, record, repo_id):
            return
        file = urllib.parse.unquote(file)
        if revision is None:
            sha, files = None, self._buckets.get(repo_id, {})
        else:
            sha = self._lookup(repo_id, revision)
            files = self._commits.get(sha or "", {})
        self._resolve(handler, record, file, files.get(file), sha)

    # -- writes (huggingface_hub's commit path)

    def _handle_write(
        self,
        handler: BaseHTTPRequestHandler,
        record: RecordedRequest,
        path: str,
        query: dict[str, list[str]],
        authorization: str | None,
    ) -> None:
        match = re.match(r"^/api/buckets/([^/]+/[^/]+)/batch$", path)
        if match:
            self._bucket_batch(handler, record, match.group(1), authorization)
            return
        match = re.match(r"^/api/buckets/([^/]+/[^/]+)/paths-info$", path)
        if match:  # a read, though a POST
            self._bucket_paths_info(handler, record, match.group(1))
            return
        match = re.match(r"^/api/datasets/([^/]+/[^/]+)/(preupload|commit)/([^/]+)$", path)
        if match is None:
            _send_json(handler, 404, {"error": "Not found"}, record)
            return
        repo_id, action, revision = match.group(1), match.group(2), match.group(3)
        revision = urllib.parse.unquote(revision)
        create_pr = query.get("create_pr", ["0"])[0] in ("1", "true")
        may_write = authorization == f"Bearer {self.token}"
        may_open_pr = may_write or authorization in {f"Bearer {t}" for t in self.contributor_tokens}
        if not (may_open_pr if create_pr else may_write):
            message = f"You don't have the rights to create a commit on dataset {repo_id}"
            if authorization in {f"Bearer {t}" for t in self.read_tokens}:
                message += " (this token has the read role only)"
            _send_json(handler, 403, {"error": message}, record, {"X-Error-Message": message})
            return
        head = self._lookup(repo_id, revision)
        if head is None:
            message = f"Invalid rev id: {revision}"
            _send_json(
                handler, 404, {"error": message}, record, {"X-Error-Code": "RevisionNotFound"}
            )
            return
        if action == "preupload":
            self._preupload(handler, record, head)
        else:
            self._commit_ndjson(handler, record, repo_id, revision, head, create_pr)

    def _refuse_bucket_write(
        self,
        handler: BaseHTTPRequestHandler,
        record: RecordedRequest,
        bucket_id: str,
        authorization: str | None,
    ) -> bool:
        if authorization == f"Bearer {self.token}":
            return False
        message = f"You don't have the rights to write to bucket {bucket_id}"
        _send_json(handler, 403, {"error": message}, record, {"X-Error-Message": message})
        return True

    def _xet_write_token(
        self,
        handler: BaseHTTPRequestHandler,
        record: RecordedRequest,
        bucket_id: str,
        authorization: str | None,
    ) -> None:
        """A Xet write token whose CAS is hf_xet's own local store (``local://``): uploads
        go through the real Xet client, and the stand-in reads files back with it."""
        if self._refuse_bucket_write(handler, record, bucket_id, authorization):
            return
        answer = {
            "casUrl": f"local://{self._xet_dir}",
            "accessToken": "xet-standin-write",
            "exp": int(time.time()) + 3600,
        }
        _send_json(handler, 200, answer, record)

    def _xet_read_token(
        self, handler: BaseHTTPRequestHandler, record: RecordedRequest, bucket_id: str
    ) -> None:
        """A Xet read token whose CAS is a fresh hf_xet ``local://`` store holding the
        bucket's files as they are now, uploaded by the real Xet client (so downloads by
        ``xetHash`` go through hf_xet's own reconstruction)."""
        from hf_xet import XetSession

        with self._lock:
            files = self._buckets.get(bucket_id)
            blobs = [self._blobs[h] for h in (files or {}).values()]
        if files is None:
            _send_json(handler, 404, {"error": "Bucket not found"}, record)
            return
        store = tempfile.mkdtemp(prefix="hub-standin-xet-read-", dir=self._xet_dir)
        writer = tempfile.mkdtemp(prefix="hub-standin-xet-upload-", dir=self._xet_dir)
        expiry = int(time.time()) + 3600
        with XetSession().new_upload_commit(
            endpoint=f"local://{writer}", token="xet-standin", token_expiry_unix_secs=expiry
        ) as commit:
            handles = [commit.start_upload_bytes(data) for data in blobs if data]
        for handle in handles:
            handle.result()
        # the uploader keeps its store's database locked: the reader gets a copy
        shutil.copytree(writer, store, dirs_exist_ok=True)
        answer = {"casUrl": f"local://{store}", "accessToken": "xet-standin-read", "exp": expiry}
        _send_json(handler, 200, answer, record)

    def _bucket_batch(
        self,
        handler: BaseHTTPRequestHandler,
        record: RecordedRequest,
        bucket_id: str,
        authorization: str | None,
    ) -> None:
        """``POST /api/buckets/{id}/batch`` (NDJSON ``addFile`` / ``deleteFile`` lines): an
        added file's bytes are fetched from the Xet store by its hash, then served."""
        if self._refuse_bucket_write(handler, record, bucket_id, authorization):
            return
        from hf_xet import XetFileInfo, XetSession

        # the uploader's Xet client keeps its local store's database locked: read a snapshot
        snapshot = tempfile.mkdtemp(prefix="hub-standin-xet-read-")
        try:
            shutil.copytree(self._xet_dir, snapshot, dirs_exist_ok=True)
            failed = self._apply_batch(bucket_id, record.body, snapshot, XetSession, XetFileInfo)
        finally:
            shutil.rmtree(snapshot, ignore_errors=True)
        _send_json(handler, 200, {"failed": failed}, record)

    def _apply_batch(
        self, bucket_id: str, body: bytes, store: str, session_type: Any, file_info: Any
    ) -> list[dict[str, Any]]:
        failed: list[dict[str, Any]] = []
        for line in body.splitlines():
            if not line.strip():
                continue
            operation = json.loads(line)
            if operation["type"] == "deleteFile":
                with self._lock:
                    self._buckets.get(bucket_id, {}).pop(operation["path"], None)
                continue
            if operation["type"] != "addFile":
                failed.append({"path": operation.get("path"), "error": "not modelled"})
                continue
            target = os.path.join(store, "materialized", operation["xetHash"])
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with session_type().new_file_download_group(
                endpoint=f"local://{store}",
                token="xet-standin-read",
                token_expiry_unix_secs=int(time.time()) + 3600,
                token_refresh_url=f"{self.endpoint}/api/buckets/{bucket_id}/xet-read-token",
                token_refresh_headers={},
                custom_headers={},
                progress_callback=None,
            ) as group:
                group.start_download_file(file_info(operation["xetHash"], None), target)
            with open(target, "rb") as handle:
                self.put_bucket_file(bucket_id, operation["path"], handle.read())
            with self._lock:
                self.bucket_writes.append((bucket_id, operation["path"]))
        return failed

    def _preupload(
        self, handler: BaseHTTPRequestHandler, record: RecordedRequest, head: str
    ) -> None:
        files = json.loads(record.body)["files"]
        answer = []
        with self._lock:
            tree = self._commits[head]
            for item in files:
                blob = tree.get(item["path"])
                oid = None
                if blob is not None:  # git's blob id of the file there now
                    data = self._blobs[blob]
                    oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                mode = "regular" if item["size"] <= self.inline_max_bytes else "lfs"
                answer.append(
                    {"path": item["path"], "uploadMode": mode, "shouldIgnore": False, "oid": oid}
                )
        _send_json(handler, 200, {"files": answer}, record)

    def _commit_ndjson(
        self,
        handler: BaseHTTPRequestHandler,
        record: RecordedRequest,
        repo_id: str,
        revision: str,
        head: str,
        create_pr: bool,
    ) -> None:
        lines = [json.loads(line) for line in record.body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            _send_json(handler, 400, {"error": "the first line must be the header"}, record)
            return
        parent = lines[0]["value"].get("parentCommit")
        if parent is not None and parent != head and not create_pr:
            message = "A commit has happened since. Please refresh and try again."
            _send_json(handler, 412, {"error": message}, record, {"X-Error-Message": message})
            return
        base = parent if (create_pr and parent is not None) else head
        with self._lock:
            tree = dict(self._commits.get(base, {}))
            for line in lines[1:]:
                if line.get("key") != "file" or line["value"].get("encoding") != "base64":
                    message = f"the stand-in takes base64 'file' lines only, not {line.get('key')}"
                    _send_json(handler, 400, {"error": message}, record)
                    return
                value = line["value"]
                tree[value["path"]] = self._blob(base64.b64decode(value["content"]))
            if create_pr:
                number = 1 + sum(
                    1 for repo, ref in self._refs if repo == repo_id and ref.startswith("refs/pr/")
                )
                ref = f"refs/pr/{number}"
            else:
                ref = revision
            sha = self._record_commit(repo_id, ref, tree)
            self.write_commits.append((repo_id, ref, sha))
        answer: dict[str, Any] = {
            "commitUrl": f"{self.endpoint}/datasets/{repo_id}/commit/{sha}",
            "commitOid": sha,
            "pullRequestUrl": (
                f"{self.endpoint}/datasets/{repo_id}/discussions/{number}" if create_pr else None
            ),
        }
        _send_json(handler, 200, answer, record)

    def _refuse_gated(
        self, handler: BaseHTTPRequestHandler, record: RecordedRequest, repo_id: str
    ) -> bool:
        if repo_id not in self.gated:
            return False
        message = (
            f"Access to dataset {repo_id} is restricted and you are not in the authorized "
            f"list. Visit https://huggingface.co/datasets/{repo_id} to ask for access."
        )
        headers = {"X-Error-Code": "GatedRepo", "X-Error-Message": message}
        _send_json(handler, 403, {"error": message}, record, headers)
        return True

    def _lookup(self, repo_id: str, revision: str) -> str | None:
        revision = urllib.parse.unquote(revision)
        with self._lock:
            if revision in self._commits and self._repo_of_commit[revision] == repo_id:
                return revision
            return self._refs.get((repo_id, revision))

    def _resolve(
        self,
        handler: BaseHTTPRequestHandler,
        record: RecordedRequest,
        path: str,
        blob: str | None,
        sha: str | None,
    ) -> None:
        if blob is None:
            headers = {"X-Error-Code": "EntryNotFound"}
            if sha:
                headers["X-Repo-Commit"] = sha
            _send_json(handler, 404, {"error": "Entry not found"}, record, headers)
            return
        with self._lock:
            data = self._blobs[blob]
        commit = {"X-Repo-Commit": sha} if sha else {}
        if path.endswith(self.inline_suffixes) and len(data) <= self.inline_max_bytes:
            # a plain git file: served by the Hub itself, its ETag the git blob id
            git_oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
            _serve_bytes(
                handler, _File(data, f'"{git_oid}"', None), None, record, extra_headers=commit
            )
            return
        owner = record.path.split("/resolve/")[0]
        headers = {
            "Location": self._signed_url(blob, handler.headers.get("Range") or ""),
            "Content-Length": "0",
            "X-Linked-Size": str(len(data)),
            "X-Xet-Hash": blob,
            **commit,
        }
        # the refresh route is absolute: huggingface_hub hands it to hf_xet as it is
        if sha:  # a repo file: the LFS object's id, and a read token for that commit
            headers["X-Linked-Etag"] = f'"{blob}"'
            headers["X-Xet-Refresh-Route"] = f"{self.endpoint}/api{owner}/xet-read-token/{sha}"
        else:
            # a bucket file: no git or LFS id, so no X-Linked-Etag (huggingface_hub's bucket
            # client reads only size, Xet hash and the bucket's read-token route)
            headers["X-Xet-Refresh-Route"] = f"{self.endpoint}/api{owner}/xet-read-token"
        _send_head(handler, 302, headers, record)

    def _list(
        self,
        handler: BaseHTTPRequestHandler,
        record: RecordedRequest,
        tree: dict[str, str] | None,
        folder: str,
        query: dict[str, list[str]],
    ) -> None:
        folder = folder.strip("/")
        if tree is None:
            _send_json(handler, 404, {"error": "Repository not found"}, record)
            return
        recursive = query.get("recursive", ["false"])[0] == "true"
        prefix = folder + "/" if folder else ""
        entries: list[dict[str, Any]] = []
        folders: set[str] = set()
        for path, blob in sorted(tree.items()):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            parts = rest.split("/")
            for depth in range(1, len(parts)):
                if recursive or depth == 1:
                    folders.add(prefix + "/".join(parts[:depth]))
            if recursive or len(parts) == 1:
                size = len(self._blobs[blob])
                entries.append({"type": "file", "oid": blob[:40], "size": size, "path": path})
        if folder and not entries and not folders:
            _send_json(handler, 404, {"error": "Entry not found"}, record)
            return
        entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f} for f in folders]
        entries.sort(key=lambda e: e["path"])
        self._send_page(handler, record, entries, query, {"recursive": recursive})

    def _bucket_entry(self, bucket_id: str, path: str, xet_hash: str) -> dict[str, Any]:
        """A file as the Hub's bucket API describes it (``BucketFile``'s fields)."""
        stamp = _iso_time(self._bucket_times[(bucket_id, path)])
        return {
            "type": "file",
            "path": path,
            "size": len(self._blobs[xet_hash]),
            "xetHash": xet_hash,
            "mtime": stamp,
            "uploadedAt": stamp,
        }

    def _list_bucket(
        self,
        handler: BaseHTTPRequestHandler,
        record: RecordedRequest,
        bucket_id: str,
        prefix: str,
        query: dict[str, list[str]],
    ) -> None:
        """``GET /api/buckets/{id}/tree[/{prefix}]``: recursive, every file whose path starts
        with ``prefix`` as a string (``sub`` also lists ``submarine.txt``, which
        huggingface_hub's own sync filters out), with the folders above them; otherwise the
        entries directly in folder ``prefix``. A prefix matching nothing is an empty list."""
        with self._lock:
            known = bucket_id in self._buckets
        if not known:
            _send_json(handler, 404, {"error": "Bucket not found"}, record)
            return
        with self._lock:
            files = dict(self._buckets[bucket_id])
            recursive = query.get("recursive", ["false"])[0] in ("true", "True", "1")
            folder = prefix.strip("/")
            entries: list[dict[str, Any]] = []
            folders: set[str] = set()
            for path, xet_hash in sorted(files.items()):
                if recursive:
                    if not path.startswith(prefix):
                        continue
                    parts = path.split("/")
                    folders.update(
                        f
                        for depth in range(1, len(parts))
                        if (f := "/".join(parts[:depth])).startswith(prefix)
                    )
                    entries.append(self._bucket_entry(bucket_id, path, xet_hash))
                    continue
                inside = folder + "/" if folder else ""
                if not path.startswith(inside):
                    continue
                rest = path[len(inside) :].split("/")
                if len(rest) == 1:
                    entries.append(self._bucket_entry(bucket_id, path, xet_hash))
                else:
                    folders.add(inside + rest[0])
            uploaded = {
                f: _iso_time(
                    max(
                        t
                        for (b, p), t in self._bucket_times.items()
                        if b == bucket_id and p.startswith(f + "/")
                    )
                )
                for f in folders
            }
        entries += [{"type": "directory", "path": f, "uploadedAt": uploaded[f]} for f in folders]
        entries.sort(key=lambda e: e["path"])
        self._send_page(handler, record, entries, query, {"recursive": recursive})

    def _send_page(
        self,
        handler: BaseHTTPRequestHandler,
        record: RecordedRequest,
        entries: list[dict[str, Any]],
        query: dict[str, list[str]],
        params: dict[str, Any],
    ) -> None:
        """One page of ``entries`` at ``?cursor=``, with the Hub's ``Link: rel="next"``."""
        cursor = int(query.get("cursor", ["0"])[0])
        page = entries[cursor : cursor + self.page_size]
        headers = {}
        if cursor + self.page_size < len(entries):
            following = {
                **{k: ("true" if v else "false") for k, v in params.items()},
                "cursor": cursor + self.page_size,
            }
            # absolute, as the Hub writes it (huggingface_hub requests it as it is)
            url = f"{self.endpoint}{record.raw_path}?{urllib.parse.urlencode(following)}"
            headers["Link"] = f'<{url}>; rel="next"'
        _send_json(handler, 200, page, record, headers, chunked=True)

    def _bucket_paths_info(
        self, handler: BaseHTTPRequestHandler, record: RecordedRequest, bucket_id: str
    ) -> None:
        """``POST /api/buckets/{id}/paths-info`` (``{"paths": [...]}``): the files among
        ``paths``; a missing path is left out, not an error."""
        try:
            paths = json.loads(record.body)["paths"]
        except (ValueError, KeyError, TypeError):
            _send_json(handler, 400, {"error": 'expected {"paths": [...]}'}, record)
            return
        with self._lock:
            files = self._buckets.get(bucket_id)
            answer = (
                [self._bucket_entry(bucket_id, p, files[p]) for p in paths if p in files]
                if files is not None
                else None
            )
        if answer is None:
            _send_json(handler, 404, {"error": "Bucket not found"}, record)
            return
        _send_json(handler, 200, answer, record)

    def _bucket_info(
        self, handler: BaseHTTPRequestHandler, record: RecordedRequest, bucket_id: str
    ) -> None:
        """``GET /api/buckets/{id}``: ``BucketInfo``'s fields."""
        with self._lock:
            files = self._buckets.get(bucket_id)
        if files is None:
            _send_json(handler, 404, {"error": "Bucket not found"}, record)
            return
        with self._lock:
            times = [t for (b, _), t in self._bucket_times.items() if b == bucket_id]
            answer = {
                "id": bucket_id,
                "private": bucket_id not in self.public,
                "createdAt": _iso_time(min(times, default=time.time())),
                "size": sum(len(self._blobs[h]) for h in files.values()),
                "totalFiles": len(files),
            }
        _send_json(handler, 200, answer, record)

    # -- cdn hosts

    def _handle_cdn(
        self, index: int, handler: BaseHTTPRequestHandler, record: RecordedRequest
    ) -> None:
        match = re.match(r"^/blobs/([0-9a-f]{64})$", record.path)
        query = urllib.parse.parse_qs(record.query)
        if match is None:
            _send_head(handler, 404, {"Content-Length": "0"}, record)
            return
        if record.header("Authorization") is not None:
            body = b"<Error><Code>InvalidArgument</Code><Message>Only one auth mechanism allowed"
            body += b"</Message></Error>"
            _send_head(handler, 400, {"Content-Length": str(len(body))}, record)
            handler.wfile.write(body)
            return
        blob = match.group(1)
        try:
            expires = int(query["expires"][0])
            signature = query["signature"][0]
        except (KeyError, ValueError, IndexError):
            _send_head(handler, 403, {"Content-Length": "0"}, record)
            return
        with self._lock:
            now = time.time() + self._clock_offset
            data = self._blobs.get(blob)
        expected = self._sign(blob, expires, index, handler.headers.get("Range") or "")
        if expires < now or not hmac.compare_digest(signature, expected):
            _send_head(handler, 403, {"Content-Length": "0"}, record)
            return
        if data is None:
            _send_head(handler, 404, {"Content-Length": "0"}, record)
            return
        with self._lock:
            fault = self._cdn_faults.popleft() if self._cdn_faults else None
        record.fault = fault.kind if fault else None
        if fault is not None and fault.kind == "status":
            _send_status_fault(handler, fault, record)
            return
        # each CDN host has its own validator for the very same bytes
        etag = '"' + hashlib.md5(f"{blob}/{index}".encode()).hexdigest() + '"'
        _serve_bytes(handler, _File(data, etag, None), fault, record)

    def close(self) -> None:
        self._hub.close()
        for cdn in self._cdns:
            cdn.close()
        shutil.rmtree(self._xet_dir, ignore_errors=True)


@dataclass
class S3Stand:
    """A moto S3 server on loopback and the options that reach it."""

    endpoint_url: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def client(self) -> Any:
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    """A fresh fault-injecting HTTP server (see :class:`Fault`)."""
    server = FaultServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def hub_standin() -> Iterator[HubStandIn]:
    """A fresh Hugging Face Hub stand-in (Hub API + resolve on 127.0.0.1, CDN hosts on
    127.0.0.2 and 127.0.0.3); what readers learnt of earlier stand-ins' CDN hosts is forgotten
    (a port may be reused), and so are rate-limit windows."""
    from episodestream.storage.http._hostgate import HOST_GATES
    from episodestream.storage.http._redirects import REDIRECT_HOSTS

    REDIRECT_HOSTS.forget()
    HOST_GATES.forget()
    standin = HubStandIn()
    try:
        yield standin
    finally:
        standin.close()
        HOST_GATES.forget()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Stand]:
    """A moto S3-compatible server in a thread, for the whole session."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    try:
        yield S3Stand(
            endpoint,
            {
                "key": "testing",
                "secret": "testing",
                "endpoint_url": endpoint,
                "client_kwargs": {"region_name": "us-east-1"},
            },
        )
    finally:
        server.stop()

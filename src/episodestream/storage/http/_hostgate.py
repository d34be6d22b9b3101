"""One shared back-off per host: when a server says its quota is exhausted, every thread of
every reader — in this process and in the other processes of the same job on this machine
(DataLoader workers, fork or spawn; several ranks) — waits for the same window instead of each
spending its own requests (and 429s) on finding out.

A gate is closed until a deadline. :meth:`HostGates.hold` closes it (or moves the deadline
later, never earlier) and logs once per closing, with the reason and the time left;
:meth:`HostGates.wait` blocks a caller until its host's gate opens, in slices, so a reader's
``close()`` interrupts the wait.

Across processes, a closing is also written to a small file per host in a shared folder (the
blocked-until wall time, its length, the reason and the writer's pid), atomically (a temporary
file renamed over the old one). Before each request a process whose own gate is open ``stat``s
that file and reads it only when it changed (inode, size or mtime), so the check costs one
system call; a window found there closes this process's gate too, logged once. The folder is
:func:`share_rate_limits`'s, else ``$EPISODESTREAM_RATE_LIMIT_DIR`` (``off`` disables sharing),
else ``$EPISODESTREAM_CACHE/ratelimit``, else ``~/.cache/episodestream/ratelimit``. Put it on a
shared file system to share windows across nodes. A folder that cannot be written leaves each
process learning its own windows (logged once); sharing never fails a read.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from episodestream.errors import ConfigError, ConfigTypeError
from episodestream.storage._config import DEFAULT_RETRY
from episodestream.storage._urls import origin_of

__all__ = [
    "HOST_GATES",
    "MAX_SHARED_WAIT_SECONDS",
    "RATE_LIMIT_DIR_ENV",
    "HostGates",
    "rate_limit_dir",
    "reset_rate_limits",
    "share_rate_limits",
]

logger = logging.getLogger("episodestream.storage")

Origin = tuple[str, str, int]

RATE_LIMIT_DIR_ENV = "EPISODESTREAM_RATE_LIMIT_DIR"
_CACHE_ENV = "EPISODESTREAM_CACHE"  # the sidecar cache's folder (manifest.default_cache_dir)
_DISABLED = frozenset({"", "0", "off", "none", "false"})
# A window read from another process is trusted up to the default policy's bound; a longer one
# (a corrupt file, a clock set far ahead) is ignored and this process learns its own.
MAX_SHARED_WAIT_SECONDS = DEFAULT_RETRY.rate_limit_max_seconds
_WINDOW_FILE_VERSION = 1
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9.\-]")


@dataclass(slots=True)
class _Gate:
    until: float  # time.monotonic() at which requests may go again
    reason: str


@dataclass(frozen=True, slots=True)
class _SharedWindow:
    """One host's window as a file says it."""

    until_wall: float  # time.time() at which requests may go again
    seconds: float  # the window's length when it was written (bounds a clock jump)
    reason: str
    pid: int


class _FromEnvironment:
    """Marker: resolve the shared folder from the environment at first use."""


FROM_ENVIRONMENT = _FromEnvironment()


def rate_limit_dir() -> Path | None:
    """The folder where rate-limit windows are shared, as the environment says; ``None``: off."""
    value = os.environ.get(RATE_LIMIT_DIR_ENV)
    if value is not None:
        return None if value.strip().lower() in _DISABLED else Path(value).expanduser()
    cache = os.environ.get(_CACHE_ENV)
    if cache:
        return Path(cache).expanduser() / "ratelimit"
    try:
        return Path.home() / ".cache" / "episodestream" / "ratelimit"
    except RuntimeError:  # no home directory: nothing to share through
        return None


class HostGates:
    """Deadlines per origin (scheme, host, port) before which no request is sent; thread-safe.

    Args:
        shared_dir: folder through which other processes' windows are learned and this one's
            published; ``None`` keeps the gates to this process; :data:`FROM_ENVIRONMENT`
            resolves it with :func:`rate_limit_dir` at first use.
    """

    def __init__(self, shared_dir: str | os.PathLike[str] | _FromEnvironment | None = None) -> None:
        self._lock = threading.Lock()
        self._gates: dict[Origin, _Gate] = {}
        self._local = threading.local()
        self._configured = shared_dir
        self._shared_dir: Path | None = None
        self._resolved = False
        # per origin: (file identity, window) as last read, so unchanged files are not reread
        self._seen: dict[Origin, tuple[tuple[int, ...], _SharedWindow | None]] = {}
        self._paths: dict[Origin, str] = {}  # window file per origin, built once (hot path)
        self._published: dict[Origin, float] = {}  # the window end this process last wrote
        self._write_failed = False

    # ---------------------------------------------------------------- configuration

    @property
    def shared_dir(self) -> Path | None:
        """The folder windows are shared through (``None``: this process only)."""
        if not self._resolved:
            configured = self._configured
            if isinstance(configured, _FromEnvironment):
                self._shared_dir = rate_limit_dir()
            else:
                self._shared_dir = None if configured is None else Path(configured)
            self._resolved = True
        return self._shared_dir

    def share_through(self, directory: Path | None) -> None:
        """Share windows through ``directory`` from now on (``None``: stop sharing)."""
        with self._lock:
            self._configured = directory
            self._shared_dir = directory
            self._resolved = True
            self._seen.clear()
            self._paths.clear()
            self._published.clear()
            self._write_failed = False

    # ---------------------------------------------------------------------- gates

    def hold(self, url: str, seconds: float, reason: str) -> bool:
        """Keep requests to ``url``'s host back for ``seconds`` from now, here and in every
        process sharing the folder; ``True`` when this closed an open gate (and logged it),
        ``False`` when it only moved a closed one."""
        seconds = max(0.0, seconds)
        origin = origin_of(url)
        closed, moved = self._close(origin, seconds, reason)
        if closed:
            logger.warning(
                "%s rate-limits us: %s; every request to it waits %.0f s, until the window resets",
                _host_name(origin),
                reason,
                seconds,
            )
        if closed or moved:
            self._publish(origin, time.time() + seconds, seconds, reason)
        return closed

    def remaining(self, url: str) -> float:
        """Seconds until ``url``'s host may be asked again (0 when open).

        When this process's gate is open, the shared window file is checked (one ``stat``;
        read only when it changed), and a window another process published closes the gate."""
        origin = origin_of(url)
        gate = self._gates.get(origin)  # a dict read is atomic: no lock on the hot path
        if gate is not None:
            left = gate.until - time.monotonic()
            if left > 0:
                return left
        if self.shared_dir is None:
            return 0.0
        window = self._shared_window(origin)
        if window is None or window.until_wall == self._published.get(origin):
            # the window this process wrote is its gate: once the gate opened, the file's
            # wall-clock end (a few ms after the monotonic one) must not close it again
            return 0.0
        left = min(window.until_wall - time.time(), window.seconds)
        if left <= 0:
            return 0.0
        closed, _ = self._close(origin, left, window.reason)
        if closed:
            logger.info(
                "%s rate-limits us: %s (learned by process %d); every request to it waits "
                "%.0f s, until the window resets",
                _host_name(origin),
                window.reason,
                window.pid,
                left,
            )
        return left

    def wait(self, url: str, stop: threading.Event, *, slice_seconds: float = 1.0) -> float:
        """Block until ``url``'s host may be asked (or ``stop`` is set); seconds waited.

        Bounded by the deadline, which :meth:`hold` only sets from a bounded wait and a shared
        window only up to :data:`MAX_SHARED_WAIT_SECONDS`.
        """
        left = self.remaining(url)
        if left <= 0:
            return 0.0
        began = time.monotonic()
        while left > 0 and not stop.wait(min(left, slice_seconds)):
            left = self.remaining(url)
        waited = time.monotonic() - began
        self._local.seconds = self.waited_here() + waited
        return waited

    def waited_here(self) -> float:
        """Seconds this thread has spent waiting on gates, in all (to keep retry budgets fair:
        time spent waiting for a quota is not time spent failing)."""
        return float(getattr(self._local, "seconds", 0.0))

    def forget(self) -> None:
        """Reset: open every gate of this process and delete the window files of the shared
        folder, so no process sharing it waits for a window learned so far.

        Public, for a program that knows the windows it learned no longer apply — the server
        behind a host was replaced (a restarted stand-in, a test server on a reused loopback
        port) or a window was announced in error. Against a real quota it only trades a wait
        for a fresh 429: every reader meets the quota again and learns its window anew.
        """
        with self._lock:
            self._gates.clear()
            self._seen.clear()
        directory = self.shared_dir
        if directory is not None and directory.is_dir():
            for path in directory.glob("*.json"):
                path.unlink(missing_ok=True)

    def _close(self, origin: Origin, seconds: float, reason: str) -> tuple[bool, bool]:
        """(closed an open gate, moved a closed one later) for a window of ``seconds``."""
        now = time.monotonic()
        until = now + seconds
        with self._lock:
            gate = self._gates.get(origin)
            if gate is not None and gate.until > now:
                if until > gate.until:
                    gate.until, gate.reason = until, reason
                    return False, True
                return False, False
            self._gates[origin] = _Gate(until, reason)
        return True, False

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()

    # --------------------------------------------------------------- shared files

    def _window_path(self, origin: Origin) -> str | None:
        path = self._paths.get(origin)
        if path is None:
            directory = self.shared_dir
            if directory is None:
                return None
            scheme, host, port = origin
            name = f"{scheme}_{_UNSAFE_NAME.sub('_', host)}_{port}.json"
            path = self._paths[origin] = os.path.join(directory, name)
        return path

    def _shared_window(self, origin: Origin) -> _SharedWindow | None:
        """The window another process published for ``origin``, reread only when its file
        changed."""
        path = self._window_path(origin)
        if path is None:
            return None
        try:
            status = os.stat(path)
        except OSError:
            return None
        identity = (status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
        seen = self._seen.get(origin)
        if seen is not None and seen[0] == identity:
            return seen[1]
        window = _read_window(path)
        self._seen[origin] = (identity, window)
        return window

    def _publish(self, origin: Origin, until_wall: float, seconds: float, reason: str) -> None:
        """Write ``origin``'s window for the other processes, unless a later one is there.

        Two processes may both read an earlier window and write; the later write wins even
        when its window ends first. That costs at most a request sent early, whose 429 closes
        the window again."""
        path = self._window_path(origin)
        if path is None or self._write_failed:
            return
        current = _read_window(path)
        if current is not None and current.until_wall >= until_wall:
            return
        self._published[origin] = until_wall
        record = {
            "version": _WINDOW_FILE_VERSION,
            "origin": f"{origin[0]}://{_host_name(origin)}",
            "until_wall": until_wall,
            "seconds": seconds,
            "reason": reason,
            "pid": os.getpid(),
        }
        temporary: str | None = None
        folder = os.path.dirname(path)
        try:
            os.makedirs(folder, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".tmp")
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(record, file)
            os.replace(temporary, path)
            temporary = None
        except OSError as error:
            self._write_failed = True
            logger.warning(
                "cannot share rate-limit windows through %s (%s); each process learns its "
                "own (set %s to a writable folder, or 'off')",
                folder,
                error,
                RATE_LIMIT_DIR_ENV,
            )
        finally:
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)


def _read_window(path: str) -> _SharedWindow | None:
    """The window in ``path``; ``None`` when absent, unreadable, malformed or beyond
    :data:`MAX_SHARED_WAIT_SECONDS`."""
    try:
        with open(path, encoding="utf-8") as file:
            record = json.load(file)
        window = _SharedWindow(
            until_wall=float(record["until_wall"]),
            seconds=float(record["seconds"]),
            reason=str(record["reason"]),
            pid=int(record["pid"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as error:
        logger.debug("ignoring rate-limit window file %s: %s", path, error)
        return None
    if not 0 <= window.seconds <= MAX_SHARED_WAIT_SECONDS:
        logger.debug("ignoring rate-limit window file %s: %g s", path, window.seconds)
        return None
    return window


def _host_name(origin: Origin) -> str:
    return origin[1] if origin[2] in (80, 443) else f"{origin[1]}:{origin[2]}"


def reset_rate_limits() -> None:
    """Forget every rate-limit window learned so far: this process's gates open, and the
    window files of the shared folder are deleted (see :meth:`HostGates.forget` for when
    that is right; against a real quota it trades a wait for a fresh 429)."""
    HOST_GATES.forget()


def share_rate_limits(directory: str | os.PathLike[str] | None) -> Path | None:
    """Share rate-limit windows through ``directory`` (``None``: keep them to each process).

    Applies to this process and to the processes it starts afterwards — DataLoader workers,
    fork or spawn — through ``$EPISODESTREAM_RATE_LIMIT_DIR``, which this sets. Processes of
    one job that share a folder (by default ``~/.cache/episodestream/ratelimit`` on each
    machine) wait out a host's quota window together after the first 429 any of them gets.

    Returns:
        The folder, created if missing (``None`` when sharing is off).

    Raises:
        ConfigTypeError: ``directory`` is not a path or ``None``.
        ConfigError: it exists and is not a folder, or cannot be created.
    """
    if directory is None:
        os.environ[RATE_LIMIT_DIR_ENV] = "off"
        HOST_GATES.share_through(None)
        return None
    if isinstance(directory, bool) or not isinstance(directory, str | os.PathLike):
        raise ConfigTypeError(
            f"share_rate_limits(directory) must be a path or None, got {directory!r}"
        )
    text = os.fspath(directory)
    if not isinstance(text, str) or text.strip().lower() in _DISABLED:
        raise ConfigError(
            f"share_rate_limits(directory) must name a folder (None turns sharing off), "
            f"got {directory!r}"
        )
    path = Path(text).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"share_rate_limits(directory): {path} exists and is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"share_rate_limits(directory): cannot create {path}: {error}") from error
    os.environ[RATE_LIMIT_DIR_ENV] = str(path)
    HOST_GATES.share_through(path)
    return path


HOST_GATES = HostGates(FROM_ENVIRONMENT)
os.register_at_fork(after_in_child=HOST_GATES._after_fork_in_child)

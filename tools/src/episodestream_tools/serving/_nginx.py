"""A private nginx: Debian's binary, our own config and folder, never the system service."""

from __future__ import annotations

import contextlib
import grp
import importlib.resources
import ipaddress
import logging
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import weakref
from pathlib import Path
from typing import Self

from episodestream.errors import ConfigError, ServingError
from episodestream.helpers import Bound, Closing, check_int
from episodestream_tools.serving._accesslog import (
    AccessLogRecord,
    access_log_format,
    read_access_log,
)
from episodestream_tools.serving._net import LOOPBACK_HOST, free_port, port_accepts

__all__ = [
    "DEFAULT_NGINX_PATH",
    "MAX_NGINX_WORKERS",
    "NginxServer",
    "find_nginx",
    "nginx_string",
    "worker_account",
]

logger = logging.getLogger(__name__)

DEFAULT_NGINX_PATH = "/usr/sbin/nginx"
DEFAULT_START_TIMEOUT_S = 10.0
# SIGQUIT lets workers finish replies in flight (bounded by worker_shutdown_timeout below);
# SIGTERM then SIGKILL follow if a stage overruns.
DEFAULT_STOP_TIMEOUT_S = 5.0
_WORKER_SHUTDOWN_TIMEOUT_S = 2
_WORKER_CONNECTIONS = 4096
_PORT_ATTEMPTS = 3
_TEMP_FOLDERS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
_PUBLISH_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
_HOST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: worker processes of one nginx (each takes memory and descriptors at start)
MAX_NGINX_WORKERS = Bound("MAX_NGINX_WORKERS", 256, "worker processes of one nginx")
# the account nginx's workers switch to when started as root
_UNPRIVILEGED_USER = "nobody"
_READABLE_CHECK_TIMEOUT_S = 60.0


def find_nginx(path: str | os.PathLike[str] | None = None) -> str:
    """The nginx binary to run: ``path``, else Debian's ``/usr/sbin/nginx``, else ``$PATH``."""
    candidates = [os.fspath(path)] if path is not None else [DEFAULT_NGINX_PATH]
    if path is None and (found := shutil.which("nginx")):
        candidates.append(found)
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise ServingError(
        f"nginx not found (looked for {', '.join(candidates)}); install it with "
        "`apt-get install nginx` or run `make setup`"
    )


def nginx_string(value: str, what: str) -> str:
    """``value`` as one nginx configuration token: double-quoted, ``\\`` and ``"`` escaped.

    Quoted, a path holding ``;``, ``{``, ``#`` or spaces stays one string, which is why paths
    are quoted rather than limited to a safe alphabet. Two things quoting cannot make safe are
    refused: ``$`` (nginx expands variables in ``root`` and ``access_log`` even inside quotes
    and has no escape for it: ``$http_x`` would let a request header choose what is served)
    and control characters (no plain path holds one).

    Raises:
        ServingError: naming ``what`` and the character.
    """
    if "$" in value:
        raise ServingError(
            f"cannot give nginx {what} {value!r}: nginx reads '$' in a path as a variable "
            "and has no escape for it; rename the folder, or serve one above it"
        )
    if bad := _CONTROL.search(value):
        raise ServingError(
            f"cannot give nginx {what} {value!r}: it holds the control character {bad.group()!r}"
        )
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _listen_address(host: str, port: int) -> str:
    """``host:port`` for nginx's ``listen``: an IPv4 address or a host name, nothing else."""
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        if not _HOST_NAME.match(host):
            raise ServingError(
                f"cannot listen on {host!r}: not an IPv4 address or host name"
            ) from None
    return f"{host}:{port}"


def _render_config(values: dict[str, str]) -> str:
    """The template with each ``@NAME@`` replaced by ``values[NAME]`` in one pass (a value is
    never read again as holding placeholders)."""
    template = importlib.resources.files("episodestream_tools.serving").joinpath("nginx.conf")
    text = template.read_text(encoding="utf-8")
    if missing := sorted(set(re.findall(r"@([A-Z_]+)@", text)) - set(values)):
        raise ServingError(f"nginx config template has unfilled placeholders {missing}")
    return re.sub(r"@([A-Z_]+)@", lambda match: values[match.group(1)], text)


def worker_account(served: Path | None) -> tuple[str, str] | None:
    """The (user, group) nginx's workers switch to; None when nginx cannot switch (it is not
    started as root) and its workers run as whoever started it.

    Started as root, nginx's workers would serve as root: a symlink in the folder, or a bug
    in a path's handling, could then hand out any file on the machine. They run as
    ``nobody`` instead when ``nobody`` can read every file and folder served (checked by
    ``find`` running as ``nobody``). When it cannot (a folder under a private home or a
    pytest temporary folder, mode 0700), or when the folder is not known at start (a server
    into which folders are published later), they keep root's account, named explicitly
    (left out, nginx would switch them to ``nobody``, who could not read the files); a
    warning names the first path ``nobody`` cannot read.
    """
    if os.geteuid() != 0:
        return None
    own = pwd.getpwuid(os.geteuid()).pw_name, grp.getgrgid(os.getegid()).gr_name
    try:
        account = pwd.getpwnam(_UNPRIVILEGED_USER)
        group = grp.getgrgid(account.pw_gid).gr_name
    except KeyError:
        logger.warning("no user %r here: nginx's workers run as %s", _UNPRIVILEGED_USER, own[0])
        return own
    if served is None:
        logger.debug("nginx without a root (folders published later): workers run as %s", own[0])
        return own
    unreadable = _unreadable_by(account, served)
    if unreadable is not None:
        logger.warning(
            "nginx's workers run as %s: %s cannot read %s (make the folder readable to all, "
            "chmod -R o+rX, to serve it unprivileged)",
            own[0],
            _UNPRIVILEGED_USER,
            unreadable,
        )
        return own
    return account.pw_name, group


def _unreadable_by(account: pwd.struct_passwd, folder: Path) -> str | None:
    """The first path under ``folder`` ``account`` cannot read (a folder: list and enter),
    found by ``find`` running as that account; None when every one is readable."""
    command = [
        "find",
        str(folder),
        "(",
        "!",
        "-readable",
        "-o",
        "-type",
        "d",
        "!",
        "-executable",
        ")",
        "-print",
        "-quit",
    ]
    try:
        found = subprocess.run(
            command,
            user=account.pw_uid,
            group=account.pw_gid,
            extra_groups=[],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=_READABLE_CHECK_TIMEOUT_S,
            check=False,
            cwd="/",
        )
    except subprocess.TimeoutExpired:
        logger.warning(
            "checking that %s can read %s took over %g s; its workers serve as %s anyway "
            "(a file it cannot read answers 403)",
            account.pw_name,
            folder,
            _READABLE_CHECK_TIMEOUT_S,
            account.pw_name,
        )
        return None
    except OSError as error:
        return f"{folder} ({error})"
    if found.stdout.strip():
        return found.stdout.splitlines()[0]
    if found.returncode != 0:  # find could not enter the folder (or one above it)
        said = found.stderr.strip().splitlines()
        return f"{folder} ({said[-1] if said else 'find failed'})"
    return None


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _emergency_stop(pid: int, workdir: str | None) -> None:
    """Last resort at garbage collection or interpreter exit: nginx must not outlive us."""
    _kill_group(pid)
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
    if workdir is not None:
        shutil.rmtree(workdir, ignore_errors=True)


class NginxServer(Closing):
    """nginx serving one folder on loopback with byte ranges, ETags and an access log.

    The server runs as a child process (``daemon off``, its own process group) with a config,
    pid file, logs and temp folders inside a private working folder, so it never touches
    ``/etc/nginx`` or the system service. Use as a context manager, or call :meth:`start` and
    :meth:`close`.

    Args:
        root: folder served at ``/``. ``None`` serves an empty private folder instead, into
            which :meth:`publish` links other folders — one nginx for many datasets.
        host: address to listen on (loopback by default).
        port: TCP port; ``None`` picks a free one.
        workers: nginx worker processes.
        workdir: folder for config, logs and pid file; kept after close. ``None`` uses a new
            temporary folder removed at close.
        nginx_path: the nginx binary; ``None`` finds Debian's.
        start_timeout_s: how long :meth:`start` waits for the port to accept.
        stop_timeout_s: how long each stop stage (SIGQUIT, SIGTERM) waits.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        host: str = LOOPBACK_HOST,
        port: int | None = None,
        workers: int = 1,
        workdir: str | os.PathLike[str] | None = None,
        nginx_path: str | os.PathLike[str] | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
    ) -> None:
        workers = check_int("workers", workers, minimum=1, maximum=MAX_NGINX_WORKERS)
        if port is not None and not 0 < check_int("port", port) < 65536:
            raise ConfigError(f"port must be in 1..65535, got {port}")
        self._nginx_path = find_nginx(nginx_path)
        self._explicit_root = Path(root).resolve() if root is not None else None
        if self._explicit_root is not None and not self._explicit_root.is_dir():
            raise ServingError(f"cannot serve {os.fspath(root)!r}: not a folder")  # type: ignore[arg-type]
        self._host = host
        self._requested_port = port
        self._port: int | None = None
        self._workers = workers
        self._given_workdir = Path(workdir).resolve() if workdir is not None else None
        self._workdir: Path | None = None
        self._start_timeout_s = start_timeout_s
        self._stop_timeout_s = stop_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None
        self._worker_account: tuple[str, str] | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> Self:
        """Start nginx and wait until its port accepts connections; returns ``self``."""
        if self._process is not None:
            raise ServingError(f"nginx already running (pid {self._process.pid})")
        if self._given_workdir is not None:
            self._given_workdir.mkdir(parents=True, exist_ok=True)
            workdir = self._given_workdir
        else:
            workdir = Path(tempfile.mkdtemp(prefix="episodestream-nginx-"))
        self._workdir = workdir
        try:
            self._worker_account = worker_account(self._explicit_root)
            (workdir / "www").mkdir(exist_ok=True)
            for name in _TEMP_FOLDERS:
                (workdir / "temp" / name).mkdir(parents=True, exist_ok=True)
            attempts = 1 if self._requested_port is not None else _PORT_ATTEMPTS
            for attempt in range(1, attempts + 1):
                port = self._requested_port or free_port(self._host)
                if self._launch(port):
                    return self
                if attempt == attempts or "Address already in use" not in self._error_tail():
                    break
                logger.info("port %d taken before nginx bound it; trying another", port)
            raise ServingError(
                f"nginx did not start on {self._host}:{port} within {self._start_timeout_s} s; "
                f"error log {self.error_log_path}:\n{self._error_tail()}"
            )
        except BaseException:
            self._cleanup_workdir()
            raise

    def _launch(self, port: int) -> bool:
        """Write the config for ``port``, start nginx, wait until ready. False if it failed."""
        workdir = self._require_workdir()
        account = self._worker_account
        temp = workdir / "temp"
        config = _render_config(
            {
                "USER": (
                    ""
                    if account is None
                    else f"user {nginx_string(account[0], 'user')} "
                    f"{nginx_string(account[1], 'group')};"
                ),
                "WORKERS": str(self._workers),
                "WORKER_CONNECTIONS": str(_WORKER_CONNECTIONS),
                "WORKER_SHUTDOWN_TIMEOUT": f"{_WORKER_SHUTDOWN_TIMEOUT_S}s",
                "PID_FILE": nginx_string(str(self.pid_file), "the pid file"),
                "ERROR_LOG": nginx_string(str(self.error_log_path), "the error log"),
                "ACCESS_LOG": nginx_string(str(self.access_log_path), "the access log"),
                "LOG_FORMAT": access_log_format(),
                **{
                    f"{name.upper()}_TEMP": nginx_string(str(temp / name), "a temporary folder")
                    for name in _TEMP_FOLDERS
                },
                "LISTEN": _listen_address(self._host, port),
                "ROOT": nginx_string(str(self.root), "the folder to serve"),
            }
        )
        self.config_path.write_text(config, encoding="utf-8")
        self.pid_file.unlink(missing_ok=True)
        error_log_start = self._error_log_size()
        with (workdir / "nginx.stderr").open("ab") as stderr:
            process = subprocess.Popen(
                [
                    self._nginx_path,
                    "-p",
                    str(workdir),
                    "-e",
                    str(self.error_log_path),
                    "-c",
                    str(self.config_path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
                cwd=workdir,
                start_new_session=True,  # own process group: one signal reaches the workers
            )
        owned = None if self._given_workdir is not None else str(workdir)
        finalizer = weakref.finalize(self, _emergency_stop, process.pid, owned)
        deadline = time.monotonic() + self._start_timeout_s
        while time.monotonic() < deadline:
            if process.poll() is not None:
                finalizer.detach()
                return False
            if b"[emerg]" in self._error_log_since(error_log_start):
                # e.g. bind() failed: nginx would retry for 2.5 s before giving up itself
                break
            # the pid file appears only after nginx bound its port, so a foreign listener on
            # the same port is never mistaken for ours
            if self._pid_file_matches(process.pid) and port_accepts(self._host, port):
                self._process, self._port, self._finalizer = process, port, finalizer
                logger.info("nginx pid %d serving %s at %s", process.pid, self.root, self.url)
                return True
            time.sleep(0.02)
        finalizer.detach()
        self._stop_process(process)
        return False

    def _pid_file_matches(self, pid: int) -> bool:
        try:
            return int(self.pid_file.read_text().strip() or "0") == pid
        except (FileNotFoundError, ValueError):
            return False

    def close(self) -> None:
        """Stop nginx (SIGQUIT, then SIGTERM, then SIGKILL, each bounded); idempotent."""
        process, self._process = self._process, None
        if process is not None:
            if self._finalizer is not None:
                self._finalizer.detach()
                self._finalizer = None
            self._stop_process(process)
            logger.info("nginx pid %d stopped", process.pid)
        self._cleanup_workdir()

    def _stop_process(self, process: subprocess.Popen[bytes]) -> None:
        pgid = process.pid  # start_new_session made nginx its group's leader
        for sig in (signal.SIGQUIT, signal.SIGTERM):
            if process.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=self._stop_timeout_s)
        if process.poll() is None:
            logger.warning("nginx pid %d ignored SIGQUIT and SIGTERM; killing it", pgid)
            _kill_group(pgid)
            try:
                process.wait(timeout=self._stop_timeout_s)
            except subprocess.TimeoutExpired as error:
                raise ServingError(f"nginx pid {pgid} survived SIGKILL") from error
        # workers orphaned by a killed master would keep the port; they share the group
        deadline = time.monotonic() + self._stop_timeout_s
        while _group_alive(pgid):
            if time.monotonic() >= deadline:
                raise ServingError(f"nginx processes of group {pgid} still alive after stop")
            _kill_group(pgid)
            time.sleep(0.02)

    def _cleanup_workdir(self) -> None:
        if self._workdir is not None and self._given_workdir is None:
            shutil.rmtree(self._workdir, ignore_errors=True)
        self._workdir = None if self._given_workdir is None else self._workdir

    def __enter__(self) -> Self:
        return self.start()

    def __repr__(self) -> str:
        state = f"pid {self.pid} at {self.url}" if self.running else "stopped"
        return f"NginxServer({str(self.root) if self._workdir else '-'!r}, {state})"

    # -- where things are ------------------------------------------------------------------

    @property
    def worker_account(self) -> tuple[str, str] | None:
        """(user, group) the workers switched to (None: nginx was not started as root, they
        run as whoever started it); see :func:`worker_account`."""
        return self._worker_account

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The nginx master's pid while running."""
        return self._process.pid if self._process is not None else None

    @property
    def host(self) -> str:
        return self._host

    @property
    def port(self) -> int:
        if self._port is None or self._process is None:
            raise ServingError("nginx is not running")
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` (no trailing slash)."""
        return f"http://{self._host}:{self.port}"

    def url_for(self, path: str = "") -> str:
        """URL of ``path`` (relative to the served root), percent-encoded."""
        return f"{self.url}/{urllib.parse.quote(path.lstrip('/'))}"

    @property
    def workdir(self) -> Path:
        return self._require_workdir()

    @property
    def root(self) -> Path:
        """The folder served at ``/``."""
        if self._explicit_root is not None:
            return self._explicit_root
        return self._require_workdir() / "www"

    @property
    def config_path(self) -> Path:
        return self._require_workdir() / "nginx.conf"

    @property
    def pid_file(self) -> Path:
        return self._require_workdir() / "nginx.pid"

    @property
    def access_log_path(self) -> Path:
        return self._require_workdir() / "access.log"

    @property
    def error_log_path(self) -> Path:
        return self._require_workdir() / "error.log"

    def _require_workdir(self) -> Path:
        if self._workdir is None:
            raise ServingError("nginx is not started (no working folder yet)")
        return self._workdir

    def _error_log_size(self) -> int:
        try:
            return self.error_log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def _error_log_since(self, offset: int) -> bytes:
        try:
            with self.error_log_path.open("rb") as file:
                file.seek(offset)
                return file.read()
        except FileNotFoundError:
            return b""

    def _error_tail(self, lines: int = 20) -> str:
        texts = []
        for name in ("error.log", "nginx.stderr"):
            with contextlib.suppress(OSError):
                texts.extend(
                    (self._require_workdir() / name).read_text(errors="replace").splitlines()
                )
        return "\n".join(texts[-lines:])

    # -- publishing ------------------------------------------------------------------------

    def publish(self, path: str | os.PathLike[str], name: str) -> str:
        """Serve the file or folder ``path`` at ``/<name>``; returns its URL (no trailing slash).

        Publishing links ``path`` into the private served folder, so it needs a server started
        with ``root=None``. Publishing the same path under the same name again is a no-op; a
        name already used for another path is an error.
        """
        if self._explicit_root is not None:
            raise ServingError(
                f"this nginx serves {str(self._explicit_root)!r} at /; publish() needs a "
                "server started with root=None"
            )
        if not _PUBLISH_NAME.match(name) or name in (".", ".."):
            raise ServingError(
                f"cannot publish under {name!r}: use one path segment of letters, digits, "
                "'.', '_' or '-'"
            )
        target = Path(path).resolve()
        if not target.exists():
            raise ServingError(f"cannot publish {os.fspath(path)!r}: no such file or folder")
        link = self.root / name
        if link.is_symlink() or link.exists():
            if link.is_symlink() and Path(os.readlink(link)) == target:
                return self.url_for(name)
            current = os.readlink(link) if link.is_symlink() else "a file"
            raise ServingError(f"name {name!r} is already published for {current!r}")
        link.symlink_to(target, target_is_directory=target.is_dir())
        return self.url_for(name)

    def unpublish(self, name: str) -> None:
        """Stop serving what :meth:`publish` put at ``/<name>``."""
        link = self.root / name
        if self._explicit_root is not None or not link.is_symlink():
            raise ServingError(f"nothing published under {name!r}")
        link.unlink()

    # -- access log ------------------------------------------------------------------------

    def log_mark(self) -> int:
        """The access log's current end, to read only later records with ``since=``."""
        try:
            return self.access_log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def access_records(self, since: int = 0) -> list[AccessLogRecord]:
        """Access-log records written after byte offset ``since`` (see :meth:`log_mark`)."""
        return read_access_log(self.access_log_path, since)[0]

    def wait_for_records(
        self, count: int, *, since: int = 0, timeout_s: float = 5.0
    ) -> list[AccessLogRecord]:
        """At least ``count`` records after ``since``; nginx logs a request just after replying,
        so a client can see its reply before the line exists."""
        deadline = time.monotonic() + timeout_s
        while True:
            records = self.access_records(since)
            if len(records) >= count:
                return records
            if time.monotonic() >= deadline:
                raise ServingError(
                    f"access log {self.access_log_path} has {len(records)} records after "
                    f"offset {since}, expected {count} within {timeout_s} s"
                )
            time.sleep(0.01)

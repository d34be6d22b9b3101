"""``episodestream serve``: serves through the emulator, stops on SIGTERM by pid, leaves nothing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil


def _serve(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "episodestream.cli", "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _read_until(process: subprocess.Popen[str], marker: str, timeout_s: float = 20) -> str:
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    assert process.stdout is not None
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return "".join(lines)
    process.kill()
    raise AssertionError(f"no {marker!r} in output:\n{''.join(lines)}")


def test_serve_until_sigterm_by_pid(lerobot_fixture_root: Path, tmp_path: Path) -> None:
    pid_file = tmp_path / "serve.pid"
    process = _serve(
        str(lerobot_fixture_root), "--rtt-ms", "10", "--bandwidth-mibps", "0",
        "--pid-file", str(pid_file),
    )  # fmt: skip
    try:
        output = _read_until(process, "stop with")
        url = re.search(r"url:\s+(http://\S+)", output).group(1)
        nginx_pid = int(re.search(r"direct, pid (\d+)", output).group(1))
        assert "rtt 10 ms, unlimited per connection" in output
        assert int(pid_file.read_text()) == process.pid
        relative = "videos/observation.images.cam_left_wrist/chunk-000/file-002.mp4"
        request = urllib.request.Request(f"{url}/{relative}", headers={"Range": "bytes=100-4195"})
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 206
            assert response.read() == (lerobot_fixture_root / relative).read_bytes()[100:4196]
        assert psutil.Process(nginx_pid).name().startswith("nginx")
        os.kill(int(pid_file.read_text()), signal.SIGTERM)
        rest, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    assert process.returncode == 0, rest
    assert "stopping" in rest
    assert not pid_file.exists()
    assert not psutil.pid_exists(nginx_pid)


def test_serve_rejects_bad_input(tmp_path: Path) -> None:
    missing = _serve(str(tmp_path / "missing"))
    out, _ = missing.communicate(timeout=20)
    assert missing.returncode == 2 and "not a folder" in out
    negative = _serve(str(tmp_path), "--rtt-ms", "-5")
    out, _ = negative.communicate(timeout=20)
    assert negative.returncode == 2 and "--rtt-ms" in out and ">= 0" in out

"""Fork safety: a reader used in a parent process, then inherited by forked children (what a
``DataLoader(num_workers=N)`` does with the default start method on Linux).

The parent's kept-alive connections and request threads must not be shared with its
children: two processes talking on one socket read each other's responses (a range of one
file arriving as the answer to another), an inherited thread pool has no threads, and
fsspec's async filesystems refuse to run in a forked child at all.
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from episodestream.storage import FsspecRangeReader, HttpRangeReader, ReadRequest
from episodestream_tools.serving import NginxServer

CHILDREN = 3
READS_PER_CHILD = 150
CHILD_DEADLINE_S = 60


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    folder = tmp_path_factory.mktemp("fork-files")
    rng = random.Random(0)
    contents = {f"f{i}.bin": rng.randbytes(200_000 + 37_000 * i) for i in range(4)}
    for name, data in contents.items():
        (folder / name).write_bytes(data)
    return folder, contents


def _child(
    reader: HttpRangeReader | FsspecRangeReader, contents: dict[str, bytes], seed: int, many: bool
) -> int:
    """Runs in the forked child: many reads, each checked; the exit status says how it went."""
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # not pytest-timeout's handler
    signal.alarm(CHILD_DEADLINE_S)  # a hang ends the child (status: killed by SIGALRM)
    rng = random.Random(seed)
    names = sorted(contents)
    try:
        for _ in range(READS_PER_CHILD):
            requests = []
            for _ in range(rng.randint(1, 3)):
                name = rng.choice(names)
                # half the reads start at byte 0: a response meant for another process's
                # read of another file then passes the Content-Range start check
                offset = 0 if rng.random() < 0.5 else rng.randrange(len(contents[name]) - 1)
                length = rng.randint(1, min(50_000, len(contents[name]) - offset))
                requests.append(ReadRequest(name, offset, length))
            if many:
                results = reader.read_many(requests)
            else:
                results = [reader.read(r.path, r.offset, r.length) for r in requests]
            for request, data in zip(requests, results, strict=True):
                if data != contents[request.path][request.offset : request.end]:
                    return 3  # wrong bytes
    except Exception:
        return 2  # an error: another process's response, a broken connection, ...
    # a healthy server needs no retry: one means this process read another's response
    return 4 if reader.metrics().get("retries") else 0


@pytest.mark.parametrize("kind", ["http", "fsspec"])
@pytest.mark.parametrize("many", [False, True], ids=["sockets", "sockets-and-threads"])
def test_forked_children_do_not_share_the_parents_connections(
    many: bool, kind: str, http_server: NginxServer, files: tuple[Path, dict[str, bytes]]
) -> None:
    """``sockets``: the parent leaves kept-alive connections; ``sockets-and-threads``: it
    also used ``read_many``, so its request thread pool exists too."""
    folder, contents = files
    url = http_server.publish(folder, f"fork-files-{os.getpid()}")
    reader = HttpRangeReader(url) if kind == "http" else FsspecRangeReader(url)
    # the parent reads first: kept-alive connections (and request threads) now exist
    for name, data in contents.items():
        far = [ReadRequest(name, 0, 1000), ReadRequest(name, 150_000, 1000)]  # not coalesced
        if many:
            assert reader.read_many(far) == [data[:1000], data[150_000:151_000]]
        else:
            assert [reader.read(r.path, r.offset, r.length) for r in far] == [
                data[:1000],
                data[150_000:151_000],
            ]
    assert reader.metrics()["requests"] >= 1
    pids = []
    for seed in range(CHILDREN):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            status = 1
            try:
                status = _child(reader, contents, seed, many)
            finally:
                os._exit(status)
        pids.append(pid)
    # the parent keeps using its own connections meanwhile
    for _ in range(50):
        name = random.choice(sorted(contents))
        assert reader.read(name, 100, 5000) == contents[name][100:5100]
    statuses = {}
    deadline = time.monotonic() + CHILD_DEADLINE_S + 10
    while len(statuses) < len(pids) and time.monotonic() < deadline:
        for pid in pids:
            if pid not in statuses:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    statuses[pid] = status
        time.sleep(0.05)
    for pid in pids:
        if pid not in statuses:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    reader.close()
    described = {
        pid: (f"exit {os.WEXITSTATUS(s)}" if os.WIFEXITED(s) else f"signal {os.WTERMSIG(s)}")
        for pid, s in statuses.items()
    }
    assert len(statuses) == len(pids), f"children still running: {described}"
    assert all(os.WIFEXITED(s) and os.WEXITSTATUS(s) == 0 for s in statuses.values()), (
        f"children: {described} (2 = error, 3 = wrong bytes, 4 = retried, signal 14 = hung)"
    )

"""The Hub's control plane: huggingface_hub's calls vs the hand-written parts we keep.

Run: ``python -m benchmarks.hub_control [--rounds 7] [--rtt-ms 50] [--json out.json]``

The repository's Hub stand-in (tests/plugins/storage.py, checked against huggingface_hub's own
client) serves the LeRobot fixture ``tests/data/lerobot_sim5`` (14 files in 6 folders: 9 MP4
files, 3 cameras), 1,000 tree entries a page as the Hub pages them. A WAN emulator in front of
the Hub host adds the round trip (``--rtt-ms``, one RTT per new connection); the CDN hosts are
reached directly (every variant reads the same CDN bytes). Each round runs every variant once,
cold (a new reader, huggingface_hub's session closed), in an order that alternates between
rounds; the table gives medians, and wall time against episodestream's own path.

- ``open``: what opening a dataset asks of the control plane: the revision's commit, then the
  size of every file. ``episodestream`` resolves the revision through huggingface_hub
  (``dataset_info``) and lists each folder once with its own client (``HubRangeReader``:
  bounded timeouts, quota waits on every page, no token to a foreign ``Link``);
  ``huggingface_hub`` does ``dataset_info`` + ``list_repo_tree(recursive=True)`` per folder.
- ``cold start``: the same, then identity and the first 64 KiB of each MP4 file.
  ``episodestream`` pins identity from the answer to its ranged ``resolve`` GET
  (``X-Linked-Etag`` / ``X-Linked-Size``); ``huggingface_hub`` asks ``get_hf_file_metadata``
  (a ``HEAD``) per file first, then reads the range through our reader.
"""

from __future__ import annotations

import argparse
import posixpath
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import huggingface_hub as hf
from tests.plugins.storage import HubStandIn

from benchmarks._common import add_json_option, put_out
from episodestream.storage import HubRangeReader
from episodestream_tools.serving import WanEmulator, WanSettings

REPO = "bench/lerobot_sim5"
FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "data" / "lerobot_sim5"
FIRST_RANGE_BYTES = 64 * 1024
HUB_PAGE_SIZE = 1000  # entries per tree page on the Hub


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _cold_ours(
    endpoint: str, token: str, paths: list[str], videos: list[str]
) -> tuple[dict[str, int], list[bytes]]:
    """episodestream's cold start: revision through huggingface_hub, sizes from our own
    listing (one per folder), identity from each ranged resolve."""
    hf.close_session()  # cold: the revision lookup opens a connection as a new process would
    with HubRangeReader(f"hf://datasets/{REPO}", endpoint=endpoint, token=token) as reader:
        sizes = {path: reader.file_info(path).size for path in paths}
        return sizes, [reader.read(path, 0, FIRST_RANGE_BYTES) for path in videos]


def _cold_hf(
    endpoint: str, token: str, paths: list[str], videos: list[str]
) -> tuple[dict[str, int], list[bytes]]:
    """The same through huggingface_hub wherever it has a call: ``dataset_info``,
    ``list_repo_tree`` per folder, ``get_hf_file_metadata`` per video; the ranges themselves
    through our reader (pinned to the commit, so it asks nothing else)."""
    hf.close_session()
    api = hf.HfApi(endpoint=endpoint, token=token)
    sha = api.dataset_info(REPO, revision="main").sha
    listed: dict[str, int] = {}
    for folder in sorted({posixpath.dirname(path) for path in paths}):
        for entry in api.list_repo_tree(
            REPO, folder, recursive=True, revision=sha, repo_type="dataset"
        ):
            if isinstance(entry, hf.hf_api.RepoFile):
                listed[entry.path] = entry.size
    sizes = {path: listed[path] for path in paths}
    if not videos:
        return sizes, []
    with HubRangeReader(f"hf://datasets/{REPO}@{sha}", endpoint=endpoint, token=token) as reader:
        chunks = []
        for path in videos:
            url = hf.hf_hub_url(REPO, path, repo_type="dataset", revision=sha, endpoint=endpoint)
            metadata = hf.get_hf_file_metadata(url, token=token, endpoint=endpoint)
            assert metadata.size == sizes[path]
            chunks.append(reader.read(path, 0, FIRST_RANGE_BYTES))
        return sizes, chunks


def measure(rounds: int, rtt_ms: float) -> dict[str, Any]:
    files = _files(FIXTURE)
    paths = sorted(files)
    videos = [path for path in paths if path.endswith(".mp4")]
    expected_sizes = {path: len(files[path]) for path in paths}
    expected_ranges = [files[path][:FIRST_RANGE_BYTES] for path in videos]
    hub = HubStandIn()
    hub.page_size = HUB_PAGE_SIZE
    hub.commit(REPO, files)
    variants: dict[str, tuple[Callable[[str, str], Any], Any]] = {
        "open: episodestream": (
            lambda e, t: _cold_ours(e, t, paths, []),
            (expected_sizes, []),
        ),
        "open: huggingface_hub": (
            lambda e, t: _cold_hf(e, t, paths, []),
            (expected_sizes, []),
        ),
        "cold start: episodestream": (
            lambda e, t: _cold_ours(e, t, paths, videos),
            (expected_sizes, expected_ranges),
        ),
        "cold start: huggingface_hub": (
            lambda e, t: _cold_hf(e, t, paths, videos),
            (expected_sizes, expected_ranges),
        ),
    }
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    requests: dict[str, list[int]] = {name: [] for name in variants}
    try:
        with WanEmulator(hub.endpoint, WanSettings(rtt_ms=rtt_ms)) as wan:
            names = list(variants)
            for index in range(rounds):
                order = names if index % 2 == 0 else names[::-1]
                for name in order:
                    run, expected = variants[name]
                    before = len(hub.hub_requests)
                    started = time.perf_counter()
                    result = run(wan.url, hub.token)
                    seconds[name].append(time.perf_counter() - started)
                    requests[name].append(len(hub.hub_requests) - before)
                    if result != expected:
                        raise AssertionError(f"{name}: wrong answer")
    finally:
        hf.close_session()
        hub.close()
    return {
        "rtt_ms": rtt_ms,
        "rounds": rounds,
        "files": len(paths),
        "folders": len({posixpath.dirname(path) for path in paths}),
        "median_seconds": {name: statistics.median(v) for name, v in seconds.items()},
        "median_hub_requests": {name: statistics.median(v) for name, v in requests.items()},
    }


def report(result: dict[str, Any]) -> str:
    lines = [
        f"Hub control plane, RTT {result['rtt_ms']:g} ms, {result['files']} files in "
        f"{result['folders']} folders, medians of {result['rounds']} interleaved rounds",
        "",
        "| step | client | wall s | Hub requests | wall vs episodestream |",
        "|---|---|---|---|---|",
    ]
    for step in ("open", "cold start"):
        base = result["median_seconds"][f"{step}: episodestream"]
        for client in ("episodestream", "huggingface_hub"):
            name = f"{step}: {client}"
            wall = result["median_seconds"][name]
            count = result["median_hub_requests"][name]
            lines.append(f"| {step} | {client} | {wall:.3f} | {count:g} | {wall / base:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    add_json_option(parser)
    args = parser.parse_args(argv)
    result = measure(args.rounds, args.rtt_ms)
    return put_out(result, args.json, report(result))


if __name__ == "__main__":
    raise SystemExit(main())

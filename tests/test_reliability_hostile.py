"""Hostile input through the whole dataset path (EpisodeStreamDataset: metadata, Parquet,
manifest/sidecar, clips, decoders), from local disk and over HTTP.

Each case copies synthetic_av1, damages the copy one way, then opens it and streams the
episodes concerned. Accepted outcomes: a typed ``EpisodeStreamError`` (naming the file), or
— for damage the data does not depend on — every sample equal to the undamaged dataset's.
A sample that differs without an error, an untyped exception, a run past its time bound or
a memory spike fails the case; so does any file written outside the cache folder.
"""

from __future__ import annotations

import collections
import random
import shutil
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch

from episodestream import (
    EpisodeStreamDataset,
    EpisodeStreamError,
    ManifestError,
)
from episodestream.demo import read_frame_identity
from episodestream.mp4 import walk_boxes

CASE_TIME_BOUND_S = 60.0
RSS_BOUND_BYTES = 400 * 2**20
CAM = "observation.images.cam_high"
VIDEO_0 = f"videos/{CAM}/chunk-000/file-000.mp4"  # episodes 0, 1, 2
EPISODES_PARQUET = "meta/episodes/chunk-000/file-000.parquet"
# every outcome of every case, for docs/RELIABILITY.md (printed at the end of the module)
OUTCOMES: collections.Counter[tuple[str, str]] = collections.Counter()
MESSAGES: list[str] = []


@dataclass
class Outcome:
    kind: str  # "typed", "complete", "wrong", "untyped"
    error: BaseException | None
    samples: int
    seconds: float
    rss_peak_delta: int

    @property
    def label(self) -> str:
        if self.error is not None:
            return f"{self.kind}: {type(self.error).__name__}"
        return self.kind


class RssPeak:
    """Samples this process's RSS every 10 ms while active; ``peak_delta`` above the start."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._start = self._process.memory_info().rss
        self.peak = self._start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak - self._start


def snapshot(tree: Path, skip: Path) -> dict[str, tuple[int, int]]:
    """(size, mtime) of every file under ``tree`` except under ``skip``."""
    files = {}
    for path in tree.rglob("*"):
        if path.is_file() and skip not in path.parents:
            stat = path.stat()
            files[str(path.relative_to(tree))] = (stat.st_size, stat.st_mtime_ns)
    return files


def same_sample(got: dict[str, Any], want: dict[str, Any]) -> bool:
    if got.keys() != want.keys():
        return False
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            if not torch.equal(got[key], value):
                return False
        elif got[key] != value:
            return False
    return True


def stream(
    root: str | Path,
    cache_dir: Path,
    reference: dict[int, Any],
    episodes: list[int] | None = None,
    **options: Any,
) -> Outcome:
    """Open ``root`` and stream ``episodes`` under a watchdog, an RSS sampler and checks."""
    result: dict[str, Any] = {"samples": 0, "kind": "complete", "error": None}
    rss = RssPeak()
    started = time.perf_counter()

    def work() -> None:
        try:
            with EpisodeStreamDataset(
                root,
                cache_dir=cache_dir,
                image_dtype="uint8",
                episodes=episodes,
                wait_timeout_s=30.0,
                **options,
            ) as dataset:
                cameras = dataset.samples.video_keys
                for index in range(len(dataset)):
                    sample = dataset[index]
                    want = reference.get(int(sample["index"]))
                    identity = (int(sample["episode_index"]), int(sample["frame_index"]))
                    ok = want is not None and same_sample(sample, want)
                    ok = ok and all(read_frame_identity(sample[c]) == identity for c in cameras)
                    if not ok:
                        result["kind"] = "wrong"
                        result["error"] = None
                        return
                    result["samples"] += 1
        except EpisodeStreamError as error:
            result["kind"], result["error"] = "typed", error
        except Exception as error:  # the failure this test exists to catch
            result["kind"], result["error"] = "untyped", error

    thread = threading.Thread(target=work, name="hostile-case", daemon=True)
    thread.start()
    thread.join(CASE_TIME_BOUND_S)
    seconds = time.perf_counter() - started
    delta = rss.stop()
    if thread.is_alive():
        pytest.fail(f"{root}: still running after {CASE_TIME_BOUND_S:.0f} s")
    return Outcome(result["kind"], result["error"], result["samples"], seconds, delta)


@pytest.fixture(scope="module")
def reference(synthetic_av1: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    cache = tmp_path_factory.mktemp("hostile-reference-cache")
    with EpisodeStreamDataset(synthetic_av1, cache_dir=cache, image_dtype="uint8") as dataset:
        samples = (dataset[i] for i in range(len(dataset)))
        return {int(sample["index"]): sample for sample in samples}


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # a default cache that must stay unused: every case passes cache_dir explicitly
    monkeypatch.setenv("EPISODESTREAM_CACHE", str(tmp_path / "default-cache-must-stay-unused"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def check_case(
    name: str,
    outcome: Outcome,
    allowed: set[str],
    workspace: Path,
    before: dict[str, tuple[int, int]],
    *,
    names: str | None = None,
) -> None:
    OUTCOMES[(name, outcome.label)] += 1
    if outcome.error is not None:
        MESSAGES.append(f"{name}: {type(outcome.error).__name__}: {str(outcome.error)[:300]}")
    assert outcome.kind in allowed, f"{name}: {outcome.kind} {outcome.error!r}"
    if outcome.kind == "typed" and names is not None:
        assert names in str(outcome.error), f"{name}: error does not name {names}: {outcome.error}"
    assert outcome.rss_peak_delta < RSS_BOUND_BYTES, f"{name}: RSS +{outcome.rss_peak_delta}"
    after = snapshot(workspace, workspace / "cache")
    assert after == before, f"{name}: files changed outside the cache folder"
    assert not (workspace / "default-cache-must-stay-unused").exists()


def copy_of(synthetic_av1: Path, workspace: Path) -> Path:
    root = workspace / "data"
    shutil.copytree(synthetic_av1, root)
    return root


# -- fuzzed MP4 files ------------------------------------------------------------------------


def _boxes(data: bytes) -> dict[str, Any]:
    return {box.path: box for box in walk_boxes(data)}


def mutate_mp4(data: bytes, strategy: str, rng: random.Random) -> bytes:
    """``data`` with its moov (or the whole file) damaged by ``strategy``."""
    out = bytearray(data)
    boxes = _boxes(data)
    moov = boxes["moov"]
    tables = [
        b
        for p, b in boxes.items()
        if p.rsplit("/", 1)[-1]
        in {"stts", "stss", "stsc", "stsz", "stco", "ctts", "elst", "mdhd", "tkhd", "stsd", "mvhd"}
    ]
    if strategy == "flip":  # a few random bytes anywhere in moov
        for _ in range(rng.randint(1, 6)):
            position = rng.randrange(moov.start + 8, moov.end)
            out[position] ^= 1 << rng.randrange(8)
    elif strategy == "box_size":  # a box claims a size that is not its own
        box = rng.choice(tables)
        size = rng.choice([0, 1, 7, box.end - box.start + rng.randint(1, 64), 2**32 - 1])
        out[box.start : box.start + 4] = struct.pack(">I", size)
    elif strategy == "entry_count":  # a table's entry count far beyond its bytes
        box = rng.choice([b for b in tables if b.type in {"stts", "stss", "stsc", "stsz", "stco"}])
        field = box.start + 8 + 4 + (4 if box.type == "stsz" else 0)
        out[field : field + 4] = struct.pack(">I", rng.choice([2**31 - 1, 2**32 - 1, 10**6]))
    elif strategy == "table_values":  # random values inside one sample table
        box = rng.choice([b for b in tables if b.type in {"stts", "stsz", "stco", "stss", "stsc"}])
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(box.start + 16, box.end - 3) & ~3
            out[position : position + 4] = struct.pack(
                ">I", rng.choice([0, 1, 2**31, 2**32 - 1, rng.getrandbits(32)])
            )
    elif strategy == "truncate":  # the file cut short inside moov or mdat
        return bytes(out[: rng.randrange(moov.start + 8, len(out) - 1)])
    elif strategy == "zeros":
        return bytes(len(out))
    else:
        raise ValueError(strategy)
    return bytes(out)


FUZZ_CASES = [
    (strategy, seed)
    for strategy, seeds in {
        "flip": range(6),
        "box_size": range(4),
        "entry_count": range(4),
        "table_values": range(6),
        "truncate": range(3),
        "zeros": range(1),
    }.items()
    for seed in seeds
]


@pytest.mark.parametrize(("strategy", "seed"), FUZZ_CASES, ids=[f"{s}-{n}" for s, n in FUZZ_CASES])
def test_fuzzed_mp4_through_the_dataset(
    strategy: str,
    seed: int,
    synthetic_av1: Path,
    workspace: Path,
    reference: dict[int, Any],
) -> None:
    root = copy_of(synthetic_av1, workspace)
    video = root / VIDEO_0
    video.write_bytes(mutate_mp4(video.read_bytes(), strategy, random.Random(seed)))
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(root, workspace / "cache", reference, episodes=[0, 1, 2])
    check_case(f"mp4 {strategy}", outcome, {"typed", "complete"}, workspace, before)


@pytest.fixture(scope="module", autouse=True)
def _print_outcomes() -> Any:
    yield
    for (name, label), count in sorted(OUTCOMES.items()):
        print(f"[hostile] {name}: {label} x{count}")
    for message in MESSAGES:
        print(f"[hostile-msg] {message}")


def test_truncated_video_is_refused_when_indexed(
    synthetic_av1: Path, workspace: Path, reference: dict[int, Any]
) -> None:
    """A video cut short inside mdat: its samples run past the end of the file. The index
    build refuses it, naming the file and the first sample outside it — not a failed range
    read (or an absurd byte-budget demand) at the first sample."""
    root = copy_of(synthetic_av1, workspace)
    video = root / VIDEO_0
    video.write_bytes(video.read_bytes()[:-2000])
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(root, workspace / "cache", reference, episodes=[0, 1, 2])
    check_case("mp4 truncated mdat", outcome, {"typed"}, workspace, before, names=VIDEO_0)
    assert isinstance(outcome.error, ManifestError)
    assert "outside the 8282-byte file" in str(outcome.error)
    assert outcome.samples == 0

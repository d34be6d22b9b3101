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
import functools
import json
import random
import shutil
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from episodestream import (
    EpisodeStreamDataset,
    EpisodeStreamError,
    ManifestError,
)
from episodestream.mp4 import walk_boxes
from episodestream_tools.synthetic import read_frame_identity

CASE_TIME_BOUND_S = 60.0
RSS_BOUND_BYTES = 400 * 2**20
CAM = "observation.images.cam_high"
VIDEO_0 = f"videos/{CAM}/chunk-000/file-000.mp4"  # episodes 0, 1, 2
EPISODES_PARQUET = "meta/episodes/chunk-000/file-000.parquet"
# every outcome of every case, for docs/RELIABILITY.md (printed at the end of the module)
OUTCOMES: collections.Counter[tuple[str, str]] = collections.Counter()
PEAKS: list[tuple[float, int]] = []  # (seconds, RSS rise) of every case


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


@pytest.fixture
def reference(synthetic_av1_samples: dict[int, Any]) -> dict[int, Any]:
    return synthetic_av1_samples


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
    PEAKS.append((outcome.seconds, outcome.rss_peak_delta))
    assert outcome.kind in allowed, f"{name}: {outcome.kind} {outcome.error!r}"
    if outcome.kind == "typed" and names is not None:
        assert names in str(outcome.error), f"{name}: error does not name {names}: {outcome.error}"
    assert outcome.rss_peak_delta < RSS_BOUND_BYTES, f"{name}: RSS +{outcome.rss_peak_delta}"
    after = snapshot(workspace, workspace / "cache")
    assert after == before, f"{name}: files changed outside the cache folder"
    leftovers = [
        p.name
        for p in (workspace / "cache").rglob("*")
        if p.is_file() and not p.name.endswith((".arrow", ".lock"))
    ]
    assert not leftovers, f"{name}: temporary files left in the cache: {leftovers}"
    assert not (workspace / "default-cache-must-stay-unused").exists()


def copy_of(synthetic_av1: Path, workspace: Path) -> Path:
    root = workspace / "data"
    shutil.copytree(synthetic_av1, root)
    return root


EditedRun: TypeAlias = Callable[..., tuple[Outcome, dict[str, tuple[int, int]]]]


@pytest.fixture
def stream_edited(
    synthetic_av1: Path,
    workspace: Path,
    reference: dict[int, Any],
    http_publish: Callable[..., str],
) -> EditedRun:
    """``stream_edited(edit, over=..., episodes=...)``: a copy of the dataset changed by
    ``edit(root)``, streamed from disk (``over="local"``) or over HTTP; returns the outcome
    and the workspace as it was before streaming (for check_case)."""

    def run(
        edit: Callable[[Path], None], *, over: str, episodes: list[int] | None
    ) -> tuple[Outcome, dict[str, tuple[int, int]]]:
        root = copy_of(synthetic_av1, workspace)
        edit(root)
        target = str(root) if over == "local" else http_publish(root, f"hostile-{time.time_ns()}")
        before = snapshot(workspace, workspace / "cache")
        return stream(target, workspace / "cache", reference, episodes=episodes), before

    return run


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
    if PEAKS:
        print(
            f"[hostile] {len(PEAKS)} cases: longest {max(p[0] for p in PEAKS):.2f} s, "
            f"largest RSS rise {max(p[1] for p in PEAKS) / 2**20:.1f} MiB"
        )


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


# -- info.json -------------------------------------------------------------------------------


def _edit_info(root: Path, change: Callable[[dict[str, Any]], None]) -> None:
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    change(info)
    path.write_text(json.dumps(info))


def _set(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(info: dict[str, Any]) -> None:
        info[key] = value

    return change


def _set_feature(field: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(info: dict[str, Any]) -> None:
        info["features"][CAM][field] = value

    return change


INFO_CASES: dict[str, Callable[[dict[str, Any]], None]] = {
    "fps as a string": _set("fps", "thirty"),
    "fps negative": _set("fps", -30),
    "fps zero": _set("fps", 0),
    "fps huge": _set("fps", 1e308),
    "features a list": _set("features", [CAM]),
    "feature shape a string": _set_feature("shape", "48x64x3"),
    "feature dtype unknown": _set_feature("dtype", "complex256"),
    "total_episodes huge": _set("total_episodes", 10**15),
    "total_frames negative": _set("total_frames", -1),
    "chunks_size zero": _set("chunks_size", 0),
    "codebase v2.1": _set("codebase_version", "v2.1"),
    "video_path climbs out": _set(
        "video_path", "../../../outside/{video_key}/{chunk_index:03d}-{file_index:03d}.mp4"
    ),
    "video_path absolute": _set("video_path", "/etc/{video_key}/{chunk_index}/{file_index}.mp4"),
    "video_path attribute lookup": _set(
        "video_path", "videos/{video_key.__class__}/{chunk_index}/{file_index}.mp4"
    ),
    "data_path climbs out": _set(
        "data_path", "data/{chunk_index:03d}/../../../../x/{file_index:03d}.parquet"
    ),
    "data_path URL": _set("data_path", "http://evil.example/{chunk_index}/{file_index}.parquet"),
    "info not an object": lambda info: info.clear(),
}


def _write_raw_info(root: Path, text: str) -> None:
    (root / "meta/info.json").write_text(text)


@pytest.mark.parametrize("over", ["local", "http"])
@pytest.mark.parametrize("case", sorted(INFO_CASES))
def test_hostile_info_json(case: str, over: str, workspace: Path, stream_edited: EditedRun) -> None:
    edit = functools.partial(_edit_info, change=INFO_CASES[case])
    outcome, before = stream_edited(edit, over=over, episodes=[0])
    # LeRobot's reader uses neither (frames are found at from_timestamp + each row's
    # timestamp, episodes by their rows): it returns every sample, and so do we
    allowed = {"complete"} if case in ("fps huge", "total_episodes huge") else {"typed"}
    check_case(f"info.json {case}", outcome, allowed, workspace, before, names="meta/info.json")


@pytest.mark.parametrize(
    ("case", "text"),
    [("truncated", '{"codebase_version": "v3.0", "fps": 3'), ("binary", "\x00\xff" * 100)],
)
def test_unparseable_info_json(
    case: str, text: str, synthetic_av1: Path, workspace: Path, reference: dict[int, Any]
) -> None:
    root = copy_of(synthetic_av1, workspace)
    _write_raw_info(root, text)
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(root, workspace / "cache", reference, episodes=[0])
    check_case(f"info.json {case}", outcome, {"typed"}, workspace, before, names="meta/info.json")


# -- episodes Parquet ------------------------------------------------------------------------


def _edit_episodes(root: Path, change: Callable[[pa.Table], pa.Table]) -> None:
    path = root / EPISODES_PARQUET
    pq.write_table(change(pq.read_table(path)), path)


def _replace_column(
    name: str, values: Callable[[np.ndarray], Any]
) -> Callable[[pa.Table], pa.Table]:
    def change(table: pa.Table) -> pa.Table:
        column = table.column(name).to_numpy()
        index = table.schema.get_field_index(name)
        return table.set_column(index, name, pa.array(values(column.copy())))

    return change


def _with(index: int, value: Any) -> Callable[[np.ndarray], np.ndarray]:
    def values(column: np.ndarray) -> np.ndarray:
        column[index] = value
        return column

    return values


FROM = f"videos/{CAM}/from_timestamp"
TO = f"videos/{CAM}/to_timestamp"
EPISODE_CASES: dict[str, Callable[[pa.Table], pa.Table]] = {
    "length as strings": _replace_column("length", lambda c: [str(v) for v in c]),
    "length huge": _replace_column("length", _with(0, 10**12)),
    "length negative": _replace_column("length", _with(1, -5)),
    "from_timestamp negative": _replace_column(FROM, _with(0, -1.0)),
    "from_timestamp NaN": _replace_column(FROM, _with(1, float("nan"))),
    "timestamps overlap": _replace_column(FROM, _with(1, 0.2)),  # inside episode 0
    "to before from": _replace_column(TO, _with(0, -0.5)),
    "timestamps past the video": _replace_column(TO, _with(2, 1e6)),
    "episode_index duplicated": _replace_column("episode_index", _with(1, 0)),
    "episode_index negative": _replace_column("episode_index", _with(2, -3)),
    "chunk_index points nowhere": _replace_column(f"videos/{CAM}/chunk_index", _with(0, 7)),
    "file_index huge": _replace_column(f"videos/{CAM}/file_index", _with(0, 2**40)),
    "dataset_from_index shifted": _replace_column("dataset_from_index", _with(1, 3)),
    "tasks not strings": _replace_column("tasks", lambda c: [[1.5]] * len(c)),
    "column missing": lambda table: table.drop_columns([FROM]),
    "no rows": lambda table: table.slice(0, 0),
}


@pytest.mark.parametrize("over", ["local", "http"])
@pytest.mark.parametrize("case", sorted(EPISODE_CASES))
def test_hostile_episodes_parquet(
    case: str, over: str, workspace: Path, stream_edited: EditedRun
) -> None:
    edit = functools.partial(_edit_episodes, change=EPISODE_CASES[case])
    outcome, before = stream_edited(edit, over=over, episodes=None)
    # a row pointing at a video that does not exist names that video; the rest the table
    names = (
        "/chunk-" if case in ("chunk_index points nowhere", "file_index huge") else EPISODES_PARQUET
    )
    if case == "chunk_index points nowhere":
        names = "chunk-007/file-000.mp4"
    # to_timestamp is a hint LeRobot's reader never reads: every sample as before. Episodes
    # overlapping in one file read each other's frames in LeRobot too (other samples than
    # the unedited dataset's, so "wrong" here; test_lerobot_meta checks they are LeRobot's)
    allowed = {
        "timestamps past the video": {"complete"},
        "to before from": {"complete"},
        "timestamps overlap": {"wrong"},
    }.get(case, {"typed"})
    check_case(f"episodes parquet {case}", outcome, allowed, workspace, before, names=names)


# -- sidecars --------------------------------------------------------------------------------


def _built_sidecar(root: Path, cache: Path) -> Path:
    with EpisodeStreamDataset(root, cache_dir=cache) as dataset:
        dataset[0]
    (sidecar,) = cache.glob("sidecars/*/index.arrow")
    return sidecar


@pytest.fixture(scope="module")
def foreign_sidecars(
    synthetic_h264: Path, synthetic_moov_end: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, bytes]:
    """Sidecar bytes of another dataset (H.264) and of a twin: synthetic_moov_end has the same
    info.json, episodes table and file sizes as synthetic_av1, its moov boxes elsewhere."""
    return {
        "other dataset": _built_sidecar(
            synthetic_h264, tmp_path_factory.mktemp("h264")
        ).read_bytes(),
        "moov-moved twin": _built_sidecar(
            synthetic_moov_end, tmp_path_factory.mktemp("twin")
        ).read_bytes(),
    }


@pytest.mark.parametrize("build", [False, True], ids=["no-build", "build"])
@pytest.mark.parametrize("which", ["other dataset", "moov-moved twin", "garbage", "truncated"])
def test_explicit_sidecar_that_does_not_fit(
    which: str,
    build: bool,
    synthetic_av1: Path,
    workspace: Path,
    reference: dict[int, Any],
    foreign_sidecars: dict[str, bytes],
) -> None:
    """``sidecar=`` naming an index of another dataset, of a twin whose metadata and sizes
    match but whose bytes are laid out differently, random bytes, or a truncated index."""
    if which == "garbage":
        data = random.Random(3).randbytes(5000)
    elif which == "truncated":
        data = _built_sidecar(synthetic_av1, workspace / "own").read_bytes()
        data = data[: len(data) // 2]
        shutil.rmtree(workspace / "own")
    else:
        data = foreign_sidecars[which]
    explicit = workspace / "explicit" / "index.arrow"
    explicit.parent.mkdir()
    explicit.write_bytes(data)
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(
        synthetic_av1,
        workspace / "cache",
        reference,
        episodes=[0, 4],
        sidecar=explicit,
        build_index=build,
    )
    after_sidecar = explicit.read_bytes()
    # the folder of an explicit sidecar is the caller's choice of where the index lives: it
    # is rewritten in place when rebuilt (beside its file lock); nothing else may change
    before.pop("explicit/index.arrow")
    shutil.rmtree(explicit.parent)
    name = f"sidecar explicit {which} ({'build' if build else 'no build'})"
    if which == "moov-moved twin":
        # nothing in the index tells the layouts apart (see docs/RELIABILITY.md): every
        # sample fails to decode, typed — never a wrong frame
        check_case(name, outcome, {"typed"}, workspace, before)
        assert outcome.samples == 0
        return
    if build:
        check_case(name, outcome, {"complete"}, workspace, before)
        assert outcome.samples == 20 + 15
        assert after_sidecar != data  # refused, rebuilt
    else:
        check_case(name, outcome, {"typed"}, workspace, before, names=str(explicit))
        assert isinstance(outcome.error, ManifestError)
        assert after_sidecar == data


def test_cached_sidecar_truncated_on_disk(
    synthetic_av1: Path, workspace: Path, reference: dict[int, Any]
) -> None:
    """The cache's index cut in half (a crash, a full disk): refused and rebuilt in place."""
    cached = _built_sidecar(synthetic_av1, workspace / "cache")
    cached.write_bytes(cached.read_bytes()[:1000])
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(
        synthetic_av1, workspace / "cache", reference, episodes=[0, 4], build_index=False
    )
    check_case("sidecar cached truncated (no build)", outcome, {"typed"}, workspace, before)
    assert isinstance(outcome.error, ManifestError) and "cache" in str(outcome.error)
    # a subset indexes only its own files (per file, beside it): the whole sidecar is left
    # for an open of the whole dataset, which rebuilds it in place
    outcome = stream(synthetic_av1, workspace / "cache", reference, episodes=[0, 4])
    check_case("sidecar cached truncated (subset)", outcome, {"complete"}, workspace, before)
    assert len(cached.read_bytes()) == 1000
    outcome = stream(synthetic_av1, workspace / "cache", reference)
    check_case("sidecar cached truncated (build)", outcome, {"complete"}, workspace, before)
    assert len(cached.read_bytes()) > 1000


def test_published_sidecar_of_another_dataset_over_http(
    synthetic_av1: Path,
    workspace: Path,
    reference: dict[int, Any],
    foreign_sidecars: dict[str, bytes],
    http_publish: Callable[..., str],
) -> None:
    """meta/episodestream/index.arrow under the root belongs to another dataset: refused
    (never copied into the cache), the index built from the videos instead."""
    root = copy_of(synthetic_av1, workspace)
    published = root / "meta/episodestream/index.arrow"
    published.parent.mkdir(parents=True)
    published.write_bytes(foreign_sidecars["other dataset"])
    url = http_publish(root, f"hostile-published-{time.time_ns()}")
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(url, workspace / "cache", reference, episodes=[0, 4])
    check_case("sidecar published from another dataset", outcome, {"complete"}, workspace, before)
    # a subset indexes its own files into the per-file index (episodes 0 and 4: file 0 and
    # file 1 of each camera); nothing published was copied
    assert not list((workspace / "cache").glob("sidecars/*/index.arrow"))
    assert len(list((workspace / "cache").glob("sidecars/*/files-*/*.arrow"))) == 4

"""Hostile files and sidecars (issue 26: holes 1 and 3, and hole 5's errors from files).

Sidecars (the cache's whole and subset ones, the per-file index entries, a published one)
are edited the way someone with write access to the cache or the repository would: rows
swapped with their times adjusted, sample offsets shifted, counts, times and scalars set to
lies, headers replaced. MP4 boxes, ``info.json`` and the v2.x JSON Lines get values no
writer writes: a moov claiming the rest of a 768 MiB file, an unknown mdhd duration, path
templates padded to 200,000,000 digits, JSON nested 200,000 deep, 5,000-digit integers, a
million delta timestamps.

Each case streams through ``EpisodeStreamDataset`` under the hostile suite's harness
(``stream`` / ``check_case`` of test_reliability_hostile: a thread joined with a deadline,
RSS sampled every 10 ms) and accepts only a typed ``EpisodeStreamError`` or every sample
equal to the undamaged dataset's. A sidecar refused at a sample must be gone (or ignored,
published) at the next open, which then streams every sample. The memory-bomb cases hold a
tighter RSS bound and print the time to their typed error and the RSS growth.

Last, the property the checks rest on: every index the builder makes, of every synthetic
and LeRobot-written dataset here and of variants other writers leave, passes every check.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from episodestream import EpisodeStreamDataset, ManifestError, SamplingError
from episodestream.errors import DatasetFormatError
from episodestream.lerobot import load_dataset_meta
from episodestream.manifest import (
    build_manifest,
    check_file_track,
    check_span,
    check_spans,
    load_sidecar,
    write_sidecar,
)
from episodestream.manifest._tables import check_file_table
from episodestream.mp4 import check_sample_framing
from episodestream.storage import LocalRangeReader
from tests.integration.test_reliability_hostile import (
    CAM,
    VIDEO_0,
    Outcome,
    check_case,
    copy_of,
    snapshot,
    stream,
)
from tests.plugins.synthetic import (
    SYNTHETIC_AV1_SPEC,
    SYNTHETIC_CHUNKED_SPEC,
    SYNTHETIC_H264_SPEC,
    SYNTHETIC_HEVC_SPEC,
    SYNTHETIC_MOOV_END_SPEC,
)
from tests.support import sidecars, variants
from tests.support.lerobot_v2 import V21_SPEC
from tests.support.metadata_mutators import deep_json, pad_template, set_raw_field
from tests.support.mp4_boxes import claim_moov_to_end, set_mdhd

# the memory bombs: a bound well under what they cost before (~1 GiB and more)
BOMB_RSS_BOUND_BYTES = 128 * 2**20
# episodes 1 and 2 (16 frames each) share file 0 of each camera with episode 0
SAME_LENGTH = (1, 2)
SUBSET = [1, 2]


@pytest.fixture
def reference(synthetic_av1_samples: dict[int, Any]) -> dict[int, Any]:
    return synthetic_av1_samples


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # as test_reliability_hostile's: a default cache that must stay unused
    monkeypatch.setenv("EPISODESTREAM_CACHE", str(tmp_path / "default-cache-must-stay-unused"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _report(name: str, outcome: Outcome) -> None:
    error = "" if outcome.error is None else f" {type(outcome.error).__name__}"
    print(
        f"[hostile-input] {name}: {outcome.kind}{error} in {outcome.seconds:.2f} s, "
        f"RSS +{outcome.rss_peak_delta / 2**20:.1f} MiB"
    )


# -- sidecars in the cache -------------------------------------------------------------------


def _cache_of(root: Path, cache: Path, episodes: list[int] | None) -> None:
    with EpisodeStreamDataset(root, cache_dir=cache, episodes=episodes) as dataset:
        dataset[0]


@pytest.fixture(scope="module")
def built_caches(synthetic_av1: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Cache folders holding synthetic_av1's whole sidecar (``whole``) and the per-file
    entries of episodes 1 and 2 (``entries``), built once; each case copies one."""
    whole = tmp_path_factory.mktemp("whole-cache") / "cache"
    _cache_of(synthetic_av1, whole, None)
    entries = tmp_path_factory.mktemp("entries-cache") / "cache"
    _cache_of(synthetic_av1, entries, SUBSET)
    return {"whole": whole, "entries": entries}


def _whole_sidecar(cache: Path) -> Path:
    (found,) = cache.glob("sidecars/*/index.arrow")
    return found


def _entry_of(cache: Path, video: str) -> Path:
    import hashlib

    digest = hashlib.sha256(video.encode()).hexdigest()[:32]
    (found,) = cache.glob(f"sidecars/*/files-*/{digest}.arrow")
    return found


def _columns(path: Path) -> dict[str, Any]:
    return sidecars.read_columns(path)


def _cam(path: Path) -> Callable[[int, int], int]:
    """Flat position of (row, camera column) in a sidecar's span columns."""
    width = len(_columns(path)["span.file_id"]) // len(_columns(path)["episode.index"])
    return lambda row, camera: row * width + camera


# name -> (mutation of the whole sidecar, when it is refused)
# "load": refused when loaded; the first open indexes again and streams every sample
# "span": it loads; a span differs from the one its (checked) track plans: the sidecar is
#   refused (removed) and that span planned again, so the first open streams every sample
# "sample": it loads; its track table, or the bytes it names, fail at the first sample of
#   that file: typed error, the sidecar removed; the next open streams every sample
SIDECAR_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "swap same-length rows, times adjusted": (
        lambda p: sidecars.swap_spans(p, *SAME_LENGTH, 0),
        "span",
    ),
    "swap rows of other lengths, times adjusted": (
        lambda p: sidecars.swap_spans(p, 0, 1, 0),
        "load",
    ),
    "swap rows whole": (lambda p: sidecars.swap_spans(p, *SAME_LENGTH, 0, adjust=False), "load"),
    "swap rows of two files": (lambda p: sidecars.swap_spans(p, 1, 4, 1), "load"),
    "shift sample offsets": (lambda p: sidecars.shift_samples(p, 0, -7), "sample"),
    "zero a span": (lambda p: sidecars.zero_span(p, 1, 0), "span"),
    "pts contradict dts": (
        lambda p: sidecars.set_values(p, "sample.pts", 20 * 512 + 1, 20),
        "sample",
    ),
    "timescale zero": (lambda p: sidecars.set_values(p, "file.timescale", 0), "load"),
    "timescale 2**40": (lambda p: sidecars.set_values(p, "file.timescale", 2**40), "load"),
    "duration negative": (lambda p: sidecars.set_values(p, "file.duration", -1), "load"),
    "frame count 10**12": (
        lambda p: sidecars.set_values(p, "span.frame_count", 10**12, 2),
        "load",
    ),
    "byte range past the file": (
        lambda p: sidecars.set_values(p, "span.byte_end", 10**9, 2),
        "load",
    ),
    "sample range past the track": (
        lambda p: sidecars.set_values(p, "span.sample_end", 10**6, 2),
        "load",
    ),
    "times NaN": (lambda p: sidecars.set_values(p, "span.first_pts_s", float("nan"), 2), "load"),
    "from_timestamp lie": (
        lambda p: sidecars.set_values(p, "span.from_timestamp_s", 0.5, 2),
        "load",
    ),
    "episode column reordered": (
        lambda p: sidecars.set_values(p, "episode.index", np.array([0, 2, 1, 3, 4, 5])),
        "load",
    ),
    "file cameras reversed": (
        lambda p: sidecars.edit_sidecar(
            p, lambda c: c.__setitem__("file.camera", c["file.camera"][::-1])
        ),
        "load",
    ),
    "sample bounds claim 10**12": (
        lambda p: sidecars.set_values(p, "file.sample_bounds", 10**12, -1),
        "load",
    ),
    "subset header claims 2**60 episodes": (
        lambda p: sidecars.edit_header(
            p,
            lambda h: (h.update(version=2), h["identity"].update(episodes=[[0, 2**60]])),
        ),
        "load",
    ),
    "header nested 200,000 deep": (
        lambda p: sidecars.set_raw_header(p, deep_json(200_000).encode()),
        "load",
    ),
    "header holds a 5,000-digit integer": (
        lambda p: sidecars.set_raw_header(p, b'{"version": ' + b"9" * 5000 + b"}"),
        "load",
    ),
}


@pytest.mark.parametrize("case", sorted(SIDECAR_CASES))
def test_lying_cached_sidecar(
    case: str,
    synthetic_av1: Path,
    workspace: Path,
    reference: dict[int, Any],
    built_caches: dict[str, Path],
) -> None:
    """A cached whole sidecar, edited: refused when loaded, or at the first sample that
    shows the lie (removed; a span planned again from its checked track, a track or bytes
    that fail raise, typed); the next open indexes again and streams every sample."""
    mutate, when = SIDECAR_CASES[case]
    cache = workspace / "cache"
    shutil.copytree(built_caches["whole"], cache)
    sidecar = _whole_sidecar(cache)
    mutate(sidecar)
    before = snapshot(workspace, cache)
    # the whole dataset: the open that takes (and rebuilds) the whole sidecar
    outcome = stream(synthetic_av1, cache, reference)
    _report(f"sidecar {case}", outcome)
    if when == "load":
        check_case(f"sidecar {case}", outcome, {"complete"}, workspace, before)
        assert outcome.samples == len(reference)
        return
    if when == "span":
        check_case(f"sidecar {case}", outcome, {"complete"}, workspace, before)
        assert outcome.samples == len(reference)
    else:
        check_case(f"sidecar {case}", outcome, {"typed"}, workspace, before)
        assert isinstance(outcome.error, ManifestError), outcome.error
        assert str(sidecar) in str(outcome.error)
    assert not sidecar.exists(), "a sidecar refused at a sample must not stay in the cache"
    again = stream(synthetic_av1, cache, reference)
    check_case(f"sidecar {case} (next open)", again, {"complete"}, workspace, before)
    assert again.samples == len(reference)
    assert sidecar.exists()  # indexed again and written


def test_lying_sidecar_given_explicitly_is_refused_at_the_sample_and_kept(
    synthetic_av1: Path,
    workspace: Path,
    reference: dict[int, Any],
    built_caches: dict[str, Path],
) -> None:
    """``sidecar=`` names the caller's own file: a lying span found at a sample is planned
    again (every sample right) and the file left for its owner (a warning says to rebuild
    it); bytes that are not the samples raise, typed, the file left as it is."""
    explicit = workspace / "mine" / "index.arrow"
    explicit.parent.mkdir()
    shutil.copy(_whole_sidecar(built_caches["whole"]), explicit)
    sidecars.swap_spans(explicit, *SAME_LENGTH, 0)
    data = explicit.read_bytes()
    before = snapshot(workspace, workspace / "cache")
    before.pop("mine/index.arrow")
    outcome = stream(synthetic_av1, workspace / "cache", reference, sidecar=explicit)
    kept = explicit.read_bytes()
    sidecars.shift_samples(explicit, 0, -7)
    shifted = explicit.read_bytes()
    typed = stream(synthetic_av1, workspace / "cache", reference, sidecar=explicit)
    assert explicit.read_bytes() == shifted
    shutil.rmtree(explicit.parent)
    check_case("sidecar explicit swapped", outcome, {"complete"}, workspace, before)
    assert outcome.samples == len(reference)
    assert kept == data
    check_case("sidecar explicit shifted", typed, {"typed"}, workspace, before)
    assert isinstance(typed.error, ManifestError) and str(explicit) in str(typed.error)


# -- the per-file index ----------------------------------------------------------------------

ENTRY_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "shift sample offsets": (lambda p: sidecars.shift_samples(p, 0, -7), "sample"),
    "timescale zero": (lambda p: sidecars.set_values(p, "file.timescale", 0), "load"),
    "pts contradict dts": (
        lambda p: sidecars.set_values(p, "sample.pts", 20 * 512 + 1, 20),
        "load",
    ),
    "decode times backwards": (lambda p: sidecars.set_values(p, "sample.dts", -5, 3), "load"),
    "sample sizes past 32 bits": (
        lambda p: sidecars.set_values(p, "sample.sizes", 2**40, 3),
        "load",
    ),
    "header claims 2**40 samples": (
        lambda p: sidecars.edit_header(p, lambda h: h.update(num_samples=2**40)),
        "load",
    ),
    "stsd not a box": (lambda p: sidecars.set_values(p, "file.stsd", b"\x00" * 20), "load"),
}


@pytest.mark.parametrize("case", sorted(ENTRY_CASES))
def test_lying_per_file_entry(
    case: str,
    synthetic_av1: Path,
    workspace: Path,
    reference: dict[int, Any],
    built_caches: dict[str, Path],
) -> None:
    """The per-file index entry of a video, edited: refused when loaded (and read again
    from the video), or at a sample (typed, and removed); then every sample streams."""
    mutate, when = ENTRY_CASES[case]
    cache = workspace / "cache"
    shutil.copytree(built_caches["entries"], cache)
    entry = _entry_of(cache, VIDEO_0)
    mutate(entry)
    before = snapshot(workspace, cache)
    outcome = stream(synthetic_av1, cache, reference, episodes=SUBSET)
    _report(f"entry {case}", outcome)
    if when == "load":
        check_case(f"entry {case}", outcome, {"complete"}, workspace, before)
        assert outcome.samples == 32
        return
    check_case(f"entry {case}", outcome, {"typed"}, workspace, before)
    assert isinstance(outcome.error, ManifestError), outcome.error
    assert not entry.exists()
    again = stream(synthetic_av1, cache, reference, episodes=SUBSET)
    check_case(f"entry {case} (next open)", again, {"complete"}, workspace, before)
    assert again.samples == 32


def test_lying_entry_taken_into_a_whole_sidecar(
    synthetic_av1: Path,
    workspace: Path,
    reference: dict[int, Any],
    built_caches: dict[str, Path],
) -> None:
    """A whole build reuses the per-file index: a lying entry goes into the whole sidecar.
    The first sample of that file refuses both (the sidecar and the entry), so the next
    open reads the video's moov again and streams every sample."""
    cache = workspace / "cache"
    shutil.copytree(built_caches["entries"], cache)
    entry = _entry_of(cache, VIDEO_0)
    sidecars.shift_samples(entry, 0, -7)
    before = snapshot(workspace, cache)
    outcome = stream(synthetic_av1, cache, reference)
    check_case("entry shifted, whole open", outcome, {"typed"}, workspace, before)
    assert isinstance(outcome.error, ManifestError), outcome.error
    assert not entry.exists() and not list(cache.glob("sidecars/*/index.arrow"))
    again = stream(synthetic_av1, cache, reference)
    check_case("entry shifted, whole open (next open)", again, {"complete"}, workspace, before)
    assert again.samples == len(reference)


# -- a published sidecar ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "when"),
    [
        ("swap same-length rows, times adjusted", "span"),
        ("shift sample offsets", "sample"),
        ("frame count 10**12", "load"),
    ],
)
def test_lying_published_sidecar_is_ignored(
    case: str,
    when: str,
    synthetic_av1: Path,
    workspace: Path,
    reference: dict[int, Any],
    built_caches: dict[str, Path],
    http_publish: Callable[..., str],
) -> None:
    """``meta/episodestream/index.arrow`` under the root lies: refused when fetched (never
    copied into the cache), or at a sample (a span planned again, or a typed error), after
    which it is ignored: the next open indexes the videos instead of using it again."""
    root = copy_of(synthetic_av1, workspace)
    published = root / "meta/episodestream/index.arrow"
    published.parent.mkdir(parents=True)
    shutil.copy(_whole_sidecar(built_caches["whole"]), published)
    SIDECAR_CASES[case][0](published)
    url = http_publish(root, f"hostile-input-published-{time.time_ns()}")
    cache = workspace / "cache"
    before = snapshot(workspace, cache)
    outcome = stream(url, cache, reference)
    _report(f"published {case}", outcome)
    refused_marks = list(cache.glob("sidecars/*/published-refused"))
    if when == "load":
        check_case(f"published {case}", outcome, {"complete"}, workspace, before)
        assert not refused_marks
        return
    if when == "span":
        assert outcome.kind == "complete" and outcome.samples == len(reference), outcome
    else:
        assert outcome.kind == "typed" and isinstance(outcome.error, ManifestError), outcome
    assert not list(cache.glob("sidecars/*/index.arrow"))
    (mark,) = refused_marks
    assert mark.read_text().split() == [_digest(published)]
    mark.unlink()  # (the harness allows only .arrow and .lock files in the cache)
    check_case(f"published {case}", outcome, {outcome.kind}, workspace, before)
    mark.write_text(_digest(published) + "\n")
    again = stream(url, cache, reference)
    mark.unlink()
    check_case(f"published {case} (next open)", again, {"complete"}, workspace, before)
    assert again.samples == len(reference)
    # indexed from the videos, not the published lie
    (rebuilt,) = cache.glob("sidecars/*/index.arrow")
    assert _digest(rebuilt) != _digest(published)


def _digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- MP4 boxes -------------------------------------------------------------------------------


def test_moov_claiming_the_rest_of_a_768_mib_file(
    synthetic_av1: Path, workspace: Path, reference: dict[int, Any]
) -> None:
    """A moov header claiming every byte to the end of a 768 MiB file is refused from its
    header (the cap: 4 MiB + 256 bytes a frame the episodes table puts in the file)."""
    root = copy_of(synthetic_av1, workspace)
    claim_moov_to_end(root / VIDEO_0, 768 * 2**20)
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(root, workspace / "cache", reference, episodes=[0])
    _report("moov claims 768 MiB", outcome)
    check_case("mp4 moov claims 768 MiB", outcome, {"typed"}, workspace, before, names=VIDEO_0)
    assert isinstance(outcome.error, ManifestError)
    assert "max_moov_bytes" in str(outcome.error) and "per frame" in str(outcome.error)
    assert outcome.rss_peak_delta < BOMB_RSS_BOUND_BYTES


@pytest.mark.parametrize(
    ("case", "version", "duration", "allowed"),
    [
        ("v1 all ones (unknown)", 1, 2**64 - 1, "complete"),
        ("v0 all ones (unknown)", 0, 2**32 - 1, "complete"),
        ("v1 2**63", 1, 2**63, "typed"),
    ],
)
def test_mdhd_duration(
    case: str,
    version: int,
    duration: int,
    allowed: str,
    synthetic_moov_end: Path,
    workspace: Path,
    reference: dict[int, Any],
) -> None:
    """mdhd durations that overflowed int64 when the sidecar was written: all ones means
    unknown (ISO 14496-12; FFmpeg reads it so), anything else past 63 bits is malformed."""
    root = copy_of(synthetic_moov_end, workspace)
    for video in sorted(root.glob("videos/**/*.mp4")):
        video.write_bytes(set_mdhd(video.read_bytes(), version=version, duration=duration))
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(root, workspace / "cache", reference)
    check_case(f"mp4 mdhd duration {case}", outcome, {allowed}, workspace, before)
    if allowed == "complete":
        assert outcome.samples == len(reference)
    else:
        assert isinstance(outcome.error, ManifestError) and "duration" in str(outcome.error)


def test_mdhd_timescale_ffmpeg_reads_otherwise(
    synthetic_moov_end: Path, workspace: Path, reference: dict[int, Any]
) -> None:
    """A media timescale of 2**31 or more: FFmpeg reads it as a negative int and falls
    back to 1, so its times would not be ours; refused, typed."""
    root = copy_of(synthetic_moov_end, workspace)
    video = root / VIDEO_0
    video.write_bytes(set_mdhd(video.read_bytes(), version=0, timescale=2**31))
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(root, workspace / "cache", reference, episodes=[0])
    check_case("mp4 mdhd timescale 2**31", outcome, {"typed"}, workspace, before, names=VIDEO_0)


# -- info.json and the v2.x JSON Lines -------------------------------------------------------


def _width(field: str, name: str) -> Callable[[Path], None]:
    return lambda root: pad_template(root, field, name, "0200000000")


META_CASES: dict[str, Callable[[Path], None]] = {
    "data_path padded to 200,000,000 digits": _width("data_path", "chunk_index"),
    "video_path padded to 200,000,000 digits": _width("video_path", "file_index"),
    "nested 200,000 deep": lambda root: (root / "meta/info.json").write_text(deep_json(200_000)),
    "a 5,000-digit integer": lambda root: set_raw_field(root, "total_frames", "9" * 5000),
    "fps an int too large for a float": lambda root: set_raw_field(root, "fps", "9" * 400),
    "a feature shape of 2**40": lambda root: set_raw_field(
        root,
        "features",
        '{"action": {"dtype": "float32", "shape": [1099511627776], "names": null}}',
    ),
}


@pytest.mark.parametrize("case", sorted(META_CASES))
def test_hostile_info_json_is_typed_and_bounded(
    case: str, synthetic_av1: Path, workspace: Path, reference: dict[int, Any]
) -> None:
    root = copy_of(synthetic_av1, workspace)
    META_CASES[case](root)
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(root, workspace / "cache", reference, episodes=[0])
    _report(f"info.json {case}", outcome)
    check_case(f"info.json {case}", outcome, {"typed"}, workspace, before, names="meta/info.json")
    assert isinstance(outcome.error, DatasetFormatError)
    assert len(str(outcome.error)) < 2000, "the message must not carry the hostile value"
    assert outcome.rss_peak_delta < BOMB_RSS_BOUND_BYTES


def test_info_json_totals_are_hints_of_any_size(
    synthetic_av1: Path, workspace: Path, reference: dict[int, Any]
) -> None:
    """``total_frames`` of 10**30 (past int64): LeRobot's reader reads the rows, not the
    totals, and so do we: every sample."""
    root = copy_of(synthetic_av1, workspace)
    set_raw_field(root, "total_frames", str(10**30))
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(root, workspace / "cache", reference, episodes=[0])
    check_case("info.json total_frames 10**30", outcome, {"complete"}, workspace, before)
    assert outcome.samples == 20


@pytest.mark.parametrize("line", ["nested", "digits"])
def test_hostile_v2_episodes_jsonl(
    line: str,
    synthetic_dataset: Callable[..., Path],
    workspace: Path,
    reference: dict[int, Any],
) -> None:
    """A LeRobot v2.1 dataset whose ``meta/episodes.jsonl`` holds a line nested 200,000
    deep, or a 5,000-digit episode index."""
    root = copy_of(synthetic_dataset(V21_SPEC), workspace)
    path = root / "meta/episodes.jsonl"
    hostile = deep_json(200_000) if line == "nested" else '{"episode_index": ' + "9" * 5000 + "}"
    path.write_text(path.read_text() + hostile + "\n")
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(root, workspace / "cache", reference, episodes=[0])
    check_case(
        f"v2.1 episodes.jsonl {line}", outcome, {"typed"}, workspace, before, names="episodes.jsonl"
    )


# -- delta timestamps ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "offsets"),
    [
        ("a million offsets", lambda: [i / 30 for i in range(10**6)]),
        ("1e300 seconds", lambda: [0.0, 1e300]),
        ("an integer too large for a float", lambda: [0, 10**400]),
    ],
)
def test_delta_timestamps_are_capped(
    case: str,
    offsets: Callable[[], list[float]],
    synthetic_av1: Path,
    workspace: Path,
    reference: dict[int, Any],
) -> None:
    """A million camera offsets made numpy try to allocate 34 GiB at the first sample;
    offsets past int64 frames overflowed. Refused when the dataset is built, the cap named."""
    deltas = {CAM: offsets()}
    before = snapshot(workspace, workspace / "cache")
    outcome = stream(
        synthetic_av1, workspace / "cache", reference, episodes=[0], delta_timestamps=deltas
    )
    _report(f"delta_timestamps {case}", outcome)
    check_case(f"delta_timestamps {case}", outcome, {"typed"}, workspace, before)
    assert isinstance(outcome.error, SamplingError)
    assert "MAX_DELTA" in str(outcome.error) or "finite" in str(outcome.error)
    assert outcome.rss_peak_delta < BOMB_RSS_BOUND_BYTES


# -- the property the checks rest on: what the builder makes passes them ---------------------


def _variant_root(synthetic_av1: Path, folder: Path) -> Path:
    """synthetic_av1 as other writers leave it: to_timestamp at the last frame, one video a
    frame short, one a frame long, others in H.264 with B-frames, MPEG-4 Part 2 and VP9, and
    an episode whose from_timestamp lies past its video (a span of no frames)."""
    root = variants.copy_dataset(synthetic_av1, folder / "variants")
    variants.set_to_timestamp_last_frame(root)
    high, wrist = (
        variants.video_files(root, CAM),
        variants.video_files(root, "observation.images.cam_left_wrist"),
    )
    variants.drop_last_video_frame(high[0])
    variants.reencode_video(high[1], "libx264")
    variants.reencode_video(wrist[0], "mpeg4")
    variants.repeat_last_video_frame(wrist[1])

    def past_the_end(table: Any) -> Any:
        import pyarrow as pa

        name = f"videos/{CAM}/from_timestamp"
        values = table.column(name).to_numpy().copy()
        values[table.column("episode_index").to_numpy() == 5] = 60.0
        return table.set_column(table.schema.get_field_index(name), name, pa.array(values))

    variants.edit_episodes(root, past_the_end)
    return root


@pytest.fixture(scope="module")
def built_roots(
    synthetic_dataset: Callable[..., Path],
    synthetic_av1: Path,
    lerobot_fixture_root: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Path]]:
    specs = {
        "av1": SYNTHETIC_AV1_SPEC,
        "h264": SYNTHETIC_H264_SPEC,
        "hevc": SYNTHETIC_HEVC_SPEC,
        "moov at end": SYNTHETIC_MOOV_END_SPEC,
        "chunked": SYNTHETIC_CHUNKED_SPEC,
        "v2.1": V21_SPEC,
    }
    roots = {name: synthetic_dataset(spec) for name, spec in specs.items()}
    roots["lerobot_sim5 (LeRobot-written)"] = lerobot_fixture_root
    roots["other writers"] = _variant_root(synthetic_av1, tmp_path_factory.mktemp("variants"))
    yield roots


@pytest.mark.parametrize(
    "name",
    [
        "av1",
        "h264",
        "hevc",
        "moov at end",
        "chunked",
        "v2.1",
        "lerobot_sim5 (LeRobot-written)",
        "other writers",
    ],
)
def test_every_built_index_passes_every_check(
    name: str, built_roots: dict[str, Path], tmp_path: Path
) -> None:
    """Build, write, load, check: the load checks, the per-sample checks of every file, every
    span planned again (with the window the episodes table gives, and without it), and the
    framing of every span's bytes in the real file."""
    root = built_roots[name]
    with LocalRangeReader(root) as reader:
        meta = load_dataset_meta(reader)
        built = build_manifest(reader, meta, progress=False)
    check_file_table(built._files, built._samples, "built", per_sample=True)
    path = write_sidecar(built, tmp_path / "index.arrow")
    for windows in (True, False):
        loaded = load_sidecar(path, origin="cache")
        if windows:
            check_spans(loaded, meta, where=str(path))
            assert loaded.span_end_s is not None
        empty = 0
        for file_id, file_path in enumerate(loaded.file_paths):
            track = check_file_track(loaded, file_id, where=str(path))
            data = (root / file_path).read_bytes()
            rows = np.flatnonzero((loaded.spans.file_id == file_id).any(axis=1))
            camera = loaded.source(file_id).camera
            for row in rows.tolist():
                episode = int(loaded.episode_index[row])
                span = check_span(loaded, episode, camera, track, where=str(path))
                assert span == built.span(episode, camera)
                if span.frame_count == 0:
                    empty += 1
                    continue
                check_sample_framing(track, span.to_plan(), data[span.byte_start : span.byte_end])
        if name == "other writers":
            assert empty == 1  # the episode placed past its video: read, it raises

"""`episodestream check`: the pre-flight report, on copies of a synthetic dataset with
hand-made defects (tests/support/variants.py), read from disk and over nginx.

Each defect asserts the exact episodes, rows and cameras reported, the exit status and the
JSON; where a local dataset opens, episodestream's own reader confirms the prediction sample
by sample (the samples the check says raise are exactly those that raise).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from episodestream import EpisodeStreamDataset, EpisodeStreamError, ManifestError, check_dataset
from episodestream.cli import main
from episodestream.lerobot import load_dataset_meta
from episodestream.storage import LocalRangeReader
from tests.plugins.synthetic import SYNTHETIC_AV1_SPEC
from tests.support import variants

HIGH, LEFT = SYNTHETIC_AV1_SPEC.cameras
FPS = SYNTHETIC_AV1_SPEC.fps
EPISODES = list(range(SYNTHETIC_AV1_SPEC.episodes))  # 3 per video file, 4 per data file
ROOTS = ["local", "http"]


@dataclass(frozen=True)
class Run:
    status: int
    out: str
    report: dict[str, Any]

    def episode(self, episode: int) -> dict[str, Any]:
        return next(e for e in self.report["episodes"] if e["episode_index"] == episode)

    def findings(self, kind: str) -> list[tuple[int, dict[str, Any]]]:
        return [
            (e["episode_index"], f)
            for e in self.report["episodes"]
            for f in e["findings"]
            if f["kind"] == kind
        ]


@pytest.fixture(scope="module")
def lengths(synthetic_av1: Path) -> dict[int, int]:
    with LocalRangeReader(synthetic_av1) as reader:
        table = load_dataset_meta(reader).episodes
    return dict(zip(table.episode_index.tolist(), table.length.tolist(), strict=True))


@pytest.fixture
def make_variant(
    synthetic_av1: Path, tmp_path: Path, http_publish: Callable[..., str]
) -> Callable[..., tuple[Path, str]]:
    """``make_variant(edit, where) -> (local copy, root to check)``: a copy of the synthetic
    dataset edited by ``edit(copy)``, checked from disk or served by nginx."""

    def make(edit: Callable[[Path], object], where: str) -> tuple[Path, str]:
        copy = variants.copy_dataset(synthetic_av1, tmp_path / "dataset")
        edit(copy)
        return copy, (str(copy) if where == "local" else http_publish(copy))

    return make


def check(root: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Run:
    """``episodestream check ROOT ARGS --json FILE``, in this process."""
    report = tmp_path / f"report-{len(list(tmp_path.glob('report-*')))}.json"
    status = main(
        ["check", root, "--cache-dir", str(tmp_path / "cache"), "--json", str(report), *args]
    )
    out = capsys.readouterr().out
    return Run(status, out, json.loads(report.read_text()))


def engine_raising_rows(
    root: Path, episode: int, tmp_path: Path, **options: Any
) -> tuple[list[int], set[str]]:
    """The samples of ``episode`` at which episodestream's map-style dataset raises, and the
    errors' class names."""
    rows, errors = [], set()
    with EpisodeStreamDataset(
        root, episodes=[episode], cache_dir=tmp_path / "engine-cache", **options
    ) as dataset:
        for k in range(len(dataset)):
            try:
                dataset[k]
            except EpisodeStreamError as error:
                rows.append(k)
                errors.add(type(error).__name__)
    return rows, errors


def summary(run: Run) -> dict[str, list[int]]:
    return {k: v for k, v in run.report["summary"].items() if k != "episodes"}


# ---------------------------------------------------------------------------------- clean


@pytest.mark.parametrize("where", ROOTS)
def test_clean_dataset_reads_every_episode(
    make_variant: Any,
    where: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    http_server: Any,
) -> None:
    _, root = make_variant(lambda root: None, where)
    mark = http_server.log_mark()
    run = check(root, tmp_path, capsys)
    assert run.status == 0
    assert summary(run) == {"reads": EPISODES, "raises": [], "differs": [], "odd": []}
    assert run.report["ok"] is True
    assert all(e["findings"] == [] and e["outcome"] == "reads" for e in run.report["episodes"])
    assert run.report["index"] == "built"
    assert "reads       6 episodes read as LeRobot reads them: 0-5" in run.out
    assert "raises      none" in run.out and "differs     none" in run.out
    assert "odd         none" in run.out
    assert "exit 0: every episode checked reads as LeRobot reads it" in run.out
    assert run.report["requests"] > 0 and run.report["bytes"] > 0
    if where == "http":
        # the cost reported is the requests nginx served
        records = http_server.wait_for_records(run.report["requests"], since=mark)
        assert len(records) == run.report["requests"]
        # bytes of data: the 404 page of the published-sidecar look-up is not
        assert sum(r.body_bytes for r in records if r.status < 300) == run.report["bytes"]


def test_a_subset_reads_only_its_files(
    make_variant: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    http_server: Any,
) -> None:
    _, root = make_variant(lambda root: None, "http")
    mark = http_server.log_mark()
    run = check(root, tmp_path, capsys, "--episodes", "0,1")
    assert run.status == 0 and summary(run)["reads"] == [0, 1]
    uris = {r.uri.split("/", 2)[2] for r in http_server.access_records(since=mark)}
    data_and_videos = {uri for uri in uris if not uri.startswith("meta/")}
    # file-000 of each: episodes 0-2 of the videos, 0-3 of the data
    assert data_and_videos == {
        f"videos/{HIGH}/chunk-000/file-000.mp4",
        f"videos/{LEFT}/chunk-000/file-000.mp4",
        "data/chunk-000/file-000.parquet",
    }


# ---------------------------------------------------------------------------------- defects


@pytest.mark.parametrize("where", ROOTS)
def test_a_video_one_frame_short_raises_at_its_last_row(
    make_variant: Any,
    where: str,
    lengths: dict[int, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # file-001 of the first camera holds episodes 3-5: its end is episode 5's last row
    path = f"videos/{HIGH}/chunk-000/file-001.mp4"
    local, root = make_variant(
        lambda root: variants.drop_last_video_frame(variants.episode_video_file(root, 5, HIGH)),
        where,
    )
    last = lengths[5] - 1
    run = check(root, tmp_path, capsys)
    assert run.status == 1
    assert summary(run) == {"reads": [0, 1, 2, 3, 4], "raises": [5], "differs": [], "odd": []}
    episode = run.episode(5)
    assert episode["outcome"] == "raises" and episode["raising_rows"] == [last]
    [finding] = episode["findings"]
    assert finding["kind"] == "frame_not_found" and finding["camera"] == HIGH
    assert finding["file"] == path and finding["field"] == "timestamp"
    assert finding["rows"] == [last] and finding["frame_rows"] == [last]
    assert finding["error"] == "FrameNotFoundError" and finding["whole_episode"] is False
    assert (
        f"  episode 5: {HIGH}: {path} has no frame within 0.0001 s of from_timestamp + "
        f"timestamp: row {last} at "
    ) in run.out
    assert (
        f"the video presents {last} frames for {lengths[5]} rows "
        f"[FrameNotFoundError at sample {last}]"
    ) in run.out
    assert "exit 1: some episodes would raise or differ" in run.out

    # a delta of one frame ahead makes the sample before it query the missing frame too
    deltas = json.dumps({HIGH: [0.0, 1 / FPS]})
    with_deltas = check(root, tmp_path, capsys, "--delta-timestamps", deltas)
    [finding] = with_deltas.episode(5)["findings"]
    assert finding["rows"] == [last - 1, last] and finding["frame_rows"] == [last]
    assert with_deltas.report["delta_timestamps"] == {HIGH: [0.0, 1 / FPS]}
    if where == "local":
        assert engine_raising_rows(local, 5, tmp_path) == ([last], {"FrameNotFoundError"})
        assert engine_raising_rows(local, 5, tmp_path, delta_timestamps={HIGH: [0.0, 1 / FPS]}) == (
            [last - 1, last],
            {"FrameNotFoundError"},
        )


@pytest.mark.parametrize("where", ROOTS)
def test_a_missing_video_file_raises_for_its_episodes_only(
    make_variant: Any,
    where: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = f"videos/{LEFT}/chunk-000/file-000.mp4"  # episodes 0-2 of the second camera
    _, root = make_variant(lambda root: variants.remove_video_file(root, path), where)
    run = check(root, tmp_path, capsys, "--episodes", "4,0")
    assert run.status == 1
    assert summary(run) == {"reads": [4], "raises": [0], "differs": [], "odd": []}
    [finding] = run.episode(0)["findings"]
    assert finding["kind"] == "video_file_missing" and finding["camera"] == LEFT
    assert finding["file"] == path and finding["whole_episode"] is True
    assert finding["error"] == "ManifestError"
    assert run.episode(0)["raising_rows"] == list(range(run.episode(0)["length"]))
    line = f"  episode 0: {LEFT}: {path} is missing [ManifestError at open, with this episode"
    assert line in run.out
    # and so it does: the open of a dataset with episode 0 refuses, naming the file
    with pytest.raises(ManifestError, match=path):
        EpisodeStreamDataset(root, episodes=[0], cache_dir=tmp_path / "engine-cache")
    # the index of episodes 0 and 4 did not open: each of their video files was read alone
    assert run.report["index"] == "files"
    [note] = run.report["notes"]
    assert note.startswith("the index of the asked episodes did not open (ManifestError: ")
    assert path in note and "note        the index of the asked episodes" in run.out

    # the episodes of the other files read, and their index opens: the file is not theirs
    others = check(root, tmp_path, capsys, "--episodes", "3,4")
    assert others.status == 0
    assert summary(others) == {"reads": [3, 4], "raises": [], "differs": [], "odd": []}
    assert others.report["index"] != "files" and others.report["notes"] == []


def test_to_timestamp_at_the_last_frame_is_harmless(
    make_variant: Any,
    lengths: dict[int, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, root = make_variant(variants.set_to_timestamp_last_frame, "local")
    run = check(root, tmp_path, capsys)
    assert run.status == 0
    assert summary(run) == {"reads": EPISODES, "raises": [], "differs": [], "odd": EPISODES}
    found = run.findings("to_timestamp")
    assert sorted((e, f["camera"]) for e, f in found) == [
        (e, camera) for e in EPISODES for camera in (HIGH, LEFT)
    ]
    assert all(len(e["findings"]) == 2 for e in run.report["episodes"])
    for episode, finding in found:
        assert finding["outcome"] == "odd" and finding["error"] is None
        assert finding["field"] == f"videos/{finding['camera']}/to_timestamp"
        assert finding["detail"] == (
            f"to_timestamp - from_timestamp = {(lengths[episode] - 1) / FPS:.6f} s, "
            f"length / fps = {lengths[episode] / FPS:.6f} s"
        )
    for camera in (HIGH, LEFT):
        assert (
            f"  videos/{camera}/to_timestamp is the last frame's time, from_timestamp + "
            "(length - 1) / fps (a hint only: frames are found at from_timestamp + timestamp): "
            "episodes 0-5"
        ) in run.out


def test_a_codec_label_that_is_not_the_files_is_harmless(
    make_variant: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, root = make_variant(lambda root: variants.relabel_codec(root, "h264"), "local")
    run = check(root, tmp_path, capsys)
    assert run.status == 0
    assert summary(run) == {"reads": EPISODES, "raises": [], "differs": [], "odd": EPISODES}
    found = run.findings("codec_label")
    assert sorted((e, f["camera"], f["file"]) for e, f in found) == [
        (e, camera, f"videos/{camera}/chunk-000/file-00{e // 3}.mp4")
        for e in EPISODES
        for camera in (HIGH, LEFT)
    ]
    assert all(f["field"] == f"features.{f['camera']}.info.video.codec" for _, f in found)
    for camera in (HIGH, LEFT):
        assert (
            f"  {camera}: info.json says video.codec 'h264' but the files hold 'av01' (the "
            "file's codec is decoded): episodes 0-5"
        ) in run.out


@pytest.mark.parametrize("where", ROOTS)
def test_a_shifted_timestamp_raises_at_that_row_on_every_camera(
    make_variant: Any,
    where: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # half a frame: no frame within tolerance on either side
    local, root = make_variant(lambda root: variants.shift_timestamp(root, 2, 4, 0.5 / FPS), where)
    run = check(root, tmp_path, capsys)
    assert run.status == 1
    assert summary(run) == {"reads": [0, 1, 3, 4, 5], "raises": [2], "differs": [], "odd": []}
    findings = run.episode(2)["findings"]
    assert [(f["kind"], f["camera"], f["rows"]) for f in findings] == [
        ("frame_not_found", HIGH, [4]),
        ("frame_not_found", LEFT, [4]),
    ]
    assert run.episode(2)["raising_rows"] == [4]
    if where == "local":
        assert engine_raising_rows(local, 2, tmp_path) == ([4], {"FrameNotFoundError"})


def test_a_frame_past_the_episodes_span_differs_from_lerobot(
    make_variant: Any,
    lengths: dict[int, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # episode 1's last row says one frame later: the file has that frame (episode 2's first,
    # which LeRobot returns), but the span episodestream fetches ends before it
    last = lengths[1] - 1
    local, root = make_variant(
        lambda root: variants.shift_timestamp(root, 1, last, 1 / FPS), "local"
    )
    run = check(root, tmp_path, capsys)
    assert run.status == 1
    assert summary(run) == {"reads": [0, 2, 3, 4, 5], "raises": [], "differs": [1], "odd": []}
    findings = run.episode(1)["findings"]
    assert [(f["kind"], f["camera"], f["rows"], f["outcome"]) for f in findings] == [
        ("frame_outside_span", HIGH, [last], "differs"),
        ("frame_outside_span", LEFT, [last], "differs"),
    ]
    assert "differs     1 episode would differ from LeRobot's reader: 1" in run.out
    # the prediction, confirmed by episodestream itself
    assert engine_raising_rows(local, 1, tmp_path) == ([last], {"FrameNotFoundError"})


def test_a_video_one_frame_long_is_harmless(
    make_variant: Any,
    lengths: dict[int, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, root = make_variant(
        lambda root: variants.repeat_last_video_frame(variants.episode_video_file(root, 5, LEFT)),
        "local",
    )
    run = check(root, tmp_path, capsys)
    assert run.status == 0
    assert summary(run) == {"reads": EPISODES, "raises": [], "differs": [], "odd": [5]}
    [(episode, finding)] = run.findings("frame_count")
    assert (episode, finding["camera"], finding["outcome"]) == (5, LEFT, "odd")
    path = f"videos/{LEFT}/chunk-000/file-001.mp4"
    assert finding["file"] == path
    assert finding["detail"] == f"{path}: {lengths[5] + 1} frames for {lengths[5]} rows"
    assert (
        f"  {LEFT}: the video presents more frames than the episode has rows, from its "
        "from_timestamp to the next episode's (or the file's end) (harmless: only a row timed "
        "there reads one, in LeRobot and here alike): episode 5"
    ) in run.out


def test_row_columns_that_disagree_with_the_episodes_table(
    make_variant: Any,
    lengths: dict[int, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def edit(root: Path) -> None:
        variants.set_data_value(root, 1, 3, "episode_index", 2)
        variants.set_data_value(root, 3, 2, "frame_index", 7)
        variants.set_data_value(root, 3, 5, "index", 999)
        variants.set_data_value(root, 4, 0, "task_index", 99)

    local, root = make_variant(edit, "local")
    run = check(root, tmp_path, capsys)
    assert run.status == 1
    assert summary(run) == {"reads": [0, 2, 3, 5], "raises": [4], "differs": [1], "odd": [3]}
    [mislabelled] = run.episode(1)["findings"]
    assert mislabelled["kind"] == "episode_index_mismatch" and mislabelled["rows"] == [3]
    assert mislabelled["whole_episode"] is True and mislabelled["error"] == "DatasetFormatError"
    assert mislabelled["detail"] == "row 3 holds episode_index 2"
    assert [(f["kind"], f["rows"], f["outcome"]) for f in run.episode(3)["findings"]] == [
        ("frame_index_mismatch", [2], "odd"),
        ("index_mismatch", [5], "odd"),
    ]
    [task] = run.episode(4)["findings"]
    assert (task["kind"], task["rows"], task["error"]) == (
        "task_index_out_of_range",
        [0],
        "DatasetFormatError",
    )
    assert task["file"] == "data/chunk-000/file-001.parquet"
    assert engine_raising_rows(local, 4, tmp_path) == ([0], {"DatasetFormatError"})
    rows, errors = engine_raising_rows(local, 1, tmp_path)
    assert rows == list(range(lengths[1])) and errors == {"DatasetFormatError"}

    # LeRobot's delta_timestamps queries follow the index column: no longer harmless
    deltas = check(root, tmp_path, capsys, "--delta-timestamps", json.dumps({"action": [0.0]}))
    assert summary(deltas)["differs"] == [1, 3]
    assert [f["outcome"] for f in deltas.episode(3)["findings"]] == ["differs", "odd"]


def test_a_missing_data_file_raises_for_its_episodes(
    make_variant: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = "data/chunk-000/file-001.parquet"  # episodes 4 and 5
    _, root = make_variant(lambda root: (root / path).unlink(), "local")
    run = check(root, tmp_path, capsys, "--episodes", "3,4,5")
    assert run.status == 1
    assert summary(run) == {"reads": [3], "raises": [4, 5], "differs": [], "odd": []}
    for episode in (4, 5):
        [finding] = run.episode(episode)["findings"]
        assert (finding["kind"], finding["file"], finding["whole_episode"]) == (
            "data_file_missing",
            path,
            True,
        )


# ---------------------------------------------------------------------------------- usage


def test_usage_and_dataset_errors_exit_2(
    synthetic_av1: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(synthetic_av1)
    assert main(["check", root, "--cache-dir", str(tmp_path), "--episodes", "9"]) == 2
    assert "unknown episode(s) 9" in capsys.readouterr().err
    deltas = json.dumps({HIGH: [0.01]})  # not a multiple of 1/30 s
    assert main(["check", root, "--cache-dir", str(tmp_path), "--delta-timestamps", deltas]) == 2
    assert "not a multiple of 1/30 s" in capsys.readouterr().err
    assert main(["check", str(tmp_path / "nothing"), "--cache-dir", str(tmp_path)]) == 2
    # a --json path that cannot be written: refused before the check, not a traceback after
    unwritable = str(tmp_path / "no-such-folder" / "report.json")
    assert main(["check", root, "--cache-dir", str(tmp_path), "--json", unwritable]) == 2
    assert "no-such-folder does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["check", root, "--delta-timestamps", "[0.1]"])
    assert exited.value.code == 2


def test_the_command_prints_json_to_stdout_and_exits_with_its_status(
    make_variant: Any, tmp_path: Path
) -> None:
    _, root = make_variant(lambda root: variants.shift_timestamp(root, 0, 0, 0.5 / FPS), "local")
    command = ["check", root, "--num-episodes", "2", "--cache-dir", str(tmp_path / "cache")]
    result = subprocess.run(
        [sys.executable, "-m", "episodestream.cli", *command, "--json", "-"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["summary"]["raises"] == [0] and report["summary"]["reads"] == [1]
    assert "raises      1 episode would raise: 0" in result.stderr


def test_the_library_function_returns_the_report(synthetic_av1: Path, tmp_path: Path) -> None:
    report = check_dataset(synthetic_av1, episodes=[2, 0], cache_dir=tmp_path)
    assert report.ok and report.reading == (0, 2)
    assert [e.episode_index for e in report.episodes] == [0, 2]
    assert report.cameras == (HIGH, LEFT) and report.total_episodes == 6

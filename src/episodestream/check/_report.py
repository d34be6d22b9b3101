"""What ``check_dataset`` found: frozen values, their JSON form, and the human report."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "CheckFinding",
    "DatasetCheck",
    "EpisodeCheck",
    "EpisodeOutcome",
    "FindingKind",
    "FindingOutcome",
    "format_check",
]

#: What LeRobot's reader and episodestream do at the samples a finding names:
#: ``raises``: both raise there (episodestream a typed error, ``CheckFinding.error``);
#: ``differs``: they disagree (one raises where the other reads, or both read other values);
#: ``odd``: both read the same samples; worth knowing, harmless.
FindingOutcome = Literal["raises", "differs", "odd"]
#: ``reads``: every sample reads as LeRobot reads it (oddities allowed); else the worst
#: outcome among the episode's findings.
EpisodeOutcome = Literal["reads", "raises", "differs"]
FindingKind = Literal[
    "data_file_missing",  # the episode's data Parquet file is absent
    "data_unreadable",  # its rows cannot be read (columns, row count, Parquet itself)
    "video_file_missing",  # a camera's MP4 file is absent
    "video_unreadable",  # a camera's MP4 cannot be indexed (moov, damage, span planning)
    "frame_not_found",  # rows whose time has no frame within tolerance in the file
    "frame_outside_span",  # the file has the frame but the episode's span (what we fetch) not
    "episode_index_mismatch",  # rows whose episode_index column is another episode's
    "index_mismatch",  # rows whose index column is not dataset_from_index + row
    "frame_index_mismatch",  # rows whose frame_index column is not their position
    "task_index_out_of_range",  # rows whose task_index names no task
    "frame_count",  # the video presents another number of frames than the episode has rows
    "codec_label",  # info.json's video.codec is not the file's sample entry
    "to_timestamp",  # videos/<key>/to_timestamp is not the episode's end
]

_OUTCOME_ORDER: dict[str, int] = {"reads": 0, "differs": 1, "raises": 2}
# episodes a human report details one by one, per outcome, before "and N more"
_DETAILED_EPISODES = 20


@dataclass(frozen=True, slots=True)
class CheckFinding:
    """One thing found about one episode (and camera, file or column).

    Attributes:
        kind: what was found (:data:`FindingKind`).
        outcome: what LeRobot and episodestream do at the samples it names.
        summary: what was found, the same words for every episode it concerns (a human
            report groups oddities by it): names the camera, file and field.
        detail: what is particular to this episode (rows, times, counts), or ``""``.
        camera: the camera key, when the finding is about one.
        file: the file (relative to the dataset root) it is about.
        field: the column or ``info.json`` field it is about.
        rows: samples it concerns, as 0-based rows of the episode (for ``raises`` and
            ``differs``: the samples that raise or differ, delta_timestamps queries
            included); empty when ``whole_episode``.
        frame_rows: for the frame kinds, the rows whose own time finds no frame (without
            delta_timestamps the same as ``rows``).
        whole_episode: every sample of the episode is concerned.
        error: the episodestream error raised at those samples (class name), or None when
            episodestream reads them.
    """

    kind: FindingKind
    outcome: FindingOutcome
    summary: str
    detail: str = ""
    camera: str | None = None
    file: str | None = None
    field: str | None = None
    rows: tuple[int, ...] = ()
    frame_rows: tuple[int, ...] = ()
    whole_episode: bool = False
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "outcome": self.outcome,
            "summary": self.summary,
            "detail": self.detail,
            "camera": self.camera,
            "file": self.file,
            "field": self.field,
            "rows": list(self.rows),
            "frame_rows": list(self.frame_rows),
            "whole_episode": self.whole_episode,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class EpisodeCheck:
    """The findings about one episode asked for."""

    episode_index: int
    length: int
    findings: tuple[CheckFinding, ...] = ()

    @property
    def outcome(self) -> EpisodeOutcome:
        worst: EpisodeOutcome = "reads"
        for finding in self.findings:
            if finding.outcome != "odd" and _OUTCOME_ORDER[finding.outcome] > _OUTCOME_ORDER[worst]:
                worst = finding.outcome
        return worst

    @property
    def raising_rows(self) -> tuple[int, ...]:
        """Samples (0-based rows) at which episodestream raises, ascending."""
        rows: set[int] = set()
        for finding in self.findings:
            if finding.error is None:
                continue
            if finding.whole_episode:
                return tuple(range(self.length))
            rows.update(finding.rows)
        return tuple(sorted(rows))

    @property
    def oddities(self) -> tuple[CheckFinding, ...]:
        return tuple(f for f in self.findings if f.outcome == "odd")

    def to_json(self) -> dict[str, Any]:
        return {
            "episode_index": self.episode_index,
            "length": self.length,
            "outcome": self.outcome,
            "raising_rows": list(self.raising_rows),
            "findings": [finding.to_json() for finding in self.findings],
        }


@dataclass(frozen=True, slots=True)
class DatasetCheck:
    """A pre-flight report: how each episode asked for reads, as LeRobot's reader would
    read it and as episodestream will (see :func:`~episodestream.check_dataset`).

    Attributes:
        root: the dataset as opened (``meta.root``).
        codebase_version: ``info.json``'s, as published.
        fps: ``info.json``'s.
        cameras: the video keys.
        total_episodes: episodes in the dataset's episodes table.
        tolerance_s: the frame-matching tolerance checked against (LeRobot's ``tolerance_s``).
        delta_timestamps: the ``delta_timestamps`` checked, as ``(key, offsets)`` pairs.
        index: where the episodes' video index came from: ``"cache"``, ``"built"``,
            ``"published"``, ``"explicit"`` (an open of the asked episodes' index), or
            ``"files"`` (that failed: each video file was then read on its own), or
            ``"none"`` (no cameras).
        notes: dataset-level remarks (why the index was read file by file, ...).
        episodes: one entry per episode asked for, ascending.
        requests: requests the check sent to the store (the reader's metrics; metadata,
            index and rows; with split roots, those to the data root only).
        bytes_read: body bytes it received.
        seconds: its wall time.
    """

    root: str
    codebase_version: str
    fps: float
    cameras: tuple[str, ...]
    total_episodes: int
    tolerance_s: float
    delta_timestamps: tuple[tuple[str, tuple[float, ...]], ...] | None
    index: str
    notes: tuple[str, ...]
    episodes: tuple[EpisodeCheck, ...]
    requests: int
    bytes_read: int
    seconds: float

    def _with(self, outcome: str) -> tuple[int, ...]:
        return tuple(e.episode_index for e in self.episodes if e.outcome == outcome)

    @property
    def reading(self) -> tuple[int, ...]:
        """Episodes whose every sample reads as LeRobot reads it."""
        return self._with("reads")

    @property
    def raising(self) -> tuple[int, ...]:
        """Episodes with samples at which LeRobot and episodestream raise."""
        return self._with("raises")

    @property
    def differing(self) -> tuple[int, ...]:
        """Episodes with samples episodestream reads otherwise than LeRobot (and none
        that raise in both)."""
        return self._with("differs")

    @property
    def odd(self) -> tuple[int, ...]:
        """Episodes with harmless oddities (whatever else they have)."""
        return tuple(e.episode_index for e in self.episodes if e.oddities)

    @property
    def ok(self) -> bool:
        """Every episode asked for reads as LeRobot reads it."""
        return all(e.outcome == "reads" for e in self.episodes)

    def episode(self, episode_index: int) -> EpisodeCheck:
        for entry in self.episodes:
            if entry.episode_index == episode_index:
                return entry
        raise KeyError(f"episode {episode_index} was not checked")

    def to_json(self) -> dict[str, Any]:
        """Everything, as JSON-ready values."""
        return {
            "root": self.root,
            "codebase_version": self.codebase_version,
            "fps": self.fps,
            "cameras": list(self.cameras),
            "total_episodes": self.total_episodes,
            "tolerance_s": self.tolerance_s,
            "delta_timestamps": (
                None
                if self.delta_timestamps is None
                else {key: list(offsets) for key, offsets in self.delta_timestamps}
            ),
            "index": self.index,
            "notes": list(self.notes),
            "ok": self.ok,
            "summary": {
                "episodes": len(self.episodes),
                "reads": list(self.reading),
                "raises": list(self.raising),
                "differs": list(self.differing),
                "odd": list(self.odd),
            },
            "episodes": [entry.to_json() for entry in self.episodes],
            "requests": self.requests,
            "bytes": self.bytes_read,
            "seconds": round(self.seconds, 3),
        }


# --------------------------------------------------------------------------------------------
# the human report


def ranges(values: Iterable[int]) -> str:
    """``"0-4, 7, 9-11"``: ascending integers as runs."""
    ordered = sorted(set(int(v) for v in values))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(parts) or "none"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def _size(num_bytes: int) -> str:
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{num_bytes} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{num_bytes} B"


# findings that stop a dataset opened with their episode from opening: its index cannot be
# built (ManifestError), not a sample that raises later
_RAISED_AT_OPEN = frozenset({"video_file_missing", "video_unreadable"})


def _finding_line(finding: CheckFinding) -> str:
    text = finding.summary + (f": {finding.detail}" if finding.detail else "")
    if finding.error is not None:
        if finding.kind in _RAISED_AT_OPEN:
            at = "open, with this episode asked for"
        elif finding.whole_episode:
            at = "every sample"
        else:
            at = f"{'sample' if len(finding.rows) == 1 else 'samples'} {ranges(finding.rows)}"
        text += f" [{finding.error} at {at}]"
    return text


def _detailed(check: DatasetCheck, outcome: str, label: str, lines: list[str]) -> None:
    episodes = [e for e in check.episodes if e.outcome == outcome]
    if not episodes:
        lines.append(f"{label:<11} none")
        return
    what = {"raises": "would raise", "differs": "would differ from LeRobot's reader"}[outcome]
    lines.append(
        f"{label:<11} {_count(len(episodes), 'episode')} {what}: "
        f"{ranges(e.episode_index for e in episodes)}"
    )
    for entry in episodes[:_DETAILED_EPISODES]:
        for finding in entry.findings:
            if finding.outcome != "odd":
                lines.append(f"  episode {entry.episode_index}: {_finding_line(finding)}")
    if len(episodes) > _DETAILED_EPISODES:
        lines.append(f"  and {len(episodes) - _DETAILED_EPISODES} more episodes (--json for all)")


def format_check(check: DatasetCheck) -> str:
    """The human report: one summary line per outcome (episodes that read as LeRobot would,
    that would raise and why, that would differ; harmless oddities grouped across
    episodes), then the cost."""
    asked = len(check.episodes)
    deltas = (
        ""
        if check.delta_timestamps is None
        else ", delta_timestamps " + ", ".join(f"{k}: {list(v)}" for k, v in check.delta_timestamps)
    )
    lines = [
        f"dataset     {check.root} ({check.codebase_version}, {check.fps:g} fps, "
        f"{_count(len(check.cameras), 'camera')})",
        f"checked     {asked} of {_count(check.total_episodes, 'episode')}, "
        f"tolerance {check.tolerance_s:g} s{deltas}; video index: {check.index}",
    ]
    lines.extend(f"note        {note}" for note in check.notes)
    reading = check.reading
    one = len(reading) == 1
    lines.append(
        f"reads       {_count(len(reading), 'episode')} {'reads' if one else 'read'} as "
        f"LeRobot reads {'it' if one else 'them'}: {ranges(reading)}"
    )
    _detailed(check, "raises", "raises", lines)
    _detailed(check, "differs", "differs", lines)
    groups: dict[tuple[str, str], list[int]] = {}
    for entry in check.episodes:
        for finding in entry.oddities:
            groups.setdefault((finding.kind, finding.summary), []).append(entry.episode_index)
    if not groups:
        lines.append("odd         none")
    else:
        lines.append(
            f"odd         {_count(len(check.odd), 'episode')} with harmless oddities: "
            f"{ranges(check.odd)}"
        )
        for (_, summary), episodes in groups.items():
            lines.append(
                f"  {summary}: {'episode' if len(episodes) == 1 else 'episodes'} {ranges(episodes)}"
            )
    lines.append(
        f"cost        {check.requests} requests, {_size(check.bytes_read)}, {check.seconds:.2f} s"
    )
    return "\n".join(lines)


def sorted_findings(findings: Sequence[CheckFinding]) -> tuple[CheckFinding, ...]:
    """Findings worst first (raises, differs, odd), in the order found within each."""
    rank = {"raises": 0, "differs": 1, "odd": 2}
    return tuple(sorted(findings, key=lambda f: rank[f.outcome]))

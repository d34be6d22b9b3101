"""MP4 layer benchmark: index parse rate, clip planning + writing cost, moov location cost.

Run: ``python -m benchmarks.mp4 [--quick] [--json PATH]``.

- ``parse``: ``parse_moov`` on synthesized ``moov`` boxes (no video) of one hour at 30 fps
  (108,000 samples; one sample per chunk, and 30 per chunk) and of 1,000,000 samples:
  best-of-N time and samples/s;
- ``clip``: on the one-hour index, ``plan_span`` + ``write_clip`` for random 10 s spans (300
  frames, about 1 MB of payload), against a plain copy of the same payload bytes; and for
  every episode-camera of the LeRobot-written fixture, clip building (locate + parse + plan +
  write) against torchcodec decoding the same clip (medians per clip);
- ``locate``: probes and bytes ``locate_moov`` reads for the one-hour file laid out
  faststart and with the moov after a ~470 MB mdat (served virtually: no mdat in memory);
- ``hostile``: worst and 99th-percentile ``parse_moov`` time over mutated moov boxes.
"""

from __future__ import annotations

import argparse
import json
import random
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from tests.support.synthetic_moov import synthetic_moov

from benchmarks._common import add_json_option, put_out
from episodestream.errors import EpisodeStreamError
from episodestream.mp4 import (
    locate_moov,
    parse_moov,
    plan_span,
    walk_boxes,
    write_clip,
)

__all__ = ["main", "run_mp4_bench"]

HOUR_SAMPLES = 30 * 3600
MILLION = 1_000_000
SPAN_S = 10.0
_FIXTURE = Path(__file__).resolve().parents[3] / "tests" / "data" / "lerobot_sim5"


def _best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    best = float("inf")
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def bench_parse(quick: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cases = [("hour_1_per_chunk", HOUR_SAMPLES, 1), ("hour_30_per_chunk", HOUR_SAMPLES, 30)]
    if not quick:
        cases.append(("million_1_per_chunk", MILLION, 1))
    for name, n, per_chunk in cases:
        moov, _ = synthetic_moov(n, samples_per_chunk=per_chunk)
        seconds, index = _best(lambda m=moov: parse_moov(m), 3 if quick else 7)
        assert index.num_samples == n
        out[name] = {
            "samples": n,
            "moov_bytes": len(moov),
            "parse_s": seconds,
            "samples_per_s": n / seconds,
        }
    return out


class _VirtualFile:
    """A file of ftyp + moov + mdat (or ftyp + mdat + moov) whose mdat reads as zeros."""

    def __init__(self, moov: bytes, mdat_payload: int, *, faststart: bool) -> None:
        ftyp = struct.pack(">I4s4sI4s4s", 24, b"ftyp", b"isom", 0x200, b"isom", b"iso2")
        mdat_header = struct.pack(">I4sQ", 1, b"mdat", 16 + mdat_payload)
        order = (
            [ftyp, moov, mdat_header, mdat_payload]
            if faststart
            else [ftyp, mdat_header, mdat_payload, moov]
        )
        self.parts: list[tuple[int, bytes | int]] = []
        pos = 0
        for part in order:
            self.parts.append((pos, part))
            pos += part if isinstance(part, int) else len(part)
        self.size = pos
        self.calls: list[tuple[int, int]] = []

    def read(self, offset: int, length: int) -> bytes:
        self.calls.append((offset, length))
        out = bytearray()
        end = offset + length
        for start, part in self.parts:
            n = part if isinstance(part, int) else len(part)
            lo, hi = max(offset, start), min(end, start + n)
            if lo < hi:
                out += bytes(hi - lo) if isinstance(part, int) else part[lo - start : hi - start]
        return bytes(out)


def bench_locate() -> dict[str, Any]:
    moov, expected = synthetic_moov(HOUR_SAMPLES, samples_per_chunk=30)
    payload = int(expected.sizes.sum())
    out: dict[str, Any] = {"moov_bytes": len(moov), "mdat_bytes": payload}
    for layout, faststart in (("faststart", True), ("tail", False)):
        file = _VirtualFile(moov, payload, faststart=faststart)
        loc = locate_moov(file.read, file.size)
        assert loc.moov == moov and loc.faststart == faststart
        out[layout] = {
            "probes": loc.probes,
            "bytes_read": loc.bytes_read,
            "bytes_read_over_moov": loc.bytes_read / len(moov),
            "reads": file.calls,
        }
    # the LeRobot-written fixture (faststart, small moov), when run from the repository
    files = sorted(_FIXTURE.glob("videos/*/chunk-*/file-*.mp4"))
    if not files:
        out["lerobot_fixture"] = None
        return out
    probes, read, moov_total = 0, 0, 0
    for path in files:
        data = path.read_bytes()
        loc = locate_moov(lambda o, n, d=data: d[o : o + n], len(data))
        probes += loc.probes
        read += loc.bytes_read
        moov_total += len(loc.moov)
    out["lerobot_fixture"] = {
        "files": len(files),
        "probes_per_file": probes / max(len(files), 1),
        "bytes_read_per_file": read / max(len(files), 1),
        "moov_bytes_per_file": moov_total / max(len(files), 1),
    }
    return out


def bench_clip(quick: bool) -> dict[str, Any]:
    moov, _ = synthetic_moov(HOUR_SAMPLES, samples_per_chunk=30)
    index = parse_moov(moov)
    rng = np.random.default_rng(0)
    starts = rng.uniform(0, HOUR_SAMPLES / 30 - SPAN_S - 1, 50 if quick else 300)
    source = bytes(int(index.offsets[-1] + index.sizes[-1]) + 1024)  # the virtual file
    plan_s, write_s, copy_s, payload_bytes = [], [], [], []
    for t0 in starts:
        t = time.perf_counter()
        plan = plan_span(index, float(t0), float(t0) + SPAN_S - 1 / 30)
        t1 = time.perf_counter()
        payload = memoryview(source)[plan.byte_start : plan.byte_end]
        clip = write_clip(index, plan, payload)
        t2 = time.perf_counter()
        copied = bytes(payload)
        t3 = time.perf_counter()
        assert len(clip) > len(copied) == plan.byte_length
        plan_s.append(t1 - t)
        write_s.append(t2 - t1)
        copy_s.append(t3 - t2)
        payload_bytes.append(plan.byte_length)
    # medians: this machine is shared, and a median per clip shrugs off the spikes
    plan_med, write_med, copy_med = (float(np.median(x)) for x in (plan_s, write_s, copy_s))
    out: dict[str, Any] = {
        "hour_index": {
            "clips": len(starts),
            "frames_per_clip": int(SPAN_S * 30),
            "payload_bytes_per_clip": float(np.mean(payload_bytes)),
            "plan_s_per_clip": plan_med,
            "write_s_per_clip": write_med,
            "payload_copy_s_per_clip": copy_med,
            "plan_plus_write_over_payload_copy": (plan_med + write_med) / copy_med,
        }
    }
    out["lerobot_fixture"] = _clip_vs_decode() if _FIXTURE.is_dir() else None
    return out


def _clip_vs_decode() -> dict[str, Any]:
    """Per episode-camera of the LeRobot fixture: building the clip vs decoding it."""
    import pyarrow.parquet as pq
    from torchcodec.decoders import VideoDecoder

    info = json.loads((_FIXTURE / "meta" / "info.json").read_text())
    rows = []
    for path in sorted((_FIXTURE / "meta" / "episodes").rglob("*.parquet")):
        rows += pq.read_table(path).to_pylist()
    keys = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    build_s, decode_s = [], []
    frames = 0
    for key in keys:
        for row in rows:
            path = _FIXTURE / info["video_path"].format(
                video_key=key,
                chunk_index=row[f"videos/{key}/chunk_index"],
                file_index=row[f"videos/{key}/file_index"],
            )
            data = path.read_bytes()
            t = time.perf_counter()
            loc = locate_moov(lambda o, n, d=data: d[o : o + n], len(data))
            index = parse_moov(loc.moov)
            t0 = row[f"videos/{key}/from_timestamp"]
            plan = plan_span(index, t0, row[f"videos/{key}/to_timestamp"] - 1 / info["fps"])
            clip = write_clip(index, plan, data[plan.byte_start : plan.byte_end])
            t1 = time.perf_counter()
            decoder = VideoDecoder(clip)
            decoder.get_frames_in_range(0, len(decoder))
            t2 = time.perf_counter()
            build_s.append(t1 - t)
            decode_s.append(t2 - t1)
            frames += plan.frame_count
    build, decode = float(np.median(build_s)), float(np.median(decode_s))
    return {
        "clips": len(build_s),
        "frames": frames,
        "build_s_per_clip": build,
        "decode_s_per_clip": decode,
        "build_over_decode": build / decode,
    }


def bench_hostile(quick: bool) -> dict[str, Any]:
    base, _ = synthetic_moov(3000, samples_per_chunk=7, bframes=3)
    fields = [b.start for b in walk_boxes(base)]
    fields += [b.payload_start + 4 for b in walk_boxes(base) if b.type.startswith("st")]
    rng = random.Random(0)
    times = []
    outcomes = {"parsed": 0, "rejected": 0}
    for _ in range(300 if quick else 3000):
        moov = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            offset = rng.choice(fields) if rng.random() < 0.5 else rng.randrange(len(moov) - 4)
            value = rng.choice([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, rng.getrandbits(32)])
            moov[offset : offset + 4] = value.to_bytes(4, "big")
        data = bytes(moov)
        t = time.perf_counter()
        try:
            parse_moov(data)
            outcomes["parsed"] += 1
        except EpisodeStreamError:
            outcomes["rejected"] += 1
        times.append(time.perf_counter() - t)
    arr = np.array(times)
    clean, _ = _best(lambda: parse_moov(base), 5)
    return {
        "inputs": len(times),
        "input_bytes": len(base),
        **outcomes,
        "max_s": float(arr.max()),
        "p99_s": float(np.percentile(arr, 99)),
        "max_over_clean_parse": float(arr.max()) / clean,
    }


def run_mp4_bench(*, quick: bool = False) -> dict[str, Any]:
    """All figures of the MP4 layer benchmark (see the module docstring)."""
    return {
        "parse": bench_parse(quick),
        "clip": bench_clip(quick),
        "locate": bench_locate(),
        "hostile": bench_hostile(quick),
    }


def _print(report: dict[str, Any]) -> None:
    for name, r in report["parse"].items():
        print(
            f"parse {name:22s} {r['samples']:>9,} samples  moov {r['moov_bytes'] / 1e6:6.2f} MB"
            f"  {r['parse_s'] * 1e3:7.1f} ms  {r['samples_per_s'] / 1e6:6.1f} M samples/s"
        )
    h = report["clip"]["hour_index"]
    print(
        f"clip  one-hour index, {h['clips']} x {h['frames_per_clip']} frames, "
        f"{h['payload_bytes_per_clip'] / 1e6:.2f} MB payload: plan {h['plan_s_per_clip'] * 1e3:.2f}"
        f" ms + write {h['write_s_per_clip'] * 1e3:.2f} ms = "
        f"{h['plan_plus_write_over_payload_copy']:.1f} x a copy of the payload"
    )
    f = report["clip"]["lerobot_fixture"] or {}
    if f:
        print(
            f"clip  LeRobot fixture, {f['clips']} episode-cameras: build "
            f"{f['build_s_per_clip'] * 1e3:.2f} ms, torchcodec decode "
            f"{f['decode_s_per_clip'] * 1e3:.2f} ms per clip: build / decode = "
            f"{f['build_over_decode']:.3f}"
        )
    loc = report["locate"]
    for layout in ("faststart", "tail"):
        r = loc[layout]
        print(
            f"locate {layout:9s} moov {loc['moov_bytes']:,} B: {r['probes']} probes, "
            f"{r['bytes_read']:,} B read = {r['bytes_read_over_moov']:.3f} x moov"
        )
    fx = loc["lerobot_fixture"]
    if fx:
        print(
            f"locate LeRobot fixture: {fx['probes_per_file']:.1f} probes, "
            f"{fx['bytes_read_per_file']:,.0f} B per file (moov "
            f"{fx['moov_bytes_per_file']:,.0f} B)"
        )
    hs = report["hostile"]
    print(
        f"hostile {hs['inputs']} mutated {hs['input_bytes']:,} B moovs ({hs['parsed']} parsed, "
        f"{hs['rejected']} rejected): worst {hs['max_s'] * 1e3:.2f} ms, p99 "
        f"{hs['p99_s'] * 1e3:.2f} ms = {hs['max_over_clean_parse']:.1f} x a clean parse"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats and clips")
    add_json_option(parser)
    args = parser.parse_args(argv)
    report = run_mp4_bench(quick=args.quick)
    _print(report)
    return put_out(report, args.json, default=str)


if __name__ == "__main__":
    raise SystemExit(main())

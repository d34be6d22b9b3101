"""HeapTrimmer: glibc's malloc_trim found where it exists, called at most once per interval,
free heap pages really handed back, and DecoderPool asking for a trim when it closes decoders."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from episodestream.decode import DecoderPool, HeapTrimmer, heap_trimmer, open_decoder
from episodestream.decode._heap import _glibc_malloc_trim
from episodestream.errors import ConfigError
from tests.support.forking import reply_from_fork

ON_GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


def test_the_process_trimmer_is_available_exactly_on_glibc() -> None:
    assert heap_trimmer().available is ON_GLIBC
    assert (_glibc_malloc_trim() is not None) is ON_GLIBC


def test_trims_at_most_once_per_interval_and_not_when_disabled() -> None:
    trim = _glibc_malloc_trim()
    if trim is None:
        assert not ON_GLIBC
        trimmer = HeapTrimmer(trim=None)
        assert not trimmer.maybe_trim()
        assert not trimmer.trim_now()
        trimmer.enabled = True  # cannot be turned on without a malloc_trim
        assert not trimmer.enabled
        return
    trimmer = HeapTrimmer(min_interval_s=3600, trim=trim)
    assert trimmer.enabled
    assert trimmer.maybe_trim()
    assert not trimmer.maybe_trim()  # within the hour
    assert trimmer.trim_now()  # asked outright: trims whenever the last trim was
    assert not trimmer.maybe_trim()
    stats = trimmer.stats()
    assert (stats.trims, stats.available, stats.enabled) == (2, True, True)
    assert stats.seconds >= 0
    every_time = HeapTrimmer(min_interval_s=0, max_cpu_share=1e9, trim=trim)
    every_time.enabled = False
    assert not every_time.maybe_trim()
    assert not every_time.trim_now()
    every_time.enabled = True
    assert every_time.maybe_trim()
    assert every_time.maybe_trim()
    assert every_time.stats().trims == 2


def test_rejects_bad_settings() -> None:
    with pytest.raises(ConfigError):
        HeapTrimmer(min_interval_s=-1)
    with pytest.raises(ConfigError):
        HeapTrimmer(max_cpu_share=0)


_FRAGMENTED_HEAP = textwrap.dedent(
    """
    import ctypes, psutil
    from episodestream.decode._heap import _glibc_malloc_trim
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    libc.mallopt(-3, 64 << 20)  # M_MMAP_THRESHOLD: blocks of 1 MiB come from the heap
    blocks = [libc.malloc(1 << 20) for _ in range(128)]
    for block in blocks:
        ctypes.memset(block, 1, 1 << 20)  # touch every page
    for block in blocks[:-1:2]:  # every other block freed, the last kept: no top to trim
        libc.free(block)
    process = psutil.Process()
    before = process.memory_info().rss
    assert _glibc_malloc_trim()(0) == 1  # 1: memory was released
    print((before - process.memory_info().rss) / (1 << 20))
    """
)


@pytest.mark.skipif(not ON_GLIBC, reason="malloc_trim is glibc's; elsewhere nothing is trimmed")
def test_trim_hands_back_the_free_pages_between_live_blocks() -> None:
    # a child process: the fixed mmap threshold must not leak into the test session
    out = subprocess.run(
        [sys.executable, "-c", _FRAGMENTED_HEAP], capture_output=True, text=True, check=True
    )
    released_mib = float(out.stdout.strip())
    assert released_mib >= 56  # 64 MiB freed between live blocks, less what malloc reuses


def test_decoder_pool_trims_when_it_closes_decoders(lerobot_fixture_root: Path) -> None:
    clip = next((lerobot_fixture_root / "videos").glob("*/chunk-000/*.mp4")).read_bytes()
    trim = _glibc_malloc_trim()
    trimmer = HeapTrimmer(min_interval_s=0, max_cpu_share=1e9, trim=trim)
    with DecoderPool(max_decoders=1, trimmer=trimmer) as pool:
        with pool.lease("a", lambda: open_decoder(clip, name="a")) as decoder:
            assert decoder.frames_at([0.0]).shape[0] == 1
        assert trimmer.stats().trims == 0  # back idle, nothing closed
        with pool.lease("b", lambda: open_decoder(clip, name="b")):
            pass
        assert pool.stats().evictions == 1  # "a" closed to stay within one decoder
        assert trimmer.stats().trims == (1 if ON_GLIBC else 0)
        assert pool.discard("b") == 1
        assert trimmer.stats().trims == (2 if ON_GLIBC else 0)


def test_a_forked_child_may_trim_at_once_whatever_its_parent_did() -> None:
    trimmer = heap_trimmer()
    trimmer.maybe_trim()
    assert not trimmer.maybe_trim()  # the parent: not due again for a while

    def child() -> str:  # its CPU clock starts afresh, and so does the trimmer
        trimmed = heap_trimmer().maybe_trim()
        return f"{trimmed} {heap_trimmer().stats().trims}"

    reply = reply_from_fork(child)
    assert reply == ("True 1" if ON_GLIBC else "False 0")


_TRIMMER_STATE = (
    "from episodestream.decode import heap_trimmer; "
    "t = heap_trimmer(); print(t.available, t.enabled, t.maybe_trim())"
)


@pytest.mark.parametrize(("value", "enabled"), [("0", False), ("off", False), ("1", True)])
def test_the_environment_switch_turns_the_process_trimmer_off(value: str, enabled: bool) -> None:
    # a fresh interpreter, as a spawn or forkserver DataLoader worker is: the switch is read
    # when the process's trimmer is created
    env = {**os.environ, "EPISODESTREAM_HEAP_TRIM": value}
    out = subprocess.run(
        [sys.executable, "-c", _TRIMMER_STATE], capture_output=True, text=True, check=True, env=env
    )
    on = enabled and ON_GLIBC
    assert out.stdout.split() == [str(ON_GLIBC), str(on), str(on)]

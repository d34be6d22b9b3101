"""DecoderPool: LRU bounds by count and bytes, exclusive leases across threads, discard, close."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from episodestream.decode import DecoderPool, open_decoder
from episodestream.errors import DecodeError, FrameNotFoundError


@pytest.fixture(scope="module")
def clips(lerobot_fixture_root: Path) -> dict[str, bytes]:
    """The nine LeRobot MP4s (3 cameras x 3 files), keyed 'camera/file'."""
    out = {}
    for path in sorted((lerobot_fixture_root / "videos").glob("*/chunk-000/*.mp4")):
        out[f"{path.parent.parent.name.rsplit('.', 1)[-1]}/{path.stem}"] = path.read_bytes()
    assert len(out) == 9
    return out


class _Opener:
    """Opens real decoders and remembers each one, to check what the pool closed."""

    def __init__(self, clips: dict[str, bytes]) -> None:
        self.clips = clips
        self.opened: list = []
        self.lock = threading.Lock()

    def __call__(self, key: str):
        def open_fn():
            decoder = open_decoder(self.clips[key], name=key)
            with self.lock:
                self.opened.append(decoder)
            return decoder

        return open_fn

    def open_count(self) -> int:
        return sum(not d.closed for d in self.opened)


def test_reuses_idle_decoders_and_evicts_least_recently_used_by_count(
    clips: dict[str, bytes],
) -> None:
    opener = _Opener(clips)
    keys = list(clips)
    with DecoderPool(max_decoders=3) as pool:
        for key in keys[:3]:
            with pool.lease(key, opener(key)) as decoder:
                assert decoder.name == key
        with pool.lease(keys[0], opener(keys[0])) as decoder:  # hit; keys[0] now most recent
            assert decoder is opener.opened[0]
        with pool.lease(keys[3], opener(keys[3])):  # evicts keys[1], the least recently used
            pass
        stats = pool.stats()
        assert (stats.opens, stats.hits, stats.evictions, stats.decoders) == (4, 1, 1, 3)
        assert opener.opened[1].closed and not opener.opened[0].closed
        assert opener.open_count() == len(pool) == 3
        assert stats.peak_decoders == 4  # the new decoder is opened before the eviction
    assert opener.open_count() == 0  # closing the pool closed every idle decoder


def test_bytes_bound_is_kept_and_counts_decoder_nbytes(clips: dict[str, bytes]) -> None:
    opener = _Opener(clips)
    keys = list(clips)
    with open_decoder(clips[keys[0]]) as probe:
        one = probe.nbytes
    sizes = []
    with DecoderPool(max_decoders=100, max_bytes=int(2.5 * one)) as pool:
        for key in keys:
            with pool.lease(key, opener(key)):
                pass
            stats = pool.stats()
            sizes.append(stats.bytes)
            assert stats.bytes <= pool.max_bytes
            assert stats.bytes == sum(d.nbytes for d in opener.opened if not d.closed)
        assert pool.stats().evictions == len(keys) - len(pool)
        assert 1 <= len(pool) <= 3


def test_leased_decoders_are_never_evicted_and_bounds_recover(clips: dict[str, bytes]) -> None:
    opener = _Opener(clips)
    keys = list(clips)[:4]
    with DecoderPool(max_decoders=2) as pool:
        leases = [pool.lease(key, opener(key)) for key in keys]
        decoders = [lease.__enter__() for lease in leases]
        assert len(pool) == 4 and all(not d.closed for d in decoders)  # over the bound while leased
        for lease in leases:
            lease.__exit__(None, None, None)
        assert len(pool) == 2
        assert [d.closed for d in decoders] == [True, True, False, False]


def test_same_key_from_two_holders_gets_two_decoders(clips: dict[str, bytes]) -> None:
    opener = _Opener(clips)
    key = next(iter(clips))
    with DecoderPool() as pool:
        with pool.lease(key, opener(key)) as first, pool.lease(key, opener(key)) as second:
            assert first is not second
        with pool.lease(key, opener(key)) as third:
            assert third in (first, second)
        assert pool.stats().opens == 2


def test_errors_during_a_lease_close_the_decoder_except_frame_not_found(
    clips: dict[str, bytes],
) -> None:
    opener = _Opener(clips)
    key = next(iter(clips))
    with DecoderPool() as pool:
        with pytest.raises(FrameNotFoundError), pool.lease(key, opener(key)) as decoder:
            decoder.frames_at([99.0])
        assert not decoder.closed and len(pool) == 1  # a miss leaves the decoder healthy
        with pytest.raises(RuntimeError), pool.lease(key, opener(key)) as again:
            assert again is decoder
            raise RuntimeError("caller failed mid-use")
        assert decoder.closed and len(pool) == 0 and pool.stats().discarded == 1


def test_open_errors_propagate_and_leave_nothing_behind(clips: dict[str, bytes]) -> None:
    with DecoderPool() as pool:
        with pytest.raises(DecodeError, match="broken clip"):
            pool.lease("x", lambda: open_decoder(b"garbage" * 10, name="broken clip"))
        assert pool.stats().decoders == 0 and pool.stats().leased == 0


def test_discard_closes_idle_now_and_leased_on_release(clips: dict[str, bytes]) -> None:
    opener = _Opener(clips)
    key, other = list(clips)[:2]
    with DecoderPool() as pool:
        with pool.lease(key, opener(key)):
            pass
        idle = opener.opened[0]
        with pool.lease(key, opener(key)) as held, pool.lease(other, opener(other)):
            assert held is idle
            with pool.lease(key, opener(key)):
                pass  # a second decoder for key, now idle
            assert pool.discard(key) == 1  # the idle one; `held` is in use
            assert not held.closed
        assert held.closed  # closed when its lease ended
        assert len(pool) == 1  # only `other` remains
        with pool.lease(key, opener(key)) as fresh:
            assert fresh is not held and not fresh.closed


def test_closed_pool_refuses_leases_and_closes_leased_on_release(clips: dict[str, bytes]) -> None:
    opener = _Opener(clips)
    key = next(iter(clips))
    pool = DecoderPool()
    lease = pool.lease(key, opener(key))
    decoder = lease.__enter__()
    pool.close()
    assert not decoder.closed
    lease.__exit__(None, None, None)
    assert decoder.closed
    with pytest.raises(DecodeError, match="closed"):
        pool.lease(key, opener(key))
    with pytest.raises(ValueError):
        DecoderPool(max_decoders=0)


def test_concurrent_leases_are_exclusive_and_frames_correct(clips: dict[str, bytes]) -> None:
    """Six threads lease decoders for three keys and decode random frames: a decoder is never
    held by two threads at once, every frame equals a single-threaded decode, the bound holds
    whenever no more leases than the bound are outstanding."""
    keys = list(clips)[:3]
    expected = {}
    for key in keys:
        with open_decoder(clips[key]) as decoder:
            expected[key] = (decoder.frame_times(), decoder.frames_at(decoder.frame_times()))
    opener = _Opener(clips)
    holders: Counter[int] = Counter()
    guard = threading.Lock()
    failures: list[str] = []
    pool: DecoderPool[str] = DecoderPool(max_decoders=6)

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        for _ in range(25):
            key = keys[int(rng.integers(len(keys)))]
            times, frames = expected[key]
            pick = rng.choice(len(times), size=3)
            with pool.lease(key, opener(key)) as decoder:
                with guard:
                    holders[id(decoder)] += 1
                    if holders[id(decoder)] != 1:
                        failures.append(f"decoder {decoder.name} held twice")
                try:
                    got = decoder.frames_at(times[pick])
                finally:
                    with guard:
                        holders[id(decoder)] -= 1
            if not torch.equal(got, frames[torch.from_numpy(pick)]):
                failures.append(f"wrong frames for {key}")

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    stats = pool.stats()
    assert stats.hits + stats.opens == 6 * 25
    assert stats.leased == 0 and stats.decoders <= 6
    assert stats.hits > stats.opens  # decoders were reused
    pool.close()
    assert opener.open_count() == 0

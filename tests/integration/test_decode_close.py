"""A decoder's close(): of threads closing it at once, exactly one frees its state."""

from __future__ import annotations

import threading
from pathlib import Path

from episodestream.decode import PyAVDecoder


class _CountingDecoder(PyAVDecoder):
    releases = 0

    def _release(self) -> None:
        type(self).releases += 1
        super()._release()


def test_threads_closing_a_decoder_at_once_free_it_once(lerobot_fixture_root: Path) -> None:
    clip = next((lerobot_fixture_root / "videos").glob("*/chunk-000/*.mp4")).read_bytes()
    for _ in range(20):
        _CountingDecoder.releases = 0
        decoder = _CountingDecoder(clip, name="clip")
        assert decoder.frames_at([0.0]).shape[0] == 1
        start = threading.Barrier(8)

        def close(decoder: PyAVDecoder = decoder, start: threading.Barrier = start) -> None:
            start.wait()
            decoder.close()

        threads = [threading.Thread(target=close) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert decoder.closed
        assert _CountingDecoder.releases == 1

"""Decoders are opened on one thread of the dataset's own (``episodestream-open``), never on
the decode threads or the caller: torchcodec leaks a few small heap blocks per open, which on
the decode threads pinned pages among the frame buffers (docs/BENCHMARKS.md, "Memory over 50
passes"). A wait for an open is bounded, and a decoder opened after its caller gave up is
closed."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import episodestream.datasets._engine as engine_module
from episodestream import EpisodePoolDataset, EpisodeStreamDataset
from episodestream.errors import DecodeError, EpisodeStreamError
from tests.support.threads import episodestream_threads

TOTAL_FRAMES = 104  # synthetic_av1: 6 episodes of 8..20 frames, 2 cameras


def _recording_opens(monkeypatch: pytest.MonkeyPatch, delay_s: float = 0.0) -> list[Any]:
    """Wraps the engine's open_decoder: each open's thread name and decoder, in order."""
    opens: list[Any] = []
    real = engine_module.open_decoder

    def recorded(*args: Any, **kwargs: Any) -> Any:
        time.sleep(delay_s)
        decoder = real(*args, **kwargs)
        opens.append((threading.current_thread().name, decoder))
        return decoder

    monkeypatch.setattr(engine_module, "open_decoder", recorded)
    return opens


@pytest.mark.parametrize("decode_threads", [0, 2])
def test_the_pool_opens_every_decoder_on_its_open_thread(
    synthetic_av1: Path, datasets_cache_dir: Path, monkeypatch: pytest.MonkeyPatch, decode_threads
) -> None:
    opens = _recording_opens(monkeypatch)
    before = episodestream_threads()
    with EpisodePoolDataset(
        synthetic_av1,
        cache_dir=datasets_cache_dir,
        pool_size=3,
        decode_threads=decode_threads,
        image_dtype="uint8",
    ) as dataset:
        assert len(list(dataset)) == TOTAL_FRAMES
        assert len(list(dataset)) == TOTAL_FRAMES  # a second pass: the same kept thread
        assert "episodestream-open-0" in {t.name for t in episodestream_threads() - before}
    # two passes, each camera of each episode once (two decode threads that want one camera
    # at the same moment may each open it)
    assert len(opens) == 2 * 2 * 6 if decode_threads == 0 else len(opens) >= 2 * 2 * 6
    assert {name for name, _ in opens} == {"episodestream-open-0"}
    assert all(decoder.closed for _, decoder in opens)  # close() closed every one
    assert episodestream_threads() - before == set()  # and joined the open thread


def test_the_map_style_dataset_opens_on_its_open_thread_not_the_caller(
    synthetic_av1: Path, datasets_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opens = _recording_opens(monkeypatch)
    with EpisodeStreamDataset(synthetic_av1, cache_dir=datasets_cache_dir) as dataset:
        first = dataset[0]
        assert first["observation.images.cam_high"].shape[0] == 3
    assert [name for name, _ in opens] == ["episodestream-open-0"] * 2  # two cameras


def test_an_open_past_its_timeout_is_a_typed_error_and_its_decoder_is_closed(
    synthetic_av1: Path, datasets_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opens = _recording_opens(monkeypatch, delay_s=1.5)
    monkeypatch.setattr(engine_module, "OPEN_TIMEOUT_S", 0.3)
    with EpisodeStreamDataset(synthetic_av1, cache_dir=datasets_cache_dir) as dataset:
        with pytest.raises(
            DecodeError,
            match=r"episode 0 / observation\.images\.\w+: decoder not "
            r"opened within 0\.3 s",
        ):
            dataset[0]
        # the open finishes after the caller gave up; its decoder is then closed, unleased
        deadline = time.monotonic() + 10
        while not (opens and opens[0][1].closed) and time.monotonic() < deadline:
            time.sleep(0.05)
        ((thread, decoder),) = opens
        assert thread == "episodestream-open-0"
        assert decoder.closed
        assert dataset.metrics()["decoders"].decoders == 0


def test_closing_while_opens_are_queued_ends_every_wait_at_once(
    synthetic_av1: Path, datasets_cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _recording_opens(monkeypatch, delay_s=1.0)
    submitted: list[str] = []
    real_submit = engine_module.StreamEngine._open_on_own_thread

    def counted(self: Any, open_clip: Any, name: str) -> Any:
        submitted.append(name)
        return real_submit(self, open_clip, name)

    monkeypatch.setattr(engine_module.StreamEngine, "_open_on_own_thread", counted)
    before = episodestream_threads()
    dataset = EpisodeStreamDataset(synthetic_av1, cache_dir=datasets_cache_dir)
    dataset[0]  # the engine, its open thread and episode 0's decoders exist
    errors: list[BaseException] = []

    def sample(index: int) -> None:
        try:
            dataset[index]
        except BaseException as error:  # collected for the assertions below
            errors.append(error)

    # two other episodes at once: one open runs on the open thread, the other waits in its queue
    callers = [threading.Thread(target=sample, args=(i,)) for i in (30, 60)]
    for caller in callers:
        caller.start()
    deadline = time.monotonic() + 10
    while len(submitted) < 4 and time.monotonic() < deadline:  # 2 cameras of episode 0, then 2
        time.sleep(0.01)
    assert len(submitted) == 4, submitted
    time.sleep(0.2)  # into the queue; the running open still has most of its second to go
    # not the open timeout (60 s): the queued open ends with the close, the running one with it
    deadline = time.monotonic() + 5
    dataset.close()
    for caller in callers:
        caller.join(max(0.0, deadline - time.monotonic()))
    assert not any(caller.is_alive() for caller in callers)
    assert len(errors) == 2 and all(isinstance(e, EpisodeStreamError) for e in errors), errors
    assert any("closed while its decoder opened" in str(e) for e in errors), errors
    assert episodestream_threads() - before == set()

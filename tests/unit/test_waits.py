"""``result_within``: a bounded wait whose own timeout never hides the work's errors."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor, wait

import pytest

from episodestream.datasets._waits import result_within
from episodestream.errors import DecodeError, StorageTimeout


def _late() -> DecodeError:
    return DecodeError("sample 7 was not decoded within 0.2 s")


def test_a_done_future_gives_its_result() -> None:
    future: Future[int] = Future()
    future.set_result(41)
    assert result_within(future, 0.0, _late) == 41


def test_a_result_that_comes_while_waiting_is_returned() -> None:
    future: Future[str] = Future()
    timer = threading.Timer(0.05, future.set_result, args=("frame",))
    timer.start()
    try:
        assert result_within(future, 10.0, _late) == "frame"
    finally:
        timer.join()


class _BoundRecorded(Future):  # type: ignore[type-arg]
    """Records the bound each wait on it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def exception(self, timeout: float | None = None) -> BaseException | None:
        self.waits.append(timeout)
        return super().exception(timeout)


def test_the_wait_running_out_raises_the_callers_error() -> None:
    future = _BoundRecorded()
    with pytest.raises(DecodeError, match="not decoded within") as caught:
        result_within(future, 0.2, _late)
    assert future.waits == [0.2]  # one wait, bounded by the caller's limit, then the error
    assert not future.done()
    assert caught.value.__suppress_context__  # not chained to the wait's own TimeoutError


@pytest.mark.parametrize("already_done", [True, False])
def test_the_works_own_timeout_passes_through_unchanged(already_done: bool) -> None:
    # a StorageTimeout is a TimeoutError: it must not read as this wait running out
    own = StorageTimeout("rows.parquet bytes 0-99: no byte within 5 s")
    release = threading.Event()

    def work() -> None:
        release.wait(10)
        raise own

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(work)
        if already_done:
            release.set()
            assert wait([future], timeout=10).done
        else:
            threading.Timer(0.05, release.set).start()
        with pytest.raises(StorageTimeout) as caught:
            result_within(future, 10.0, _late)
    assert caught.value is own


class _SeenPendingOnce(Future):  # type: ignore[type-arg]
    """Done already, but reported pending to the first ``done()``: the waiting path runs
    whatever the timing."""

    def __init__(self) -> None:
        super().__init__()
        self._asked = False

    def done(self) -> bool:
        if not self._asked:
            self._asked = True
            return False
        return super().done()


def test_the_works_own_timeout_passes_through_the_waiting_path() -> None:
    own = StorageTimeout("rows.parquet bytes 0-99: no byte within 5 s")
    future = _SeenPendingOnce()
    future.set_exception(own)
    with pytest.raises(StorageTimeout) as caught:
        result_within(future, 10.0, _late)
    assert caught.value is own and future._asked


def test_a_result_through_the_waiting_path_is_returned() -> None:
    future = _SeenPendingOnce()
    future.set_result("frame")
    assert result_within(future, 10.0, _late) == "frame"
    assert future._asked


@pytest.mark.parametrize("while_waiting", [False, True])
def test_a_cancelled_future_raises_cancelled(while_waiting: bool) -> None:
    future: Future[int] = Future()
    if while_waiting:
        timer = threading.Timer(0.05, future.cancel)
        timer.start()
    else:
        assert future.cancel()
    # CancelledError, not the caller's DecodeError: the cancel ended the wait, not the bound
    with pytest.raises(CancelledError):
        result_within(future, 10.0, _late)
    if while_waiting:
        timer.join()

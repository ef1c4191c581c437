"""The one tick schedule (dltop/live/schedule.py), on a fake clock: every loop that ticks keeps to it."""

from __future__ import annotations

import threading

from dltop.live.schedule import FRAME_S, REFRESH_S, WINDOW_S, ticks, ticks_in_window


class FakeClock:
    """A monotonic clock that moves only when a tick's work or a wait moves it."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeStop(threading.Event):
    """``wait`` advances the fake clock instead of sleeping."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    def wait(self, timeout=None) -> bool:
        self.clock.now += timeout or 0.0
        return self.is_set()


def run(interval: float, work: list, duration=None, stop_after=None) -> list:
    """The clock's reading at each tick, each tick's work taking the next of ``work`` seconds."""
    clock = FakeClock()
    stop = FakeStop(clock)
    seen = []
    for i, final in enumerate(ticks(interval, stop, clock, duration)):
        seen.append((round(clock.now, 3), final))
        clock.now += work[i % len(work)]
        if stop_after is not None and len(seen) >= stop_after:
            stop.set()
    return seen


def test_ticks_keep_to_the_grid_whatever_each_tick_costs():
    times = [t for t, _ in run(1.0, [0.3, 0.7, 0.1], stop_after=5)]
    assert times == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_a_tick_that_overruns_is_followed_at_once_and_the_grid_restarts_there():
    times = [t for t, _ in run(1.0, [2.5, 0.1, 0.1], stop_after=4)]
    assert times == [0.0, 2.5, 3.5, 4.5]


def test_a_fixed_duration_ends_on_a_final_tick_at_its_end():
    assert run(1.0, [0.2], duration=3.0) == [(0.0, False), (1.0, False), (2.0, False), (3.0, True)]
    # an interval longer than the duration: the start, then the end
    assert run(5.0, [0.2], duration=2.0) == [(0.0, False), (2.0, True)]


def test_stop_ends_the_ticks():
    assert len(run(1.0, [0.1], stop_after=2)) == 2


def test_a_diagnosis_looks_back_120_s_whatever_the_interval():
    """The live view at htop's 1.5 s, the recorder at 1 s and the exporter at 5 s judge the same
    span; a slow interval still keeps two ticks (rates need one before them)."""
    assert (REFRESH_S, FRAME_S, WINDOW_S) == (1.5, 1.0, 120.0)
    assert [ticks_in_window(s) for s in (REFRESH_S, FRAME_S, 5.0, 0.7, 300.0)] == [80, 120, 24, 172, 2]

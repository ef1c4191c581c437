"""The Window one diagnosis judges: a tick's figures worked out once in the tick's life, the
capacity model once per diagnosis, and nothing kept after the tick is gone."""

from __future__ import annotations

import dataclasses
import gc

from dltop.diagnose import capacity, diagnose, window
from dltop.diagnose.memory import memory_points
from dltop.diagnose.window import MemoryReadings, Window
from dltop.model import Snapshot
from dltop.settings import Settings
from tests.windows import bound_window


def fresh_ticks(count: int) -> list[Snapshot]:
    """``count`` distinct Snapshot objects, as a live collector gives them."""
    return [dataclasses.replace(snap) for snap in bound_window(80.0, ticks=count)]


def test_a_ticks_figures_are_worked_out_once_in_its_life():
    ticks = fresh_ticks(4)
    seen: list[int] = []

    def figure(tick: Snapshot, scale: int) -> int:
        seen.append(id(tick))
        return scale * len(tick.processes)

    assert Window(ticks[:3]).per_tick(figure, 2) == [6, 6, 6]
    assert Window(ticks[1:]).per_tick(figure, 2) == [6, 6, 6]  # the next tick's window: one new tick
    assert seen == [id(t) for t in ticks]
    Window(ticks).per_tick(figure, 3)  # other arguments: another figure
    assert len(seen) == 8


def test_a_ticks_figures_leave_with_it():
    ticks = fresh_ticks(3)
    diagnose(ticks)
    kept = [id(tick) for tick in ticks]
    assert all(key in window._TICK_FIGURES for key in kept)
    del ticks
    gc.collect()
    assert not any(key in window._TICK_FIGURES for key in kept)


def test_the_rules_of_one_diagnosis_share_one_capacity_model(monkeypatch):
    built: list[int] = []
    real = capacity.capacity

    def counted(win: Window, loader, settings: Settings):
        built.append(loader.trainer_pid)
        return real(win, loader, settings)

    monkeypatch.setattr(capacity, "capacity", counted)
    # input-bound, too-many-workers and cpu-oversubscribed all read it
    ticks = bound_window(40.0, workers=4, cpu=40.0, cpu_wait=30.0, cpus_allowed=2.0, trainer_cpu=40.0)
    assert {"input-bound", "cpu-oversubscribed"} <= {f.id for f in diagnose(ticks)}
    assert built == [1]


def test_a_steps_figure_is_worked_out_once_while_its_tick_follows_the_same_one():
    ticks = fresh_ticks(4)
    seen: list[tuple[int, int]] = []

    def figure(previous: Snapshot, tick: Snapshot) -> int:
        seen.append((id(previous), id(tick)))
        return len(seen)

    assert Window(ticks[:3]).per_step(figure) == [1, 2]
    assert Window(ticks[1:]).per_step(figure) == [2, 3]  # the window slid: one new step
    assert Window([ticks[0], ticks[2]]).per_step(figure) == [4]  # another tick before it: a new step


def test_memory_points_walk_the_readings_that_changed():
    """A repeat, a gap (not read, or not there) and the same reading after it start no point; USS
    where the window has any, else RSS; the times are the window's, from its first tick."""
    uss = [1, 1, "gone", None, 1, 2, 2, 3]  # worker 10
    rss = [5, 5, 6, 6, None, 6, 7, 7]  # worker 11: no USS read
    ticks = []
    for i, snap in enumerate(fresh_ticks(len(uss))):
        trainer, first, second = snap.processes
        there = [] if uss[i] == "gone" else [dataclasses.replace(first, uss_bytes=uss[i])]
        ticks.append(
            dataclasses.replace(
                snap, processes=[trainer, *there, dataclasses.replace(second, uss_bytes=None, rss_bytes=rss[i])]
            )
        )
    assert memory_points(Window(ticks), {10, 11, 12}) == {
        10: [(0.0, 1), (5.0, 2), (7.0, 3)],
        11: [(0.0, 5), (2.0, 6), (6.0, 7)],
        12: [],
    }
    assert memory_points(Window(ticks[5:]), {10, 11}) == {10: [(0.0, 2), (2.0, 3)], 11: [(0.0, 6), (1.0, 7)]}


def test_memory_readings_keep_each_process_s_changes_for_their_span():
    """Changed USS readings only, for ``kept_s``; a process gone from a tick is dropped, and a
    pid that comes back as another process (another start) starts anew."""
    uss = [1, 1, 2, 2, 3, 3, 3, 4]
    memory = MemoryReadings(kept_s=4.0)
    for i, snap in enumerate(fresh_ticks(len(uss))):
        trainer, first, second = snap.processes
        second = dataclasses.replace(second, started_at="later" if i >= 6 else None, uss_bytes=7)
        processes = [trainer, dataclasses.replace(first, uss_bytes=uss[i])] + ([second] if i != 3 else [])
        memory.add(dataclasses.replace(snap, processes=processes))
    assert memory.of(10) == [(3.0, 3), (0.0, 4)]  # read at 4 and 7 s; the reading at 2 s is over 4 s old
    assert memory.of(11) == [(1.0, 7)]  # gone at 3 s, back at 4 s, another process at 6 s
    assert memory.of(12) == []

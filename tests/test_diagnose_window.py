"""The Window one diagnosis judges: a tick's figures worked out once in the tick's life, the
capacity model once per diagnosis, and nothing kept after the tick is gone."""

from __future__ import annotations

import dataclasses
import gc

from dltop.diagnose import capacity, diagnose, window
from dltop.diagnose.window import Window
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

"""The window one diagnosis judges: its ticks (Snapshots, oldest first) and every figure the rules
read from them, each worked out once. ``diagnose`` and ``pending`` build one Window from the
ticks they are given and hand it to every rule, so the rules of one diagnosis share it.

Three lifetimes, all kept here and nowhere else:

* a figure of one tick alone (``per_tick``) lives as long as that tick: the live loop judges a
  120 s window every tick (80 ticks at its 1.5 s), so a tick's figures are worked out when it
  arrives and read back by the next 79 diagnoses (and by ``pending``), not summed again each time. A Snapshot is frozen
  and cannot be hashed (its fields are lists), so its figures are not written onto it: they sit in
  a table keyed by its identity, and a finalizer drops them when the Snapshot goes (before its id
  can be reused). A figure of a tick and the one before it (``per_step``: what changed between
  them) lives with the later tick while the earlier one stays before it, as it does in a live
  window: a rule then walks the changes, not every tick of every process;
* a figure of the whole window (its time axis; the capacity model, through ``once``) lives on the
  Window;
* each process's memory readings live longer than the window (``MemoryReadings``, kept by a live
  loop): USS is re-read within a CPU budget, so on a large node a window holds too few of them.

It imports nothing else of diagnose: the figures and the rules build on it.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional, TypeVar

from dltop.model import Snapshot

T = TypeVar("T")
_UNSET = object()  # a figure not worked out yet (None is a figure)

# id(tick) -> {(figure, *args): its value for that tick}; an entry leaves with its tick
_TICK_FIGURES: dict[int, dict[tuple[Hashable, ...], Any]] = {}


def of_tick(tick: Snapshot, figure: Callable[..., T], *args: Hashable) -> T:
    """``figure(tick, *args)``, worked out once in the tick's life (as ``Window.per_tick`` keeps it):
    for a figure of a tick and the one before it, built from each one's own."""
    figures = _figures_of(tick)
    key = (figure, *args)
    if key not in figures:
        figures[key] = figure(tick, *args)
    return figures[key]


def _figures_of(tick: Snapshot) -> dict[tuple[Hashable, ...], Any]:
    figures = _TICK_FIGURES.get(id(tick))
    if figures is None:
        figures = _TICK_FIGURES[id(tick)] = {}
        weakref.finalize(tick, _TICK_FIGURES.pop, id(tick), None).atexit = False
    return figures


@dataclass(frozen=True)
class ShownAdvice:
    """The num_workers a live view has shown for a trainer: advice holds still while the evidence
    stays within its noise, so the rules are told what they said before, since when, and what it
    replaced and why."""

    workers: int
    since: str  # when it was first shown (ISO)
    previous: Optional[int] = None
    because: Optional[str] = None


# how far back a live loop keeps each process's memory readings: on a node of 73 processes the
# live view re-reads each USS about every 2 min, the exporter (5 s ticks) every ~6 min
MEMORY_KEPT_S = 1800.0


class MemoryReadings:
    """Each process's distinct USS readings over the last ``kept_s``, as a live loop saw them tick
    by tick (``add`` each tick before judging it): on a node of 8 ranks x 8 workers, 30 minutes
    hold four readings of each process or more, where the 120 s window holds one or two."""

    def __init__(self, kept_s: float = MEMORY_KEPT_S) -> None:
        self.kept_s = kept_s
        self._now = 0.0  # seconds since the first tick added, by the ticks' own window_s
        # pid -> (its start, [(seconds, USS) where the reading changed]); a reused pid starts anew
        self._readings: dict[int, tuple[Optional[str], list[tuple[float, int]]]] = {}

    def add(self, tick: Snapshot) -> None:
        self._now += tick.window_s
        there = set()
        for proc in tick.processes:
            there.add(proc.pid)
            started, readings = self._readings.setdefault(proc.pid, (proc.started_at, []))
            if started != proc.started_at:  # a reused pid
                started, readings = self._readings[proc.pid] = (proc.started_at, [])
            if proc.uss_bytes is not None and (not readings or readings[-1][1] != proc.uss_bytes):
                readings.append((self._now, proc.uss_bytes))
            while readings and readings[0][0] < self._now - self.kept_s:
                readings.pop(0)
        for pid in self._readings.keys() - there:
            del self._readings[pid]

    def of(self, pid: int) -> list[tuple[float, int]]:
        """[(seconds before the newest tick added, USS)] of ``pid``, oldest first."""
        return [(self._now - t, value) for t, value in self._readings.get(pid, (None, []))[1]]


class Window:
    def __init__(
        self,
        ticks: Sequence[Snapshot],
        shown_advice: Optional[Mapping[tuple[int, str], ShownAdvice]] = None,
        memory: Optional[MemoryReadings] = None,
    ) -> None:
        """``shown_advice``: (trainer pid, dataset) -> what a live view showed that loader so far
        (none for a report); ``memory``: the readings a live loop kept, up to the newest tick."""
        self.ticks: list[Snapshot] = list(ticks)
        self.shown_advice: Mapping[tuple[int, str], ShownAdvice] = shown_advice or {}
        self.memory = memory
        self._figures: dict[tuple[Hashable, ...], Any] = {}  # (figure, *args) -> its value for the window
        self._per_tick: dict[tuple[Hashable, ...], list[Any]] = {}  # (figure, *args) -> its value per tick

    @property
    def latest(self) -> Snapshot:
        return self.ticks[-1]

    @functools.cached_property
    def times(self) -> list[float]:
        """Seconds since the first tick, one per tick (from each tick's window_s)."""
        return [0.0, *itertools.accumulate(tick.window_s for tick in self.ticks[1:])]

    @functools.cached_property
    def _tick_figures(self) -> list[dict[tuple[Hashable, ...], Any]]:
        """Each tick's figures, looked up once per window (a diagnosis reads dozens of them)."""
        return [_figures_of(tick) for tick in self.ticks]

    def per_tick(self, figure: Callable[..., T], *args: Hashable) -> list[T]:
        """``figure(tick, *args)`` for every tick, oldest first: a figure of that tick alone, worked
        out once in the tick's life."""
        key = (figure, *args)
        values = self._per_tick.get(key)  # several rules of one diagnosis read the same
        if values is None:
            values = self._per_tick[key] = [figures.get(key, _UNSET) for figures in self._tick_figures]
            if _UNSET in values:  # ticks that came since the last diagnosis (a live window: the newest)
                for index, (figures, tick) in enumerate(zip(self._tick_figures, self.ticks)):
                    if values[index] is _UNSET:
                        values[index] = figures[key] = figure(tick, *args)
        return list(values)

    def per_step(self, figure: Callable[..., T], *args: Hashable) -> list[T]:
        """``figure(previous, tick, *args)`` for every tick after the first, oldest first: a figure
        of what changed since the tick before, worked out once while that tick stays before it."""
        key = (Window.per_step, figure, *args)
        values = []
        for previous, figures, tick in zip(self.ticks, self._tick_figures[1:], self.ticks[1:]):
            kept = figures.get(key)  # (a weak reference to the tick it followed, the value)
            if kept is None or kept[0]() is not previous:
                kept = figures[key] = (weakref.ref(previous), figure(previous, tick, *args))
            values.append(kept[1])
        return values

    def once(self, figure: Callable[..., T], *args: Hashable) -> T:
        """``figure(window, *args)``: a figure of the whole window, worked out once per window (every
        rule of one diagnosis reads the same)."""
        key = (figure, *args)
        if key not in self._figures:
            self._figures[key] = figure(self, *args)
        return self._figures[key]

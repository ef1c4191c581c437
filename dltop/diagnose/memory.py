"""Workers' memory: a steady rise (worker-memory-growth), judged by a least-squares line through
each worker's distinct readings. ``memory_points`` is shared with ``pending``, which says when a
worker has too few readings for a line yet.

USS is re-read within a CPU budget (a read makes the kernel walk the page tables), so on a node of
8 ranks x 8 workers each process is read about every two minutes: a 120 s window holds one or two
readings of a worker, too few for a line. A live loop keeps each process's readings for 30 min
(``MemoryReadings``): where the window holds too few, the line goes through its last ones.
"""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass
from typing import Optional

from dltop.diagnose.window import Window, of_tick
from dltop.model import Finding, Snapshot
from dltop.model.findings import WORKER_MEMORY_GROWTH
from dltop.settings import Settings
from dltop.units import human_bytes, rough_span

Points = list[tuple[float, int]]  # (seconds into the window, bytes)


def worker_memory_growth(window: Window, settings: Settings) -> list[Finding]:
    """Workers' private memory rises in a straight line: a leak, or copy-on-read under fork
    (every read of a Python object writes its refcount, so its page is copied into the worker)."""
    latest = window.latest
    findings = []
    for loader in latest.loaders:
        series = memory_points(window, set(loader.worker_pids), settings.memory_growth_points)
        lines = {pid: line for pid, points in series.items() if (line := steady_growth(points, settings)) is not None}
        growing = {pid: line.bytes_per_s for pid, line in lines.items()}
        if not growing:
            continue
        rate = sum(growing.values())
        available = _memory_available(latest)
        to_exhaust = available / rate if available else None
        fork = loader.start_method == "fork"
        why = (
            "Under fork, reading Python objects (lists, dicts, strings) of the dataset copies their pages into each"
            " worker (refcounts are writes): each worker grows toward its own copy."
            if fork
            else "Each worker keeps more memory as it runs: a cache or a leak in the dataset or collate code."
        )
        fix = (
            "Keep per-sample metadata in numpy arrays, pyarrow tables or torch tensors instead of Python "
            "lists/dicts of objects (no refcounts to touch); if it is your own cache, bound it"
            if fork
            else "Bound any per-worker cache (functools.lru_cache(maxsize=...)) and drop references to decoded samples"
        )
        findings.append(
            Finding(
                id=WORKER_MEMORY_GROWTH,
                severity="error" if to_exhaust is not None and to_exhaust < settings.memory_error_s else "warning",
                title=f"Workers of trainer {loader.trainer_pid} grow by {human_bytes(rate * 60)}/min",
                detail=f"{len(growing)} of {len(loader.worker_pids)} workers' private memory rises steadily"
                + (f"; at this rate available memory runs out in {rough_span(to_exhaust)}" if to_exhaust else "")
                + f". {why}",
                pids=sorted(growing),
                evidence={
                    "trainer_pid": loader.trainer_pid,
                    "bytes_per_s": round(rate),
                    "per_worker_bytes_per_s": {pid: round(s) for pid, s in sorted(growing.items())},
                    "memory_available_bytes": available,
                    "seconds_to_exhaustion": round(to_exhaust) if to_exhaust else None,
                    "start_method": loader.start_method,
                    "confidence": {pid: lines[pid].evidence() for pid in sorted(growing)},
                },
                suggestion=fix + ".",
                impact=min(1.0, settings.memory_error_s / to_exhaust) if to_exhaust else 0.1,
            )
        )
    return findings


@dataclass(frozen=True)
class Growth:
    """A least-squares line through a worker's distinct memory readings, and how sure it is."""

    bytes_per_s: float
    points: int
    span_s: float
    r2: float
    t: float  # the slope over its standard error: large for a steep clean line, small for noise

    def evidence(self) -> dict[str, float]:
        return {"points": self.points, "span_s": round(self.span_s, 1), "r2": round(self.r2, 3), "t": round(self.t, 1)}


def memory_points(window: Window, pids: set[int], at_least: int = 0) -> dict[int, Points]:
    """{pid: [(seconds, bytes)]} of each worker's private memory each time its reading changed.

    USS when dltop can read it, else RSS (never a mix: RSS counts shared pages). Memory is re-read
    within a CPU budget, so a reading can repeat: only changed readings are points. The readings
    are walked where they changed from the tick before (``Window.per_step``), not tick by tick: a
    repeated reading, or one missing (None) after a missing one, can start no point. A worker
    with fewer than ``at_least`` USS points in the window gets its last ``at_least`` from the
    window's ``memory`` (kept by a live loop), before the window's start (negative seconds).
    """
    changed_uss = window.once(_uss_changes)
    series: dict[int, Points] = {}
    for pid in pids:
        seen = changed_uss.get(pid, [])
        if all(uss is None for _, uss in seen):  # no USS in the window: RSS
            seen = _rss_changes(window, pid)
        known = [(t, value) for t, value in seen if value is not None]
        series[pid] = [next(run) for _, run in itertools.groupby(known, key=operator.itemgetter(1))]
        if window.memory is not None and len(series[pid]) < at_least:
            kept = window.memory.of(pid)
            if len(kept) > len(series[pid]):
                series[pid] = [(window.times[-1] - ago, value) for ago, value in kept[-at_least:]]
    return series


def memory_readings(snap: Snapshot) -> dict[int, tuple[Optional[int], Optional[int]]]:
    """{pid: (USS, RSS)} of every process at one tick."""
    return {p.pid: (p.uss_bytes, p.rss_bytes) for p in snap.processes}


_Readings = dict[int, Optional[int]]  # pid -> bytes (None: not read, or the process is not there)
_NOT_THERE = (None, None)


def _memory_changes(previous: Snapshot, tick: Snapshot) -> tuple[_Readings, _Readings]:
    """The processes whose USS, and whose RSS, differ from the tick before, with their new reading."""
    before, now = of_tick(previous, memory_readings), of_tick(tick, memory_readings)
    uss: _Readings = {}
    rss: _Readings = {}
    for pid in now.keys() | before.keys():
        (old_uss, old_rss), (new_uss, new_rss) = before.get(pid, _NOT_THERE), now.get(pid, _NOT_THERE)
        if new_uss != old_uss:
            uss[pid] = new_uss
        if new_rss != old_rss:
            rss[pid] = new_rss
    return uss, rss


def _steps(window: Window) -> list[tuple[float, tuple[_Readings, _Readings]]]:
    """(seconds, the readings that changed) at each tick after the first, once per window."""
    return list(zip(window.times[1:], window.per_step(_memory_changes)))


def _uss_changes(window: Window) -> dict[int, list[tuple[float, Optional[int]]]]:
    """{pid: [(seconds, USS)]} at the first tick and wherever a process's USS changed, once per window
    for every process (the rules ask for each loader's workers)."""
    changes: dict[int, list[tuple[float, Optional[int]]]] = {
        pid: [(0.0, uss)] for pid, (uss, _rss) in of_tick(window.ticks[0], memory_readings).items()
    }
    for t, (uss, _rss) in window.once(_steps):
        for pid, value in uss.items():
            changes.setdefault(pid, []).append((t, value))
    return changes


def _rss_changes(window: Window, pid: int) -> list[tuple[float, Optional[int]]]:
    """[(seconds, RSS)] of one process at the first tick and wherever it changed."""
    first = of_tick(window.ticks[0], memory_readings).get(pid, _NOT_THERE)[1]
    return [(0.0, first)] + [(t, rss[pid]) for t, (_uss, rss) in window.once(_steps) if pid in rss]


def steady_growth(points: Points, settings: Settings) -> Optional[Growth]:
    """The line, when it rises steadily enough to be sure of: judged by its evidence (a slope many
    standard errors from zero, a good fit, a real rise), not by how long it was watched, so a steep
    clean line is reported within seconds and a shallow noisy one only once it has built up."""
    n = len(points)
    if n < settings.memory_growth_points:
        return None
    mean_t, mean_v = sum(t for t, _ in points) / n, sum(v for _, v in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    var_v = sum((v - mean_v) ** 2 for _, v in points)
    if not var_t or not var_v:
        return None
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / var_t
    r2 = min(1.0, slope * slope * var_t / var_v)
    t_stat = math.sqrt(r2 / max(1 - r2, 1e-12) * (n - 2))
    span = points[-1][0] - points[0][0]
    if (
        r2 < settings.memory_growth_fit
        or t_stat < settings.memory_growth_t
        or slope * span < settings.memory_growth_min_bytes
    ):
        return None
    return Growth(slope, n, span, r2, t_stat)


def _memory_available(latest: Snapshot) -> Optional[int]:
    system = latest.system
    if system is None:
        return None
    available = system.mem_available_bytes
    if system.mem_limit_bytes:
        used = sum(p.pss_bytes or p.rss_bytes or 0 for p in latest.processes)
        available = min(available, max(0, system.mem_limit_bytes - used))
    return available

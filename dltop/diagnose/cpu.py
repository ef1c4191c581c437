"""The CPUs: the job wants more of them than it may use (cpu-oversubscribed). Its advice reads the
capacity model that input-bound and too-many-workers read, so it never takes away the workers
another rule would add."""

from __future__ import annotations

import math
from typing import Optional

from dltop.diagnose.capacity import Capacity, capacities
from dltop.diagnose.figures import column_means, job_load, loader_change, surely_above, wait_error
from dltop.diagnose.knobs import on_threads
from dltop.diagnose.window import Window
from dltop.model import Finding
from dltop.model.findings import CPU_OVERSUBSCRIBED
from dltop.settings import Settings


def cpu_oversubscribed(window: Window, settings: Settings) -> list[Finding]:
    """The job wants more CPU than it may use: processes sit runnable, waiting for a core.

    CPU% alone cannot show it (it tops out at the CPUs allowed); the run-queue wait of each
    process's main thread (schedstat) can. CPU wanted = used + waiting, summed over the job.
    What to change depends on who starves: a trainer that waits for data needs its workers (so
    never fewer of them); its own intra-op threads are what to cut. A trainer that never waits
    has workers to spare.
    """
    latest = window.latest
    wanted = _cpu_wanted(window, settings)
    if wanted is None or latest.system is None:
        return []
    used, waiting = wanted
    allowed = latest.system.cpus_allowed
    trainers = [p for p in latest.processes if p.role == "trainer" and p.state != "zombie"]
    ranks = max(1, len(trainers))
    caps = capacities(window, settings)
    # a trainer that waits for data at all (beyond its noise) is held back by its workers: fewer
    # of them starve it more (4 CPU-bound workers on 2 CPUs, the trainer waiting 26%: cutting to
    # 2 measured 0.76x). Only below too-many-workers' line does it have workers to spare.
    line = settings.too_many_wait_percent
    starving = [c for c in caps if c.wait is not None and surely_above(c.wait, wait_error(c.loader), line)]
    threads = next((c for c in caps if c.threads_take_cpus), None)
    advice = _advice(caps, threads, bool(starving), allowed / ranks, ranks)
    ranks_text = f" across {ranks} ranks ({allowed / ranks:.1f} CPUs per rank)" if ranks > 1 else ""
    return [
        Finding(
            id=CPU_OVERSUBSCRIBED,
            severity="warning",
            title=f"The job wants {used + waiting:.1f} CPUs and may use {allowed:g}",
            detail=f"Its processes used {used:.1f} CPUs and waited runnable for a CPU {waiting:.1f} CPUs' worth of the"
            f" time{ranks_text}: workers and trainers slow each other down"
            + (", and the trainer still waits for data." if starving else "; the trainer does not wait for data."),
            pids=[p.pid for p in trainers],
            evidence={
                "cpus_allowed": allowed,
                "cpu_used": round(used, 2),
                "cpu_waiting": round(waiting, 2),
                "ranks": ranks,
                "trainer_threads_cpu": round(threads.trainer_threads_cpu, 2) if threads else 0.0,
                "trainer_waits_for_data": bool(starving),
                "host_cpu_busy_percent": latest.system.cpu_busy_percent,
            },
            suggestion="; ".join(advice) or "Fewer workers per trainer.",
            impact=waiting / (used + waiting),
        )
    ]


def _cpu_wanted(window: Window, settings: Settings) -> Optional[tuple[float, float]]:
    """(CPUs used, CPUs' worth of runnable waiting) over the window, where they add up to more
    than the oversubscription line of the CPUs allowed; None otherwise (or unread)."""
    system = window.latest.system
    if system is None or len(window.ticks) < 2:
        return None
    used, waiting = column_means(window.per_tick(job_load)[1:], width=2)  # rates need a tick before them
    if used is None or waiting is None or used + waiting < settings.oversubscribed_ratio * system.cpus_allowed:
        return None
    return used, waiting


def _advice(
    caps: list[Capacity], threads: Optional[Capacity], starving: bool, per_rank: float, ranks: int
) -> list[str]:
    """What to change, in order: the trainers' intra-op threads first (they take CPUs the workers
    need); then never fewer workers for a trainer that waits for data; else the workers that fit."""
    advice: list[str] = []
    if threads is not None:
        count = threads.threads_left or 1
        advice.append(
            f"OMP_NUM_THREADS={count} for the trainer(s) (or torch.set_num_threads({count})): each runs intra-op"
            f" threads using {threads.trainer_threads_cpu:.1f} cores beside its main thread, on CPUs its workers need"
        )
    if starving:
        advice.append(
            "keep num_workers: the trainer waits for data, and fewer workers would starve it more; make samples"
            " cheaper or give the job more CPUs"
        )
    elif threads is not None:
        advice.append("then watch again before changing num_workers (the threads may be all it takes)")
    else:
        advice += _fewer_workers(caps, per_rank, ranks)
    return advice


def _fewer_workers(caps: list[Capacity], per_rank: float, ranks: int) -> list[str]:
    """For each loader with more workers than its rank's CPUs fit beside its trainer, the count that
    fits (a trainer that never waits for data has workers to spare)."""
    changes = []
    for cap in (c for c in caps if not on_threads(c.loader)):  # threads of one process: their GIL, not the CPUs
        wants = min(1.0, cap.figures.cpu + cap.figures.cpu_wait) or 1.0
        trainer_share = min(cap.trainer_cpu, per_rank - 1)
        fit = max(1, math.floor(max(per_rank - trainer_share, 1) / wants))
        if cap.loader.num_workers and fit < cap.loader.num_workers:
            rank = f", trainer {cap.loader.trainer_pid}" if ranks > 1 else ""
            changes.append(loader_change(cap.loader, num_workers=fit) + rank)
    return changes

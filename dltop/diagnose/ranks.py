"""The ranks of one training run judged together: the slowest sets the pace of all.

Ranks move in lock step at every collective (DDP's gradient all-reduce, FSDP's all-gather, a
barrier): a rank whose input pipeline is slow makes every other rank wait for it there. Their
own DataLoaders are fine, their wait is a consequence, and fixing the straggler speeds up the
whole run. The evidence is the asymmetry of the ranks' data waits beyond their sampling noise;
the waiting ranks' stacks (a collective, a CUDA sync, backward()) corroborate it and say where
they wait. Trainers of one run: one Placement.run (torchrun's run id, or MASTER_ADDR:PORT with
WORLD_SIZE), else the ranks one launcher started (one job).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Optional

from dltop.diagnose.capacity import capacities
from dltop.diagnose.figures import trusted_wait, wait_error
from dltop.diagnose.window import Window
from dltop.model import ENDED, Finding, LoaderSample, ProcessSample, Snapshot
from dltop.model.findings import RANK_STRAGGLER
from dltop.rank_frames import rank_position
from dltop.settings import Settings


@dataclass(frozen=True)
class RankWait:
    rank: Optional[int]
    trainer_pid: int
    wait: float  # data-wait share, 0..1
    error: float  # its standard error


def runs(snap: Snapshot, at_least: int = 2) -> dict[str, list[ProcessSample]]:
    """{run: its ranks on this node}, for runs with ``at_least`` ranks here."""
    grouped: dict[str, list[ProcessSample]] = {}
    trainers = [p for p in snap.processes if p.role == "trainer" and p.state not in ENDED]
    for trainer in trainers:
        run = trainer.placement.run if trainer.placement is not None else None
        if run is None and trainer.rank is not None:
            run = f"job {snap.job.pid}"  # ranks one launcher started, with no run id or rendezvous to read
        if run is not None:
            grouped.setdefault(run, []).append(trainer)
    return {run: ranks for run, ranks in grouped.items() if len(ranks) >= at_least}


def _rank_wait(trainer: ProcessSample, loaders: list[LoaderSample], settings: Settings) -> Optional[RankWait]:
    """The trainer's data wait (shared by its loaders: one trainer_time), once enough samples back it."""
    loader = next((x for x in loaders if x.trainer_pid == trainer.pid and x.trainer_time is not None), None)
    wait = trusted_wait(loader, settings.min_stack_samples) if loader is not None else None
    if loader is None or wait is None:
        return None
    return RankWait(trainer.rank, trainer.pid, wait, wait_error(loader) or 0.0)


def _sync_points(snap: Snapshot, pids: frozenset[int]) -> Counter[str]:
    """Where the waiting ranks' stacks show them waiting for the others (a collective, a sync point)."""
    places = (rank_position(p.stack, still=True) for p in snap.processes if p.pid in pids and p.stack)
    return Counter(place for position in places if position and (place := position.waiting_place()))


def rank_straggler(window: Window, settings: Settings) -> list[Finding]:
    latest = window.latest
    findings = []
    for run, trainers in sorted(runs(latest).items()):
        waits = [w for t in trainers if (w := _rank_wait(t, latest.loaders, settings)) is not None]
        if len(waits) < 2:
            continue
        slowest = max(waits, key=lambda w: w.wait)
        others = sorted((w for w in waits if w is not slowest), key=lambda w: w.wait)
        median = others[len(others) // 2]
        gap = slowest.wait - median.wait
        noise = settings.advice_spread_errors * math.hypot(slowest.error, median.error)
        if gap * 100 < settings.straggler_gap_percent or gap <= noise:
            continue
        by_cpus = next((c.speedup_cpus for c in capacities(window, settings) if c.loader.trainer_pid ==
                        slowest.trainer_pid), None)  # fmt: skip
        findings.append(_finding(window, run, slowest, others, median, len(trainers), by_cpus))
    return findings


def _finding(window: Window, run: str, slowest: RankWait, others: list[RankWait], median: RankWait,
             ranks: int, by_cpus: Optional[float]) -> Finding:  # fmt: skip
    waiting = frozenset(w.trainer_pid for w in others)
    points: Counter[str] = Counter()
    for tick in window.per_tick(_sync_points, waiting):
        points.update(tick)
    where, seen = points.most_common(1)[0] if points else (None, 0)
    stacks = sum(1 for tick in window.ticks for p in tick.processes if p.pid in waiting and p.stack)
    meanwhile = (
        f"their stacks show them waiting {where} ({seen} of {stacks} stacks)"
        if where
        else "their stacks name no collective, but every rank waits for the slowest at each one"
    )
    # one step of the run = the straggler's; fixed, it would take what the others need of their own.
    # A fix that keeps the CPU a batch costs (more workers) goes as far as the CPUs carry every rank
    # (capacity.py's model: all of it scales); a cheaper sample goes further (the truth harness: the
    # slow rank made cheap ran 3.05x, one more worker 1.53x, where the pace said 4.04x)
    speedup = 1 / max(1 - slowest.wait + median.wait, 0.05)
    workers_only = max(1.0, by_cpus) if by_cpus is not None and by_cpus < speedup else None
    limit = (f" More workers alone stop at {workers_only:.2f}x, where the CPUs the job may use are all busy:"
             " cheaper samples go further." if workers_only is not None else "")  # fmt: skip
    name = f"rank {slowest.rank}" if slowest.rank is not None else f"trainer {slowest.trainer_pid}"
    return Finding(
        id=RANK_STRAGGLER,
        severity="warning",
        title=f"{name.capitalize()} (trainer {slowest.trainer_pid}) holds back its run: it waits for data"
        f" {slowest.wait * 100:.0f}%, the other {len(others)} rank(s) {median.wait * 100:.0f}%",
        detail=f"Ranks of one run wait for each other at every collective, so the run goes at {name}'s pace. The"
        f" other ranks spend that time waiting for it: {meanwhile}. Their DataLoaders are not the problem."
        f" Fixing {name}'s input would make the whole run up to {speedup:.2f}x faster.{limit}",
        pids=[slowest.trainer_pid],
        evidence={
            "run": run,
            "ranks_on_node": ranks,
            "straggler_rank": slowest.rank,
            "trainer_pid": slowest.trainer_pid,
            "data_wait_percent": round(slowest.wait * 100, 1),
            "others_data_wait_percent": round(median.wait * 100, 1),
            "ranks": [
                {
                    "rank": w.rank,
                    "trainer_pid": w.trainer_pid,
                    "data_wait_percent": round(w.wait * 100, 1),
                    "data_wait_error_percent": round(w.error * 100, 1),
                }
                for w in sorted([slowest, *others], key=lambda w: (w.rank is None, w.rank, w.trainer_pid))
            ],  # fmt: skip
            "waiting_trainer_pids": sorted(waiting),
            "waiting_in": where,
            "run_speedup": round(speedup, 2),
            "run_speedup_by_cpus": round(by_cpus, 2) if by_cpus is not None else None,
        },
        suggestion=f"Fix {name}'s input first (its own finding below says how): every rank speeds up with it",
        impact=slowest.wait - median.wait,
    )

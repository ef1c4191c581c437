"""Findings from a window of Snapshots (DESIGN.md §1-2): pure rules, no I/O.

Each rule is one small function ``rule(window, settings) -> [Finding]`` registered in
``RULES``; ``diagnose`` runs them all over the window (oldest first, newest last).
"""

from __future__ import annotations

from dltop.diagnose.advice import input_bound, pin_memory, too_many_workers, workers_respawning
from dltop.diagnose.faults import stacks_unavailable, trainer_stalled, worker_died, worker_hung
from dltop.diagnose.pending import pending
from dltop.diagnose.relations import relate
from dltop.diagnose.resources import (
    cpu_oversubscribed,
    disk_saturated,
    fd_near_limit,
    gpu_underutilized,
    shm_low,
    worker_memory_growth,
)
from dltop.settings import DEFAULTS, Settings

RULES = (
    stacks_unavailable,
    worker_hung,
    worker_died,
    trainer_stalled,
    input_bound,
    too_many_workers,
    workers_respawning,
    pin_memory,
    cpu_oversubscribed,
    disk_saturated,
    worker_memory_growth,
    shm_low,
    fd_near_limit,
    gpu_underutilized,
)


def diagnose(window: list, settings: Settings = DEFAULTS, related: bool = True) -> list:
    """Every finding the window supports, consequences tied to their causes, most severe first.
    ``related`` False leaves them unrelated (a live view holds findings first, then relates the
    ones it shows: a consequence must not name a cause that is not on screen)."""
    if not window:
        return []
    findings: list = []
    for rule in RULES:
        findings.extend(rule(window, settings))
    return relate(findings) if related else findings


__all__ = ["RULES", "diagnose", "pending", "relate"]

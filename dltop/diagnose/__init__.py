"""Findings from a window of Snapshots (docs/how-it-works.md#shape-of-the-code, docs/findings.md): pure rules, no I/O.

Each rule is one small function ``rule(window, settings) -> [Finding]`` registered in
``RULES``, one subject a module (faults, thread_faults, ranks, advice, gil, iterable, cpu, disk, memory,
shm, fds, gpu); ``diagnose``
builds one ``Window`` over the ticks (oldest first, newest last) and runs them all over it. Rules
never call each other: which finding explains which is ``relations``' to say.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Optional

from dltop.diagnose.advice import input_bound, pin_memory, too_many_workers, workers_respawning
from dltop.diagnose.cpu import cpu_oversubscribed
from dltop.diagnose.disk import disk_saturated
from dltop.diagnose.faults import ranks_restarted, stacks_unavailable, trainer_stalled, worker_died, worker_hung
from dltop.diagnose.fds import fd_near_limit
from dltop.diagnose.gil import gil_bound
from dltop.diagnose.gpu import gpu_underutilized
from dltop.diagnose.iterable import worker_starving
from dltop.diagnose.memory import worker_memory_growth
from dltop.diagnose.pending import pending
from dltop.diagnose.ranks import rank_straggler
from dltop.diagnose.relations import relate
from dltop.diagnose.shm import shm_low
from dltop.diagnose.stopped import run_stopped
from dltop.diagnose.thread_faults import thread_died, thread_hung
from dltop.diagnose.window import MemoryReadings, ShownAdvice, Window
from dltop.model import Finding, Snapshot
from dltop.settings import DEFAULTS, Settings

Rule = Callable[[Window, Settings], list[Finding]]

RULES: tuple[Rule, ...] = (
    stacks_unavailable,
    worker_hung,
    thread_hung,
    worker_died,
    thread_died,
    ranks_restarted,
    trainer_stalled,
    run_stopped,
    rank_straggler,
    input_bound,
    gil_bound,
    too_many_workers,
    workers_respawning,
    worker_starving,
    pin_memory,
    cpu_oversubscribed,
    disk_saturated,
    worker_memory_growth,
    shm_low,
    fd_near_limit,
    gpu_underutilized,
)


def diagnose(
    ticks: Sequence[Snapshot],
    settings: Settings = DEFAULTS,
    related: bool = True,
    shown_advice: Optional[Mapping[tuple[int, str], ShownAdvice]] = None,
    memory: Optional[MemoryReadings] = None,
) -> list[Finding]:
    """Every finding the ticks (oldest first) support, consequences tied to their causes, most
    severe first. ``related`` False leaves them unrelated (a live view holds findings first, then
    relates the ones it shows: a consequence must not name a cause that is not on screen).
    ``shown_advice``: what a live view suggested so far, which holds while it stays within the noise;
    ``memory``: the memory readings it kept, longer than the window."""
    if not ticks:
        return []
    window = Window(ticks, shown_advice, memory)
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(window, settings))
    return relate(findings) if related else findings


__all__ = ["RULES", "Rule", "Window", "diagnose", "pending", "relate"]

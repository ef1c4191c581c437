"""Which finding explains which, decided once here for every view (TUI, text, JSON, exporter).

A hung or dead worker (a process or a pipeline's thread), workers restarting each epoch, a stalled
trainer, a saturated disk, CPUs or a GIL that bind explain a trainer's wait and an idle GPU: a
person needs the cause with its fix, and the symptom under it as its consequence — not two fixes
that contradict each other. A consequence keeps its figures and names its cause in
``explained_by``; its own suggestion is dropped.
"""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass
from typing import Callable, Optional

from dltop.model import Finding, severity_rank
from dltop.model.findings import (
    CPU_OVERSUBSCRIBED,
    DISK_SATURATED,
    GIL_BOUND,
    GPU_UNDERUTILIZED,
    INPUT_BOUND,
    RANK_STRAGGLER,
    RUN_STOPPED,
    SHM_LOW,
    TOO_MANY_WORKERS,
    TRAINER_STALLED,
    WORKER_DIED,
    WORKER_HUNG,
    WORKER_STARVING,
    WORKERS_RESPAWNING,
)
from dltop.settings import DEFAULTS

Explains = Callable[[Finding, Finding], bool]  # (cause, symptom) -> does the cause explain it


def _trainer_of(finding: Finding) -> Optional[int]:
    return finding.evidence.get("trainer_pid") if finding.evidence else None


def _same_trainer(cause: Finding, symptom: Finding) -> bool:
    return _trainer_of(cause) is not None and _trainer_of(cause) == _trainer_of(symptom)


def _on_gpu(cause: Finding, symptom: Finding) -> bool:
    trainers = set(symptom.evidence.get("trainer_pids") or symptom.pids)
    return _trainer_of(cause) in trainers or bool(set(cause.pids) & trainers)


def _starving(cause: Finding, symptom: Finding) -> bool:
    """A trainer on the GPU whose wait clears input-bound's line: the GPU's idle time is its wait.
    Below the line input-bound still holds where more workers surely help, but the step idles the
    GPU more than the wait does (gpu-underutilized names the step)."""
    return _on_gpu(cause, symptom) and bool(symptom.evidence.get("input_bound"))


def _binds(cap: str) -> Explains:
    """The symptom's model found no room for more workers, and ``cap`` is why."""

    def explains(cause: Finding, symptom: Finding) -> bool:
        ev = symptom.evidence
        return ev.get("binding") == cap and ev.get("suggested_workers") == ev.get("num_workers")

    return explains


def _no_shortfall(cause: Finding, symptom: Finding) -> bool:
    """Workers that could keep up (the model needs no more of them) while the trainer still waits:
    the wait is for workers starting every epoch, not for their throughput."""
    needed, workers = symptom.evidence.get("workers_needed"), symptom.evidence.get("num_workers")
    return bool(_same_trainer(cause, symptom) and needed is not None and workers and needed <= workers)


def _startup_storm(cause: Finding, symptom: Finding) -> bool:
    """Workers restarting every epoch (importing torch, unpickling the dataset) are what wants the CPUs."""
    return (cause.evidence.get("starting_workers_percent") or 0) >= DEFAULTS.startup_storm_percent


def _waiting_rank(cause: Finding, symptom: Finding) -> bool:
    """A rank that waits for the straggler at every collective: its own figures say little of its loader."""
    waiting = set(cause.evidence.get("waiting_trainer_pids") or ())
    trainers = {_trainer_of(symptom), *(symptom.evidence.get("trainer_pids") or ())} - {None}
    return bool(trainers) and trainers <= waiting


def _in_stopped_run(cause: Finding, symptom: Finding) -> bool:
    """A rank of the stopped run: its stall, its wait, its pace are the run's stop seen from it."""
    ranks = {rank["pid"] for rank in cause.evidence.get("ranks") or ()}
    trainers = {_trainer_of(symptom), symptom.evidence.get("pid"), *(symptom.evidence.get("trainer_pids") or ())}
    return bool(ranks & (trainers - {None}))


def _stopping_rank(cause: Finding, symptom: Finding) -> bool:
    """The worker that keeps the rank which stopped the run waiting for its input."""
    return _trainer_of(cause) in (symptom.evidence.get("cause_pids") or ())


def _bus_error(cause: Finding, symptom: Finding) -> bool:
    return symptom.evidence.get("signal") == signal.Signals.SIGBUS.name


# symptom id -> [(cause id, does this cause explain this symptom)], the likeliest cause first
EXPLAINS: dict[str, list[tuple[str, Explains]]] = {
    RUN_STOPPED: [(WORKER_HUNG, _stopping_rank), (WORKER_DIED, _stopping_rank)],
    TRAINER_STALLED: [(RUN_STOPPED, _in_stopped_run)],
    RANK_STRAGGLER: [(RUN_STOPPED, _in_stopped_run)],
    INPUT_BOUND: [
        (RUN_STOPPED, _in_stopped_run),
        (RANK_STRAGGLER, _waiting_rank),
        (WORKER_HUNG, _same_trainer),
        (WORKER_DIED, _same_trainer),
        (DISK_SATURATED, _binds("disk")),
        (GIL_BOUND, _binds("gil")),
        (CPU_OVERSUBSCRIBED, _binds("cpus")),
        (WORKERS_RESPAWNING, _no_shortfall),
    ],
    GPU_UNDERUTILIZED: [
        (RUN_STOPPED, _in_stopped_run),
        (RANK_STRAGGLER, _waiting_rank),
        (WORKER_HUNG, _on_gpu),
        (TRAINER_STALLED, _on_gpu),
        (WORKER_DIED, _on_gpu),
        (INPUT_BOUND, _starving),
        (WORKERS_RESPAWNING, _on_gpu),
    ],
    TOO_MANY_WORKERS: [(RUN_STOPPED, _in_stopped_run), (RANK_STRAGGLER, _waiting_rank)],
    WORKER_DIED: [(SHM_LOW, _bus_error)],
    CPU_OVERSUBSCRIBED: [(WORKERS_RESPAWNING, _startup_storm)],
}
# what a cause does to its consequences, in words (the consequence's own model no longer applies)
BECAUSE = {
    WORKER_HUNG: "the trainer waits for the batch the hung worker {pids} holds",
    WORKER_DIED: "worker {pids} died: its batches never come",
    DISK_SATURATED: "the disk it reads is saturated",
    GIL_BOUND: "its pipeline's threads fill the one core their GIL allows",
    CPU_OVERSUBSCRIBED: "the CPUs the job may use are all busy",
    TRAINER_STALLED: "the trainer is stalled outside the DataLoader",
    INPUT_BOUND: "the trainer waits for data",
    WORKERS_RESPAWNING: "workers start again every epoch (and take the CPUs doing so)",
    SHM_LOW: "/dev/shm is full",
    RANK_STRAGGLER: "this rank waits at every collective for the straggler, trainer {pids}",
    RUN_STOPPED: "the run has stopped: its ranks wait for one another (pid {pids} named as the cause)",
}
# findings that name their own cause among the others (the straggler rank's input-bound, hung
# worker, CPUs...): a cause of the same trainer, the likeliest first
NAMES_CAUSE: dict[str, tuple[str, ...]] = {
    RANK_STRAGGLER: (WORKER_HUNG, WORKER_DIED, TRAINER_STALLED, DISK_SATURATED, CPU_OVERSUBSCRIBED,
                     WORKER_STARVING, WORKERS_RESPAWNING, GIL_BOUND, INPUT_BOUND),
}  # fmt: skip


def relate(findings: list[Finding]) -> list[Finding]:
    """The findings with ``explained_by`` set on consequences, ordered by severity, then impact
    (causes before the consequences they explain)."""
    related = []
    for finding in findings:
        direct = _direct_cause(finding, findings)
        if direct is not None:
            cause = _root(direct, findings)
            # what it does to this finding is its direct cause's doing: a rank waiting for the rank
            # whose worker hung waits in a collective, not for that worker's batch
            because = BECAUSE[direct.id].format(pids=_named(direct))
            through = f" (through {direct.id})" if direct is not cause else ""
            detail = f"A consequence of {cause.id}{through}: {because}."
            finding = dataclasses.replace(finding, explained_by=cause.id, detail=detail, suggestion="", bench_args=None)
        related.append(_with_own_cause(finding, findings))
    return sorted(related, key=_order)


def _with_own_cause(finding: Finding, findings: list[Finding]) -> Finding:
    """The finding with its own cause named (``evidence["cause"]``, a sentence in its detail)."""
    trainer = _trainer_of(finding)
    for cause_id in NAMES_CAUSE.get(finding.id, ()):
        cause = next((f for f in findings if f.id == cause_id and f is not finding and (
            _trainer_of(f) == trainer or trainer in f.pids)), None)  # fmt: skip
        if cause is not None:
            evidence = {**finding.evidence, "cause": cause.id}
            detail = f"{finding.detail} Its own cause: {cause.title} ({cause.id})."
            # read before its cause: it says why that cause matters beyond its own trainer
            impact = max(finding.impact, cause.impact + 1e-6)
            return dataclasses.replace(finding, evidence=evidence, detail=detail, impact=impact)
    return finding


def _named(cause: Finding) -> str:
    """Who a cause is about: its processes, or the pipeline thread it names (of the trainer)."""
    ev = cause.evidence
    if ev.get("tid") is not None:
        return f"thread {ev.get('thread') or '?'} (tid {ev['tid']}) of {ev.get('pid')}"
    return ", ".join(map(str, cause.pids))


def _direct_cause(symptom: Finding, findings: list[Finding]) -> Optional[Finding]:
    """The likeliest finding that explains ``symptom`` directly."""
    for cause_id, explains in EXPLAINS.get(symptom.id, ()):
        for cause in findings:
            if cause.id == cause_id and cause is not symptom and explains(cause, symptom):
                return cause
    return None


def _root(cause: Finding, findings: list[Finding], depth: int = 0) -> Finding:
    """A cause that is itself explained (an idle GPU <- input-bound <- a hung worker) gives way to its own."""
    deeper = _direct_cause(cause, findings) if depth < 3 else None
    return _root(deeper, findings, depth + 1) if deeper is not None else cause


def _order(finding: Finding) -> tuple[int, bool, float, str, list[int]]:
    return (severity_rank(finding.severity), finding.explained_by is not None, -finding.impact, finding.id,
            finding.pids)  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """A root cause with its fix, and the findings it explains (its consequences, shown under it
    with no fix of their own): the one grouping every front end renders."""

    cause: Finding
    consequences: tuple[Finding, ...] = ()


def grouped(findings: list[Finding]) -> list[Entry]:
    """Related ``findings`` (as ``relate`` orders them) grouped cause first. A finding explained by
    one that is not in the list stands on its own; a cause raised for several processes carries
    its consequences once, under the first."""
    ids = {f.id for f in findings}
    roots = [f for f in findings if f.explained_by is None or f.explained_by not in ids]
    explained = [f for f in findings if f not in roots]
    entries = []
    for root in roots:
        first_of_id = next(r for r in roots if r.id == root.id) is root
        entries.append(Entry(root, tuple(f for f in explained if first_of_id and f.explained_by == root.id)))
    return entries


def root_cause(findings: list[Finding]) -> Optional[Finding]:
    """The most severe finding that nothing else explains (warnings and errors only)."""
    roots = [e.cause for e in grouped(findings) if e.cause.severity != "info"]
    return min(roots, key=lambda f: severity_rank(f.severity), default=None)

"""Every finding id dltop can raise, spelled once, with what kind of finding it is, whether it is
a hang, and what it means in one line.

The rules create findings with these ids; the screen (its badge and help), the text report, the
recorder (which findings open an incident), the exporter, the relations between findings and the
pending judgements all read them here, so a new id or a changed kind is one edit, and the docs
(docs/findings.md, the README's table) are checked against this list by a unit test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# fault: a process of the job is wrong (hung, dead, restarted, stalled) and dltop says which;
# performance: a setting wastes time or resources, or a resource runs out, and the change to make;
# info: what dltop itself cannot see, and how to let it
FindingKind = Literal["fault", "performance", "info"]


@dataclass(frozen=True)
class FindingType:
    id: str
    kind: FindingKind
    means: str  # one line, as the README's table says it
    hang: bool = False  # a process stuck on one frame: the screen's HUNG, the exporter's hung workers


WORKER_HUNG = "worker-hung"
WORKER_DIED = "worker-died"
RANKS_RESTARTED = "ranks-restarted"
TRAINER_STALLED = "trainer-stalled"
RUN_STOPPED = "run-stopped"
STACKS_UNAVAILABLE = "stacks-unavailable"
RANK_STRAGGLER = "rank-straggler"
INPUT_BOUND = "input-bound"
GIL_BOUND = "gil-bound"
WORKER_STARVING = "worker-starving"
TOO_MANY_WORKERS = "too-many-workers"
WORKERS_RESPAWNING = "workers-respawning"
PIN_MEMORY = "pin-memory"
CPU_OVERSUBSCRIBED = "cpu-oversubscribed"
DISK_SATURATED = "disk-saturated"
WORKER_MEMORY_GROWTH = "worker-memory-growth"
SHM_LOW = "shm-low"
FD_NEAR_LIMIT = "fd-near-limit"
GPU_UNDERUTILIZED = "gpu-underutilized"

# in the order the docs list them
REGISTRY: tuple[FindingType, ...] = (
    FindingType(WORKER_HUNG, "fault", "a DataLoader worker makes no progress while its trainer waits for it", True),
    FindingType(WORKER_DIED, "fault", "a worker exited with a signal or a non-zero code while its trainer ran"),
    FindingType(RANKS_RESTARTED, "fault", "the launcher started the job's ranks again after one failed"),
    FindingType(TRAINER_STALLED, "fault", "the trainer is stuck outside the DataLoader, its workers idle", True),
    FindingType(RUN_STOPPED, "fault", "a run's ranks wait for one another and none moves: the rank that stopped it"),
    FindingType(STACKS_UNAVAILABLE, "info", "dltop cannot read stacks: py-spy is missing or may not attach"),
    FindingType(RANK_STRAGGLER, "performance", "one rank waits for data far more than the others, which wait for it"),
    FindingType(INPUT_BOUND, "performance", "the trainer waits for data a large share of its time"),
    FindingType(GIL_BOUND, "performance", "a thread pipeline's Python work fills the one core its GIL allows"),
    FindingType(WORKER_STARVING, "performance", "workers of an iterable loader get no part of its source"),
    FindingType(TOO_MANY_WORKERS, "performance", "workers idle nearly all the time and the trainer never waits"),
    FindingType(WORKERS_RESPAWNING, "performance", "non-persistent workers are started again every epoch"),
    FindingType(PIN_MEMORY, "performance", "a GPU job's loader does not pin its batches, or one without a GPU does"),
    FindingType(CPU_OVERSUBSCRIBED, "performance", "the job wants more CPU than it may use"),
    FindingType(DISK_SATURATED, "performance", "a device the job reads is busy nearly all the time and reads queue"),
    FindingType(WORKER_MEMORY_GROWTH, "performance", "workers' private memory rises steadily"),
    FindingType(SHM_LOW, "performance", "/dev/shm is nearly full: a batch that does not fit kills a worker"),
    FindingType(FD_NEAR_LIMIT, "performance", "a process is close to its open-file limit"),
    FindingType(GPU_UNDERUTILIZED, "performance", "a GPU the job holds is idle much of the time"),
)
FINDINGS: dict[str, FindingType] = {t.id: t for t in REGISTRY}
FAULTS: frozenset[str] = frozenset(t.id for t in REGISTRY if t.kind == "fault")
HANGS: frozenset[str] = frozenset(t.id for t in REGISTRY if t.hang)


def is_fault(finding_id: str) -> bool:
    """A process of the job is wrong: the recorder opens an incident, the screen names it."""
    return finding_id in FAULTS


def is_hang(finding_id: str) -> bool:
    """A process stuck on one frame (a hung worker, a stalled trainer)."""
    return finding_id in HANGS

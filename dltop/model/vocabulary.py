"""The words every part of dltop uses, defined once with their order: what a process is (its
role), what its main thread is doing (its activity), where a trainer's time goes (its phases),
how bad a finding is (its severity), and when an unchanged stack counts as stuck.

The collector, the rules, the screen, the text report, the metrics and the recorder all import
these, so they cannot disagree about the same process.
"""

from __future__ import annotations

from typing import Literal, Optional, Protocol

Role = Literal["launcher", "trainer", "worker", "helper"]
# the order a job's tree is listed in: a launcher, its trainers, their workers, the rest
ROLES: tuple[Role, ...] = ("launcher", "trainer", "worker", "helper")
JOB_ROLES: tuple[Role, ...] = ("trainer", "worker")  # the processes whose CPU is the job's work

Activity = Literal[
    "idle",  # a worker waiting for its next index
    "fetching",  # a worker in the dataset's __getitem__ / __iter__
    "collating",  # collating a batch (worker) or collating/pinning in __next__ (trainer)
    "sending",  # a worker handing a batch to its result queue
    "starting",  # a worker not yet in _worker_loop's loop
    "waiting-for-data",  # a trainer inside the DataLoader's __next__, waiting for its workers
    "starting-workers",  # a trainer at an epoch boundary: starting or shutting down its workers
    "running",  # a trainer's training step (anything outside the DataLoader)
    "stuck",  # the same stack, without CPU, for longer than the hang threshold
    "unknown",  # no stack read yet (or none that says)
]
# an unchanged stack without CPU in these is waiting (between batches, for its workers) or not
# read at all: never "stuck", whatever its age
WAITING: frozenset[Activity] = frozenset({"idle", "waiting-for-data", "unknown"})

# a process's states once it has ended: exited but not reaped yet, no longer there, or gone with
# its job (a report's last word on it)
ENDED: frozenset[str] = frozenset({"zombie", "gone", "exited"})

Phase = Literal["waiting-for-data", "collating", "starting-workers", "running"]
# a trainer's phases, in the order they are shown, each with its TrainerTime field
PHASES: dict[Phase, str] = {
    "waiting-for-data": "waiting_for_data_percent",
    "collating": "collating_percent",
    "starting-workers": "starting_workers_percent",
    "running": "running_percent",
}

# how a DataLoader's workers get their data: indices into a map-style Dataset (any worker can
# fetch any sample), or their own part of an IterableDataset's source (shards, files, ranges)
DatasetKind = Literal["map", "iterable"]

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("error", "warning", "info")  # most severe first

# a stack held this long without CPU is worth showing with its age and watching as a possible hang
STILL_NOTICE_S = 5.0


def severity_rank(severity: str) -> int:
    """0 for the most severe; an unknown severity after every known one."""
    return SEVERITIES.index(severity) if severity in SEVERITIES else len(SEVERITIES)


def most_severe(severities: list[str]) -> Optional[str]:
    return min(severities, key=severity_rank, default=None)


class _Still(Protocol):
    @property
    def activity(self) -> str: ...
    @property
    def stuck_s(self) -> Optional[float]: ...


def still_for(process: _Still) -> Optional[float]:
    """Seconds the process has kept one stack without CPU where that means something (None while
    it is waiting, as idle workers and trainers waiting for data do, or while unread)."""
    return None if process.activity in WAITING else process.stuck_s


def is_stuck(process: _Still, hang_after_s: float) -> bool:
    """The one test of "stuck": the same stack, no CPU, past the hang threshold, and not waiting."""
    still = still_for(process)
    return still is not None and still >= hang_after_s

"""The exporter's sink: the newest Snapshot of every job, and the counters that need history.

The node watcher calls ``update(tick)`` after each pass; scrapes read ``view`` (replaced whole
each pass, never changed in place, so a scrape on the HTTP thread sees one consistent pass).
A Snapshot carries rates and states; counters (seconds waited, CPU seconds, bytes read,
respawns, deaths) are summed here tick by tick. A job that exits is dropped with everything
kept for it, so its series vanish from the next scrape.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Optional

from dltop.export.labels import TRAINER, Roster, roster
from dltop.model import Snapshot

KEEP_DEATHS = 1024  # worker pids remembered per job, so that a death is counted once


@dataclass(frozen=True)
class JobView:
    snapshot: Snapshot
    roster: Roster
    wait_s: dict  # TRAINER values -> seconds waited for data (the sampled share times the tick)
    cpu_s: dict  # PROCESS values -> CPU seconds
    read_bytes: dict  # PROCESS values -> bytes read from storage
    respawns: dict  # LOADER values -> workers replaced
    deaths: dict  # LOADER values -> workers that died (a signal or a non-zero exit)
    findings: dict  # (TRAINER values, id, severity) -> 1 while active, 0 once it cleared


@dataclass(frozen=True)
class NodeView:
    jobs: list = field(default_factory=list)  # JobView
    collected_at: Optional[float] = None  # time.time() of the newest pass
    collection_s: float = 0.0
    collection_failures: int = 0


@dataclass
class JobHistory:
    """One job's counters, kept as long as the trainer or loader they belong to."""

    wait_s: dict = field(default_factory=dict)
    cpu_s: dict = field(default_factory=dict)
    read_bytes: dict = field(default_factory=dict)
    respawns: dict = field(default_factory=dict)
    respawns_seen: dict = field(default_factory=dict)  # LOADER values -> the loader's own count last tick
    deaths: dict = field(default_factory=dict)
    dead: OrderedDict = field(default_factory=OrderedDict)  # worker pids counted as deaths
    findings: dict = field(default_factory=dict)

    def add(self, snap: Snapshot, who: Roster) -> None:
        dt = snap.window_s
        for trainer, loader in who.first_loaders().items():
            self.wait_s[trainer] = self.wait_s.get(trainer, 0.0) + (loader.data_wait_percent or 0.0) / 100 * dt
        for loader, values in who.loaders:
            # the loader's count is of the exits it still lists: count its increases only
            seen = self.respawns_seen.get(values, 0)
            self.respawns[values] = self.respawns.get(values, 0) + max(0, loader.worker_respawns - seen)
            self.respawns_seen[values] = loader.worker_respawns
            self.deaths.setdefault(values, 0)
            for worker in loader.workers_exited:
                if worker.cause == "died" and worker.pid not in self.dead:
                    self.dead[worker.pid] = True
                    self.deaths[values] += 1
        while len(self.dead) > KEEP_DEATHS:
            self.dead.popitem(last=False)
        for process, values in who.processes:
            if process.cpu_percent is not None:
                self.cpu_s[values] = self.cpu_s.get(values, 0.0) + process.cpu_percent / 100 * dt
            if process.read_bytes_per_s is not None:
                self.read_bytes[values] = self.read_bytes.get(values, 0.0) + process.read_bytes_per_s * dt
        self._add_findings(snap, who)
        self._forget_gone(snap, who)

    def _add_findings(self, snap: Snapshot, who: Roster) -> None:
        """A finding is a series of the trainer it concerns (a worker's: its trainer's), or of the
        job when it names none; once raised it stays, at 0 after it clears, while its trainer lives."""
        for key in self.findings:
            self.findings[key] = 0
        for finding in snap.findings:
            trainers = {who.trainer_of(pid) for pid in finding.pids} - {None}
            for trainer in trainers or {None}:
                values = who.trainers.get(trainer, _job_values(snap))
                self.findings[(values, finding.id, finding.severity)] = 1

    def _forget_gone(self, snap: Snapshot, who: Roster) -> None:
        """A worker slot empty for a while (a val loader between passes) keeps its counters and
        goes on where it left off; a trainer or loader that is gone takes its counters along."""
        trainers = set(who.trainers.values()) | {_job_values(snap)}
        loaders = {values for _, values in who.loaders}
        for counts in (self.wait_s, self.cpu_s, self.read_bytes):
            for key in [k for k in counts if k[: len(TRAINER)] not in trainers]:
                del counts[key]
        for counts in (self.respawns, self.respawns_seen, self.deaths):
            for key in [k for k in counts if k not in loaders]:
                del counts[key]
        for key in [k for k in self.findings if k[0] not in trainers]:
            del self.findings[key]

    def view(self, snap: Snapshot, who: Roster) -> JobView:
        return JobView(
            snap,
            who,
            dict(self.wait_s),
            dict(self.cpu_s),
            dict(self.read_bytes),
            dict(self.respawns),
            dict(self.deaths),
            dict(self.findings),
        )


def _job_values(snap: Snapshot) -> tuple:
    """TRAINER values of a finding about the job as a whole (no trainer named)."""
    return (str(snap.job.pid), *[""] * (len(TRAINER) - 1))


class ExporterState:
    """``update(NodeTick)`` after each pass of the node watcher; ``view`` for scrapes."""

    def __init__(self, wall: Callable[[], float] = time.time) -> None:
        self._wall = wall
        self._history: dict = {}  # job root pid -> JobHistory
        self._failures = 0
        self._lock = threading.Lock()  # one writer; a scrape only reads self.view
        self.view = NodeView()

    def update(self, tick) -> None:
        with self._lock:
            self._failures += len(tick.failures)
            jobs = []
            for snap in tick.snapshots:
                if snap.job.state == "exited" or snap.job.pid in tick.ended:
                    continue  # its series vanish now
                who = roster(snap)
                history = self._history.setdefault(snap.job.pid, JobHistory())
                history.add(snap, who)
                jobs.append(history.view(snap, who))
            followed = {job.snapshot.job.pid for job in jobs}
            for root in set(self._history) - followed:
                del self._history[root]
            self.view = NodeView(jobs, self._wall(), tick.took_s, self._failures)

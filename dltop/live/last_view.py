"""What a live view shows once the job has exited: its last complete view, with the exit added.

The tick that sees the job gone has little left to read: no trainer, no command line, no CPUs or
memory of the job, workers that ended with their trainer's shutdown. Judged anew, it would
drop the trainer's row, blank the meters and turn advice into "not enough evidence". So the last
view stays as it was, each process marked as gone with its job, and only what the exit itself
tells is added: its exit code, and the faults it raised (a worker that died before its trainer
did). Workers that ended with the job are no deaths.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from dltop.model import JobInfo, LoaderSample, ProcessSample, Snapshot
from dltop.model.findings import is_fault


def last_view(before: Snapshot, ended: Snapshot) -> Snapshot:
    """``before`` (the last view of the running job) with the exit ``ended`` (the tick that saw it go) added."""
    shown = {(f.id, tuple(f.pids)) for f in before.findings}
    faults = [f for f in ended.findings if is_fault(f.id) and (f.id, tuple(f.pids)) not in shown]
    died = {pid for f in faults for pid in f.pids}
    at_exit = {p.pid: p for p in ended.processes}
    return dataclasses.replace(
        before,
        taken_at=ended.taken_at,
        window_s=ended.window_s,
        job=dataclasses.replace(before.job, state="exited", exit_code=ended.job.exit_code),
        processes=[_gone_with_job(p, at_exit.get(p.pid), ended.job) for p in before.processes],
        loaders=[_with_deaths(loader, ended.loaders, died) for loader in before.loaders],
        findings=faults + list(before.findings),
        pending=[],
    )


def _gone_with_job(last: ProcessSample, at_exit: Optional[ProcessSample], job: JobInfo) -> ProcessSample:
    """Its last reading, as gone with its job; its exit code where the exit showed one (a zombie
    not reaped yet, or the job's own trainer)."""
    code = at_exit.exit_code if at_exit is not None else None
    if code is None and last.role == "trainer" and job.trainer_pids == [last.pid]:
        code = job.exit_code
    return dataclasses.replace(last, state="exited", exit_code=code)


def _with_deaths(loader: LoaderSample, at_exit: list[LoaderSample], died: set[int]) -> LoaderSample:
    """The loader as last seen, plus the workers whose death the exit raised as a fault."""
    known = {w.pid for w in loader.workers_exited}
    deaths = [
        w
        for other in at_exit
        if other.trainer_pid == loader.trainer_pid
        for w in other.workers_exited
        if w.pid in died and w.pid not in known
    ]
    return dataclasses.replace(loader, workers_exited=[*loader.workers_exited, *deaths]) if deaths else loader

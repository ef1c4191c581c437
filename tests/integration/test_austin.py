"""Austin streams a real trainer's samples and takes its workers' routine stacks; py-spy takes over
where Austin cannot attach. Real jobs, real Austin and py-spy."""

from __future__ import annotations

import dataclasses
import time

import pytest

from dltop.collect.stacks import budget
from dltop.collect.stacks.austin import StreamRun
from dltop.collect.stacks.sampler import ProcessStacks
from dltop.frames import worker_activity


def _trainer(collector, pid: int) -> ProcessStacks:
    return collector.stacks.procs[pid]


def test_trainer_streamed_and_workers_swept_by_austin(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--sample-ms", "15", "--batch-size", "4", "--step-ms", "2")
    job.wait_workers(2)
    collector = attach(job.pid)
    collector.stacks.watcher = dataclasses.replace(budget.LIVE_VIEW, sweep_every_s=1.0)  # three sweeps in 12 s
    assert collector.stacks.austin, "austin-dist is a dependency: it must be found"
    streamed, swept, ticks = False, {}, []

    def gathered() -> bool:
        """Streamed, 30 samples and every worker swept thrice: what the checks below need seen."""
        (loader,) = ticks[-1].loaders or [None]
        workers = {p.pid for p in ticks[-1].processes if p.role == "worker"}
        return (
            streamed and loader is not None and loader.trainer_time is not None
            and loader.trainer_time.samples >= 30
            and bool(workers) and set(swept) == workers and all(len(times) >= 3 for times in swept.values())
        )  # fmt: skip

    deadline = time.monotonic() + 12  # as many samples and sweeps within 12 s as the checks ask, or it fails
    while time.monotonic() < deadline:
        ticks.append(collector.tick())
        trainer = _trainer(collector, job.pid)
        streamed = streamed or isinstance(trainer.run, StreamRun)
        for p in collector.stacks.procs.values():
            if p.role == "worker" and p.sweep.swept_at is not None:
                swept.setdefault(p.pid, set()).add(p.sweep.swept_at)
        if gathered():
            break
        time.sleep(0.5)
    trainer = _trainer(collector, job.pid)
    assert streamed and not trainer.austin_failed and not trainer.sweep.failed
    (loader,) = ticks[-1].loaders
    # 7 samples a second from the first window: far more than py-spy's windows gave in this time
    assert loader.trainer_time.samples >= 30, loader.trainer_time
    assert loader.data_wait_percent > 50, loader.trainer_time
    workers = [p for p in ticks[-1].processes if p.role == "worker"]
    # every worker's stack refreshed again and again by the one Austin under the trainer
    assert set(swept) == {p.pid for p in workers} and all(len(times) >= 3 for times in swept.values()), swept
    assert all(p.stack for p in workers), workers
    assert {worker_activity(list(collector.stacks.procs[p.pid].stack)) for p in workers} <= {
        "idle", "fetching", "collating", "sending",
    }  # fmt: skip
    assert all(p.loader_config for p in collector.stacks.procs.values() if p.role == "worker")  # py-spy's locals

    # what the user looks at: a dump every tick, Austin's where mode
    looked_at = workers[0].pid
    collector.stacks.requested = {looked_at}
    dumped = set()
    for _ in range(6):
        collector.tick()
        proc = collector.stacks.procs[looked_at]
        if proc.run is not None and proc.austin_dump:
            dumped.add(proc.run_began.at)
        time.sleep(0.3)
    assert len(dumped) >= 3 and not collector.stacks.procs[looked_at].austin_failed


FAKE_AUSTIN = {  # austin-like scripts, the pid last among their arguments
    # attaches, then reads nothing whole: as Austin on a Python it does not know
    "unreadable": "echo '# austin: 3.7.0'; echo \"P$pid;T0:$pid;:INVALID: 1000\"",
    # streams, but never the main thread (a thread id it cannot match), and would run on
    "no-main-thread": 'for i in $(seq 60); do echo "P$pid;T0:1;x.py:f:1 1000"; done; exec sleep 30',
}


@pytest.mark.parametrize("austin", ["refused", *FAKE_AUSTIN])
def test_py_spy_takes_over_where_austin_cannot_sample(start_job, attach, monkeypatch, tmp_path, austin):
    fake = tmp_path / "austin"
    fake.write_text(f"#!/bin/sh\nfor pid; do :; done\n{FAKE_AUSTIN.get(austin, '')}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DLTOP_AUSTIN", "/bin/false" if austin == "refused" else str(fake))
    job = start_job("--workers", "1", "--persistent", "--sample-ms", "15", "--batch-size", "4", "--step-ms", "2")
    job.wait_workers(1)
    collector = attach(job.pid)
    ticks = []
    deadline = time.monotonic() + 7  # py-spy windows of 1, 2 and 3 s: tens of samples
    while time.monotonic() < deadline:
        ticks.append(collector.tick())
        time.sleep(0.5)
    collector.settle()
    ticks.append(collector.tick())
    assert _trainer(collector, job.pid).austin_failed
    (loader,) = ticks[-1].loaders
    assert loader.trainer_time and loader.trainer_time.samples >= 10, loader.trainer_time
    assert ticks[-1].stacks_status == "ok"
    (worker,) = [p for p in collector.stacks.procs.values() if p.role == "worker"]
    assert worker.stack and worker.austin_failed  # routine stacks from py-spy again

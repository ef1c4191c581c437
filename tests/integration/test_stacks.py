"""Stacks on real jobs: what workers do, the trainer's data wait, and the faults dltop must catch.

Hang thresholds are lowered to a few seconds so the suite stays quick; the detection logic is
the same as with the default 20 s (benchmarks/bench_stacks.py measures that one).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from dltop.diagnose import diagnose
from dltop.settings import Settings
from tests.support import alive, wait_for, watch, worker_with_id

HANG_AFTER = 4.0


def ids(findings: list) -> set:
    return {f.id for f in findings}


def only(findings: list, finding_id: str):
    (found,) = [f for f in findings if f.id == finding_id]
    return found


@pytest.mark.parametrize("how", ["lock", "sleep"])
def test_hung_worker_is_caught_with_its_frame(start_job, attach, how):
    job = start_job("--workers", "2", "--persistent", "--hang", how, "--hang-at", "6", "--step-ms", "5")
    stuck = worker_with_id(job, 0)
    collector = attach(job.pid, settings=Settings(hang_after_s=HANG_AFTER))
    ticks, findings = watch(collector, lambda t, f: "worker-hung" in ids(f), 60, "worker-hung")
    hung = only(findings, "worker-hung")
    assert hung.pids == [stuck] and hung.severity == "error"
    evidence = hung.evidence
    assert evidence["stuck_s"] >= HANG_AFTER and evidence["trainer_pid"] == job.pid
    assert "_hang" in evidence["stuck_frame"] and "job.py" in evidence["stuck_frame"]
    assert evidence["deadlock"] is (how == "lock")
    assert evidence["code"] == ("with _FLUSH_LOCK:  # never returns: the lock was held when this worker forked"
                                if how == "lock" else "time.sleep(3600)")  # fmt: skip
    assert ("deadlock" in hung.title) is (how == "lock")
    # The other worker is idle, the trainer waits for data: neither is blamed.
    procs = {p.pid: p for p in ticks[-1].processes}
    assert procs[stuck].activity == "stuck"
    assert procs[job.pid].activity == "waiting-for-data"
    assert {p.activity for p in procs.values() if p.role == "worker" and p.pid != stuck} == {"idle"}
    assert "trainer-stalled" not in ids(findings)


def test_a_worker_waiting_on_slow_storage_is_not_hung(start_job, attach):
    """Every sample sleeps 20 ms (a slow read) without CPU: the stack barely changes and the
    trainer waits for data, but the worker is scheduled 50 times a second: busy, not hung."""
    job = start_job("--workers", "1", "--persistent", "--sample-ms", "0", "--slow-every", "1", "--slow-ms", "20",
                    "--step-ms", "10")  # fmt: skip
    job.wait_workers(1)
    collector = attach(job.pid, settings=Settings(hang_after_s=HANG_AFTER))
    began = time.monotonic()
    ticks, findings = watch(collector, lambda t, f: time.monotonic() - began > 3 * HANG_AFTER, 60, "the window")
    assert "worker-hung" not in ids(findings) and "input-bound" in ids(findings)
    worker = [p for p in ticks[-1].processes if p.role == "worker"][0]
    assert worker.activity == "fetching" and (worker.stuck_s or 0) < HANG_AFTER


def test_killed_worker_is_reported_dead_after_the_trainer_exits(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--sample-ms", "5", "--step-ms", "5")
    victim = worker_with_id(job, 1)
    job.wait_workers(2)
    collector = attach(job.pid)
    ticks = [collector.tick()]
    time.sleep(1.5)  # let a dump show what the worker was doing
    ticks.append(collector.tick())
    os.kill(victim, signal.SIGKILL)
    ticks += watch(collector, lambda t, f: t[-1].job.state == "exited", 30, "the trainer to exit")[0]
    time.sleep(0.5)
    ticks.append(collector.tick())  # an exited job is still watched: its log is read once more
    findings = diagnose(ticks)
    exits = [(w.pid, w.exit_code, w.cause, w.in_trainer_log) for ld in ticks[-1].loaders for w in ld.workers_exited]
    assert "worker-died" in ids(findings), (victim, exits, (job.report / "stderr.txt").read_text()[-300:])
    died = only(findings, "worker-died")
    assert died.pids == [victim]
    assert died.evidence["exit_code"] == -signal.SIGKILL and died.evidence["signal"] == "SIGKILL"
    assert "OOM" in died.suggestion and "The trainer then exited" in died.detail
    # The job's stderr is a file here: torch's own message confirms it (the zombie may be reaped first)
    # - when torch wrote one: a kill while the worker hands over a tensor's fd ends the trainer with a
    # ConnectionResetError from the fd handover instead
    log = (job.report / "stderr.txt").read_text()
    said = any("DataLoader worker (pid" in line and str(victim) in line for line in log.splitlines())
    assert died.evidence["in_trainer_log"] is said, log[-600:]
    # The other left when torch shut the loader down: not a death.
    (loader,) = ticks[-1].loaders
    assert [w.cause for w in loader.workers_exited if w.pid != victim] in (["ended"], ["unknown"])


def test_a_job_killed_as_a_whole_is_not_a_worker_death(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--step-ms", "5")
    job.wait_workers(2)
    collector = attach(job.pid)
    ticks = [collector.tick()]
    os.killpg(job.pid, signal.SIGKILL)
    ticks += watch(collector, lambda t, f: t[-1].job.state == "exited", 30, "the job to exit")[0]
    assert ticks[-1].job.exit_code in (-signal.SIGKILL, None)
    assert "worker-died" not in ids(diagnose(ticks))


def _share(job, ticks_window_s: float, collector) -> tuple:
    """(dltop's data-wait %, the job's own measured %) over the same stretch."""
    wait_for(lambda: job.records("timing"), 30, "the job's timing record")
    before = job.records("timing")[0]
    ticks = [collector.tick()]
    deadline = time.monotonic() + ticks_window_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        ticks.append(collector.tick())
    collector.settle()
    ticks.append(collector.tick())
    after = job.records("timing")[0]
    truth = 100 * (after["wait_s"] - before["wait_s"]) / (after["total_s"] - before["total_s"])
    (loader,) = ticks[-1].loaders
    return loader.data_wait_percent, truth, loader, ticks


def test_input_bound_job_waits_for_data(start_job, attach):
    job = start_job("--workers", "1", "--persistent", "--sample-ms", "15", "--batch-size", "4", "--step-ms", "2")
    job.wait_workers(1)
    measured, truth, loader, ticks = _share(job, 8, attach(job.pid))
    assert measured > 60 and truth > 60
    assert abs(measured - truth) < 15, (measured, truth)
    assert loader.trainer_time.samples >= 30
    # each dump is one moment: an input-bound worker is between batches (reading its next index,
    # "idle") a small share of the time, so one of its dumps may show that; not all of them
    seen = {p.stack_at: p.activity for t in ticks for p in t.processes if p.role == "worker" and p.stack_at}
    assert any(a in ("fetching", "collating", "sending") for a in seen.values()), seen


def test_compute_bound_job_does_not(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--sample-ms", "0.5", "--step-ms", "40")
    job.wait_workers(2)
    measured, truth, loader, ticks = _share(job, 8, attach(job.pid))
    assert measured < 20 and truth < 20, (measured, truth)
    assert loader.trainer_time.running_percent > 70
    trainer = next(p for p in ticks[-1].processes if p.role == "trainer")
    assert trainer.activity == "running"


def test_without_workers_the_fetch_is_the_wait(start_job, attach):
    job = start_job("--workers", "0", "--sample-ms", "10", "--batch-size", "4", "--step-ms", "2")
    wait_for(lambda: job.records("timing"), 30, "the job to train")
    measured, truth, loader, _ = _share(job, 5, attach(job.pid))
    assert measured > 60 and loader.num_workers == 0


def test_stalled_trainer_is_not_blamed_on_workers(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--stall-after", "10", "--step-ms", "5")
    job.wait_workers(2)
    collector = attach(job.pid, settings=Settings(hang_after_s=HANG_AFTER))
    ticks, findings = watch(collector, lambda t, f: "trainer-stalled" in ids(f), 60, "trainer-stalled")
    stalled = only(findings, "trainer-stalled")
    assert stalled.pids == [job.pid]
    assert "_wait_for_peers" in stalled.evidence["user_frame"]
    assert "worker-hung" not in ids(findings)
    assert {p.activity for p in ticks[-1].processes if p.role == "worker"} == {"idle"}


def test_healthy_job_raises_no_fault(start_job, attach):
    """Epoch boundaries (workers respawn), slow samples, a long validation pass: all normal."""
    job = start_job(
        "--workers", "2", "--batches", "30", "--sample-ms", "2", "--step-ms", "5",
        "--slow-every", "25", "--slow-ms", "1500",
        "--val-workers", "2", "--val-step-ms", "150",
    )  # fmt: skip
    job.wait_workers(2)
    collector = attach(job.pid, settings=Settings(hang_after_s=HANG_AFTER))
    ticks = []
    for _ in range(40):
        ticks.append(collector.tick())
        time.sleep(0.5)
    faults = ids(diagnose(ticks, Settings(hang_after_s=HANG_AFTER)))
    assert not faults & {"worker-hung", "worker-died", "trainer-stalled", "stacks-unavailable"}, faults
    loaders = ticks[-1].loaders  # train and val; new workers join theirs once dumped
    assert sum(ld.worker_respawns for ld in loaders) >= 2 and len(job.records("epoch")) >= 1
    # Epoch-end exits are 0 when dltop reads the zombie before torch reaps it, else unknown (torch
    # joins its workers at once: on a busy machine no tick may catch a zombie): never died.
    causes = [w.cause for ld in loaders for w in ld.workers_exited]
    assert causes and set(causes) <= {"ended", "unknown"}, causes


def test_pin_memory_thread_seen_in_stacks(start_job, attach, monkeypatch):
    """Without CUDA torch starts no pin thread: pin_memory is reported False, not guessed True."""
    job = start_job("--workers", "1", "--persistent", "--pin-memory", "--step-ms", "5")
    job.wait_workers(1)
    collector = attach(job.pid)
    collector.tick()
    collector.settle()
    assert collector.tick().loaders[0].pin_memory is False


def test_full_dump_reads_the_loader_config(start_job):
    from tests.support import run_dltop

    job = start_job("--workers", "3", "--persistent", "--step-ms", "5")
    job.wait_workers(3)
    result = run_dltop("dump", "--pid", str(job.pid), "--json")
    assert result.returncode == 0, result.stderr
    import json

    dump = json.loads(result.stdout)
    configs = [p["loader_config"] for p in dump["processes"] if p["role"] == "worker"]
    assert len(configs) == 3
    assert {c["worker_id"] for c in configs} == {0, 1, 2}
    assert all(c["num_workers"] == 3 and c["persistent_workers"] is True for c in configs)
    assert alive(job.pid)  # paused briefly, never harmed


@pytest.mark.parametrize("method, val_workers", [("fork", "2"), ("spawn", "3")])
def test_train_and_val_loaders_are_told_apart(start_job, attach, method, val_workers):
    """fork: exact by the shared data_queue; spawn: by the loaders' settings (here num_workers)."""
    job = start_job("--workers", "2", "--val-workers", val_workers, "--persistent", "--start-method", method,
                    "--step-ms", "10")  # fmt: skip
    job.wait_workers(2 + int(val_workers), timeout=90)
    truth = {name: set(job.live_workers(name)) for name in ("train", "val")}
    collector = attach(job.pid)

    def split(ticks, findings):
        return {frozenset(ld.worker_pids) for ld in ticks[-1].loaders} == {frozenset(s) for s in truth.values()}

    ticks, _ = watch(collector, split, 60, "the loaders to split")
    by_pids = {frozenset(ld.worker_pids): ld for ld in ticks[-1].loaders}
    val = by_pids[frozenset(truth["val"])]
    assert val.num_workers == int(val_workers) and val.persistent_workers is True
    assert val.dataset == "SuiteDataset" and val.start_method == method

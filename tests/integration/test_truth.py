"""Jobs shaped unlike the usual fixtures, each against its own ground truth (the job's pids and
its own timing of next()): workers that live only while starting, renamed workers, a job that
exits mid-window, a zombie pid, and the DataLoader line a fix goes in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil

from dltop.collect.processes import discovery as procs
from tests.support import ROOT, alive, assert_one_line_error, run_dltop, wait_for, watch

JOB_PY = ROOT / "dltop" / "demo" / "job.py"


def timing(job) -> dict:
    return wait_for(lambda: job.records("timing") and job.records("timing")[0], 60, "the job's timing record")


def share(before: dict, after: dict, key: str) -> float:
    return 100 * (after[key] - before[key]) / (after["total_s"] - before["total_s"])


def test_short_lived_spawn_workers_are_start_up_not_data_wait(start_job):
    """spawn, non-persistent, 12 batches an epoch: workers import torch for most of their short
    lives. They are counted as workers from their first tick (starting), the loader knows its
    settings, and the trainer's wait for them is start-up, which persistent_workers=True saves."""
    job = start_job("--workers", "2", "--start-method", "spawn", "--batches", "12", "--sample-ms", "5",
                    "--step-ms", "20")  # fmt: skip
    wait_for(lambda: job.records("epoch"), 90, "an epoch")
    before = timing(job)
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "14", "--json", timeout=90)
    after = timing(job)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (loader,) = report["loaders"]
    assert loader["num_workers"] == 2 and loader["start_method"] == "spawn" and loader["persistent_workers"] is False
    assert loader["worker_respawns"] >= 4
    helpers = [p for p in report["processes"] if p["role"] == "helper"]
    assert all("resource_tracker" in p["cmdline"] for p in helpers), helpers  # no worker taken for a helper
    spent = loader["trainer_time"]
    truth_startup, truth_wait = share(before, after, "startup_s"), share(before, after, "wait_s")
    assert truth_startup > 40  # the job itself says: start-up dominates
    assert abs(spent["starting_workers_percent"] - truth_startup) < 25, (spent, truth_startup)
    assert abs(loader["data_wait_percent"] - truth_wait) < 20, (loader, truth_wait)
    by_id = {f["id"]: f for f in report["findings"]}
    respawning = by_id["workers-respawning"]
    assert respawning["severity"] == "warning" and "persistent_workers=True" in respawning["suggestion"]
    assert respawning["evidence"]["starting_workers_percent"] > 30
    bound = by_id.get("input-bound")
    assert bound is None or bound["evidence"]["suggested_workers"] <= 2, bound  # 2 CPUs: never 17 workers


def test_the_cpu_of_workers_that_live_between_two_ticks_is_the_jobs(start_job, attach):
    """fork, non-persistent, 10-batch epochs: each worker lives a fraction of a second, so most
    are never read. Their CPU is the job's all the same (it lands in the trainer's cutime once
    reaped); a CPU cap that missed it would suggest more workers than the CPUs can run."""
    from dltop.diagnose.figures import job_cpu

    job = start_job("--workers", "2", "--batches", "10", "--sample-ms", "5", "--step-ms", "5")
    wait_for(lambda: [r for r in job.records("epoch") if r["epoch"] >= 2], 60, "three epochs")
    collector = attach(job.pid, stacks=False)
    trainer = psutil.Process(job.pid)

    def spent() -> float:
        t = trainer.cpu_times()
        return t.user + t.system + t.children_user + t.children_system

    collector.tick()
    time.sleep(1.0)
    collector.tick()  # the trainer's reaped CPU is a rate from here on
    began, before = time.monotonic(), spent()
    ticks = []
    for _ in range(6):
        time.sleep(1.0)
        ticks.append(collector.tick())
    truth = (spent() - before) / (time.monotonic() - began)
    measured = sum(job_cpu(t) for t in ticks) / len(ticks)
    unseen = sum(p.unseen_children_cpu_percent or 0 for t in ticks for p in t.processes) / 100 / len(ticks)
    assert truth > 0.5, truth  # the job keeps a CPU busy
    assert unseen > 0.25 * truth, (unseen, truth)  # most of the workers' CPU was in no reading of theirs
    assert abs(measured - truth) < 0.35 * truth, (measured, truth)


def test_a_renamed_worker_is_still_a_worker(start_job, attach, monkeypatch):
    """A library renames the workers (prctl) on a torch that names its own: after the start-up
    grace, stacks keep them workers and their parent the trainer."""
    job = start_job("--workers", "2", "--persistent", "--unnamed-workers", "--step-ms", "20")
    truth = job.wait_workers(2)
    wait_for(lambda: all(open(f"/proc/{p}/comm").read().strip() == "python" for p in truth), 10, "renamed workers")
    monkeypatch.setattr(procs, "STARTUP_GRACE_S", 0.0)  # no grace: only evidence may decide
    collector = attach(job.pid)

    def settled(ticks, findings):
        tree = collector.tree
        return tree.trainer_pids == [job.pid] and set(tree.workers_of(job.pid)) == set(truth)

    watch(collector, settled, 30, "the renamed workers known as workers")
    for _ in range(4):  # and it stays so
        time.sleep(0.5)
        collector.tick()
        assert collector.tree.trainer_pids == [job.pid] and set(collector.tree.workers_of(job.pid)) == set(truth)


def test_a_job_that_exits_mid_window_keeps_its_trainers_time(start_job):
    job = start_job("--workers", "1", "--persistent", "--epochs", "1", "--batches", "60", "--sample-ms", "0",
                    "--slow-every", "1", "--slow-ms", "20", "--step-ms", "10")  # fmt: skip
    job.wait_workers(1)
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "30", "--json", timeout=90)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["job"]["state"] == "exited"
    (loader,) = report["loaders"]
    assert loader["trainer_time"] and loader["trainer_time"]["samples"] > 5 and loader["data_wait_percent"] > 40


def test_a_fix_names_the_dataset_and_the_line_that_builds_its_loader(start_job):
    # 40 samples a batch: their indices take more than the 128 characters py-spy shows of a local by default
    job = start_job("--workers", "1", "--persistent", "--sample-ms", "0", "--slow-every", "1", "--slow-ms", "5",
                    "--step-ms", "10", "--batch-size", "40")  # fmt: skip
    job.wait_workers(1)
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "6", "--json", timeout=60)
    report = json.loads(result.stdout)
    (loader,) = report["loaders"]
    assert loader["batch_size"] == 40, loader
    # a snapshot samples the trainer as py-spy does by default, not at a live view's 17 Hz at most
    assert loader["trainer_time"]["samples"] > 17 * 6, loader["trainer_time"]
    line = next(n for n, text in enumerate(JOB_PY.read_text().splitlines(), 1) if "return DataLoader(" in text)
    assert loader["dataset"] == "SuiteDataset" and loader["built_at"] == f"{JOB_PY}:{line}"
    (bound,) = [f for f in report["findings"] if f["id"] == "input-bound"]
    assert bound["suggestion"].startswith("num_workers=")
    assert f"in the DataLoader over SuiteDataset ({JOB_PY}:{line}); now num_workers=1" in bound["suggestion"]


def test_a_zombie_pid_is_called_what_it_is(tmp_path):
    """A child that exited and its parent never reaped."""
    parent = subprocess.Popen([sys.executable, "-c", "import os, time\nif os.fork() == 0: os._exit(3)\ntime.sleep(60)"],
                              start_new_session=True)  # fmt: skip
    try:
        zombie = wait_for(lambda: _zombie_child(parent.pid), 10, "the zombie")
        assert not alive(zombie)
        assert_one_line_error(run_dltop("snapshot", "--pid", str(zombie)), f"pid {zombie} has exited; its parent")
    finally:
        os.killpg(parent.pid, 9)
        parent.wait()


def _zombie_child(pid: int):
    try:
        children = open(f"/proc/{pid}/task/{pid}/children").read().split()
    except OSError:
        return None
    return next((int(c) for c in children if open(f"/proc/{c}/stat").read().rpartition(")")[2].split()[0] == "Z"),
                None)  # fmt: skip


def test_a_snapshot_reads_its_workers_busy_share_from_its_own_seconds(start_job):
    """A snapshot sweeps the workers every second (a live view every 10 s, between dumps): 4 workers
    busy all through a 6 s snapshot are read from ~20 stacks, not the ~6 the dumps reach, their
    busy share to within 10 points (all busy in n stacks reads +-100/n)."""
    job = start_job("--workers", "4", "--persistent", "--sample-ms", "0", "--slow-every", "1", "--slow-ms", "20",
                    "--step-ms", "5", "--batch-size", "4")  # fmt: skip
    job.wait_workers(4)
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "6", "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    (bound,) = [f for f in json.loads(result.stdout)["findings"] if f["id"] == "input-bound"]
    assert bound["evidence"]["worker_busy_error_percent"] < 10, bound["evidence"]

"""Discovery against real jobs: the exact worker pids, their trainer, under every start method."""

from __future__ import annotations

import sys

import pytest

from dltop.collect.processes import discovery as procs
from dltop.collect.processes.discovery import Discovery, find_jobs
from tests.support import wait_for

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def roles(tree, role: str) -> dict:
    return {pid: m for pid, m in tree.members.items() if m.role == role}


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_exact_workers_under_each_start_method(start_job, method):
    job = start_job("--workers", "3", "--start-method", method, "--persistent", "--step-ms", "20")
    truth = job.wait_workers(3)
    tree = Discovery().resolve(job.pid)
    assert tree.root_pid == job.pid and tree.trainer_pids == [job.pid] and tree.launcher_pid is None
    workers = roles(tree, "worker")
    assert set(workers) == set(truth)
    assert {(m.trainer_pid, m.start_method) for m in workers.values()} == {(job.pid, method)}
    helpers = roles(tree, "helper")
    assert len(helpers) == {"fork": 0, "spawn": 1, "forkserver": 2}[method]  # resource tracker, forkserver
    # Any process of the job resolves to the same job.
    for pid in [next(iter(truth)), *helpers]:
        assert Discovery().resolve(pid).root_pid == job.pid


def test_all_loaders_of_a_trainer_are_its_workers(start_job):
    job = start_job("--workers", "2", "--val-workers", "2", "--persistent", "--step-ms", "20")
    truth = job.wait_workers(4)
    assert {r["loader"] for r in job.records("worker")} == {"train", "val"}
    tree = Discovery().resolve(job.pid)
    assert set(roles(tree, "worker")) == set(truth)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_unnamed_workers_of_old_torch_found_by_ancestry(start_job, monkeypatch, method):
    job = start_job("--workers", "2", "--start-method", method, "--persistent", "--unnamed-workers", "--step-ms", "20")
    truth = job.wait_workers(2)
    wait_for(lambda: all(open(f"/proc/{p}/comm").read().strip() == "python" for p in truth), 10, "renamed workers")
    # torch >= 2.5 names its workers, so an unnamed child is not one; while young it is most
    # likely a worker about to name itself (the CI race this guards), so not a trainer either ...
    monkeypatch.setattr(procs, "STARTUP_GRACE_S", 3600.0)
    tree = Discovery().resolve(job.pid)
    assert roles(tree, "worker") == {} and tree.trainer_pids == [job.pid]
    monkeypatch.setattr(procs, "STARTUP_GRACE_S", 0.0)  # ... an old one may be a rank (mp.spawn-style) ...
    assert set(Discovery().resolve(job.pid).trainer_pids) == set(truth)
    discovery = Discovery()  # ... unless the parent is known to run a DataLoader with workers, or stacks tell
    discovery.loader_trainers = {job.pid}
    tree = discovery.resolve(job.pid)
    assert set(roles(tree, "worker")) == set(truth) and tree.trainer_pids == [job.pid]
    # ... but torch <= 2.2 named nothing: then command line and ancestry decide.
    monkeypatch.setattr(Discovery, "torch_version", lambda self, pid: "2.2.0" if self.cmdline(pid) else None)
    tree = Discovery().resolve(job.pid)
    assert set(roles(tree, "worker")) == set(truth) and tree.trainer_pids == [job.pid]


def test_torchrun_launcher_ranks_and_their_workers(start_job):
    job = start_job("--workers", "2", "--persistent", "--step-ms", "20", launcher=TORCHRUN)
    truth = job.wait_workers(4, timeout=120)
    ranks = job.trainers()
    assert len(ranks) == 2
    for pid in (job.pid, ranks[1], next(iter(truth))):
        tree = Discovery().resolve(pid)
        assert tree.root_pid == job.pid and tree.launcher_pid == job.pid
        assert tree.trainer_pids == ranks
        assert {p: m.trainer_pid for p, m in roles(tree, "worker").items()} == truth
    discovery = Discovery()
    discovery.resolve(job.pid)
    assert sorted(discovery.rank(p) for p in ranks) == [0, 1]


def test_find_jobs_lists_a_running_job(start_job):
    job = start_job("--workers", "2", "--persistent", "--step-ms", "20")
    truth = job.wait_workers(2)
    (tree,) = [t for t in find_jobs() if t.root_pid == job.pid]
    assert set(roles(tree, "worker")) == set(truth)

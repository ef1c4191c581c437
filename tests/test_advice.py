"""Advice rules: hand-built windows at, below and above their thresholds, and real jobs that
have the problem."""

from __future__ import annotations

import sys
import time

import pytest

from dltop.diagnose import Settings, diagnose
from dltop.model import JobInfo, LoaderSample, ProcessSample, Snapshot, TrainerTime
from tests.support import watch


def window(processes=(), loaders=()):
    job = JobInfo(1, 1, "python train.py", "running", "fork", [1])
    return [Snapshot("2026-01-01T00:00:10+00:00", 1.0, job, None, list(processes), list(loaders), [], "ok", [],
                     stacks_status="ok")]  # fmt: skip


def proc(num_fds, fd_limit=1024, kinds=None, role="worker"):
    return ProcessSample(7, 1, role, 1, "pt_data_worker", "", "sleeping", num_fds=num_fds, fd_limit=fd_limit,
                         fd_kinds=kinds)  # fmt: skip


def ids(findings):
    return [f.id for f in findings]


@pytest.mark.parametrize("num_fds, expect", [(800, []), (820, ["fd-near-limit"]), (1000, ["fd-near-limit"])])
def test_fd_near_limit_threshold(num_fds, expect):
    assert ids(diagnose(window([proc(num_fds, kinds={"file": num_fds})]))) == expect


def test_fd_near_limit_says_what_the_fds_are():
    (shm,) = diagnose(window([proc(1000, kinds={"shm": 990, "file": 10}, role="trainer")]))
    assert "set_sharing_strategy('file_system')" in shm.suggestion and shm.severity == "error"
    (files,) = diagnose(window([proc(850, kinds={"file": 840, "shm": 2})]))
    assert "worker_init_fn" in files.suggestion and files.severity == "warning" and files.pids == [7]


def loader(respawns, persistent=False, startup=5.0, workers=2):
    spent = TrainerTime(100, 30.0, 10.0, 0.0, startup, 90.0 - startup)
    return LoaderSample(1, workers, [2, 3], persistent, False, "spawn", 10.0, respawns, trainer_time=spent,
                        dataset="ImageFolder")  # fmt: skip


@pytest.mark.parametrize(
    "respawns, persistent, startup, expect",
    [(3, False, 5.0, None), (4, False, 5.0, "warning"), (4, False, 0.5, "info"), (8, None, 5.0, None),
     (8, True, 5.0, None)],
)  # fmt: skip
def test_workers_respawning(respawns, persistent, startup, expect):
    found = diagnose(window(loaders=[loader(respawns, persistent, startup)]))
    assert [f.severity for f in found] == ([expect] if expect else [])
    if expect:
        assert found[0].suggestion.startswith("DataLoader(imageFolder, ..., num_workers=2, persistent_workers=True")


def test_thresholds_are_settings():
    strict = Settings(fd_limit_share=0.5)
    assert ids(diagnose(window([proc(600, kinds={"file": 600})]), strict)) == ["fd-near-limit"]


# -- real jobs ------------------------------------------------------------------------


def test_a_worker_hoarding_files_is_named(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--open-files", "220", "--step-ms", "5",
                    launcher=["prlimit", "--nofile=256:256", sys.executable])  # fmt: skip
    job.wait_workers(2)
    ticks, findings = watch(attach(job.pid), lambda t, f: "fd-near-limit" in ids(f), 60, "fd-near-limit")
    near = [f for f in findings if f.id == "fd-near-limit"]
    assert {f.pids[0] for f in near} == set(job.live_workers())
    assert all(f.evidence["fd_limit"] == 256 and f.evidence["fd_kinds"]["file"] >= 220 for f in near)
    assert "worker_init_fn" in near[0].suggestion


def test_respawning_workers_get_persistent_workers_advice(start_job, attach):
    job = start_job("--workers", "2", "--batches", "3", "--sample-ms", "1", "--step-ms", "5")
    job.wait_workers(2)
    ticks, findings = watch(attach(job.pid), lambda t, f: "workers-respawning" in ids(f), 60, "workers-respawning")
    (advice,) = [f for f in findings if f.id == "workers-respawning"]
    assert advice.pids == [job.pid] and advice.evidence["respawns"] >= 2 * advice.evidence["num_workers"] >= 2
    assert "persistent_workers=True" in advice.suggestion


def test_persistent_job_gets_no_respawn_advice(start_job, attach):
    job = start_job("--workers", "2", "--persistent", "--batches", "3", "--step-ms", "5")
    job.wait_workers(2)
    collector = attach(job.pid)
    ticks = [collector.tick()]
    for _ in range(8):
        time.sleep(0.5)
        ticks.append(collector.tick())
    assert ticks[-1].loaders[0].persistent_workers is True
    assert "workers-respawning" not in ids(diagnose(ticks))

"""The fault rules (dltop/diagnose/faults.py) on hand-built windows: a hung worker, a worker that
died, a stalled trainer, stacks that could not be read."""

from __future__ import annotations

import dataclasses

import pytest

from dltop import frames
from dltop.diagnose import diagnose
from dltop.model import ExitedWorker, JobInfo, LoaderSample, ProcessSample, Snapshot
from dltop.settings import Settings


def snapshot(processes=(), loaders=(), state="running", exit_code=None, stacks_status="ok", stacks_fix=None):
    job = JobInfo(1, 1, "python train.py", state, "fork", [1], exit_code=exit_code)
    return Snapshot("2026-01-01T00:00:10+00:00", 1.0, job, None, list(processes), list(loaders), [], "ok", [],
                    stacks_status=stacks_status, stacks_fix=stacks_fix)  # fmt: skip


def proc(pid, role, activity, stuck_s=None, stack=None, trainer=1, state="sleeping"):
    return ProcessSample(pid, 1, role, trainer, "python", "", state, activity=activity, stuck_s=stuck_s, stack=stack)


LOCKED = [frames.make_frame("Dataset.__getitem__", "/home/me/data.py", 10)]
LOCKED[0] = dataclasses.replace(LOCKED[0], code="with CACHE_LOCK:")


def exited(pid, code, at="2026-01-01T00:00:05+00:00", cause=None):
    return ExitedWorker(pid, 1, 3.0, at, code, cause or ("died" if code else "ended"))


def loader(*gone):
    return LoaderSample(1, 2, [2, 3], True, False, "fork", 90.0, 0, list(gone))


@pytest.mark.parametrize(
    "trainer_activity, stuck_s, worker_activity, expect",
    [
        ("waiting-for-data", 25.0, "stuck", True),
        ("waiting-for-data", 15.0, "fetching", False),  # not long enough
        ("running", 25.0, "stuck", False),  # the trainer is not waiting on it
        ("waiting-for-data", 25.0, "idle", False),  # idle workers wait for work: normal
    ],
)
def test_worker_hung_needs_time_a_waiting_trainer_and_a_non_idle_stack(
    trainer_activity, stuck_s, worker_activity, expect
):
    window = [snapshot([proc(1, "trainer", trainer_activity), proc(2, "worker", worker_activity, stuck_s, LOCKED)])]
    found = [f for f in diagnose(window) if f.id == "worker-hung"]
    assert bool(found) is expect
    if expect:
        assert found[0].evidence["deadlock"] is True and "CACHE_LOCK" in found[0].detail


def test_worker_died_only_outside_normal_exits():
    isolated = snapshot(loaders=[loader(exited(2, -9), exited(3, 0))], state="exited", exit_code=1)
    assert [f.pids for f in diagnose([isolated]) if f.id == "worker-died"] == [[2]]
    epoch_end = snapshot(loaders=[loader(exited(2, 0), exited(3, 0))])
    assert not diagnose([epoch_end])
    unknown = snapshot(loaders=[loader(exited(2, None, cause="unknown"))])
    assert not diagnose([unknown])
    job_killed = snapshot(loaders=[loader(exited(2, -9), exited(3, -9))], state="exited", exit_code=-9)
    assert not diagnose([job_killed])
    reaped_first = snapshot(loaders=[loader(exited(2, -9), exited(3, None, cause="unknown"))], state="exited")
    assert not diagnose([reaped_first])  # could be the whole job killed: say nothing ...
    in_log = dataclasses.replace(exited(2, -9), in_trainer_log=True)
    said = snapshot(loaders=[loader(in_log, exited(3, None, cause="unknown"))], state="exited")
    assert [f.pids for f in diagnose([said])] == [[2]]  # ... unless torch reported that one death
    bus = snapshot(loaders=[loader(exited(2, -7))])
    (finding,) = diagnose([bus])
    assert finding.evidence["signal"] == "SIGBUS" and "--shm-size" in finding.suggestion


def test_trainer_stalled_only_outside_the_dataloader_with_idle_workers():
    stall = [frames.make_frame("sync_gradients", "/home/me/train.py", 50)]
    window = [snapshot([proc(1, "trainer", "running", 30.0, stall), proc(2, "worker", "idle")])]
    (finding,) = diagnose(window)
    assert finding.id == "trainer-stalled" and finding.pids == [1]
    busy = [snapshot([proc(1, "trainer", "running", 30.0, stall), proc(2, "worker", "fetching")])]
    assert not diagnose(busy)


def test_stacks_unavailable_carries_the_fix():
    window = [snapshot(stacks_status="denied", stacks_fix="run `sudo dltop --pid 1`")]
    (finding,) = diagnose(window, Settings())
    assert finding.id == "stacks-unavailable" and finding.suggestion == "run `sudo dltop --pid 1`"

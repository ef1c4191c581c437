"""The last view a live view keeps once its job exits (dltop.live.last_view): what was seen stays,
the exit is added, nothing is judged anew from processes that are gone."""

from __future__ import annotations

import dataclasses

from dltop.diagnose import diagnose
from dltop.live.last_view import last_view
from dltop.model import ExitedWorker, Finding
from dltop.tui import view
from tests.windows import bound_window


def _exit_tick(before, *exits: ExitedWorker, findings: tuple = ()):
    """The tick that saw the job gone: nothing of it left to read but what ended."""
    loaders = [dataclasses.replace(before.loaders[0], worker_pids=[], workers_exited=list(exits))]
    return dataclasses.replace(
        before,
        taken_at="2026-01-01T00:00:12+00:00",
        job=dataclasses.replace(before.job, cmdline="", state="exited", exit_code=-15),
        system=None,
        processes=[],
        loaders=loaders,
        findings=list(findings),
        pending=[],
    )


def test_the_last_view_keeps_every_process_finding_and_figure_and_adds_the_exit():
    window = bound_window(80.0, ticks=3)
    before = dataclasses.replace(window[-1], findings=diagnose(window))
    assert "input-bound" in [f.id for f in before.findings]
    shutdown = [ExitedWorker(pid, 1, 30.0, "2026-01-01T00:00:12+00:00", -15, "died", False) for pid in (10, 11)]
    garbage = Finding("input-bound", "warning", "no CPUs known", "", [1], {}, "Not enough evidence for a number yet")
    final = last_view(before, _exit_tick(before, *shutdown, findings=(garbage,)))

    assert final.job.state == "exited" and final.job.exit_code == -15 and final.job.cmdline == "python train.py"
    assert final.system == before.system and final.disks == before.disks and final.pending == []
    assert [(p.pid, p.role, p.state) for p in final.processes] == [
        (1, "trainer", "exited"), (10, "worker", "exited"), (11, "worker", "exited")
    ]  # fmt: skip
    assert final.processes[0].exit_code == -15  # the job's one trainer carries the job's exit
    assert final.findings == before.findings  # as last shown: no advice redone without the CPUs
    rows = view.rows(final)
    assert [r.pid for r in rows] == [1, 10, 11] and not [r for r in rows if r.alert == "dead"]


def test_a_worker_that_died_before_its_trainer_is_added_as_a_fault_with_its_row():
    window = bound_window(80.0, ticks=3)
    before = dataclasses.replace(window[-1], findings=diagnose(window))
    dead = ExitedWorker(12, 1, 30.0, "2026-01-01T00:00:11+00:00", -9, "died", True)
    died = Finding("worker-died", "error", "Worker 12 was killed by SIGKILL", "", [12], {}, "")
    final = last_view(before, _exit_tick(before, dead, findings=(died,)))

    assert final.findings == [died, *before.findings]
    assert final.loaders[0].workers_exited == [dead]
    assert [r.alert for r in view.rows(final) if r.pid == 12] == ["dead"]

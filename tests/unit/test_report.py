"""A window of ticks folded into one report (dltop/live/report.py), on hand-built data; the text
report of a pipeline of threads."""

from __future__ import annotations

import dataclasses
import json

from dltop.live.report import summarize
from dltop.model import DiskSample, JobInfo, ProcessSample, Snapshot, snapshot_from_dict
from tests.support import ROOT


def proc(pid: int, cpu, role: str = "worker") -> ProcessSample:
    return ProcessSample(pid, 1, role, 1, "pt_data_worker", "python train.py", "running", cpu_percent=cpu)


def disk(reads: float, r_await, util: float) -> DiskSample:
    return DiskSample("sda", reads, 0, reads * 4096, 0, r_await, None, 0.5, util, True)


def snap(window: float, processes: list, disks: list = (), state: str = "running") -> Snapshot:
    job = JobInfo(1, 1, "python train.py", state, "fork", [1])
    return Snapshot("t", window, job, None, processes, [], [], "no-nvml", list(disks))


def test_rates_are_time_weighted_and_awaits_io_weighted():
    ticks = [
        snap(0, [proc(1, None, "trainer"), proc(2, None)], [disk(0, None, 0)]),
        snap(1, [proc(1, 100, "trainer"), proc(2, 10)], [disk(100, 2.0, 50)]),
        snap(3, [proc(1, 0, "trainer"), proc(2, 50)], [disk(10, 20.0, 10)]),
    ]
    report = summarize(ticks)
    assert report.window_s == 4
    assert [p.cpu_percent for p in report.processes] == [25, 40]
    (folded,) = report.disks
    # 100 reads at 2 ms + 30 reads at 20 ms: iostat's r_await over the window.
    assert folded.r_await_ms == (100 * 2 + 30 * 20) / 130
    assert folded.util_percent == (50 + 30) / 4 and folded.reads_per_s == 130 / 4


def test_departed_workers_leave_processes_but_an_exited_job_keeps_everything():
    running = summarize([snap(0, [proc(1, None, "trainer"), proc(2, None)]), snap(1, [proc(1, 5, "trainer")])])
    assert [p.pid for p in running.processes] == [1]
    exited = summarize(
        [
            snap(0, [proc(1, None, "trainer"), proc(2, None)]),
            snap(1, [proc(1, 5, "trainer"), proc(2, 90)]),
            snap(1, [], state="exited"),
        ]
    )
    assert exited.job.state == "exited"
    assert [(p.pid, p.state, p.cpu_percent) for p in exited.processes] == [(1, "exited", 5), (2, "exited", 90)]


# -- the text report (dltop/text_report.py): a pipeline of threads -------------------------------


def test_the_text_report_lists_a_pipelines_threads_under_their_trainer_and_what_runs_it():
    from dltop.text_report import render

    snap = snapshot_from_dict(json.loads((ROOT / "tests/fixtures/snapshots/spdl-threads.json").read_text()))
    lines = render(snap).splitlines()
    table = lines[lines.index(next(line for line in lines if line.lstrip().startswith("PID"))) :]
    assert table[1].split()[:3] == ["19272", "19250", "trainer"]
    threads = [line.split() for line in table[2:8]]
    assert [row[:3] for row in threads] == [[str(tid), "19272", "thread"] for tid in (19279, 19280, 19303, 19304)] + [
        ["19277", "19272", "feeder"], ["19278", "19272", "feeder"]]  # fmt: skip
    assert threads[0][-2:] == ["fetching", "spdl_worker_thread__0"] and threads[0][4] == "3.1"
    assert "loader of trainer 19272: 4 threads (spdl) · feeders 2 · exited 0" in lines
    torchdata = dataclasses.replace(snap.loaders[0], pipeline="torchdata.nodes", start_method="fork", worker_threads=[])
    text = render(dataclasses.replace(snap, loaders=[torchdata]))
    assert "loader of trainer 19272: 4 workers (torchdata.nodes, processes) · feeders 0 · exited 0" in text
    assert "19279" not in text  # no threads, no thread rows

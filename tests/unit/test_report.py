"""A window of ticks folded into one report (dltop/live/report.py), on hand-built data."""

from __future__ import annotations

from dltop.live.report import summarize
from dltop.model import DiskSample, JobInfo, ProcessSample, Snapshot


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

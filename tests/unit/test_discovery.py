"""Discovery without a job: a command line kept once past exec, a known worker followed while it
runs and not once its pid is reused."""

from __future__ import annotations

from dltop.collect.processes import discovery as procs
from dltop.collect.processes.discovery import Discovery, JobTree, Member, ProcessTable
from dltop.collect.procfs import Stat


def test_a_command_line_is_kept_once_past_exec(monkeypatch):
    """Between fork and exec a spawn child reads as its parent, during exec as empty: neither is
    kept, or a spawn worker would be a fork child (or a helper) for good. Its own is."""
    spawn = ["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)"]
    trainer = ["python", "train.py"]
    reads = {1: [["/sbin/init"]], 100: [trainer], 101: [trainer, [], spawn, ["changed"]]}
    discovery = Discovery()

    def tick() -> None:
        ticks = procs.procfs.CLOCK_TICKS
        discovery.table = ProcessTable(
            stats={100: Stat(100, "python", "S", 1, 0, None), 101: Stat(101, "python", "R", 100, 5 * ticks, None)},
            children={100: [101]},
            uptime_s=6.0,
        )

    monkeypatch.setattr(
        procs.procfs, "read_cmdline", lambda pid: reads[pid].pop(0) if len(reads[pid]) > 1 else reads[pid][0]
    )
    seen = []
    for _ in range(4):
        tick()
        seen.append((discovery.cmdline(101), discovery._child_method(101)))
        assert discovery.cmdline(101) == seen[-1][0]  # one read a tick
    assert seen == [(trainer, "fork"), ([], None), (spawn, "spawn"), (spawn, "spawn")]


def test_a_known_worker_is_followed_while_it_runs_and_not_once_its_pid_is_reused():
    """A worker that outlived its trainer is still followed; once pids wrap, a new process with
    its pid (started later) is someone else's, not the job's."""
    worker = Member(4242, 1, "worker", 4200, "fork", start_ticks=1000)
    known = JobTree(4200, 4200, {4242: worker}, None)
    discovery = Discovery()
    discovery.table = ProcessTable(stats={4242: Stat(4242, "pt_data_worker", "S", 1, 1000, None)})
    assert discovery.still_running(known) == [4242]
    discovery.table = ProcessTable(stats={4242: Stat(4242, "bash", "S", 77, 9000, None)})
    assert discovery.still_running(known) == []

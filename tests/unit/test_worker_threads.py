"""A thread pipeline's threads under their trainer: per-thread samples from Austin's lines and
py-spy's speedscope, and the per-thread bookkeeping (kind, activity, busy share, CPU, stuck,
exited) on recorded stacks and a fake /proc."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from dltop.collect import procfs
from dltop.collect.loader_samples import judge_stuck
from dltop.collect.stacks.austin import parse_samples
from dltop.collect.stacks.pyspy import ThreadWindow, parse_dump, parse_record
from dltop.collect.stacks.threads import EXITED_KEEP_S, EXITED_MAX, PipelineThreads
from dltop.model import WorkerThread
from tests.support import FIXTURES

PYSPY = FIXTURES / "pyspy"
PID = 14055  # the trainer of pipeline_torchdata_threads.json
T = "/usr/lib/python3.11/threading.py"
F = "/usr/lib/python3.11/concurrent/futures/thread.py"
POOL = f"{T}:Thread._bootstrap:1002;{T}:Thread.run:982;{F}:_worker:83"
LINES = [
    "# austin: 3.7.0",
    "P7;T0:7;/srv/train.py:<module>:9;/usr/lib/python3.11/queue.py:Queue.get:171 1000",
    f"P7;T0:11;{POOL};{F}:_WorkItem.run:58;/srv/train.py:load:5 1000",
    f"P7;T0:12;{POOL} 1000",
    f"P7;T0:11;{POOL} 1000",
    f"P7;T0:12;{POOL};{F}:_WorkItem.run:58;/srv/train.py:load:5 1000",
    f"P7;T0:11;{POOL};{F}:_WorkItem.run:58;/srv/train.py:load:5 1000",
]


def test_austin_counts_each_threads_samples_by_stack_and_keeps_its_newest():
    main, others, by_thread, tids = parse_samples(LINES, 7, {}, by_thread=True)
    assert len(main) == 1 and set(by_thread) == {11, 12} == tids
    eleven = by_thread[11]
    assert sorted(eleven.counts.values()) == [1, 2] and eleven.newest[-1].function == "load"
    assert by_thread[12].newest[-1].function == "load"  # the last of thread 12's lines, not its first
    assert eleven.name is None  # Austin names no thread
    assert others == {s for w in by_thread.values() for s in w.counts}


def test_py_spy_record_gives_each_thread_its_samples_and_python_name():
    text = (PYSPY / "pipeline_spdl_record.json").read_text()
    main, others, by_thread, tids = parse_record(text, 30451)
    assert len(main) == 21 and 30451 not in by_thread and tids == set(by_thread)
    assert {w.name for w in by_thread.values()} == {
        "spdl_event_loop_thread", "spdl_sync_source", *(f"spdl_worker_thread__{i}" for i in range(4))
    }  # fmt: skip
    assert all(sum(w.counts.values()) == 21 for w in by_thread.values())
    assert others == {s for w in by_thread.values() for s in w.counts}


def recorded_windows(name: str) -> tuple[int, dict[int, ThreadWindow], dict[int, str]]:
    """(main tid, one-sample windows of its other threads, their names) of a recorded dump."""
    dumped = parse_dump((PYSPY / name).read_text())
    main = next(t.tid for t in dumped if t.name == "MainThread")
    windows = {t.tid: ThreadWindow(Counter([t.frames]), t.frames) for t in dumped if t.tid != main}
    return main, windows, {t.tid: t.name for t in dumped}


class FakeProc:
    """/proc/<pid>/task/<tid>/{stat,schedstat} of the threads the test lists: CPU ticks and
    (run ns, timeslices); a thread not listed is gone."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.threads: dict[int, tuple[int, int, int]] = {}  # tid -> (cpu ticks, run ns, slices)
        self.reads: list[int] = []
        monkeypatch.setattr(procfs, "read_thread_stat", self.stat)
        monkeypatch.setattr(procfs, "read_thread_schedstat", self.schedstat)

    def stat(self, pid: int, tid: int) -> procfs.Stat:
        self.reads.append(tid)
        if tid not in self.threads:
            raise FileNotFoundError(tid)
        return procfs.Stat(tid, "python", "S", 1, 0, None, cpu_ticks=self.threads[tid][0])

    def schedstat(self, pid: int, tid: int) -> tuple[int, int, int]:
        _, run_ns, slices = self.threads[tid]
        return run_ns, 0, slices


def test_a_torchdata_trainers_threads_workers_first_then_feeders_each_by_tid():
    main, windows, names = recorded_windows("pipeline_torchdata_threads.json")
    threads = PipelineThreads()
    threads.named(names)
    threads.add_window(windows, now=1.0)
    rows = threads.rows()
    assert [(r.tid, r.name, r.kind, r.activity) for r in rows] == [
        (14059, "Thread-2 (_apply_udf)", "worker", "fetching"),
        (14060, "Thread-3 (_apply_udf)", "worker", "fetching"),
        (14058, "Thread-1 (_populate_queue)", "feeder", "idle"),
        (14061, "Thread-4 (_sort_worker)", "feeder", "idle"),
        (14062, "Thread-5 (_populate_queue)", "feeder", "idle"),
    ]
    assert [r.busy_percent for r in rows] == [100.0, 100.0, 0.0, 0.0, 0.0]
    assert rows[0].stack and rows[0].stack[-1].function == "decode" and rows[0].cpu_percent is None


def test_threads_that_are_no_part_of_the_pipeline_are_not_kept():
    """The torchdata process trainer: its QueueFeederThread (multiprocessing's) is no pipeline thread."""
    _, windows, names = recorded_windows("pipeline_torchdata_processes.json")
    threads = PipelineThreads()
    threads.add_window(windows, now=1.0)
    assert {r.tid for r in threads.rows()} == {14198, 14202, 14203}
    assert all(r.kind == "feeder" for r in threads.rows())
    assert names[14199] == "QueueFeederThread"


def test_busy_share_counts_samples_over_the_trainers_time_history():
    _, windows, _ = recorded_windows("pipeline_spdl.json")
    (idle,) = [w for w in windows.values() if w.newest[-1].function == "_worker"]
    (fetching, *_) = [w for w in windows.values() if w.newest[-1].function == "decode"]
    threads = PipelineThreads()
    threads.add_window({5: ThreadWindow(Counter({fetching.newest: 3, idle.newest: 1}), idle.newest)}, now=1.0)
    threads.add_window({5: ThreadWindow(Counter({idle.newest: 4}), idle.newest)}, now=2.0)
    (row,) = threads.rows()
    assert (row.kind, row.activity, row.busy_percent) == ("worker", "idle", 37.5)
    threads.add_window({5: ThreadWindow(Counter({fetching.newest: 2}), fetching.newest)}, now=32.0)
    (row,) = threads.rows()  # the first window is older than 30 s
    assert (row.activity, row.busy_percent) == ("fetching", pytest.approx(100 * 2 / 6))


def windows_of(threads: dict[int, tuple]) -> dict[int, ThreadWindow]:
    return {tid: ThreadWindow(Counter([stack]), stack) for tid, stack in threads.items()}


@pytest.fixture
def torchdata() -> tuple[tuple, tuple]:
    """(a fetching worker's stack, an idle feeder's) of the recorded torchdata trainer."""
    _, windows, _ = recorded_windows("pipeline_torchdata_threads.json")
    return windows[14059].newest, windows[14058].newest


def test_cpu_from_each_threads_stat_and_the_kernels_name_without_pythons(monkeypatch, torchdata):
    fetching, _ = torchdata
    proc = FakeProc(monkeypatch)
    threads = PipelineThreads()
    threads.add_window(windows_of({21: fetching}), now=0.0)
    proc.threads[21] = (100, 0, 0)
    threads.read(PID, now=0.0, wall=1000.0)
    proc.threads[21] = (100 + procfs.CLOCK_TICKS // 4, 10**8, 40)
    threads.read(PID, now=2.0, wall=1002.0)
    (row,) = threads.rows()
    assert row.cpu_percent == pytest.approx(12.5) and row.name == "python"  # comm, until py-spy names it


def stuck_after(proc: FakeProc, threads: PipelineThreads, stack: tuple, seconds: int) -> WorkerThread:
    """A thread that keeps ``stack`` and never runs: a window and a reading every second."""
    proc.threads[21] = (5, 10**6, 9)
    for now in range(seconds + 1):
        threads.add_window(windows_of({21: stack}), now=float(now))
        threads.read(PID, now=float(now), wall=1000.0 + now)
    (row,) = threads.rows()
    return row


def test_a_thread_that_keeps_a_busy_stack_without_running_is_stuck_past_the_hang_threshold(monkeypatch, torchdata):
    fetching, idle = torchdata
    proc = FakeProc(monkeypatch)
    row = stuck_after(proc, PipelineThreads(), fetching, 25)
    assert row.activity == "fetching" and row.stuck_s == 25.0  # quiet since its first reading
    assert judge_stuck([row], hang_after_s=20.0)[0].activity == "stuck"
    assert judge_stuck([row], hang_after_s=30.0)[0].activity == "fetching"
    # an idle thread (waiting for work) is never stuck, however long it waits
    assert stuck_after(proc, PipelineThreads(), idle, 25).stuck_s is None


def test_a_thread_that_runs_is_not_stuck(monkeypatch, torchdata):
    fetching, _ = torchdata
    proc = FakeProc(monkeypatch)
    threads = PipelineThreads()
    for now in range(25):
        proc.threads[21] = (now, now * 10**8, now * 30)  # a tenth of a core, woken 30 times a second
        threads.add_window(windows_of({21: fetching}), now=float(now))
        threads.read(PID, now=float(now), wall=1000.0 + now)
    (row,) = threads.rows()
    assert row.activity == "fetching" and (row.stuck_s or 0.0) < 2


def test_a_thread_gone_keeps_its_last_row_with_when_for_a_minute(monkeypatch, torchdata):
    fetching, idle = torchdata
    proc = FakeProc(monkeypatch)
    threads = PipelineThreads()
    threads.named({21: "Thread-2 (_apply_udf)"})
    threads.add_window(windows_of({21: fetching, 22: idle}), now=0.0)
    proc.threads = {21: (1, 1, 1), 22: (1, 1, 1)}
    threads.read(PID, now=0.0, wall=1_700_000_000.0)
    del proc.threads[21]  # the epoch ended: torchdata's next iter() starts new threads
    threads.read(PID, now=1.0, wall=1_700_000_001.0)
    assert [r.tid for r in threads.rows()] == [22]
    (gone,) = threads.exited()
    assert (gone.tid, gone.name, gone.activity, gone.gone_at) == (
        21, "Thread-2 (_apply_udf)", "fetching", "2023-11-14T22:13:21+00:00"
    )  # fmt: skip
    threads.read(PID, now=1.0 + EXITED_KEEP_S + 0.5, wall=1_700_000_062.0)
    assert threads.exited() == []


def test_at_most_64_exited_threads_are_kept_newest_last(monkeypatch, torchdata):
    fetching, _ = torchdata
    FakeProc(monkeypatch)  # no thread listed: each is gone at its first reading
    threads = PipelineThreads()
    for tid in range(100, 100 + EXITED_MAX + 6):
        threads.add_window(windows_of({tid: fetching}), now=1.0)
        threads.read(PID, now=1.0, wall=1000.0)
    assert [r.tid for r in threads.exited()] == list(range(106, 100 + EXITED_MAX + 6))


def test_names_are_asked_for_when_a_thread_has_none_at_most_every_10_s(torchdata):
    fetching, _ = torchdata
    threads = PipelineThreads()
    assert not threads.wants_names(0.0)  # no thread kept
    threads.add_window(windows_of({21: fetching}), now=0.0)
    assert threads.wants_names(0.0)
    threads.names_asked_at = 0.0
    assert not threads.wants_names(9.0) and threads.wants_names(10.0)
    threads.named({21: "Thread-2 (_apply_udf)"})
    assert not threads.wants_names(20.0)


def test_a_trainers_python_threads_cpu_is_read_from_their_own_files_and_forgotten_when_they_end():
    """This process's own threads, read from /proc: one that spins counts its CPU, one that sleeps
    next to nothing; once both end, nothing is read (0, not a stale figure)."""
    import threading
    import time

    from dltop.collect.stacks.python_threads import PythonThreads

    done = threading.Event()

    def spin() -> None:
        while not done.is_set():
            sum(range(1000))

    spinning, sleeping = threading.Thread(target=spin), threading.Thread(target=done.wait)
    spinning.start(), sleeping.start()
    try:
        threads = PythonThreads()
        assert threads.cpu_percent is None  # no samples yet: unknown, not none
        threads.saw({spinning.native_id, sleeping.native_id})
        threads.read(os.getpid(), time.monotonic())
        assert threads.cpu_percent is None  # each counted from its second reading
        time.sleep(0.5)
        threads.read(os.getpid(), time.monotonic())
        assert threads.cpu_percent is not None and 5.0 < threads.cpu_percent <= 110.0
    finally:
        done.set()
        spinning.join(), sleeping.join()
    # join() returns a moment before the thread's /proc files go
    ended = [f"/proc/self/task/{t.native_id}" for t in (spinning, sleeping)]
    deadline = time.monotonic() + 5.0
    while any(os.path.exists(path) for path in ended) and time.monotonic() < deadline:
        time.sleep(0.01)
    threads.read(os.getpid(), time.monotonic())
    assert threads.cpu_percent == 0.0

"""The stack sampler's schedule on a fake clock: which runs it starts, when, on which budget.

No job and no py-spy or Austin: the run classes are replaced by fakes that keep the commands
they were given and answer with the stack the test gave the process, and each process's
schedstat (main-thread CPU and timeslices) is what the test says it did. One tick a second.
"""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass
from typing import Optional

import pytest

from dltop.collect.stacks import budget, pyspy, sampler
from dltop.collect.stacks.budget import (
    DUMP_BURST,
    LIVE_VIEW,
    MAX_IN_FLIGHT,
    NODE,
    REQUESTED,
    ROUTINE,
    SNAPSHOT,
    STREAM_CPU_SHARE,
    STREAM_RATE_DITHER,
    STREAM_STARTUP_S,
    DumpBudget,
    Pricing,
    sweep_interval_s,
    sweep_window_s,
)
from dltop.collect.stacks.hangs import HangEvidence
from dltop.collect.stacks.pyspy import RunResult
from dltop.frames import make_frame

JOB = 1000
WALL = 1_700_000_000.0
TORCH = "/venv/lib/python3.11/site-packages/torch/utils/data"
TRAIN = "/srv/train.py"
# stacks outermost first: (function, file, line)
FETCHING = [
    ("<module>", TRAIN, 9),
    ("_worker_loop", f"{TORCH}/_utils/worker.py", 309),
    ("fetch", f"{TORCH}/_utils/fetch.py", 52),
]
WAITING = [
    ("<module>", TRAIN, 20),
    ("__next__", f"{TORCH}/dataloader.py", 631),
    ("_get_data", f"{TORCH}/dataloader.py", 1295),
]
IDLE = [
    ("<module>", TRAIN, 9),
    ("_worker_loop", f"{TORCH}/_utils/worker.py", 309),
    ("get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),
]
STEP = [("<module>", TRAIN, 20), ("step", TRAIN, 40)]


DITHERED = budget.dithered


@pytest.fixture(autouse=True)
def undithered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every window at its affordable rate (the dither's own test draws it)."""
    monkeypatch.setattr(budget, "dithered", lambda: 1.0)
    monkeypatch.setattr(sampler, "dithered", lambda: 1.0)


class FakeRun:
    """Stands in for PySpyRun: keeps its command and answers with the stack its process had when
    it began (None while the job holds it)."""

    job: FakeJob

    def __init__(self, command: list[str], timeout_s: float, output: Optional[str] = None) -> None:
        self.command, self.began, self.held = command, self.job.now, _pid(command) in self.job.hold
        self.answer = self.job.answer(command)
        self.process = None
        self.job.runs.append(self)

    def poll(self) -> Optional[RunResult]:
        return None if self.held else self.answer

    def kill(self) -> None:
        self.held = True

    def interrupt(self) -> None:
        pass


class FakeStream(FakeRun):
    """Stands in for StreamRun: runs on; ``take`` gives the lines the test fed it."""

    def __init__(self, command: list[str], timeout_s: float) -> None:
        super().__init__(command, timeout_s)
        self.lines: list[str] = []
        self.lines_taken = 0

    def poll(self) -> Optional[RunResult]:
        return None

    def take(self) -> list[str]:
        lines, self.lines = self.lines, []
        self.lines_taken += len(lines)
        return lines


@dataclass
class Proc:
    role: str
    stack: list[tuple[str, str, int]]
    working: bool = True  # its main thread runs between ticks
    run_ns: int = 0
    slices: int = 0


class FakeJob:
    """Processes whose stacks and CPU the test sets, the sampler under test on a fake clock, and
    every run it started."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, austin: str = "", dumps_per_s: float = 1.0) -> None:
        self.now = 0.0
        self.hold: set[int] = set()  # pids whose runs answer only when released
        self.procs: dict[int, Proc] = {}
        self.runs: list[FakeRun] = []
        monkeypatch.setattr(sampler, "PySpyRun", type("Run", (FakeRun,), {"job": self}))
        monkeypatch.setattr(sampler, "StreamRun", type("Stream", (FakeStream,), {"job": self}))
        monkeypatch.setattr(sampler, "_alive", lambda proc: True)
        self.sampler = sampler.StackSampler(
            JOB, py_spy="py-spy", austin=austin, dumps_per_s=dumps_per_s, clock=self.clock, wall=self.wall
        )

    def clock(self) -> float:
        return self.now

    def wall(self) -> float:
        return WALL + self.now

    def tick(self) -> None:
        """One tick at ``now``, then a second passes."""
        for proc in self.procs.values():
            if proc.working:
                proc.run_ns, proc.slices = proc.run_ns + 500_000_000, proc.slices + 50
        members = [(pid, 1, p.role, (p.run_ns, 0, p.slices)) for pid, p in self.procs.items()]
        self.sampler.update(members)
        self.now += 1

    def run_until(self, end: float) -> None:
        while self.now <= end:
            self.tick()

    def release(self) -> None:
        for run in self.runs:
            run.held = False

    def answer(self, command: list[str]) -> Optional[RunResult]:
        """What a dump started now shows: py-spy's JSON (with ``_worker_loop``'s locals where
        asked) or Austin's where mode; record windows and streams give nothing here."""
        pid = _pid(command)
        stack = self.procs[pid].stack
        if command[1] == "dump":
            return RunResult(True, _pyspy_dump(pid, stack, with_locals="--locals" in command), "")
        if command[1] == "-w":
            return RunResult(True, _austin_where(pid, stack), "")
        return None

    def dumps(self) -> list[tuple[float, int]]:
        """(when, pid) of every dump started, py-spy's or Austin's."""
        return [(run.began, _pid(run.command)) for run in self.runs if run.command[1] in ("dump", "-w")]


def _pid(command: list[str]) -> int:
    return int(command[command.index("--pid") + 1]) if "--pid" in command else int(command[-1])


def _pyspy_dump(pid: int, stack: list[tuple[str, str, int]], with_locals: bool) -> str:
    frames = []
    for function, path, line in reversed(stack):  # py-spy lists frames innermost first
        frame: dict = {"name": function, "filename": path, "line": line}
        if with_locals and function == "_worker_loop":
            frame["locals"] = [{"name": "worker_id", "repr": str(pid % 10)}, {"name": "num_workers", "repr": "2"}]
        frames.append(frame)
    return json.dumps([{"thread_id": 1, "os_thread_id": pid, "thread_name": "MainThread", "frames": frames}])


def _austin_where(pid: int, stack: list[tuple[str, str, int]]) -> str:
    head = f"\n\n\U0001f4a4 Process {pid} \U0001f9f5 Thread 0:{pid}\n\n"
    return head + "".join(f"    {function} ({path}:{line})\n" for function, path, line in stack)


def _austin_line(pid: int, stack: list[tuple[str, str, int]]) -> str:
    """One sample of a process's main thread as Austin's pipe mode writes it."""
    return f"P{pid};T0:{pid};" + ";".join(f"{path}:{function}:{line}" for function, path, line in stack) + " 1000"


@pytest.fixture
def make_job(monkeypatch: pytest.MonkeyPatch):
    jobs: list[FakeJob] = []

    def make(**kwargs) -> FakeJob:
        jobs.append(FakeJob(monkeypatch, **kwargs))
        return jobs[-1]

    yield make
    for job in jobs:
        job.sampler.close()


def test_dump_tokens_refill_at_dumps_per_s_times_share_up_to_a_burst():
    budget = DumpBudget()
    assert (budget.routine, budget.urgent) == (DUMP_BURST, DUMP_BURST)
    assert [budget.take(ROUTINE) for _ in range(5)] == [True, True, True, True, False]
    budget.refill(2.0, dumps_per_s=1.0, share=0.25)  # half a token
    assert (budget.routine, budget.urgent) == (0.5, DUMP_BURST)
    assert not budget.take(ROUTINE) and budget.take(REQUESTED)  # what the user looks at needs none
    budget.refill(100.0, dumps_per_s=1.0, share=0.25)
    assert budget.routine == DUMP_BURST


def test_a_working_worker_is_dumped_as_the_routine_budget_allows(make_job):
    """0.5 a second (1 a second, half the budget): after the first dump (urgent, a new process),
    a burst of routine dumps while the 4 tokens last (the first second's refill is lost to the
    cap), then one every 2 s."""
    job = make_job(dumps_per_s=1.0)
    job.sampler.share = 0.5
    job.procs[11] = Proc("worker", FETCHING)
    job.run_until(20)
    assert [when for when, _ in job.dumps()] == [0, 1, 2, 3, 4, 5, 6, 7, 9, 11, 13, 15, 17, 19]


def test_a_worker_quiet_after_working_is_dumped_on_the_urgent_budget(make_job):
    """Routine tokens (0.25 a second) run out by t2 and serve worker 11 again at t5 and t9; worker
    12 stops working after t3, and 3 s of quiet later is a hang to confirm: dumped at t6 from the
    urgent budget, ahead of the routine refresh it would have waited for."""
    job = make_job(dumps_per_s=0.25)
    job.procs[11] = Proc("worker", FETCHING)
    job.procs[12] = quiet = Proc("worker", FETCHING)
    for _ in range(13):
        quiet.working = job.now < 4
        job.tick()
    assert job.dumps() == [(0, 11), (0, 12), (1, 11), (1, 12), (2, 11), (2, 12), (5, 11), (6, 12), (9, 11)]


def test_quiet_for_3_s_after_working_is_a_hang_to_confirm():
    """Not an idle worker (waiting for an index) that used no more than 5 ms of CPU since its dump."""
    fetching, idle = (tuple(make_frame(*frame) for frame in stack) for stack in (FETCHING, IDLE))
    hang = HangEvidence()
    for now in (10.0, 11.0, 12.0):
        hang.read(run_ns=10**9, slices=100, now=now)  # quiet since 10
    assert hang.to_confirm(fetching, run_ns_at_dump=10**9) is False  # quiet 2 s: between batches
    hang.read(run_ns=10**9, slices=100, now=13.0)
    assert hang.to_confirm(fetching, run_ns_at_dump=10**9) is True
    assert hang.to_confirm(idle, run_ns_at_dump=10**9 - 5_000_000) is False
    assert hang.to_confirm(idle, run_ns_at_dump=10**9 - 5_000_001) is True


def test_a_hang_to_confirm_takes_the_last_slot_before_an_older_routine_refresh(make_job):
    """Workers 21-23 hold three of the four dumps in flight for good, so 11 and 12 take turns on
    the last one, oldest dump first, while routine tokens last (0.25 a second). Worker 12 stops
    working after t6; at t9 it is a hang to confirm and takes the slot (and an urgent token) from
    11, whose routine token waits for the next tick."""
    job = make_job(dumps_per_s=0.25)
    job.hold = {21, 22, 23}
    for pid in (21, 22, 23, 11):
        job.procs[pid] = Proc("worker", FETCHING)
    job.procs[12] = quiet = Proc("worker", FETCHING)
    for _ in range(11):
        quiet.working = job.now <= 6
        job.tick()
    assert job.dumps() == [
        (0, 21), (0, 22), (0, 23), (0, 11), (1, 12), (2, 11), (3, 12), (4, 11), (5, 12), (9, 12), (10, 11),
    ]  # fmt: skip


def test_an_unchanged_process_is_not_dumped_again_and_its_stuck_time_grows(make_job):
    """Worker 11 works until t2, then never runs: the dump that began at t2 is its last, and its
    stack has provably been current since (its timeslices did not change)."""
    job = make_job(dumps_per_s=1.0)
    job.procs[11] = worker = Proc("worker", FETCHING)
    stuck = {}
    for _ in range(11):
        worker.working = job.now <= 2
        job.tick()
        stuck[job.now - 1] = job.sampler.procs[11].hang.stuck_s
    assert [when for when, _ in job.dumps()] == [0, 1, 2]
    assert stuck[3] == 0.0 and stuck[4] == 2.0 and stuck[10] == 8.0


def test_what_the_user_looks_at_is_dumped_every_tick_without_budget(make_job):
    """Worker 12 (looked at) gets a dump every tick, Austin's once py-spy's first read its loader;
    worker 11 gets its first dump (urgent) and four routine ones, then no more (no refill)."""
    job = make_job(austin="/opt/austin", dumps_per_s=0.0)
    job.procs[11] = Proc("worker", FETCHING)
    job.procs[12] = Proc("worker", FETCHING)
    job.sampler.requested = {12}
    job.run_until(9)
    assert [when for when, pid in job.dumps() if pid == 12] == list(range(10))
    assert [when for when, pid in job.dumps() if pid == 11] == [0, 1, 2, 3, 4]
    looked_at = [run.command for run in job.runs if _pid(run.command) == 12]
    assert looked_at[0] == ["py-spy", "dump", "--json", "--pid", "12", "--nonblocking", *["--locals"] * 4]
    assert looked_at[1:] == [["/opt/austin", "-w", "12"]] * 9


def test_at_most_max_in_flight_dumps_at_once(make_job):
    """Six new workers at once: four dumps start, none while they are under way, the other two
    once they came back (one on the urgent budget, refilled to 1, one on the routine one)."""
    job = make_job()
    for pid in range(11, 17):
        job.procs[pid] = Proc("worker", FETCHING, working=False)
    job.hold = set(job.procs)
    job.run_until(1)
    job.hold = set()
    job.release()
    job.run_until(3)
    assert MAX_IN_FLIGHT == 4
    assert job.dumps() == [(0, 11), (0, 12), (0, 13), (0, 14), (2, 15), (2, 16)]


def _job_with_sweep(make_job, share: float) -> FakeJob:
    job = make_job(austin="/opt/austin", dumps_per_s=0.25)
    job.sampler.share = share
    job.procs[JOB] = Proc("trainer", WAITING)
    job.procs[11] = Proc("worker", FETCHING)
    job.procs[12] = Proc("worker", FETCHING)
    return job


def _sweep_runs(job: FakeJob) -> list[FakeStream]:
    return [run for run in job.runs if isinstance(run, FakeStream) and "-C" in run.command]


@pytest.mark.parametrize("share, interval_us, window_s, lately_s", [(1.0, 10_000_000, 300, 21),
                                                                   (1 / 6, 20_000_000, 600, 41)])  # fmt: skip
def test_swept_workers_are_not_dumped_routinely(make_job, share, interval_us, window_s, lately_s):
    """One Austin under the trainer samples every process under it, every 10 s (20 s on a sixth
    of a live view's budget: as if 6 trainers shared it, twice the 3 it sweeps in full). Workers'
    first dumps read their loader, routine tokens then go; a sweep that finds a routine dump
    under way leaves the stack to it but has the worker: no routine dump after it, until the
    sweep has given nothing for twice its interval (and a second)."""
    job = _job_with_sweep(make_job, share)
    job.tick()
    (sweep,) = _sweep_runs(job)
    command = ["/opt/austin", "-C", "-P", "-i", f"{interval_us}us", "-x", str(window_s), "-p", str(JOB)]
    assert sweep.command[-9:] == command
    for _ in range(8):
        sweep.lines = [_austin_line(pid, FETCHING) for pid in (11, 12)]
        job.tick()
    assert [when for when, pid in job.dumps() if pid != JOB] == [0, 0, 1, 1]
    swept = job.sampler.procs[11]
    # as a dump that began at the tick before (what was proven then holds), taken now
    assert (swept.sweep.swept_at, swept.run_began.at, swept.stack_wall) == (8, 7, WALL + 8)
    job.run_until(8 + lately_s + 1)  # the sweep gives nothing more
    assert [when for when, pid in job.dumps() if pid != JOB][4:] == [8 + lately_s + 1] * 2
    assert [run.command for run in job.runs][-2:] == [["/opt/austin", "-w", "11"], ["/opt/austin", "-w", "12"]]


@pytest.mark.parametrize("watcher, interval_us, window_s, lately_s", [(LIVE_VIEW, 10_000_000, 300, 21),
                                                                      (NODE, 20_000_000, 600, 41)])  # fmt: skip
def test_the_exporter_sweeps_less_often_as_trainers_multiply(make_job, watcher, interval_us, window_s, lately_s):
    """Two trainers: a live view sweeps each one's workers every 10 s, attached for 5 min; the
    exporter's sweeps of the two cost what one trainer's did: every 20 s, attached for 10 min
    (its attach, ~6 ms a process, paid half as often). A swept worker is not dumped routinely
    while that sweep goes on giving its stack (twice its interval, and a second)."""
    job = make_job(austin="/opt/austin", dumps_per_s=0.25)
    job.sampler.watcher = watcher
    job.procs[JOB] = Proc("trainer", WAITING)
    job.procs[2000] = Proc("trainer", WAITING)
    job.procs[11] = Proc("worker", FETCHING)
    job.tick()
    sweeps = _sweep_runs(job)
    assert [run.command[-8:] for run in sweeps] == [
        ["-C", "-P", "-i", f"{interval_us}us", "-x", str(window_s), "-p", str(pid)] for pid in (JOB, 2000)
    ]
    for _ in range(8):  # its first dump (with its loader) and the routine ones already under way come back
        sweeps[0].lines = [_austin_line(11, FETCHING)]
        job.tick()
    swept = job.sampler.procs[11]
    assert (swept.sweep.swept_at, swept.sweep.interval_s) == (8, interval_us / 1e6)
    assert swept.sweep.lately(8 + lately_s) and not swept.sweep.lately(8 + lately_s + 1)


def test_a_trainer_is_streamed_by_austin_and_its_time_split_by_phase(make_job):
    """First sight: one py-spy dump; then an Austin stream, 3 s at 13 Hz until a window is priced;
    each tick's samples are a window of trainer time."""
    job = _job_with_sweep(make_job, 1.0)
    job.tick()
    job.tick()
    trainer = [run.command for run in job.runs if _pid(run.command) == JOB and "-C" not in run.command]
    assert trainer[0] == ["py-spy", "dump", "--json", "--pid", str(JOB), "--nonblocking"]
    assert trainer[1][-8:] == ["/opt/austin", "-P", "-i", "76923us", "-x", "3", "-p", str(JOB)]
    (stream,) = [run for run in job.runs if isinstance(run, FakeStream) and "-C" not in run.command]
    stream.lines = [_austin_line(JOB, WAITING)] * 3 + [_austin_line(JOB, STEP)]
    job.tick()
    spent = job.sampler.trainer_time(JOB)
    assert (spent.samples, spent.window_s) == (4, 1.0)
    assert (spent.waiting_for_data_percent, spent.running_percent) == (75.0, 25.0)
    assert job.sampler.activity(JOB) == "waiting-for-data"


QUEUE_WAIT = [("<module>", TRAIN, 20), ("get", "/usr/lib/python3.11/queue.py", 171)]
POOL_LOAD = [
    ("_bootstrap", "/usr/lib/python3.11/threading.py", 1002),
    ("run", "/usr/lib/python3.11/threading.py", 982),
    ("_worker", "/usr/lib/python3.11/concurrent/futures/thread.py", 83),
    ("load", TRAIN, 5),
]


@pytest.mark.parametrize("main_stack, rows", [(QUEUE_WAIT, [(77, "worker", "fetching")]), (WAITING, [])])
def test_a_thread_pipelines_threads_are_kept_and_named_a_dataloaders_cost_nothing(
    make_job, monkeypatch, main_stack, rows
):
    """A trainer waiting on a queue its thread pool fills: its pool thread's row, /proc read
    every tick, one py-spy dump for the name Austin does not give (not again within 10 s). A
    DataLoader's trainer: no row, no thread file read, no such dump."""
    read: list[int] = []

    def thread_stat(pid: int, tid: int) -> sampler.procfs.Stat:
        read.append(tid)
        return sampler.procfs.Stat(tid, "python", "S", pid, 0, None)

    monkeypatch.setattr(sampler.procfs, "read_thread_stat", thread_stat)
    monkeypatch.setattr(sampler.procfs, "read_thread_schedstat", lambda pid, tid: (0, 0, 0))
    job = make_job(austin="/opt/austin")
    job.procs[JOB] = Proc("trainer", main_stack)
    job.tick()  # first sight: a dump
    for _ in range(3):
        job.tick()
        (stream,) = [run for run in job.runs if isinstance(run, FakeStream) and "-C" not in run.command]
        stream.lines = [_austin_line(JOB, main_stack), _austin_line(JOB, POOL_LOAD).replace(f"T0:{JOB}", "T0:77")]
    job.tick()
    threads, exited = job.sampler.pipeline_threads(JOB)
    assert [(t.tid, t.kind, t.activity) for t in threads] == rows and exited == []
    assert bool(read) == bool(rows)
    dumps = [when for when, pid in job.dumps() if pid == JOB]
    assert dumps == ([0.0, 2.0] if rows else [0.0])  # the first sight's, then one for the pool thread's name


def test_half_the_budget_affords_a_trainer_fewer_samples():
    """A priced sample costing 0.1 ms: Austin's 0.2% of a core, less its start-up over 15 s, buys
    14.7 a second; on half of it the window is 30 s (two trainers share the budget: their
    start-ups cost what one did), and 0.1% less 8 ms over 30 s buys 7.3; py-spy's 0.6% less its
    start-up over 8 s buys 41, capped at its 13 Hz, and half of it 11.25: 11 Hz (py-spy takes
    whole rates)."""
    full, half = Pricing(sample_cost_s=1e-4), Pricing(sample_cost_s=1e-4)
    full.plan_stream(share=1.0, trainers=1)
    half.plan_stream(share=0.5, trainers=1)
    assert (round(full.rate, 2), round(half.rate, 2), full.seconds, half.seconds) == (14.67, 7.33, 15, 30)
    full.plan_record(2, share=1.0, trainers=1)
    half.plan_record(2, share=0.5, trainers=1)
    assert (full.rate, half.rate, full.seconds) == (13, 11, 3)


def _stream_cost(pricing: Pricing, trainers: int) -> float:
    """Share of a core that ``trainers`` streams planned alike cost: samples and start-ups."""
    return trainers * (pricing.rate * pricing.sample_cost_s + STREAM_STARTUP_S / pricing.seconds)


@pytest.mark.parametrize("trainers", [1, 2, 4, 8])
def test_the_node_stream_budget_holds_as_trainers_multiply(trainers):
    """0.1 ms a sample: windows of 15 s per trainer (2 min for 8), so the start-ups of them all
    cost a fixed 0.053% and the rest buys samples; the node's trainers together stay within
    Austin's 0.2% however many there are (8: 1.8 Hz each)."""
    pricing = Pricing(sample_cost_s=1e-4)
    pricing.plan_stream(share=1.0, trainers=trainers, watcher=NODE)
    assert pricing.seconds == 15 * trainers
    assert pricing.rate >= NODE.floor_hz
    assert _stream_cost(pricing, trainers) == pytest.approx(STREAM_CPU_SHARE)
    # two jobs of half as many trainers each: the same windows and rates
    if trainers > 1:
        halved = Pricing(sample_cost_s=1e-4)
        halved.plan_stream(share=0.5, trainers=trainers // 2, watcher=NODE)
        assert (halved.seconds, halved.rate) == (pricing.seconds, pytest.approx(pricing.rate))


def test_the_node_floor_gives_way_to_1_hz_where_a_live_view_keeps_more():
    """16 trainers of 0.1 ms samples: the budget buys 0.9 Hz each. The exporter's floor gives way
    to 1 Hz (its data wait is over 30 s: 30 samples), so the
    node pays a third of what 3 Hz would cost. Windows stop lengthening at 5 min (an Austin left
    by a killed dltop ends by itself)."""
    node = Pricing(sample_cost_s=1e-4)
    node.plan_stream(share=1.0, trainers=16, watcher=NODE)
    assert (node.rate, node.seconds) == (1.0, 240)
    assert _stream_cost(node, 16) < STREAM_CPU_SHARE * 1.1
    node.plan_stream(share=1.0, trainers=32, watcher=NODE)
    assert node.seconds == 300
    unpriced = Pricing()
    unpriced.plan_stream(share=1.0, trainers=16, watcher=NODE)
    assert (unpriced.rate, unpriced.seconds) == (13.0, 3)  # a first window prices a sample quickly


@pytest.mark.parametrize(("sample_cost_s", "rate"), [(None, 50.0), (1e-4, 100.0), (4e-4, 43.33)])
def test_a_snapshot_samples_as_py_spy_does_by_default_within_2_percent_of_a_core(sample_cost_s, rate):
    """A snapshot's few seconds are its whole answer: a first window at 50 Hz, then 100 Hz (py-spy's
    default) where 2% of a core pays for it (0.4 ms samples, a 17-thread trainer, less its 3 s
    windows' start-ups: 43.3 Hz), ten times what a live view spends all day."""
    pricing = Pricing(sample_cost_s=sample_cost_s or 0.0)
    pricing.plan_stream(share=1.0, trainers=1, watcher=SNAPSHOT)
    assert pricing.rate == pytest.approx(rate, abs=0.01)
    if sample_cost_s:
        assert _stream_cost(pricing, 1) <= SNAPSHOT.stream_cpu_share * 1.001
        live = Pricing(sample_cost_s=sample_cost_s)
        live.plan_stream(share=1.0, trainers=1, watcher=LIVE_VIEW)
        assert live.rate < rate / 2
    else:  # unpriced, the first windows of several trainers share the 50 Hz, down to a live view's 13
        shared = [Pricing(), Pricing()]
        for trainers, pricing in zip((2, 8), shared):
            pricing.plan_stream(share=1.0, trainers=trainers, watcher=SNAPSHOT)
        assert [p.rate for p in shared] == [25.0, 13.0]


def test_a_snapshots_windows_are_short_and_each_draws_its_rate_afresh(monkeypatch: pytest.MonkeyPatch):
    """A periodic step aliases with a fixed sampling interval near a simple ratio of its period: a
    snapshot's 15 s are sampled in 3 s windows (a live view's stay 15 s: their start-ups are its
    budget), and every window's rate is the affordable one times a factor uniform over 1 +- the
    dither: the same on average (so is the cost), never the same twice in a row."""
    monkeypatch.setattr(budget, "dithered", DITHERED)
    snapshot, live = Pricing(sample_cost_s=1e-4), Pricing(sample_cost_s=1e-4)
    rates = []
    for _ in range(400):
        snapshot.plan_stream(share=1.0, trainers=1, watcher=SNAPSHOT)
        rates.append(snapshot.rate)
    live.plan_stream(share=1.0, trainers=1, watcher=LIVE_VIEW)
    assert (snapshot.seconds, live.seconds) == (3, 15)
    assert 100 * (1 - STREAM_RATE_DITHER) <= min(rates) < 85 and 115 < max(rates) <= 100 * (1 + STREAM_RATE_DITHER)
    assert sum(rates) / len(rates) == pytest.approx(100, rel=0.03)
    assert all(a != b for a, b in zip(rates, rates[1:]))
    # without Austin, py-spy's windows draw theirs too, in the whole rates it takes
    record = Pricing(sample_cost_s=1e-4)
    drawn = []
    for done in range(400):
        record.plan_record(done, share=1.0, trainers=1)
        drawn.append(record.rate)
    assert 10 == min(drawn) and max(drawn) == 16 and sum(drawn) / len(drawn) == pytest.approx(13, rel=0.03)


@pytest.mark.parametrize(("trainers", "floor"), [(1, 3.67), (2, 3.0), (3, 3.0), (4, 2.25), (8, 1.125), (16, 1.0)])
def test_a_live_view_keeps_3_hz_for_three_trainers_then_shares_9(trainers, floor):
    """0.4 ms samples (a 17-thread trainer), more than the budget pays at 3 Hz past one trainer:
    a live view keeps 3 Hz each for up to 3 trainers whatever it costs; more trainers share those
    9 Hz (8 ranks: 1.125 Hz each, where 3 Hz each cost more than htop), never under the
    exporter's 1 Hz. The budget still pays more where it can (one trainer: 3.67 Hz)."""
    live, node = Pricing(sample_cost_s=4e-4), Pricing(sample_cost_s=4e-4)
    live.plan_stream(share=1.0, trainers=trainers, watcher=LIVE_VIEW)
    node.plan_stream(share=1.0, trainers=trainers, watcher=NODE)
    assert live.rate == pytest.approx(floor, abs=0.01)
    assert node.rate == pytest.approx(max(1.0, 3.67 / trainers), abs=0.01)


@pytest.mark.parametrize(("trainers", "live", "node", "snapshot"), [
    (1, (10, 300), (10, 300), (1, 300)),
    (3, (10, 300), (30, 900), (1, 300)),
    (8, (26.7, 800), (80, 1800), (2.67, 800)),
])  # fmt: skip
def test_sweeps_thin_out_past_the_trainers_a_watcher_sweeps_in_full(trainers, live, node, snapshot):
    """(interval s, window s) of each trainer's sweeps: a live view sweeps 3 trainers' workers
    every 10 s, 8 trainers share that (every ~27 s, attached ~13 min); the exporter sweeps one
    trainer's in full (8: every 80 s, attached for the 30 min cap). A snapshot reads its workers'
    busy share from its few seconds alone: every second (8 trainers: every ~2.7 s)."""
    for watcher, expected in ((LIVE_VIEW, live), (NODE, node), (SNAPSHOT, snapshot)):
        got = sweep_interval_s(1.0, trainers, watcher), sweep_window_s(1.0, trainers, watcher)
        assert got == (pytest.approx(expected[0], abs=0.05), expected[1])


def test_the_node_py_spy_windows_lengthen_and_slow_to_1_hz():
    """Without Austin: py-spy's start-up (15 ms) is priced over longer windows as trainers
    multiply (8 s each, up to 30 s for the exporter; a live view keeps 8 s), and a 0.8 ms sample
    that the budget cannot pay 3 times a second is taken once a second on a node (and in a live
    view of 8 trainers, which share its 9 Hz of floors); 3 trainers keep the live view's 3 Hz."""
    node, live = Pricing(sample_cost_s=8e-4), Pricing(sample_cost_s=8e-4)
    node.plan_record(40, share=1.0, trainers=8, watcher=NODE)
    live.plan_record(40, share=1.0, trainers=8, watcher=LIVE_VIEW)
    assert (node.rate, node.seconds, live.rate, live.seconds) == (1, 30, 1, 8)
    live.plan_record(40, share=1.0, trainers=3, watcher=LIVE_VIEW)
    assert live.rate == 3
    node.plan_record(0, share=1.0, trainers=8, watcher=NODE)
    assert node.seconds == 1  # still an answer within a second at first


class _SlowToDie:
    """A py-spy that outlives SIGKILL for a while (a thread of it still in a read of the process
    that is going away): it is gone when the test says so."""

    pid = 4242

    def __init__(self) -> None:
        self.returncode: Optional[int] = None
        self.signals: list[int] = []
        self.gone = False

    def poll(self) -> Optional[int]:
        if self.gone and self.returncode is None:
            self.returncode = -signal.SIGKILL
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)

    def wait(self, timeout: Optional[float] = None) -> int:
        if timeout is None:
            raise AssertionError("the tick waited on a stopped py-spy until it was gone")
        if self.poll() is None:
            raise subprocess.TimeoutExpired("py-spy", timeout)
        return -signal.SIGKILL


def test_a_stopped_run_that_outlives_sigkill_never_holds_up_a_tick(monkeypatch):
    """A trainer goes while its first dump runs: the dump is stopped, and its py-spy outlives
    SIGKILL. The tick is not held up waiting for it (every other run under way would stay unreaped,
    a zombie, for as long as it lasted); a later tick reaps it once it is gone."""
    started: list[_SlowToDie] = []

    def popen(*args, **kwargs) -> _SlowToDie:
        started.append(_SlowToDie())
        return started[-1]

    monkeypatch.setattr(pyspy.subprocess, "Popen", popen)
    monkeypatch.setattr(pyspy, "_killed", [])
    now = [0.0]
    stacks = sampler.StackSampler(JOB, py_spy="py-spy", austin="", clock=lambda: now[0], wall=lambda: WALL + now[0])
    try:
        stacks.update([(JOB, 1, "trainer", (0, 0, 0))])  # first sight: a py-spy dump
        (dump,) = started
        now[0] += 1
        stacks.update([])  # the trainer went: its dump is stopped
        assert (dump.signals, dump.returncode, pyspy._killed) == ([signal.SIGKILL], None, [dump])
        dump.gone = True
        now[0] += 1
        stacks.update([])
        assert (dump.returncode, pyspy._killed) == (-signal.SIGKILL, [])
    finally:
        stacks.close()


def test_a_snapshot_reads_the_trainers_wait_over_all_of_its_watch(monkeypatch):
    """A live view and the exporter judge a trainer's recent past (30 s of its samples); a
    snapshot's report is over its whole watch, so a longer one narrows the wait's error (a 190 s
    snapshot of io-5 read its wait from the last 30 s alone: ±1.3 points where all of it gives
    about ±0.5)."""
    from dltop.collect.stacks.trainer_time import TrainerSamples

    waiting = make_frame("poll", "/usr/lib/python3.11/multiprocessing/connection.py", 1)
    kept = {}
    for watcher in (LIVE_VIEW, SNAPSHOT):
        trainer = TrainerSamples(history_s=watcher.trainer_history_s)
        for second in range(190):
            trainer.add([(waiting,)] * 10, set(), float(second), second + 1.0, None)
        spent = trainer.time()
        assert spent is not None
        kept[watcher] = spent.window_s
    assert kept[LIVE_VIEW] == pytest.approx(31.0) and kept[SNAPSHOT] == pytest.approx(190.0)
    # the sampler keeps each trainer's samples as its watcher says
    monkeypatch.setattr(pyspy.subprocess, "Popen", lambda *args, **kwargs: _gone())
    monkeypatch.setattr(pyspy, "_killed", [])
    for watcher in (LIVE_VIEW, SNAPSHOT):
        stacks = sampler.StackSampler(JOB, py_spy="py-spy", austin="", clock=lambda: 0.0, wall=lambda: WALL)
        stacks.watcher = watcher
        try:
            stacks.update([(JOB, 1, "trainer", (0, 0, 0))])
            assert stacks.procs[JOB].trainer_samples.history_s == watcher.trainer_history_s
        finally:
            stacks.close()


def _gone() -> _SlowToDie:
    """A py-spy run that has already ended."""
    run = _SlowToDie()
    run.gone = True
    return run

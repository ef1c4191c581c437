"""Stack samples of a job's processes within a small CPU budget: what runs when, for which process
(docs/how-it-works.md#how-stacks-are-sampled).

The tick (``StackSampler.update``) starts and collects the runs; the numbers it spends are
``budget.py``'s, what samples say of a trainer's time is ``trainer_time.py``'s, what schedstat
and dumps prove of a hang is ``hangs.py``'s, and the programs' command lines and output are
``austin.py``'s and ``pyspy.py``'s.

- Trainers: samples of the main thread tell where it spends its time (``trainer_time.py``). Austin
  streams them (``austin.py``: read every tick, about half py-spy's cost a sample); without Austin,
  back-to-back short ``py-spy record`` windows (non-blocking) do. Each window's rate is what its
  share of the budget affords, not below the watcher's floor (``budget.py``: a live view's 3 Hz
  for up to 3 trainers, shared past that; the exporter's 1 Hz); windows lengthen as trainers
  multiply, so their start-ups stay a fixed part of the budget.
- Workers: a sweep, every ``SWEEP_INTERVAL_S``, of every process under each trainer by one
  Austin that stays attached (``austin -C``: ~1.7 ms a sweep of 16 workers; attaching to them
  all, ~70 ms, is paid once per ``SWEEP_WINDOW_S``; past the trainers a watcher sweeps in full,
  sweeps and windows lengthen as trainers multiply, so they cost what those did), where one
  process per routine stack paid that attach (~5 ms) for one worker. A worker's first stack is
  a non-blocking ``py-spy dump`` (7-12 ms, nearly all parsing libpython's symbols at start)
  because it reads ``_worker_loop``'s locals; hang suspects and what the user looks at get a dump at once
  (Austin's where mode, ``austin -w``, else py-spy's); without a sweep (no Austin, or it cannot
  read this Python) routine stacks are such dumps, about ``dumps_per_s``. A process whose
  main thread has not run since its last dump is not dumped again (``hangs.py``).

Nothing here blocks a tick: runs are started and collected on later ticks. The one blocking,
pausing dump (``full_dump.py``, with locals) runs only when the user asks.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional, Union

from dltop import frames as stackframes
from dltop.collect import procfs
from dltop.collect.stacks import ptrace
from dltop.collect.stacks.austin import (
    StreamRun,
    find_austin,
    newest_main_stacks,
    parse_samples,
    parse_where_main,
    stream_command,
)
from dltop.collect.stacks.austin import dump_command as austin_dump_command
from dltop.collect.stacks.budget import (
    DUMPS_PER_S,
    LIVE_VIEW,
    MAX_IN_FLIGHT,
    ROUTINE,
    DumpBudget,
    Pricing,
    Watcher,
    dithered,
    dump_rank,
    sweep_interval_s,
    sweep_window_s,
)
from dltop.collect.stacks.hangs import HangEvidence, RunStart
from dltop.collect.stacks.pyspy import (
    PySpyRun,
    RunResult,
    Sampled,
    ThreadStack,
    dump_command,
    find_py_spy,
    parse_dump,
    parse_record,
    reap_killed,
    record_command,
)
from dltop.collect.stacks.python_threads import PythonThreads
from dltop.collect.stacks.threads import PipelineThreads
from dltop.collect.stacks.trainer_time import TrainerSamples, workers_starting
from dltop.model import Activity, Frame, Pipeline, TrainerTime, WorkerThread, status_error
from dltop.pipelines import pipeline_of_threads

DUMP_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 1.0
FAILURES_BEFORE_ERROR = 3
RETRY_AFTER_DENIED_S = 30.0
STREAM_PROBE_LINES = 40  # lines of a window with no main-thread sample among them: Austin cannot read it


@dataclass
class Sweep:
    """Trainers: the Austin sampling every process under it; workers: when it last gave their stack."""

    run: Optional[StreamRun] = None
    found: bool = False  # its window has sampled a main thread
    failed: bool = False  # a window sampled none: routine dumps from now on
    swept_at: Optional[float] = None  # workers
    interval_s: float = 0.0  # trainers: how often its run sweeps; workers: that of the sweep that gave their stack

    def lately(self, now: float) -> bool:
        """A sweep gave this worker's stack lately (it goes on doing so)."""
        return self.swept_at is not None and now - self.swept_at <= 2 * self.interval_s + 1


@dataclass
class ProcessStacks:
    """One process: its newest main-thread stack, the run under way, and each room's record of it."""

    pid: int
    start_ticks: int
    role: str
    stack: Optional[tuple[Frame, ...]] = None  # innermost last
    stack_wall: Optional[float] = None  # time.time() of the sample
    kind: Optional[str] = None  # what its newest stack says it is: worker | starting | other
    loader_config: Optional[dict[str, Any]] = None  # workers: from _worker_loop's locals (frames.worker_loop_config)
    run: Optional[PySpyRun] = None  # a dump, a py-spy record window or an Austin stream (StreamRun)
    run_began: Optional[RunStart] = None  # the newest run's start
    recording: bool = False  # the run under way is a record window or a stream (else a dump)
    austin_dump: bool = False  # the dump under way is Austin's
    austin_failed: bool = False  # Austin could not sample it: py-spy from now on
    stream_from: float = 0.0  # trainers sampled by Austin: when its samples were last taken
    hang: HangEvidence = field(default_factory=HangEvidence)
    trainer_samples: TrainerSamples = field(default_factory=TrainerSamples)  # trainers
    pricing: Pricing = field(default_factory=Pricing)  # trainers: their sampling windows
    sweep: Sweep = field(default_factory=Sweep)
    threads: PipelineThreads = field(default_factory=PipelineThreads)  # trainers whose pipeline runs on threads
    names_run: Optional[PySpyRun] = None  # trainers: a dump for their threads' Python names
    python_threads: PythonThreads = field(default_factory=PythonThreads)  # trainers: their Python threads' CPU
    on_threads: bool = False  # a trainer whose pipeline runs on threads, as its newest samples say


class SeenStack(NamedTuple):
    """What a process's stack samples showed, as the collector reads it."""

    frames: Optional[tuple[Frame, ...]]  # its newest main-thread stack, innermost last; None before the first
    wall: Optional[float]  # time.time() of that sample
    loader_config: Optional[dict[str, Any]]  # workers: from _worker_loop's locals
    activity: Activity  # what the stack shows it doing ("unknown" without one)
    stuck_s: Optional[float]  # how long that stack has stayed while the process did not run


class StackSampler:
    """One job's stack sampling: ``update`` every tick; ``stack_of`` and the other questions
    below say what each process showed."""

    sampling = True

    def __init__(
        self,
        job_pid: int,
        *,
        py_spy: Optional[str] = None,
        austin: Optional[str] = None,
        dumps_per_s: float = DUMPS_PER_S,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.py_spy = py_spy if py_spy is not None else find_py_spy()
        self.austin = austin if austin is not None else find_austin()
        self._frame_cache: dict[str, Frame] = {}  # Austin's frame text -> Frame
        self.job_pid = job_pid
        self.dumps_per_s = dumps_per_s
        self._clock, self._wall = clock, wall
        self.procs: dict[int, ProcessStacks] = {}
        self.departed: dict[int, ProcessStacks] = {}  # workers that went away (their last stack)
        self.requested: set[int] = set()  # pids the user is looking at: dumped every tick
        # this job's part of the budgets: a node watcher following several jobs splits one
        # budget between them
        self.share = 1.0
        # who watches: a live view keeps its floors for up to 3 trainers whatever they cost; the
        # node watcher (the exporter) sets NODE, whose budget holds as trainers multiply
        self.watcher: Watcher = LIVE_VIEW
        # trainer pid -> [(began, ready or None)] of its workers' start-ups (collect/events/startup.py)
        self.startups: Optional[Callable[[int], list[tuple[float, Optional[float]]]]] = None
        self._budget = DumpBudget()
        self._last_update: Optional[float] = None
        self._failures = 0
        self._denied_at: Optional[float] = None
        self.status = "ok" if self.py_spy else "no-py-spy"
        self.fix: Optional[str] = (
            None if self.py_spy else ("install py-spy (`pip install py-spy`) or point DLTOP_PY_SPY at it")
        )
        self._tmp = tempfile.mkdtemp(prefix="dltop-")

    # -- every tick ------------------------------------------------------------------

    def update(self, members: list[tuple[int, int, str, Optional[tuple[int, int, int]]]]) -> None:
        """``members``: [(pid, start_ticks, role, schedstat or None)] of the job's live processes
        now; a schedstat tuple already read this tick is used, else the file is read."""
        now = self._clock()
        elapsed = 0.0 if self._last_update is None else now - self._last_update
        self._last_update = now
        reap_killed()  # runs stopped earlier that outlived their kill
        self._forget_departed({(pid, ticks) for pid, ticks, _, _ in members})
        self._take_sweeps(now)
        for pid, ticks, role, schedstat in members:
            proc = self.procs.get(pid)
            if proc is None:
                kept = TrainerSamples(history_s=self.watcher.trainer_history_s)
                proc = self.procs[pid] = ProcessStacks(pid, ticks, role, trainer_samples=kept)
            proc.role = role
            self._read_schedstat(proc, now, schedstat)
            self._collect(proc, now)
            if role == "trainer":
                proc.python_threads.read(pid, now)
            if proc.on_threads:
                self._read_threads(proc, now)
        py_spy = self.py_spy
        if py_spy is None or not self._may_try(now):
            return
        self._budget.refill(elapsed, self.dumps_per_s, self.share)
        self._start_records(now, py_spy)
        self._start_dumps(now, py_spy)
        self._start_name_dumps(now, py_spy)

    def probe_loaders(self, pids: list[int], timeout_s: float = PROBE_TIMEOUT_S) -> dict[int, str]:
        """At attach, what each of these trainers' main-thread stack says of it, from one
        non-blocking dump each, waited for (briefly): "loader" (it runs an input pipeline with
        worker processes, so the very first tick knows a spawn worker still importing torch for
        a worker, not a helper), "worker" (a pipeline's worker process that looked like a rank:
        a forked child with its parent's command line), else what ``process_kind`` says."""
        if self.py_spy is None:
            return {}
        runs = {pid: PySpyRun(dump_command(self.py_spy, pid), timeout_s) for pid in pids}
        found: dict[int, str] = {}
        while runs:
            for pid, run in list(runs.items()):
                result = run.poll()
                if result is None:
                    continue
                del runs[pid]
                main = _main_thread(parse_dump(result.text), pid) if result.ok else None
                if main is not None:
                    frames = list(main.frames)
                    kind = stackframes.process_kind(frames)
                    found[pid] = "loader" if kind != "worker" and stackframes.uses_worker_processes(frames) else kind
            time.sleep(0.01)
        return found

    # -- what the samples showed ---------------------------------------------------------

    def stack_of(self, pid: int) -> Optional[SeenStack]:
        """What a live process's stacks showed; None for one never listed to ``update``."""
        proc = self.procs.get(pid)
        return _seen(proc) if proc is not None else None

    def departed_stack(self, pid: int) -> Optional[SeenStack]:
        """What a worker that went away showed last (the last 256 such workers are kept)."""
        proc = self.departed.get(pid)
        return _seen(proc) if proc is not None else None

    def loader_config(self, pid: int) -> Optional[dict[str, Any]]:
        """A worker's loader settings, read from ``_worker_loop``'s locals by its first dump."""
        proc = self.procs.get(pid)
        return proc.loader_config if proc is not None else None

    def trainer_stacks(self, pid: int) -> list[tuple[Frame, ...]]:
        """A trainer's newest stack and those of its recent sample windows (where its own code is)."""
        proc = self.procs.get(pid)
        if proc is None:
            return []
        newest = [proc.stack] if proc.stack else []
        return newest + [stack for window in proc.trainer_samples.windows for stack in window.stacks]

    def pin_thread(self, pid: int) -> Optional[bool]:
        """Whether a trainer's last sample window had a ``_pin_memory_loop`` thread; None if unsampled."""
        proc = self.procs.get(pid)
        return proc.trainer_samples.pin_thread if proc is not None else None

    def trainer_time(self, pid: int) -> Optional[TrainerTime]:
        proc = self.procs.get(pid)
        return proc.trainer_samples.time() if proc is not None else None

    def trainer_pipeline(self, pid: int) -> Optional[Pipeline]:
        """The input pipeline a trainer's main thread waits on, where its samples showed one;
        else the one its pipeline threads run (a trainer its threads never leave waiting, or
        one that waits for the GIL rather than in ``next()``)."""
        proc = self.procs.get(pid)
        if proc is None:
            return None
        seen = proc.trainer_samples.pipeline()
        if seen is not None or proc.trainer_samples.worker_loader:
            return seen or "dataloader"
        return pipeline_of_threads(proc.threads.stacks())

    def pipeline_threads(self, pid: int) -> tuple[list[WorkerThread], list[WorkerThread]]:
        """(the threads a trainer's pipeline runs on now, those seen and gone since): empty but
        for a trainer whose pipeline runs on threads."""
        proc = self.procs.get(pid)
        if proc is None or not proc.on_threads:
            return [], []
        return proc.threads.rows(), proc.threads.exited()

    def python_threads_cpu(self, pid: int) -> Optional[float]:
        """A trainer's Python threads beside its main one, 100 = one core, since the tick before."""
        proc = self.procs.get(pid)
        return proc.python_threads.cpu_percent if proc is not None else None

    def activity(self, pid: int) -> Activity:
        proc = self.procs.get(pid)
        return _activity(proc) if proc is not None else "unknown"

    def stack_kinds(self) -> dict[tuple[int, int], str]:
        """(pid, start ticks) -> what its newest stack says it is (worker, starting, other)."""
        return {(p.pid, p.start_ticks): p.kind for p in self.procs.values() if p.kind}

    def loader_trainers(self) -> set[int]:
        """Trainers whose samples showed a DataLoader with worker processes."""
        return {p.pid for p in self.procs.values() if p.trainer_samples.worker_loader}

    def wait_pending(self, deadline: float) -> None:
        """Cut record windows short (their samples so far are kept) and let dumps under way finish."""
        for proc in self.procs.values():
            if proc.run is not None and proc.recording:
                proc.run.interrupt()
        while any(p.run is not None and p.run.process and p.run.process.poll() is None for p in self.procs.values()):
            if self._clock() >= deadline:
                return
            time.sleep(0.02)

    def close(self) -> None:
        for proc in list(self.procs.values()):
            _stop_runs(proc)
        reap_killed()
        for leftover in Path(self._tmp).glob("*"):
            leftover.unlink(missing_ok=True)
        Path(self._tmp).rmdir()

    # -- what came back ------------------------------------------------------------------

    def _forget_departed(self, alive: set[tuple[int, int]]) -> None:
        for pid, proc in list(self.procs.items()):
            if (pid, proc.start_ticks) in alive:
                continue
            _stop_runs(proc)
            if proc.role == "worker":
                self.departed[pid] = proc
            del self.procs[pid]
        while len(self.departed) > 256:
            self.departed.pop(next(iter(self.departed)))

    def _read_schedstat(self, proc: ProcessStacks, now: float, reading: Optional[tuple[int, int, int]]) -> None:
        try:
            run_ns, _, slices = reading or procfs.read_schedstat(proc.pid)
        except (OSError, ValueError):
            return
        proc.hang.read(run_ns, slices, now)

    def _may_try(self, now: float) -> bool:
        if self.status != "denied":
            return True
        if self._denied_at is not None and now - self._denied_at >= RETRY_AFTER_DENIED_S:
            self._denied_at = now  # try again now and then: the user may have fixed it
            return True
        return False

    def _mark_denied(self, now: float) -> None:
        self.status, self._denied_at = "denied", now
        self.fix = ptrace.stacks_fix(ptrace.facts(self.job_pid), self.job_pid)

    def _collect(self, proc: ProcessStacks, now: float) -> None:
        """Take what the run under way gave, once it came back (a stream's samples every tick)."""
        if isinstance(proc.run, StreamRun):
            self._collect_stream(proc, proc.run, now)
            return
        result = proc.run.poll() if proc.run is not None else None
        if result is None:
            return
        proc.run = None
        austin_stack = self._austin_stack(proc, result)
        if austin_stack is None:
            return
        if not result.ok:
            self._count_failure(result, now)
            return
        self._failures = 0
        if self.status != "ok":
            self.status, self.fix = "ok", None
        if proc.recording:
            self._take_record(proc, result, now)
        else:
            self._take_dump(proc, austin_stack or parse_dump(result.text))

    def _austin_stack(self, proc: ProcessStacks, result: RunResult) -> Optional[list[ThreadStack]]:
        """An Austin dump's main thread ([] where the run was py-spy's); None where Austin could
        not read it (refused or unreadable: py-spy's next dump says why, if it fails too)."""
        if not proc.austin_dump:
            return []
        stack = parse_where_main(result.text, proc.pid, self._frame_cache) if result.ok else []
        if not stack:
            proc.austin_failed = not result.gone and _alive(proc)
            return None
        return stack

    def _count_failure(self, result: RunResult, now: float) -> None:
        """A py-spy run that failed: denied is said at once; other errors only once they repeat
        (a process going away mid-dump is no error)."""
        if result.denied:
            self._mark_denied(now)
        elif not result.gone:
            self._failures += 1
            if self._failures >= FAILURES_BEFORE_ERROR and self.status == "ok":
                self.status = status_error(result.error)
                self.fix = (
                    "py-spy keeps failing on this job: upgrade it (`pip install -U py-spy`); a Python "
                    "newer than the installed py-spy supports is the usual cause"
                )

    def _take_record(self, proc: ProcessStacks, result: RunResult, now: float) -> None:
        """A py-spy record window: priced by what it cost, its samples added as a window."""
        began = _began(proc)
        proc.pricing.price_record(result.cpu_s, now - began.at)
        self._add_window(proc, parse_record(result.text, proc.pid), began.at, proc.pricing.rate, now)

    def _take_dump(self, proc: ProcessStacks, threads: list[ThreadStack]) -> None:
        """A dump: the newest stack; a trainer's counts as a sample of its time, a worker's first
        (with locals) reads its loader's settings."""
        self._add_dump(proc, threads)
        if proc.role == "trainer" and proc.stack is not None:
            proc.trainer_samples.saw({proc.stack})
            proc.on_threads = _on_threads(proc)
            proc.threads.named({t.tid: t.name for t in threads})
        if proc.role == "worker" and proc.loader_config is None:
            config: dict[str, Any] = {}
            for thread in threads:
                config.update(stackframes.worker_loop_config(thread.locals or {}))
            # another pipeline's worker process (torchdata's _apply_udf) has no _worker_loop to
            # read: read once, it is swept and dumped by Austin as a DataLoader worker is
            other_loop = stackframes.pipeline_worker_process(list(proc.stack or ()))
            proc.loader_config = config if "worker_id" in config else {} if other_loop else None

    def _add_dump(self, proc: ProcessStacks, threads: list[ThreadStack]) -> None:
        main = _main_thread(threads, proc.pid)
        if main is None:
            return
        began = _began(proc)
        proc.hang.add_dump(main.frames == proc.stack, began)
        proc.stack, proc.stack_wall = main.frames, began.wall
        proc.kind = stackframes.process_kind(list(main.frames), proc.kind)

    def _read_threads(self, proc: ProcessStacks, now: float) -> None:
        """A thread pipeline's trainer: its threads' /proc files, and the names a dump brought."""
        proc.threads.read(proc.pid, now, self._wall(), proc.python_threads.schedstats)
        result = proc.names_run.poll() if proc.names_run is not None else None
        if result is not None:
            proc.names_run = None
            if result.ok:
                proc.threads.named({t.tid: t.name for t in parse_dump(result.text)})

    def _collect_stream(self, proc: ProcessStacks, run: StreamRun, now: float) -> None:
        """Every tick: the samples Austin wrote since the last, as a window of their own. A
        window that ended is priced; one that ended without a sample of a live trainer hands it
        to py-spy windows (Austin's lines name no cause: py-spy's say whether rights are missing)."""
        result = run.poll()
        sampled = parse_samples(run.take(), proc.pid, self._frame_cache, by_thread=proc.on_threads)
        if sampled.main:
            self._add_window(proc, sampled, proc.stream_from, proc.pricing.rate, now)
            proc.pricing.samples += len(sampled.main)
        proc.stream_from = now
        if result is None and not proc.pricing.samples and run.lines_taken >= STREAM_PROBE_LINES:
            run.kill()  # its main thread is not among what Austin reads
            proc.run = None
            _hand_to_py_spy(proc)
            return
        if result is None:
            return
        proc.run = None
        proc.pricing.price_stream(result.cpu_s)
        if not proc.pricing.samples and not result.gone and _alive(proc):
            _hand_to_py_spy(proc)  # refused, or attached without one readable sample (a Python it does not know)

    def _take_sweeps(self, now: float) -> None:
        """Each worker's newest stack from its trainer's sweep, as a dump that began at the last
        tick (the sample was taken since: what was proven then still holds for it)."""
        for trainer in list(self.procs.values()):
            sweep = trainer.sweep.run
            if sweep is None:
                continue
            result = sweep.poll()
            stacks = newest_main_stacks(sweep.take(), self._frame_cache)
            trainer.sweep.found = trainer.sweep.found or bool(stacks)
            for pid, frames in stacks.items():
                proc = self.procs.get(pid)
                if proc is None or proc.role != "worker" or proc.stack is None:
                    continue  # its first dump reads its loader
                if proc.run is not None:
                    # a dump under way has its own start, and gives the stack: the sweep has this
                    # worker, so no routine dump follows (one that was under way at each sweep
                    # was dumped on the routine budget for ever, and spent it all)
                    proc.sweep.swept_at, proc.sweep.interval_s = now, trainer.sweep.interval_s
                    continue
                seen_at = proc.hang.seen_at
                if seen_at is None:
                    continue  # its schedstat was never read (it went while listed): nothing to date the sample by
                proc.run_began = proc.hang.began(seen_at, self._wall())
                self._add_dump(proc, [ThreadStack(pid, "MainThread", frames)])
                proc.sweep.swept_at, proc.sweep.interval_s = now, trainer.sweep.interval_s
            if result is not None:
                trainer.sweep.run = None
                trainer.sweep.failed = not trainer.sweep.found and not result.gone and _alive(trainer)

    def _add_window(self, proc: ProcessStacks, sampled: Sampled, began: float, rate: float, now: float) -> None:
        """A trainer's window: its main thread's samples, ``rate`` a second from ``began``; its
        other threads' stacks, and their samples by thread, kept for a trainer whose pipeline runs
        on threads; their ids, whose CPU is read from then on. Every sample the same stack, window
        after window: that stack is a streak."""
        samples = sampled.main
        intervals = self.startups(proc.pid) if self.startups else []
        starting = workers_starting(intervals, len(samples), began, rate)
        proc.trainer_samples.add(samples, sampled.others, began, now, starting)
        proc.python_threads.saw(sampled.tids - {proc.pid})
        proc.on_threads = _on_threads(proc)
        if proc.on_threads:
            proc.threads.add_window(sampled.threads, now)
        if not samples:
            return
        stacks = Counter(samples)
        typical = stacks.most_common(1)[0][0]
        proc.hang.add_trainer_window(stacks, proc.stack, began, now)
        proc.stack, proc.stack_wall = typical, self._wall()
        proc.kind = stackframes.process_kind(list(typical), proc.kind)

    # -- what to start ---------------------------------------------------------------------

    def _start_records(self, now: float, py_spy: str) -> None:
        trainers = [p for p in self.procs.values() if p.role == "trainer"]
        for proc in trainers:
            if proc.run is None and proc.stack is None and not proc.trainer_samples.windows_done:
                # first sight: one dump says at once whether it runs a DataLoader with workers
                # (its new workers are then known as workers while they start), before the
                # first record window reports a second later
                self._start(proc, PySpyRun(dump_command(py_spy, proc.pid), DUMP_TIMEOUT_S), now, recording=False)
            elif proc.run is None and self.austin and not proc.austin_failed:
                self._start_stream(proc, self.austin, len(trainers), now)
            elif proc.run is None:
                self._start_record(proc, py_spy, len(trainers), now)
            if proc.sweep.run is None:
                self._start_sweep(proc, len(trainers))

    def _start_record(self, proc: ProcessStacks, py_spy: str, trainers: int, now: float) -> None:
        """A ``py-spy record`` window at the rate its share affords, priced by the last window's cost."""
        windows_done = proc.trainer_samples.windows_done
        proc.pricing.plan_record(windows_done, self.share, trainers, self.watcher)
        output = os.path.join(self._tmp, f"record-{proc.pid}-{windows_done}.txt")
        command = record_command(py_spy, proc.pid, int(proc.pricing.rate), proc.pricing.seconds, output)
        self._start(proc, PySpyRun(command, proc.pricing.seconds + DUMP_TIMEOUT_S, output), now, recording=True)

    def _start_stream(self, proc: ProcessStacks, austin: str, trainers: int, now: float) -> None:
        """An Austin window at the rate its share affords, priced by the last window's cost."""
        proc.pricing.plan_stream(self.share, trainers, self.watcher)
        command = stream_command(austin, proc.pid, proc.pricing.rate, proc.pricing.seconds)
        self._start(proc, StreamRun(command, proc.pricing.seconds + DUMP_TIMEOUT_S), now, recording=True)
        proc.stream_from = now

    def _start_sweep(self, trainer: ProcessStacks, trainers: int) -> None:
        """Sweep the processes under a trainer with workers, where Austin can read its Python; at an
        interval dithered as a trainer's windows are (a worker's cycle is periodic too)."""
        if not self.austin or trainer.austin_failed or trainer.sweep.failed or not self._has_workers():
            return
        interval_s = sweep_interval_s(self.share, trainers, self.watcher) * dithered()
        seconds = sweep_window_s(self.share, trainers, self.watcher)
        command = stream_command(self.austin, trainer.pid, 1 / interval_s, seconds, children=True)
        trainer.sweep.run, trainer.sweep.found = StreamRun(command, seconds + DUMP_TIMEOUT_S), False
        trainer.sweep.interval_s = interval_s

    def _start_dumps(self, now: float, py_spy: str) -> None:
        in_flight = sum(1 for p in self.procs.values() if p.run is not None and p.role != "trainer")
        for proc in sorted(self._dump_candidates(), key=self._priority):
            rank = self._priority(proc)[0]
            if in_flight >= MAX_IN_FLIGHT:
                break
            if rank == ROUTINE and proc.loader_config is not None and proc.sweep.lately(now):
                continue  # the sweep refreshes it (a worker not read in _worker_loop yet is dumped with locals)
            if not self._budget.take(rank):
                continue
            # A worker's first dump reads _worker_loop's arguments too (its loader and settings):
            # py-spy's alone can. Every other dump is Austin's where it can attach: half the CPU.
            with_locals = proc.role == "worker" and proc.loader_config is None
            proc.austin_dump = bool(self.austin) and not with_locals and not proc.austin_failed
            command = (
                austin_dump_command(self.austin, proc.pid)
                if proc.austin_dump and self.austin  # austin_dump is set only where Austin was found
                else dump_command(py_spy, proc.pid, with_locals=with_locals)
            )
            self._start(proc, PySpyRun(command, DUMP_TIMEOUT_S), now, recording=False)
            in_flight += 1

    def _start_name_dumps(self, now: float, py_spy: str) -> None:
        """A thread pipeline's trainer with threads Austin gave no name to: one non-blocking dump
        for their names, on the routine budget, at most every ``NAMES_EVERY_S``."""
        for proc in self.procs.values():
            if proc.names_run is None and proc.on_threads and proc.threads.wants_names(now):
                if not self._budget.take(ROUTINE):
                    return
                proc.names_run = PySpyRun(dump_command(py_spy, proc.pid), DUMP_TIMEOUT_S)
                proc.threads.names_asked_at = now

    def _start(self, proc: ProcessStacks, run: PySpyRun, now: float, *, recording: bool) -> None:
        proc.run, proc.recording = run, recording
        proc.run_began = proc.hang.began(now, self._wall())

    def _dump_candidates(self) -> list[ProcessStacks]:
        """Workers (and what the user looks at) whose stack may have changed since their last dump."""
        return [
            p
            for p in self.procs.values()
            if p.run is None
            and (p.role == "worker" or p.pid in self.requested)
            and p.role != "trainer"
            and (p.stack is None or p.hang.ran_since_stack or p.pid in self.requested)
        ]

    def _priority(self, proc: ProcessStacks) -> tuple[int, float]:
        """(rank, oldest first): a new process by when it was first seen (one whose schedstat was
        never read, as it went, last: sorting it as None against a time would raise), others by
        their last dump."""
        last = proc.run_began
        hang_to_confirm = proc.hang.to_confirm(proc.stack, last.run_ns if last else 0)
        rank = dump_rank(proc.pid in self.requested, hang_to_confirm, proc.stack is None)
        if proc.stack is None:
            return rank, proc.hang.seen_at if proc.hang.seen_at is not None else math.inf
        return rank, last.at if last else 0.0

    def _has_workers(self) -> bool:
        return any(p.role == "worker" for p in self.procs.values())


class NoStacks:
    """``--no-stacks``: the sampler's interface, sampling nothing and knowing nothing (status "off")."""

    sampling = False  # no stack will come: a worker's activity is not guessed while waiting for one
    status = "off"
    fix: Optional[str] = None

    def __init__(self) -> None:
        self.requested: set[int] = set()
        self.share = 1.0
        self.watcher: Watcher = LIVE_VIEW
        self.startups: Optional[Callable[[int], list[tuple[float, Optional[float]]]]] = None

    def update(self, members: list[tuple[int, int, str, Optional[tuple[int, int, int]]]]) -> None:
        pass

    def probe_loaders(self, pids: list[int], timeout_s: float = PROBE_TIMEOUT_S) -> dict[int, str]:
        return {}

    def stack_of(self, pid: int) -> Optional[SeenStack]:
        return None

    def departed_stack(self, pid: int) -> Optional[SeenStack]:
        return None

    def loader_config(self, pid: int) -> Optional[dict[str, Any]]:
        return None

    def trainer_stacks(self, pid: int) -> list[tuple[Frame, ...]]:
        return []

    def pin_thread(self, pid: int) -> Optional[bool]:
        return None

    def trainer_time(self, pid: int) -> Optional[TrainerTime]:
        return None

    def trainer_pipeline(self, pid: int) -> Optional[Pipeline]:
        return None

    def pipeline_threads(self, pid: int) -> tuple[list[WorkerThread], list[WorkerThread]]:
        return [], []

    def python_threads_cpu(self, pid: int) -> Optional[float]:
        return None

    def activity(self, pid: int) -> Activity:
        return "unknown"

    def stack_kinds(self) -> dict[tuple[int, int], str]:
        return {}

    def loader_trainers(self) -> set[int]:
        return set()

    def wait_pending(self, deadline: float) -> None:
        pass

    def close(self) -> None:
        pass


Stacks = Union[StackSampler, NoStacks]


def _activity(proc: ProcessStacks) -> Activity:
    if proc.stack is None:
        return "unknown"
    if proc.role == "trainer":
        return proc.trainer_samples.activity(proc.stack)
    if proc.role == "worker":
        return stackframes.worker_activity(list(proc.stack))
    return "running"


def _seen(proc: ProcessStacks) -> SeenStack:
    return SeenStack(proc.stack, proc.stack_wall, proc.loader_config, _activity(proc), proc.hang.stuck_s)


def _began(proc: ProcessStacks) -> RunStart:
    """The start of the run that just came back (every run is started with one)."""
    assert proc.run_began is not None
    return proc.run_began


def _stop_runs(proc: ProcessStacks) -> None:
    for run in (proc.run, proc.sweep.run, proc.names_run):
        if run is not None:
            run.kill()
    proc.run = proc.sweep.run = proc.names_run = None


def _on_threads(proc: ProcessStacks) -> bool:
    """A trainer whose input pipeline may run on threads: not DataLoader's, as its samples show
    (its threads are judged one by one: those of no pipeline are not kept)."""
    return proc.role == "trainer" and proc.trainer_samples.pipeline() != "dataloader"


def _hand_to_py_spy(proc: ProcessStacks) -> None:
    """Austin cannot sample this trainer: py-spy's windows from now on, priced afresh."""
    proc.austin_failed, proc.pricing.sample_cost_s = True, 0.0


def _alive(proc: ProcessStacks) -> bool:
    try:
        stat = procfs.read_stat(proc.pid)
    except (OSError, ValueError, IndexError):
        return False
    return stat.start_ticks == proc.start_ticks and stat.state not in ("Z", "X")


def _main_thread(threads: list[ThreadStack], pid: int) -> Optional[ThreadStack]:
    return next((t for t in threads if t.tid == pid), None) or next(
        (t for t in threads if t.name == "MainThread"), None
    )

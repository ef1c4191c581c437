"""Stack samples of a job's processes within a small CPU budget (DESIGN.md §3-4).

- Trainers: samples of the main thread tell where it spends its time: waiting for data,
  collating, starting workers, running the step (``TrainerTime``). Austin streams them
  (``collect/stacks/austin.py``: read every tick, about half py-spy's cost a sample); without Austin,
  back-to-back short ``py-spy record`` windows (non-blocking) do.
- Workers: a sweep, every ``SWEEP_INTERVAL_S``, of every process under each trainer by one
  Austin that stays attached (``austin -C``: ~1.7 ms a sweep of 16 workers; attaching to them
  all, ~70 ms, is paid once per ``SWEEP_WINDOW_S``), where one process per routine stack paid
  that attach (~5 ms) for one worker. A worker's first stack is a non-blocking ``py-spy dump``
  (7-12 ms, nearly all parsing libpython's symbols at start) because it reads
  ``_worker_loop``'s locals; hang suspects and what the user looks at get a dump at once
  (Austin's where mode, ``austin -w``, else py-spy's); without a sweep (no Austin, or it cannot
  read this Python) routine stacks are such dumps, about ``dumps_per_s``. A process whose
  main thread has not run since its last dump (its schedstat timeslice count is unchanged)
  provably still has that stack, so it is not dumped again: a hung worker costs one dump, and
  its ``stuck_s`` keeps growing for free. A worker that stayed quiet for a few seconds after
  working (a hang to confirm) is dumped first, on its own budget.

Nothing here blocks a tick: py-spy runs are started and collected on later ticks. The one
blocking, pausing dump (``collect/stacks/full_dump.py``, with locals) runs only when the user asks.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from dltop import frames as stackframes
from dltop.collect.processes import procfs
from dltop.collect.stacks import ptrace
from dltop.collect.stacks.austin import (
    StreamRun,
    find_austin,
    newest_main_stacks,
    parse_samples,
    parse_where,
    stream_command,
)
from dltop.collect.stacks.austin import dump_command as austin_dump_command
from dltop.collect.stacks.pyspy import (
    PySpyRun,
    ThreadStack,
    dump_command,
    find_py_spy,
    parse_dump,
    parse_speedscope,
    record_command,
)
from dltop.model import PHASES, TrainerTime

DUMPS_PER_S = 0.3  # routine worker dumps per second on average, all workers together
URGENT_DUMPS_PER_S = 0.5  # new workers, and workers that went quiet after working (hangs to confirm)
DUMP_BURST = 4  # dumps that may start at once after a quiet spell (new workers, a hang)
MAX_IN_FLIGHT = 4
DUMP_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 1.0
# py-spy reads every thread of the trainer per sample (a 16-worker trainer has 17 threads: ~2 ms a
# sample): the rate is set from the last window's measured cost to stay within this CPU share.
RECORD_CPU_SHARE = 0.006  # of one core, all trainers together
RECORD_STARTUP_S = 0.015  # py-spy's CPU to attach, paid once per window
MIN_SAMPLES_TO_PRICE = 20
# Hz per window, cycled: prime rates, so a periodic training step cannot alias with the sampling
RECORD_RATES = (11, 13, 17)
RECORD_WINDOW_MAX_S = 8  # windows grow 1, 2, 3 ... 8 s: a first share within a second, then cheap
TRAINER_TIME_HISTORY_S = 30.0
# Quiet this long after working: worth a dump at once. Workers between batches are quiet for less;
# a hang's stuck time still counts from the moment it went quiet (its stack is proven since then).
SUSPECT_QUIET_S = 3.0
IDLE_WAKE_NS = 5_000_000  # CPU an idle worker may use between dumps and still be idle
STUCK_CPU_SHARE = 0.01  # a main thread using less than this share of a core is not running
# ... nor one that wakes more often than this: a worker reading slow storage in small blocking
# reads has the same stack and no CPU, but is scheduled tens of times a second; a hung one never
# is (a timed wait in a loop wakes once every few seconds)
STUCK_WAKEUPS_PER_S = 1.0
FAILURES_BEFORE_ERROR = 3
RETRY_AFTER_DENIED_S = 30.0
MIN_RECORD_RATE = 3
# Austin streams (collect/stacks/austin.py): a sample of that 17-thread trainer costs ~0.4 ms, so a third
# of py-spy's share buys more samples than py-spy's whole share did (~4 a second against ~3)
STREAM_CPU_SHARE = 0.002
STREAM_STARTUP_S = 0.008  # Austin's CPU to attach, paid once per window
STREAM_WINDOW_S = 15  # samples arrive every tick whatever the length: windows only re-price the rate
# until a window has priced a sample: py-spy's middle rate, for a few seconds (a snapshot's first
# seconds sample a small trainer no less often than py-spy's windows did)
STREAM_FIRST_RATE = 13.0
STREAM_FIRST_WINDOW_S = 3
MIN_SAMPLE_COST_S = 1e-5
STREAM_PROBE_LINES = 40  # lines of a window with no main-thread sample among them: Austin cannot read it
STREAM_MAX_RATE = 17.0
# each window's rate is the affordable one times the next of these: rates that differ from window
# to window keep a periodic training step from aliasing with the sampling
STREAM_RATE_STEPS = (1.0, 0.89, 1.13)
# Workers' routine stacks (above): each worker every 10 s, where one dump at 0.3 a second
# reached each of 16 workers every ~53 s
SWEEP_INTERVAL_S = 10.0
# re-attaching (found children included) costs ~70 ms: paid once a window; an Austin orphaned by
# a killed dltop still ends by itself
SWEEP_WINDOW_S = 300


@dataclass
class ProcessStacks:
    """What is known about one process's main-thread stack, and how long it has not changed."""

    pid: int
    start_ticks: int
    role: str
    stack: Optional[tuple] = None  # Frame, innermost last
    stack_wall: Optional[float] = None  # time.time() of the sample
    slices_at_stack: Optional[int] = None  # main-thread timeslices when the dump began
    streak_since: Optional[float] = None  # the stack unchanged, without CPU, since then (monotonic)
    streak_run_ns: int = 0
    streak_slices: int = 0
    confirmed_at: Optional[float] = None  # the stack was last known current then
    run_ns: int = 0
    slices: Optional[int] = None
    seen_at: Optional[float] = None
    quiet_since: Optional[float] = None  # main thread has not run since then
    run: Optional[PySpyRun] = None
    run_began: tuple = ()  # (monotonic, wall, run_ns, slices, quiet_since) when the dump began
    loader_config: Optional[dict] = None  # workers: from _worker_loop's locals (frames.worker_loop_config)
    trainer_windows: deque = field(default_factory=deque)  # TrainerWindow, newest last
    windows_done: int = 0
    sample_cost_s: float = 0.0  # the sampler's CPU per sample in the last priced window (0: not priced)
    record_rate: float = 0.0
    record_seconds: int = 0
    pin_thread: Optional[bool] = None
    in_epoch_start: bool = False  # trainers: the last sample was in an epoch's start-up
    kind: Optional[str] = None  # what its newest stack says it is: worker | starting | other
    recording: bool = False  # the run under way is a record window (else a dump)
    stream_from: float = 0.0  # trainers sampled by Austin: when its samples were last taken
    stream_samples: int = 0  # main-thread samples of the Austin window under way
    austin_failed: bool = False  # Austin could not sample it: py-spy from now on
    austin_dump: bool = False  # the dump under way is Austin's
    worker_loader: bool = False  # trainers: seen inside a DataLoader iterator with worker processes
    sweep: Optional[StreamRun] = None  # trainers: the Austin sampling every process under it
    sweep_found: bool = False  # ... its window has sampled a main thread
    sweep_failed: bool = False  # ... a window sampled none: routine dumps from now on
    swept_at: Optional[float] = None  # workers: when a sweep last gave their stack

    @property
    def stuck_s(self) -> Optional[float]:
        if self.streak_since is None or self.confirmed_at is None:
            return None
        return max(0.0, self.confirmed_at - self.streak_since)


@dataclass(frozen=True)
class TrainerWindow:
    began: float
    ended: float
    phases: Counter  # phase -> main-thread samples
    stacks: Counter  # frames -> main-thread samples

    @property
    def samples(self) -> int:
        return sum(self.phases.values())


class StackSampler:
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
        self._frame_cache: dict = {}  # Austin's frame text -> Frame
        self.job_pid = job_pid
        self.dumps_per_s = dumps_per_s
        self._clock, self._wall = clock, wall
        self.procs: dict = {}  # pid -> ProcessStacks
        self.departed: dict = {}  # pid -> ProcessStacks of workers that went away (their last stack)
        self.requested: set = set()  # pids the user is looking at: dumped every tick
        # this job's part of the budgets: a node watcher following several jobs splits one
        # live view's budget between them
        self.share = 1.0
        # trainer pid -> [(began, ready or None)] of its workers' start-ups (collect/events/startup.py)
        self.startups: Optional[Callable[[int], list]] = None
        self._tokens = self._urgent_tokens = float(DUMP_BURST)
        self._last_update: Optional[float] = None
        self._failures = 0
        self._denied_at: Optional[float] = None
        self.status = "ok" if self.py_spy else "no-py-spy"
        self.fix: Optional[str] = (
            None if self.py_spy else ("install py-spy (`pip install py-spy`) or point DLTOP_PY_SPY at it")
        )
        self._tmp = tempfile.mkdtemp(prefix="dltop-")

    # -- every tick ------------------------------------------------------------------

    def update(self, members: list) -> None:
        """``members``: [(pid, start_ticks, role, schedstat or None)] of the job's live processes
        now; a schedstat tuple already read this tick is used, else the file is read."""
        now = self._clock()
        elapsed = 0.0 if self._last_update is None else now - self._last_update
        self._last_update = now
        self._forget_departed({(pid, ticks) for pid, ticks, _, _ in members})
        self._take_sweeps(now)
        for pid, ticks, role, schedstat in members:
            proc = self.procs.get(pid)
            if proc is None:
                proc = self.procs[pid] = ProcessStacks(pid, ticks, role)
            proc.role = role
            self._read_schedstat(proc, now, schedstat)
            self._collect(proc, now)
        if self.py_spy is None or not self._may_try(now):
            return
        self._tokens = min(float(DUMP_BURST), self._tokens + elapsed * self.dumps_per_s * self.share)
        self._urgent_tokens = min(float(DUMP_BURST), self._urgent_tokens + elapsed * URGENT_DUMPS_PER_S * self.share)
        self._start_records(now)
        self._start_dumps(now)

    def probe_loaders(self, pids: list, timeout_s: float = PROBE_TIMEOUT_S) -> set:
        """At attach: which of these trainers run a DataLoader with worker processes, from one
        non-blocking dump each, waited for (briefly) so the very first tick knows a spawn worker
        still importing torch for a worker, not a helper."""
        if self.py_spy is None:
            return set()
        runs = {pid: PySpyRun(dump_command(self.py_spy, pid), timeout_s) for pid in pids}
        found: set = set()
        while runs:
            for pid, run in list(runs.items()):
                result = run.poll()
                if result is None:
                    continue
                del runs[pid]
                main = _main_thread(parse_dump(result.text), pid) if result.ok else None
                if main is not None and stackframes.uses_worker_processes(list(main.frames)):
                    found.add(pid)
            time.sleep(0.01)
        return found

    def trainer_time(self, pid: int) -> Optional[TrainerTime]:
        proc = self.procs.get(pid)
        if proc is None or not proc.trainer_windows:
            return None
        windows = list(proc.trainer_windows)
        phases: Counter = Counter()
        for window in windows:
            phases.update(window.phases)
        total = sum(phases.values())
        if not total:
            return None
        return TrainerTime(
            samples=total,
            window_s=windows[-1].ended - windows[0].began,
            **{field: 100.0 * phases[phase] / total for phase, field in PHASES.items()},
        )

    def activity(self, pid: int) -> str:
        proc = self.procs.get(pid)
        if proc is None or proc.stack is None:
            return "unknown"
        if proc.role == "trainer":
            latest = proc.trainer_windows[-1] if proc.trainer_windows else None
            if latest and latest.samples:
                return latest.phases.most_common(1)[0][0]
            return stackframes.trainer_phase(list(proc.stack))  # its first-sight dump
        if proc.role == "worker":
            return stackframes.worker_activity(list(proc.stack))
        return "running"

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
        for leftover in Path(self._tmp).glob("*"):
            leftover.unlink(missing_ok=True)
        Path(self._tmp).rmdir()

    # -- internals -----------------------------------------------------------------------

    def _forget_departed(self, alive: set) -> None:
        for pid, proc in list(self.procs.items()):
            if (pid, proc.start_ticks) in alive:
                continue
            _stop_runs(proc)
            if proc.role == "worker":
                self.departed[pid] = proc
            del self.procs[pid]
        while len(self.departed) > 256:
            self.departed.pop(next(iter(self.departed)))

    def _read_schedstat(self, proc: ProcessStacks, now: float, reading: Optional[tuple]) -> None:
        try:
            run_ns, _, slices = reading or procfs.read_schedstat(proc.pid)
        except (OSError, ValueError):
            return
        if proc.slices is not None and slices == proc.slices:
            if proc.quiet_since is None:
                proc.quiet_since = proc.seen_at
        else:
            proc.quiet_since = None
        if proc.streak_since is not None:
            if not _idle_since_streak(proc, run_ns, slices, now):
                proc.streak_since = proc.confirmed_at = None  # it is running again
            elif slices == proc.slices_at_stack:
                proc.confirmed_at = now  # has not run since the dump: the stack is still current
        proc.run_ns, proc.slices, proc.seen_at = run_ns, slices, now

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
        if isinstance(proc.run, StreamRun):
            self._collect_stream(proc, proc.run, now)
            return
        if proc.run is None:
            return
        result = proc.run.poll()
        if result is None:
            return
        proc.run = None
        austin_stack = self._austin_dump(proc, result.text) if proc.austin_dump and result.ok else []
        if proc.austin_dump and not austin_stack:
            # refused or unreadable: py-spy's next dump says why, if it fails too
            proc.austin_failed = not result.gone and _alive(proc)
            return
        if not result.ok:
            if result.denied:
                self._mark_denied(now)
            elif not result.gone:
                self._failures += 1
                if self._failures >= FAILURES_BEFORE_ERROR and self.status == "ok":
                    self.status = f"error: {result.error}"
                    self.fix = (
                        "py-spy keeps failing on this job: upgrade it (`pip install -U py-spy`); a Python "
                        "newer than the installed py-spy supports is the usual cause"
                    )
            return
        self._failures = 0
        if self.status != "ok":
            self.status, self.fix = "ok", None
        if proc.recording:
            planned = max(1.0, min(now - proc.run_began[0], proc.record_seconds) * proc.record_rate)
            if planned >= MIN_SAMPLES_TO_PRICE:
                proc.sample_cost_s = max(0.0, result.cpu_s - RECORD_STARTUP_S) / planned
            threads = parse_speedscope(result.text)
            _, samples = threads.get(proc.pid, ("", []))
            if not samples:  # no OS thread ids: the main thread by name
                samples = next((ordered for name, ordered in threads.values() if name == "MainThread"), [])
            others = {s for tid, (_, ordered) in threads.items() if tid != proc.pid for s in ordered}
            self._add_window(proc, samples, others, proc.run_began[0], proc.record_rate, now)
        else:
            threads = austin_stack or parse_dump(result.text)
            self._add_dump(proc, threads)
            if proc.role == "trainer" and proc.stack is not None:
                proc.worker_loader = proc.worker_loader or stackframes.uses_worker_processes(list(proc.stack))
            if proc.role == "worker" and proc.loader_config is None:
                config: dict = {}
                for thread in threads:
                    config.update(stackframes.worker_loop_config(thread.locals or {}))
                proc.loader_config = config if "worker_id" in config else None

    def _austin_dump(self, proc: ProcessStacks, text: str) -> list:
        """Austin's main-thread stack as py-spy's dump would list it (locals are py-spy's alone)."""
        frames = parse_where(text, self._frame_cache).get(proc.pid)
        return [ThreadStack(proc.pid, "MainThread", frames)] if frames is not None else []

    def _add_dump(self, proc: ProcessStacks, threads: list) -> None:
        main = _main_thread(threads, proc.pid)
        if main is None:
            return
        began, wall, run_ns, slices, quiet_since = proc.run_began
        stack = main.frames
        same = stack == proc.stack and proc.streak_since is not None
        if same and _idle_since_streak(proc, run_ns, slices, began):
            proc.confirmed_at = max(proc.confirmed_at or began, began)
        else:
            # Quiet since before the dump began: this stack has been current since then.
            proc.streak_since = quiet_since if quiet_since is not None else began
            proc.streak_run_ns, proc.streak_slices, proc.confirmed_at = run_ns, slices or 0, began
        proc.stack, proc.stack_wall, proc.slices_at_stack = stack, wall, slices
        proc.kind = stackframes.process_kind(list(stack), proc.kind)

    def _collect_stream(self, proc: ProcessStacks, run: StreamRun, now: float) -> None:
        """Every tick: the samples Austin wrote since the last, as a window of their own. A
        window that ended is priced; one that ended without a sample of a live trainer hands it
        to py-spy windows (Austin's lines name no cause: py-spy's say whether rights are missing)."""
        result = run.poll()
        samples, others = parse_samples(run.take(), proc.pid, self._frame_cache)
        if samples:
            self._add_window(proc, samples, others, proc.stream_from, proc.record_rate, now)
            proc.stream_samples += len(samples)
        proc.stream_from = now
        if result is None and not proc.stream_samples and run.lines_taken >= STREAM_PROBE_LINES:
            run.kill()  # its main thread is not among what Austin reads
            proc.run = None
            _hand_to_py_spy(proc)
            return
        if result is None:
            return
        proc.run = None
        if proc.stream_samples >= MIN_SAMPLES_TO_PRICE:
            # priced, however cheap (a small trainer's window may cost less than its start-up estimate)
            proc.sample_cost_s = max(MIN_SAMPLE_COST_S, (result.cpu_s - STREAM_STARTUP_S) / proc.stream_samples)
        elif not proc.stream_samples and not result.gone and _alive(proc):
            _hand_to_py_spy(proc)  # refused, or attached without one readable sample (a Python it does not know)

    def _take_sweeps(self, now: float) -> None:
        """Each worker's newest stack from its trainer's sweep, as a dump that began at the last
        tick (the sample was taken since: what was proven then still holds for it)."""
        for trainer in [p for p in self.procs.values() if p.sweep is not None]:
            result = trainer.sweep.poll()
            stacks = newest_main_stacks(trainer.sweep.take(), self._frame_cache)
            trainer.sweep_found = trainer.sweep_found or bool(stacks)
            for pid, frames in stacks.items():
                proc = self.procs.get(pid)
                if proc is None or proc.role != "worker" or proc.stack is None or proc.run is not None:
                    continue  # its first dump reads its loader; a dump under way has its own start
                proc.run_began = (proc.seen_at, self._wall(), proc.run_ns, proc.slices, proc.quiet_since)
                self._add_dump(proc, [ThreadStack(pid, "MainThread", frames)])
                proc.swept_at = now
            if result is not None:
                trainer.sweep = None
                trainer.sweep_failed = not trainer.sweep_found and not result.gone and _alive(trainer)

    def _add_window(
        self, proc: ProcessStacks, samples: list, others: set, began: float, rate: float, now: float
    ) -> None:
        """``samples``: the main thread's, in time order, ``rate`` a second from ``began``;
        ``others``: the distinct stacks of its other threads (the pin-memory thread's among them)."""
        proc.pin_thread = any(stackframes.has_pin_memory_loop(list(s)) for s in others | set(samples))
        mine = set(samples)
        proc.worker_loader = proc.worker_loader or any(stackframes.uses_worker_processes(list(s)) for s in mine)
        starting = self._workers_starting(proc, len(samples), began, rate)
        phases, proc.in_epoch_start = stackframes.trainer_phases(samples, proc.in_epoch_start, starting)
        proc.trainer_windows.append(TrainerWindow(began, now, Counter(phases), Counter(samples)))
        proc.windows_done += 1
        while proc.trainer_windows and now - proc.trainer_windows[0].ended > TRAINER_TIME_HISTORY_S:
            proc.trainer_windows.popleft()
        if samples:
            self._trainer_streak(proc, Counter(samples), began, now)

    def _workers_starting(self, proc: ProcessStacks, count: int, began: float, rate: float) -> Optional[list]:
        """Per sample of a window: was one of this trainer's workers still starting then?
        Samples are ``1/rate`` apart from the window's start."""
        intervals = self.startups(proc.pid) if self.startups else []
        if not intervals:
            return None
        times = [began + (i + 0.5) / max(rate, 1) for i in range(count)]
        return [any(start <= t and (ready is None or t < ready) for start, ready in intervals) for t in times]

    def _trainer_streak(self, proc: ProcessStacks, stacks: Counter, began: float, now: float) -> None:
        """A trainer's stack is 'stuck' while every sample of consecutive windows is the same stack."""
        typical = stacks.most_common(1)[0][0]
        if len(stacks) == 1 and typical == proc.stack and proc.streak_since is not None:
            proc.confirmed_at = now
        elif len(stacks) == 1:
            proc.streak_since, proc.confirmed_at, proc.streak_run_ns = began, now, proc.run_ns
            proc.streak_slices = proc.slices or 0
        else:
            proc.streak_since = proc.confirmed_at = None
        proc.stack, proc.stack_wall = typical, self._wall()
        proc.kind = stackframes.process_kind(list(typical), proc.kind)

    def _start_records(self, now: float) -> None:
        trainers = [p for p in self.procs.values() if p.role == "trainer"]
        for proc in trainers:
            if proc.run is None and proc.stack is None and not proc.windows_done:
                # first sight: one dump says at once whether it runs a DataLoader with workers
                # (its new workers are then known as workers while they start), before the
                # first record window reports a second later
                proc.run, proc.recording = PySpyRun(dump_command(self.py_spy, proc.pid), DUMP_TIMEOUT_S), False
                proc.run_began = (now, self._wall(), proc.run_ns, proc.slices, proc.quiet_since)
            elif proc.run is None and self.austin and not proc.austin_failed:
                self._start_stream(proc, len(trainers), now)
            elif proc.run is None:
                seconds = min(RECORD_WINDOW_MAX_S, 1 + proc.windows_done)
                cycled = RECORD_RATES[proc.windows_done % len(RECORD_RATES)]
                # py-spy's start-up is priced over a full-length window: the first short windows (an answer
                # within a second) would otherwise all run at the minimum rate
                share = RECORD_CPU_SHARE * self.share / len(trainers) - RECORD_STARTUP_S / RECORD_WINDOW_MAX_S
                affordable = share / proc.sample_cost_s if proc.sample_cost_s else cycled
                rate = int(max(MIN_RECORD_RATE, min(cycled, affordable)))
                output = os.path.join(self._tmp, f"record-{proc.pid}-{proc.windows_done}.txt")
                command = record_command(self.py_spy, proc.pid, rate, seconds, output)
                proc.run, proc.recording = PySpyRun(command, seconds + DUMP_TIMEOUT_S, output), True
                proc.record_rate, proc.record_seconds = rate, seconds
                proc.run_began = (now, self._wall(), proc.run_ns, proc.slices, proc.quiet_since)
            if proc.sweep is None:
                self._start_sweep(proc)

    def _start_sweep(self, trainer: ProcessStacks) -> None:
        """Sweep the processes under a trainer with workers, where Austin can read its Python."""
        if not self.austin or trainer.austin_failed or trainer.sweep_failed or not self._has_workers():
            return
        command = stream_command(self.austin, trainer.pid, 1 / self._sweep_interval_s(), SWEEP_WINDOW_S, children=True)
        trainer.sweep, trainer.sweep_found = StreamRun(command, SWEEP_WINDOW_S + DUMP_TIMEOUT_S), False

    def _start_stream(self, proc: ProcessStacks, trainers: int, now: float) -> None:
        """An Austin window at the rate its share affords, priced by the last window's cost."""
        share = STREAM_CPU_SHARE * self.share / trainers - STREAM_STARTUP_S / STREAM_WINDOW_S
        affordable = share / proc.sample_cost_s if proc.sample_cost_s else STREAM_FIRST_RATE
        step = STREAM_RATE_STEPS[proc.windows_done % len(STREAM_RATE_STEPS)]
        rate = max(MIN_RECORD_RATE, min(STREAM_MAX_RATE, affordable)) * step
        seconds = STREAM_WINDOW_S if proc.sample_cost_s else STREAM_FIRST_WINDOW_S
        command = stream_command(self.austin, proc.pid, rate, seconds)
        proc.run, proc.recording = StreamRun(command, seconds + DUMP_TIMEOUT_S), True
        proc.record_rate, proc.record_seconds, proc.stream_samples = rate, seconds, 0
        proc.run_began, proc.stream_from = (now, self._wall(), proc.run_ns, proc.slices, proc.quiet_since), now

    def _start_dumps(self, now: float) -> None:
        in_flight = sum(1 for p in self.procs.values() if p.run is not None and p.role != "trainer")
        for proc in sorted(self._dump_candidates(), key=self._priority):
            rank = self._priority(proc)[0]
            if in_flight >= MAX_IN_FLIGHT:
                break
            if rank == 3 and proc.loader_config is not None and self._swept(proc, now):
                continue  # the sweep refreshes it (a worker not read in _worker_loop yet is dumped with locals)
            if rank in (1, 2) and self._urgent_tokens >= 1:
                self._urgent_tokens -= 1
            elif rank > 0 and self._tokens >= 1:
                self._tokens -= 1
            elif rank > 0:
                continue
            # A worker's first dump reads _worker_loop's arguments too (its loader and settings):
            # py-spy's alone can. Every other dump is Austin's where it can attach: half the CPU.
            with_locals = proc.role == "worker" and proc.loader_config is None
            proc.austin_dump = bool(self.austin) and not with_locals and not proc.austin_failed
            command = (
                austin_dump_command(self.austin, proc.pid)
                if proc.austin_dump
                else dump_command(self.py_spy, proc.pid, with_locals=with_locals)
            )
            proc.run = PySpyRun(command, DUMP_TIMEOUT_S)
            proc.recording = False
            proc.run_began = (now, self._wall(), proc.run_ns, proc.slices, proc.quiet_since)
            in_flight += 1

    def _dump_candidates(self) -> list:
        """Workers (and what the user looks at) whose stack may have changed since their last dump."""
        return [
            p
            for p in self.procs.values()
            if p.run is None
            and (p.role == "worker" or p.pid in self.requested)
            and p.role != "trainer"
            and (p.stack is None or p.slices != p.slices_at_stack or p.pid in self.requested)
        ]

    def _priority(self, proc: ProcessStacks) -> tuple:
        """(rank, oldest first): 0 the user asked (no budget); 1 a hang to confirm and 2 a new
        process (the urgent budget first); 3 routine refreshes."""
        if proc.pid in self.requested:
            rank = 0
        elif self._quiet_for(proc) >= SUSPECT_QUIET_S and self._worked_since_dump(proc):
            rank = 1  # worked, then stayed quiet: a hang to confirm (or a worker waiting long for work)
        elif proc.stack is None:
            rank = 2
        else:
            rank = 3
        return rank, proc.seen_at if proc.stack is None else (proc.run_began[0] if proc.run_began else 0.0)

    def _has_workers(self) -> bool:
        return any(p.role == "worker" for p in self.procs.values())

    def _sweep_interval_s(self) -> float:
        """A node watcher following several jobs sweeps each less often (its share of the budget)."""
        return SWEEP_INTERVAL_S / max(self.share, 0.01)

    def _swept(self, proc: ProcessStacks, now: float) -> bool:
        """A sweep gave its stack lately (it goes on doing so)."""
        return proc.swept_at is not None and now - proc.swept_at <= 2 * self._sweep_interval_s() + 1

    @staticmethod
    def _quiet_for(proc: ProcessStacks) -> float:
        if proc.quiet_since is None or proc.seen_at is None:
            return 0.0
        return proc.seen_at - proc.quiet_since

    @staticmethod
    def _worked_since_dump(proc: ProcessStacks) -> bool:
        """Not idle at its last dump, or used CPU since (an idle worker's 5 s wake-ups use ~none)."""
        if proc.stack is None:
            return True
        idle = stackframes.worker_activity(list(proc.stack)) == "idle"
        run_ns_at_dump = proc.run_began[2] if proc.run_began else 0
        return not idle or proc.run_ns - run_ns_at_dump > IDLE_WAKE_NS


def _idle_since_streak(proc: ProcessStacks, run_ns: int, slices: Optional[int], at: float) -> bool:
    """Since its streak began the main thread used under STUCK_CPU_SHARE of a core (plus 10 ms
    slack) and was scheduled at most STUCK_WAKEUPS_PER_S times a second (plus 2)."""
    elapsed = at - proc.streak_since
    woke = (slices or 0) - proc.streak_slices
    return run_ns - proc.streak_run_ns <= STUCK_CPU_SHARE * elapsed * 1e9 + 1e7 and woke <= (
        STUCK_WAKEUPS_PER_S * elapsed + 2
    )


def _stop_runs(proc: ProcessStacks) -> None:
    for run in (proc.run, proc.sweep):
        if run is not None:
            run.kill()
    proc.run = proc.sweep = None


def _hand_to_py_spy(proc: ProcessStacks) -> None:
    """Austin cannot sample this trainer: py-spy's windows from now on, priced afresh."""
    proc.austin_failed, proc.sample_cost_s = True, 0.0


def _alive(proc: ProcessStacks) -> bool:
    try:
        stat = procfs.read_stat(proc.pid)
    except (OSError, ValueError, IndexError):
        return False
    return stat.start_ticks == proc.start_ticks and stat.state not in ("Z", "X")


def _main_thread(threads: list, pid: int) -> Optional[ThreadStack]:
    return next((t for t in threads if t.tid == pid), None) or next(
        (t for t in threads if t.name == "MainThread"), None
    )

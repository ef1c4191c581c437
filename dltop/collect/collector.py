"""One Snapshot per tick: walks the job, reads every source, turns counters into rates.

A tick is five steps (``Collector.tick``): what left is forgotten (every per-process record at
once), the processes are sampled, then their stacks, then the workers' comings and goings and
the trainers that ended, and last the job's state and its loaders (``loader_samples.py``).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Optional, Protocol

from dltop.collect.events.exits import ExitWatcher
from dltop.collect.events.lifecycle import WorkerLifecycle
from dltop.collect.events.startup import StartupWatcher
from dltop.collect.events.trainer_log import TrainerLogs
from dltop.collect.host.disk import DiskSampler
from dltop.collect.host.gpu import GpuSampler
from dltop.collect.host.system import SystemSampler
from dltop.collect.loader_samples import LoaderSamples
from dltop.collect.processes.discovery import WORKER_COMMS, Discovery, JobTree
from dltop.collect.processes.placement import PlacementReader
from dltop.collect.processes.stats import ProcessSampler, iso
from dltop.collect.stacks.sampler import NoStacks, Stacks, StackSampler
from dltop.collect.stacks.source_lines import SourceLines
from dltop.frames import worker_activity
from dltop.model import Frame, JobInfo, LoaderSample, ProcessSample, Snapshot, is_stuck
from dltop.redact import redact_command
from dltop.settings import DEFAULTS, Settings

# CPU time per tick for smaps_rollup reads (USS/PSS): the rest are refreshed on later ticks. One
# read a tick at least (a torch process's costs ~3 ms: the kernel walks its page tables).
MEMORY_BUDGET_S = 0.003
SETTLE_S = 1.5
CODED_FRAMES_MAX = 20_000  # frames kept with their source line (a job's code has far fewer places)

Key = tuple[int, int]  # (pid, start ticks): a process, whatever reuses its pid later
Live = list[tuple[int, int, str]]  # (pid, start ticks, role) of the processes not ended


class Collector:
    """Attach to the job that ``pid`` belongs to (DltopError if none) and sample it on demand."""

    def __init__(
        self,
        pid: int,
        *,
        gpu: Optional[GpuSampler] = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        memory_budget_s: float = MEMORY_BUDGET_S,
        stacks: bool = True,
        py_spy: Optional[str] = None,
        settings: Settings = DEFAULTS,
        show_secrets: bool = False,
        keep_ended_s: float = math.inf,
    ) -> None:
        """``show_secrets``: command lines whole, for the job's owner on their own screen; by
        default they are redacted (dltop/redact.py), as everything that leaves the node is.
        ``keep_ended_s``: how long a trainer that ended keeps its loader entry while other ranks
        run (a live window's span; a report keeps them all)."""
        self._clock, self._wall = clock, wall
        self.memory_budget_s = memory_budget_s
        self._memory_read_s = 0.0  # CPU of the last sample that read USS/PSS
        self.settings = settings
        self._command: Callable[[list[str]], str] = " ".join if show_secrets else redact_command
        self.discovery = Discovery()
        self.tree: JobTree = self.discovery.resolve(pid)
        self.stacks: Stacks = (
            StackSampler(self.tree.root_pid, py_spy=py_spy, clock=clock, wall=wall) if stacks else NoStacks()
        )
        self.exits = ExitWatcher()
        self.startups = StartupWatcher(WORKER_COMMS)
        self.stacks.startups = self.startups.intervals
        probed = self.stacks.probe_loaders(self.tree.trainer_pids)
        self._probed_loaders = {pid for pid, kind in probed.items() if kind == "loader"}
        self._probed_kinds = self.discovery.stack_kinds_of({p: k for p, k in probed.items() if k == "worker"})
        if self._probed_kinds:
            # a pipeline's forked worker processes looked like ranks of a launcher: their stacks say
            # what they are, before the first tick lists them
            self.discovery.stack_kinds = dict(self._probed_kinds)
            self.tree = self.discovery.refresh(self.tree)
        self.sources = SourceLines()
        self.logs = TrainerLogs()
        self.lifecycle = WorkerLifecycle()
        self.loaders = LoaderSamples(
            self.stacks, self.lifecycle, self.logs, self.sources, clock, hang_after_s=settings.hang_after_s
        )
        self.processes = ProcessSampler(clock, wall)
        self.placements = PlacementReader()
        self._main_threads = _MainThreadCpu()
        self._coded = _CodedStacks(self.sources)
        # every record kept per process: each forgets the processes that left, at the tick's start
        self._per_process: tuple[_PerProcess, ...] = (self.processes, self.placements, self._main_threads, self._coded)
        self.system = SystemSampler()
        self.disks = DiskSampler(clock)
        self.gpu = gpu if gpu is not None else GpuSampler()
        self.keep_ended_s = keep_ended_s
        self._trainers = _Trainers((self.lifecycle, self.logs, self.loaders))
        self._last_tick: Optional[float] = None
        self._job_started_at: Optional[str] = None

    def tick(self, full_memory: bool = False) -> Snapshot:
        """One sample of the job: forget what left, sample the processes, their stacks (and the
        trainers' main threads), follow the workers' lifecycle, then the job's state and loaders.
        ``full_memory`` re-reads every USS/PSS whatever it costs."""
        now = self._clock()
        window = 0.0 if self._last_tick is None else now - self._last_tick
        self._last_tick = now
        self._share_stack_evidence()
        tree = self.tree = self.discovery.refresh(self.tree)
        stats = self.discovery.table.stats
        self._forget_gone(tree, stats)
        samples = self._sample_processes(tree, stats, full_memory)
        live = [(s.pid, stats[s.pid].start_ticks, s.role) for s in samples if s.state != "zombie"]
        caught = self._watch_exits(samples, stats, live)
        samples = self._read_stacks(samples, stats, live, now)
        samples = self._read_main_threads(samples, stats, now)
        by_pid = {s.pid: s for s in samples}
        running = self._follow_lifecycle(now, samples, by_pid, caught)
        return self._snapshot(window, tree, samples, by_pid, running)

    # -- the tick's steps ----------------------------------------------------------------

    def _share_stack_evidence(self) -> None:
        """Tell discovery what stacks and the worker history proved: which processes run
        ``_worker_loop`` (or another target), and which trainers run a DataLoader with workers."""
        self.discovery.loader_trainers = {t for t, h in self.lifecycle.trainers.items() if h.started_total}
        self.discovery.loader_trainers |= self._probed_loaders
        self.discovery.stack_kinds = {**self._probed_kinds, **self.stacks.stack_kinds()}
        self.discovery.loader_trainers |= self.stacks.loader_trainers()

    def _forget_gone(self, tree: JobTree, stats: dict) -> None:
        """Processes that left are forgotten by every per-process record, before the samples
        (which match them with their parent's cutime)."""
        self.discovery.forget_except(set(stats))
        alive = {(pid, stats[pid].start_ticks) for pid in tree.members if pid in stats}
        for record in self._per_process:
            record.forget_except(alive)

    def _sample_processes(self, tree: JobTree, stats: dict, full_memory: bool) -> list:
        """Every member's figures; USS/PSS re-read oldest first while the CPU budget lasts."""
        read_at = self.processes.memory_read_at
        members = [(pid, m) for pid, m in tree.members.items() if pid in stats]
        members.sort(key=lambda item: read_at.get((item[0], stats[item[0]].start_ticks), float("-inf")))
        spent, samples = 0.0, []
        for pid, member in members:
            # one read per tick at least; more only while the last one's cost still fits the budget
            # (this thread's CPU: the TUI's drawing runs in the same process)
            read_memory = full_memory or spent == 0.0 or spent + self._memory_read_s <= self.memory_budget_s
            started = time.thread_time()
            placement = (
                self.placements.read(pid, stats[pid].start_ticks, self.discovery.rank_env(pid))
                if member.role == "trainer"
                else None
            )
            sample = self.processes.sample(
                member, stats[pid], self._command(self.discovery.cmdline(pid)), placement, read_memory
            )
            if read_memory:
                self._memory_read_s = time.thread_time() - started
                spent += self._memory_read_s
            if sample is not None:
                samples.append(sample)
        return sorted(samples, key=lambda s: s.pid)

    def _watch_exits(self, samples: list, stats: dict, live: Live) -> dict:
        """Watch workers and trainers for their exit status, and workers for the moment they are
        ready; {pid: exit code} of the exits caught since the last tick."""
        for pid, start_ticks, role in live:
            if role in ("worker", "trainer"):
                self.exits.watch(pid, start_ticks)
        if self.tree.names_expected:  # a worker is ready when _worker_loop names it
            for s in samples:
                if s.role == "worker" and s.state != "zombie":
                    self.startups.watch(s.pid, stats[s.pid].start_ticks, s.trainer_pid, s.name)
        caught = self.exits.take()
        self._trainers.caught(caught)
        return caught

    def _read_stacks(self, samples: list, stats: dict, live: Live, now: float) -> list:
        """Start and collect the stack runs; each sample gets what its stack shows."""
        schedstats = self.processes.schedstats
        self.stacks.update([(pid, ticks, role, schedstats.get((pid, ticks))) for pid, ticks, role in live])
        if not self.stacks.sampling:
            return samples  # --no-stacks: no activity is claimed, not even a worker's start-up
        samples = [self._with_stack(s) for s in samples]
        self._ready_by_stack(samples, stats, now)
        return samples

    def _read_main_threads(self, samples: list, stats: dict, now: float) -> list:
        """Each trainer's sample with its main thread's CPU share."""
        return [self._with_main_thread(s, stats[s.pid].start_ticks, now) if s.role == "trainer" else s
                for s in samples]  # fmt: skip

    def _follow_lifecycle(self, now: float, samples: list, by_pid: dict, caught: dict) -> list[int]:
        """The workers that came and went, the trainers' logs, and the trainers that ended long
        enough ago to forget; the trainers running now."""
        tree = self.tree
        workers = {s.pid: s.trainer_pid for s in samples if s.role == "worker"}
        zombies = {s.pid: s.exit_code for s in samples if s.state == "zombie"}
        running = [p for p in tree.trainer_pids if p in by_pid and by_pid[p].state != "zombie"]
        self.lifecycle.update(now, iso(self._wall()), workers, {**caught, **zombies}, set(running), self._last_known)
        for trainer in running:
            self.logs.attach(trainer)
        self._trainers.ran(running, now)
        for trainer in self.lifecycle.trainers:
            self.lifecycle.late_codes(trainer, self.logs.worker_errors(trainer), from_log=True)
        self._trainers.forget_ended(now, running, self.keep_ended_s)
        return running

    def _snapshot(self, window: float, tree: JobTree, samples: list, by_pid: dict, running: list[int]) -> Snapshot:
        """The job's state, its loaders (those of trainers that exited too: their exited workers
        are the evidence) and the host's figures, with the samples."""
        trainers = sorted(set(running) | set(self.lifecycle.trainers))
        loaders = [loader for t in trainers for loader in self.loaders.sample(t, tree, by_pid)]
        live_pids = [s.pid for s in samples if s.state != "zombie"]
        anchor = running[0] if running else tree.root_pid
        system = self.system.sample(anchor) if live_pids else None
        return Snapshot(
            taken_at=iso(self._wall()),
            window_s=window,
            job=self._job_info(tree, by_pid, running, loaders),
            system=system,
            processes=samples,
            loaders=loaders,
            gpus=self.gpu.sample(live_pids),
            gpu_status=self.gpu.status,
            disks=self.disks.sample(live_pids),
            stacks_status=self.stacks.status,
            stacks_fix=self.stacks.fix,
        )

    # -- what the caller asks ------------------------------------------------------------

    def watch(self, pid: Optional[int]) -> None:
        """The process a person is looking at gets a fresh (non-blocking) stack every tick."""
        self.stacks.requested = {pid} if pid else set()

    def share_budget(self, share: float) -> None:
        """This job's part (0-1) of one live view's stack budget."""
        self.stacks.share = share

    def settle(self, timeout_s: float = SETTLE_S) -> None:
        """Wait (briefly) for py-spy runs under way, so the next tick has their results."""
        self.stacks.wait_pending(self._clock() + timeout_s)

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop py-spy runs and the exit watcher (dltop quits; the job goes on)."""
        self.stacks.close()
        self.exits.close()
        self.startups.close()
        self.logs.close()

    # -- one sample ----------------------------------------------------------------------

    def _with_stack(self, sample: ProcessSample) -> ProcessSample:
        """A sample with what its newest stack shows: its frames with their code, its activity
        (stuck past the hang threshold), its worker id."""
        if sample.state == "zombie":
            return sample
        seen = self.stacks.stack_of(sample.pid)
        if seen is None or seen.frames is None:
            # this torch names its workers as _worker_loop begins: an unnamed one is still starting
            unnamed = self.tree.names_expected and not sample.name.startswith(WORKER_COMMS)
            return replaced(sample, activity="starting") if sample.role == "worker" and unnamed else sample
        config = seen.loader_config or {}
        return replaced(
            sample,
            worker_id=config.get("worker_id"),
            activity="stuck" if is_stuck(seen, self.settings.hang_after_s) else seen.activity,
            stack=self._coded.with_code(sample.pid, seen.frames),
            stack_at=iso(seen.wall) if seen.wall else None,
            stuck_s=seen.stuck_s,
        )

    def _ready_by_stack(self, samples: list, stats: dict, now: float) -> None:
        """Workers whose stack shows them past start-up (in _worker_loop's loop) were ready when it was sampled."""
        wall = self._wall()
        for s in samples:
            if s.role == "worker" and s.stack_at and s.activity not in ("starting", "unknown"):
                seen = self.stacks.stack_of(s.pid)
                if seen is not None and seen.wall is not None:
                    self.startups.ready(s.pid, stats[s.pid].start_ticks, now - (wall - seen.wall))

    def _with_main_thread(self, sample: ProcessSample, start_ticks: int, now: float) -> ProcessSample:
        """A trainer's main thread CPU alone (schedstat), and its Python threads' (the stacks'):
        what it uses beyond those runs in native threads, mostly torch's intra-op pool, which
        competes with the workers for CPUs."""
        reading = self.processes.schedstats.get((sample.pid, start_ticks))
        if reading is None or sample.state == "zombie":
            return sample
        share = self._main_threads.share((sample.pid, start_ticks), reading[0], now)
        python = self.stacks.python_threads_cpu(sample.pid)
        return sample if share is None else replaced(sample, main_thread_cpu_percent=share,
                                                     python_threads_cpu_percent=python)  # fmt: skip

    def _last_known(self, pid: int) -> tuple:
        """(activity, stack) of a worker that just went away, from its last dump."""
        seen = self.stacks.departed_stack(pid)
        if seen is None or seen.frames is None:
            return "unknown", None
        return worker_activity(list(seen.frames)), list(seen.frames)

    # -- the job -------------------------------------------------------------------------

    def _job_info(self, tree: JobTree, by_pid: dict, running: list[int], loaders: list[LoaderSample]) -> JobInfo:
        """The job runs while a trainer does, or while its launcher waits between ranks."""
        if tree.root_pid in by_pid and self._job_started_at is None:
            self._job_started_at = by_pid[tree.root_pid].started_at
        runs = bool(running) or self._between_ranks(tree, by_pid)
        return JobInfo(
            pid=tree.root_pid,
            requested_pid=tree.requested_pid,
            cmdline=self._command(self.discovery.cmdline(tree.root_pid)),
            state="running" if runs else "exited",
            exit_code=None if runs else self._trainer_exit_code(tree, by_pid),
            start_method=next((ld.start_method for ld in loaders if ld.start_method != "unknown"), "unknown"),
            trainer_pids=tree.trainer_pids,
            launcher_pid=tree.launcher_pid,
            torch_version=tree.torch_version,
            started_at=self._job_started_at,
        )

    def _between_ranks(self, tree: JobTree, by_pid: dict) -> bool:
        """torchrun outlives its ranks while it restarts them (--max-restarts) or waits for other
        nodes': the job runs on (a shell or an mp.spawn parent whose ranks ended is a job that ended)."""
        launcher = by_pid.get(tree.launcher_pid) if tree.launcher_pid is not None else None
        return launcher is not None and launcher.state != "zombie" and self.discovery.is_launcher(launcher.pid)

    def _trainer_exit_code(self, tree: JobTree, by_pid: dict) -> Optional[int]:
        codes = [by_pid[p].exit_code for p in tree.trainer_pids if p in by_pid and by_pid[p].exit_code is not None]
        codes += [
            self._trainers.exit_codes[p] for p in tree.trainer_pids if self._trainers.exit_codes.get(p) is not None
        ]
        return next((c for c in codes if c != 0), codes[0] if codes else None)


class _PerProcess(Protocol):
    """A record kept per process (by pid and start ticks)."""

    def forget_except(self, alive: set[Key], /) -> None: ...


class _PerTrainer(Protocol):
    """A record kept per trainer."""

    def forget(self, pid: int, /) -> None: ...


class _Trainers:
    """The trainers seen running, when last, and the exit codes the watcher caught of theirs. A
    trainer that ended is forgotten by every per-trainer record at once."""

    def __init__(self, records: tuple[_PerTrainer, ...]) -> None:
        self._records = records
        self.ran_at: dict[int, float] = {}  # trainer pid -> when last seen running
        self.exit_codes: dict[int, Optional[int]] = {}  # trainer pid -> exit code caught by the watcher

    def caught(self, codes: dict) -> None:
        """Keep the caught exit codes that are trainers' (the watcher watches workers too)."""
        self.exit_codes.update({pid: code for pid, code in codes.items() if pid in self.ran_at})

    def ran(self, trainers: list[int], now: float) -> None:
        for trainer in trainers:
            self.ran_at[trainer] = now

    def forget_ended(self, now: float, running: list[int], keep_ended_s: float) -> None:
        """A trainer that ended is history once other ranks run and ``keep_ended_s`` has passed
        (a restart's old ranks): its loader entry and series go. While none runs (the job
        ending, or between a restart's ranks) every one stays: its exited workers are evidence."""
        if not running:
            return
        for pid in [p for p, at in self.ran_at.items() if p not in running and now - at > keep_ended_s]:
            del self.ran_at[pid]
            self.exit_codes.pop(pid, None)
            for record in self._records:
                record.forget(pid)


class _MainThreadCpu:
    """Each trainer's main-thread run time (schedstat) at the last tick, for its CPU share since."""

    def __init__(self) -> None:
        self._runs: dict[Key, tuple[float, int]] = {}  # -> (clock, main thread run ns)

    def share(self, key: Key, run_ns: int, now: float) -> Optional[float]:
        """Percent of one CPU since the last reading; None at the first."""
        before, self._runs[key] = self._runs.get(key), (now, run_ns)
        if before is None or now <= before[0]:
            return None
        return max(0.0, (run_ns - before[1]) / 1e9 / (now - before[0]) * 100)

    def forget_except(self, alive: set[Key], /) -> None:
        for key in set(self._runs) - alive:
            del self._runs[key]


class _CodedStacks:
    """Stacks with their source lines, worked out once per new stack (not every tick)."""

    def __init__(self, sources: SourceLines) -> None:
        self._sources = sources
        self._coded: dict[int, tuple] = {}  # pid -> (stack, the stack with source lines)
        self._frames: dict[Frame, Frame] = {}  # frame -> the frame with its source line (files are read once)

    def with_code(self, pid: int, stack: tuple) -> list:
        cached = self._coded.get(pid)
        if cached is None or cached[0] is not stack:
            cached = self._coded[pid] = (stack, [self._coded_frame(pid, f) for f in stack])
        return cached[1]

    def _coded_frame(self, pid: int, frame: Frame) -> Frame:
        """A frame with its source line, built once: a trainer's stacks arrive every tick and share
        most of their frames (SourceLines keeps a file's lines by its path, so a frame's line is
        the same whichever process showed it)."""
        coded = self._frames.get(frame)
        if coded is None:
            if len(self._frames) >= CODED_FRAMES_MAX:
                self._frames.clear()
            coded = self._frames[frame] = dataclasses.replace(
                frame, code=self._sources.line(pid, frame.file, frame.line)
            )
        return coded

    def forget_except(self, alive: set[Key], /) -> None:
        for gone in set(self._coded) - {pid for pid, _ in alive}:
            del self._coded[gone]


def replaced(sample: ProcessSample, **changes: object) -> ProcessSample:
    """``dataclasses.replace(sample, **changes)`` without its per-field pass (~16 µs against ~2.5:
    a tick replaces a sample per process of the job). ProcessSample is a plain frozen dataclass (no
    ``__post_init__``, no slots): a copy of its fields with the changes is what replace builds."""
    unknown = changes.keys() - _SAMPLE_FIELDS
    if unknown:
        raise TypeError(f"ProcessSample has no field {sorted(unknown)}")
    new = object.__new__(ProcessSample)
    new.__dict__.update(sample.__dict__)
    new.__dict__.update(changes)
    return new


_SAMPLE_FIELDS = frozenset(f.name for f in dataclasses.fields(ProcessSample))

"""One Snapshot per tick: walks the job, reads every source, turns counters into rates."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Callable, NamedTuple, Optional

from dltop.collect.events.exits import ExitWatcher
from dltop.collect.events.lifecycle import WorkerLifecycle
from dltop.collect.events.startup import StartupWatcher
from dltop.collect.events.trainer_log import TrainerLogs
from dltop.collect.host.disk import DiskSampler
from dltop.collect.host.gpu import GpuSampler
from dltop.collect.host.system import SystemSampler
from dltop.collect.processes.discovery import PIN_THREAD_COMMS, WORKER_COMMS, Discovery, JobTree
from dltop.collect.processes.loaders import loader_key, split_loaders
from dltop.collect.processes.placement import PlacementReader
from dltop.collect.processes.shards import ShardFiles, parts_from_indices
from dltop.collect.processes.stats import ProcessSampler, iso
from dltop.collect.procfs import thread_names
from dltop.collect.stacks.sampler import StackSampler
from dltop.collect.stacks.source_lines import LoaderSite, SourceLines
from dltop.frames import dataset_kind, worker_activity
from dltop.frames import start_method as stack_start_method
from dltop.model import DatasetKind, Frame, JobInfo, LoaderSample, ProcessSample, Snapshot, is_stuck
from dltop.redact import redact_command
from dltop.settings import DEFAULTS, Settings

# CPU time per tick for smaps_rollup reads (USS/PSS): the rest are refreshed on later ticks. One
# read a tick at least (a torch process's costs ~3 ms: the kernel walks its page tables).
MEMORY_BUDGET_S = 0.003
SETTLE_S = 1.5
PIN_TTL_S = 5.0
CODED_FRAMES_MAX = 20_000  # frames kept with their source line (a job's code has far fewer places)


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
        self.stacks = StackSampler(self.tree.root_pid, py_spy=py_spy, clock=clock, wall=wall) if stacks else None
        self.exits = ExitWatcher()
        self.startups = StartupWatcher(WORKER_COMMS)
        self._probed_loaders: set = set()
        if self.stacks is not None:
            self.stacks.startups = self.startups.intervals
            self._probed_loaders = self.stacks.probe_loaders(self.tree.trainer_pids)
        self.sources = SourceLines()
        self.logs = TrainerLogs()
        self.shards = ShardFiles(clock)
        self._parts: dict = {}  # (trainer pid, dataset class) -> (parts, where counted): known stays known
        self._exit_codes: dict = {}  # pid -> exit code caught by the watcher (workers and trainers)
        self._known_loaders: dict = {}  # trainer pid -> {loader key: config}
        self._seen_workers: dict = {}  # (trainer pid, loader key) -> _SeenWorkers
        self._last_trainer_time: dict = {}  # trainer pid -> TrainerTime last measured
        self._main_runs: dict = {}  # (pid, start ticks) of a trainer -> (clock, main thread run ns)
        self._sites: dict[tuple, Optional[LoaderSite]] = {}  # (trainer pid, dataset class) -> the call building it
        self._coded: dict = {}  # pid -> (stack, the stack with source lines)
        self._coded_frames: dict = {}  # frame -> the frame with its source line (files are read once)
        self._pin_cache: dict = {}  # trainer pid -> (clock, pin_memory)
        self.processes = ProcessSampler(clock, wall)
        self.placements = PlacementReader()
        self.system = SystemSampler()
        self.disks = DiskSampler(clock)
        self.gpu = gpu if gpu is not None else GpuSampler()
        self.lifecycle = WorkerLifecycle()
        self.keep_ended_s = keep_ended_s
        self._ran_at: dict[int, float] = {}  # trainer pid -> when last seen running
        self._last_tick: Optional[float] = None
        self._job_started_at: Optional[str] = None

    def tick(self, full_memory: bool = False) -> Snapshot:
        """One sample of the job. ``full_memory`` re-reads every USS/PSS whatever it costs."""
        now = self._clock()
        window = 0.0 if self._last_tick is None else now - self._last_tick
        self._last_tick = now
        self._share_stack_evidence()
        tree = self.tree = self.discovery.refresh(self.tree)
        stats = self.discovery.table.stats

        self.discovery.forget_except(set(stats))
        # processes that left are forgotten before the samples, which match them with their parent's cutime
        self.processes.forget_except({(pid, stats[pid].start_ticks) for pid in tree.members if pid in stats})
        samples = self._sample_processes(tree, stats, full_memory)
        alive = {(s.pid, stats[s.pid].start_ticks) for s in samples}
        self.placements.forget_except(alive)
        for key in set(self._main_runs) - alive:
            del self._main_runs[key]
        for gone in set(self._coded) - {s.pid for s in samples}:
            del self._coded[gone]
        live = [(s.pid, stats[s.pid].start_ticks, s.role) for s in samples if s.state != "zombie"]
        schedstats = self.processes.schedstats
        for pid, start_ticks, role in live:
            if role in ("worker", "trainer"):
                self.exits.watch(pid, start_ticks)
        if tree.names_expected:  # a worker is ready when _worker_loop names it
            for s in samples:
                if s.role == "worker" and s.state != "zombie":
                    self.startups.watch(s.pid, stats[s.pid].start_ticks, s.trainer_pid, s.name)
        caught = self.exits.take()
        self._exit_codes.update({pid: code for pid, code in caught.items() if pid in self._ran_at})  # trainers'
        if self.stacks is not None:
            self.stacks.update([(pid, ticks, role, schedstats.get((pid, ticks))) for pid, ticks, role in live])
            samples = [self._with_stack(s) for s in samples]
            self._ready_by_stack(samples, stats, now)
        samples = [self._with_main_thread(s, stats[s.pid].start_ticks, now) if s.role == "trainer" else s
                   for s in samples]  # fmt: skip
        by_pid = {s.pid: s for s in samples}
        if tree.root_pid in by_pid and self._job_started_at is None:
            self._job_started_at = by_pid[tree.root_pid].started_at

        workers = {s.pid: s.trainer_pid for s in samples if s.role == "worker"}
        zombies = {s.pid: s.exit_code for s in samples if s.state == "zombie"}
        running_trainers = [p for p in tree.trainer_pids if p in by_pid and by_pid[p].state != "zombie"]
        # torchrun outlives its ranks while it restarts them (--max-restarts) or waits for other nodes':
        # the job runs on (a shell or an mp.spawn parent whose ranks ended is a job that ended)
        launcher = by_pid.get(tree.launcher_pid) if tree.launcher_pid is not None else None
        between_ranks = (
            not running_trainers
            and launcher is not None
            and launcher.state != "zombie"
            and self.discovery.is_launcher(launcher.pid)
        )
        self.lifecycle.update(
            now, iso(self._wall()), workers, {**caught, **zombies}, set(running_trainers), self._last_known
        )
        for trainer in running_trainers:
            self.logs.attach(trainer)
            self._ran_at[trainer] = now
        for trainer in self.lifecycle.trainers:
            self.lifecycle.late_codes(trainer, self.logs.worker_errors(trainer), from_log=True)
        self._forget_ended_trainers(now, running_trainers)
        # Trainers that exited keep their loader entry: its exited workers are the evidence.
        trainers = sorted(set(running_trainers) | set(self.lifecycle.trainers))
        loaders = [loader for t in trainers for loader in self._loaders(t, tree, by_pid)]
        live_pids = [s.pid for s in samples if s.state != "zombie"]
        anchor = running_trainers[0] if running_trainers else tree.root_pid
        system = self.system.sample(anchor) if live_pids else None
        return Snapshot(
            taken_at=iso(self._wall()),
            window_s=window,
            job=JobInfo(
                pid=tree.root_pid,
                requested_pid=tree.requested_pid,
                cmdline=self._command(self.discovery.cmdline(tree.root_pid)),
                state="running" if running_trainers or between_ranks else "exited",
                exit_code=self._trainer_exit_code(tree, by_pid) if not (running_trainers or between_ranks) else None,
                start_method=next((ld.start_method for ld in loaders if ld.start_method != "unknown"), "unknown"),
                trainer_pids=tree.trainer_pids,
                launcher_pid=tree.launcher_pid,
                torch_version=tree.torch_version,
                started_at=self._job_started_at,
            ),
            system=system,
            processes=samples,
            loaders=loaders,
            gpus=self.gpu.sample(live_pids),
            gpu_status=self.gpu.status,
            disks=self.disks.sample(live_pids),
            stacks_status=self.stacks.status if self.stacks else "off",
            stacks_fix=self.stacks.fix if self.stacks else None,
        )

    def _forget_ended_trainers(self, now: float, running: list[int]) -> None:
        """A trainer that ended is history once other ranks run and ``keep_ended_s`` has passed
        (a restart's old ranks): its loader entry and series go. While none runs (the job
        ending, or between a restart's ranks) every one stays: its exited workers are evidence."""
        if not running:
            return
        for pid in [p for p, at in self._ran_at.items() if p not in running and now - at > self.keep_ended_s]:
            del self._ran_at[pid]
            self.lifecycle.forget(pid)
            self.logs.forget(pid)
            for per_trainer in (self._known_loaders, self._last_trainer_time, self._pin_cache, self._exit_codes):
                per_trainer.pop(pid, None)
            for keyed in (self._seen_workers, self._parts, self._sites):
                for key in [k for k in keyed if k[0] == pid]:
                    del keyed[key]
        self.shards.forget_except(set(self._ran_at))

    def _share_stack_evidence(self) -> None:
        """Tell discovery what stacks and the worker history proved: which processes run
        ``_worker_loop`` (or another target), and which trainers run a DataLoader with workers."""
        self.discovery.loader_trainers = {t for t, h in self.lifecycle.trainers.items() if h.started_total}
        self.discovery.loader_trainers |= self._probed_loaders
        if self.stacks is None:
            return
        procs = self.stacks.procs.values()
        self.discovery.stack_kinds = {(p.pid, p.start_ticks): p.kind for p in procs if p.kind}
        self.discovery.loader_trainers |= {p.pid for p in procs if p.trainer_samples.worker_loader}

    def watch(self, pid: Optional[int]) -> None:
        """The process a person is looking at gets a fresh (non-blocking) stack every tick."""
        if self.stacks is not None:
            self.stacks.requested = {pid} if pid else set()

    def share_budget(self, share: float) -> None:
        """This job's part (0-1) of one live view's stack budget."""
        if self.stacks is not None:
            self.stacks.share = share

    def settle(self, timeout_s: float = SETTLE_S) -> None:
        """Wait (briefly) for py-spy runs under way, so the next tick has their results."""
        if self.stacks is not None:
            self.stacks.wait_pending(self._clock() + timeout_s)

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop py-spy runs and the exit watcher (dltop quits; the job goes on)."""
        if self.stacks is not None:
            self.stacks.close()
        self.exits.close()
        self.startups.close()
        self.logs.close()

    def _with_stack(self, sample: ProcessSample) -> ProcessSample:
        stacks = self.stacks
        proc = stacks.procs.get(sample.pid) if stacks is not None else None
        if sample.state == "zombie":
            return sample
        if stacks is None or proc is None or proc.stack is None:
            # this torch names its workers as _worker_loop begins: an unnamed one is still starting
            unnamed = self.tree.names_expected and not sample.name.startswith(WORKER_COMMS)
            return replaced(sample, activity="starting") if sample.role == "worker" and unnamed else sample
        config = proc.loader_config or {}
        still = _Still(stacks.activity(sample.pid), proc.hang.stuck_s)
        return replaced(
            sample,
            worker_id=config.get("worker_id"),
            activity="stuck" if is_stuck(still, self.settings.hang_after_s) else still.activity,
            stack=self._with_code(sample.pid, proc.stack),
            stack_at=iso(proc.stack_wall) if proc.stack_wall else None,
            stuck_s=still.stuck_s,
        )

    def _ready_by_stack(self, samples: list, stats: dict, now: float) -> None:
        """Workers whose stack shows them past start-up (in _worker_loop's loop) were ready when it was sampled."""
        wall, stacks = self._wall(), self.stacks
        for s in samples:
            if stacks is not None and s.role == "worker" and s.stack_at and s.activity not in ("starting", "unknown"):
                proc = stacks.procs.get(s.pid)
                if proc is not None and proc.stack_wall is not None:
                    self.startups.ready(s.pid, stats[s.pid].start_ticks, now - (wall - proc.stack_wall))

    def _with_main_thread(self, sample: ProcessSample, start_ticks: int, now: float) -> ProcessSample:
        """A trainer's main thread CPU alone (schedstat): what it uses beyond that runs in other
        threads, mostly torch's intra-op pool, which competes with the workers for CPUs."""
        key = (sample.pid, start_ticks)
        reading = self.processes.schedstats.get(key)
        if reading is None or sample.state == "zombie":
            return sample
        before, self._main_runs[key] = self._main_runs.get(key), (now, reading[0])
        if before is None or now <= before[0]:
            return sample
        share = max(0.0, (reading[0] - before[1]) / 1e9 / (now - before[0]) * 100)
        return replaced(sample, main_thread_cpu_percent=share)

    def _with_code(self, pid: int, stack: tuple) -> list:
        """The stack with source lines, worked out once per new stack (not every tick)."""
        cached = self._coded.get(pid)
        if cached is None or cached[0] is not stack:
            cached = self._coded[pid] = (stack, [self._coded_frame(pid, f) for f in stack])
        return cached[1]

    def _coded_frame(self, pid: int, frame: Frame) -> Frame:
        """A frame with its source line, built once: a trainer's stacks arrive every tick and share
        most of their frames (SourceLines keeps a file's lines by its path, so a frame's line is
        the same whichever process showed it)."""
        coded = self._coded_frames.get(frame)
        if coded is None:
            if len(self._coded_frames) >= CODED_FRAMES_MAX:
                self._coded_frames.clear()
            coded = self._coded_frames[frame] = dataclasses.replace(
                frame, code=self.sources.line(pid, frame.file, frame.line)
            )
        return coded

    def _last_known(self, pid: int) -> tuple:
        """(activity, stack) of a worker that just went away, from its last dump."""
        proc = self.stacks.departed.get(pid) if self.stacks else None
        if proc is None or proc.stack is None:
            return "unknown", None
        return worker_activity(list(proc.stack)), list(proc.stack)

    def _trainer_exit_code(self, tree: JobTree, by_pid: dict) -> Optional[int]:
        codes = [by_pid[p].exit_code for p in tree.trainer_pids if p in by_pid and by_pid[p].exit_code is not None]
        codes += [self._exit_codes[p] for p in tree.trainer_pids if self._exit_codes.get(p) is not None]
        return next((c for c in codes if c != 0), codes[0] if codes else None)

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

    def _loaders(self, trainer: int, tree: JobTree, by_pid: dict) -> list:
        """One LoaderSample per DataLoader of this trainer (one per trainer until stacks tell them apart).

        Settings not read from a worker's ``_worker_loop`` yet are what the workers showed: the
        most alive at once, the start method of the last ones seen (short epochs leave moments
        with no worker alive at all).
        """
        worker_pids = [p for p in tree.workers_of(trainer) if p in by_pid and by_pid[p].state != "zombie"]
        methods = {p: tree.members[p].start_method or stack_start_method(by_pid[p].stack or []) for p in worker_pids}
        configs = {p: self._loader_config(p) for p in worker_pids}
        keyed = split_loaders(worker_pids, configs, methods, self._known_loaders.setdefault(trainer, {}))
        keys = [key for key, _ in keyed]
        trainer_time = self._trainer_time(trainer)
        exited = self.lifecycle.exited(trainer)
        respawns = self.lifecycle.respawns(trainer)
        loaders = []
        for index, (key, group) in enumerate(keyed):
            mine = [w for w in exited if self._exit_group(w, keys, methods) == index]
            persistent = group.config.get("persistent_workers", self.lifecycle.persistent(trainer))
            seen = self._seen_workers.setdefault((trainer, key), _SeenWorkers())
            seen.update(len(group.worker_pids), {methods[p] for p in group.worker_pids} - {None})
            dataset = _class_name(group.config.get("dataset"))
            site = self._loader_site(trainer, dataset)
            kind = self._dataset_kind(group.config, group.worker_pids or [trainer], by_pid)
            dealt = parts_from_indices([configs.get(p) for p in group.worker_pids], group.config.get("num_workers", 0))
            parts, parts_source = (
                self._iterable_parts(trainer, dataset, group.worker_pids or [trainer], dealt)
                if kind == "iterable"
                else (None, None)
            )
            loaders.append(
                LoaderSample(
                    trainer_pid=trainer,
                    num_workers=group.config.get("num_workers", seen.most_alive),
                    worker_pids=group.worker_pids,
                    persistent_workers=persistent,
                    pin_memory=self._pin_memory(trainer),
                    start_method=seen.start_method,
                    data_wait_percent=(
                        trainer_time.waiting_for_data_percent + trainer_time.collating_percent if trainer_time else None
                    ),
                    worker_respawns=0 if persistent else min(len(mine), respawns),
                    workers_exited=mine,
                    trainer_time=trainer_time,
                    dataset=dataset,
                    built_at=site.where if site else None,
                    built_by=site.call if site else None,
                    workers_keyword=site.keyword if site else None,
                    workers_flag=site.flag if site else None,
                    batch_size=group.config.get("batch_size"),
                    dataset_kind=kind,
                    parts=parts,
                    parts_source=parts_source,
                    parts_seen=self.shards.seen((trainer, dataset or "")) if parts is not None else None,
                )
            )
        return loaders

    def _dataset_kind(self, config: dict, pids: list, by_pid: dict) -> Optional[DatasetKind]:
        """map | iterable: from _worker_loop's arguments, else the fetcher on a stack of theirs."""
        if config.get("dataset_kind"):
            return config["dataset_kind"]
        return next((k for p in pids if p in by_pid and (k := dataset_kind(by_pid[p].stack or []))), None)

    def _iterable_parts(self, trainer: int, dataset: Optional[str], pids: list, dealt: tuple) -> tuple:
        """(parts, where counted) of an iterable loader's source: the shard indices its workers were
        dealt (``dealt``), the shard files its workers (or its trainer, with num_workers=0) hold open,
        else what its library told the trainer's log. Once known, a count stays (a log's message
        scrolls away, a shard is closed between files)."""
        key = (trainer, dataset or "")
        found = dealt if dealt[0] is not None else self.shards.parts(key, pids)
        if found[0] is None:
            found = self.logs.shard_limit(trainer)
        if found != (None, None):
            known = self._parts.get(key, (None, None))
            self._parts[key] = found if found[0] is not None or known[0] is None else known
        return self._parts.get(key, (None, None))

    def _loader_site(self, trainer: int, dataset: Optional[str]) -> Optional[LoaderSite]:
        """The call in the trainer's own code that builds this loader or sets its workers (a
        DataLoader, or a library's builder: timm's create_loader, transformers' TrainingArguments),
        looked for in the user files on its stacks; retried while not found (the stacks fill in)."""
        key = (trainer, dataset)
        if self._sites.get(key) is None and self.stacks is not None:
            proc = self.stacks.procs.get(trainer)
            stacks = [proc.stack] if proc is not None and proc.stack else []
            stacks += [s for w in proc.trainer_samples.windows for s in w.stacks] if proc is not None else []
            files = sorted({f.file for stack in stacks for f in stack if f.kind == "user"})
            self._sites[key] = self.sources.loader_call(trainer, files, dataset) if files else None
        return self._sites.get(key)

    def _trainer_time(self, trainer: int):
        """The trainer's time split; after it exited, the last one measured (a job that exits
        mid-window keeps what was seen)."""
        spent = self.stacks.trainer_time(trainer) if self.stacks else None
        if spent is not None:
            self._last_trainer_time[trainer] = spent
        return spent or self._last_trainer_time.get(trainer)

    def _loader_config(self, pid: int) -> Optional[dict]:
        proc = self.stacks.procs.get(pid) if self.stacks else None
        return proc.loader_config if proc else None

    def _exit_group(self, worker, keys: list, methods: dict) -> int:
        """Index of the loader an exited worker served (its last config), else the first."""
        proc = self.stacks.departed.get(worker.pid) if self.stacks else None
        if proc is not None and proc.loader_config:
            method = stack_start_method(list(proc.stack or [])) if proc.stack else None
            key = loader_key(proc.loader_config, method)
            if key in keys:
                return keys.index(key)
        return 0

    def _pin_memory(self, trainer: int) -> Optional[bool]:
        """Re-checked every PIN_TTL_S: reading every thread's name each tick costs a file per thread."""
        now = self._clock()
        cached = self._pin_cache.get(trainer)
        if cached is None or now - cached[0] > PIN_TTL_S:
            cached = self._pin_cache[trainer] = (now, self._read_pin_memory(trainer))
        return cached[1]

    def _read_pin_memory(self, trainer: int) -> Optional[bool]:
        """A ``pt_data_pin`` thread means pin_memory=True; its absence is proof only on named torch."""
        try:
            names = thread_names(trainer)
        except OSError:
            return None
        if any(name.startswith(PIN_THREAD_COMMS) for name in names):
            return True
        seen = self.stacks.procs.get(trainer) if self.stacks else None
        if seen is not None and seen.trainer_samples.pin_thread is not None:
            return seen.trainer_samples.pin_thread  # a _pin_memory_loop thread in the last sample window
        return False if self.tree.names_expected else None


class _Still(NamedTuple):
    """A stack's activity and how long it has stayed, to judge "stuck" before the sample is built."""

    activity: str
    stuck_s: Optional[float]


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


@dataclass
class _SeenWorkers:
    """What a loader's workers showed while alive, for settings not read from them yet."""

    most_alive: int = 0
    start_method: str = "unknown"

    def update(self, alive: int, methods: set) -> None:
        self.most_alive = max(self.most_alive, alive)
        if len(methods) == 1:
            (self.start_method,) = methods


def _class_name(text: Optional[str]) -> Optional[str]:
    """'<SyntheticDataset at 0x7f...>' -> 'SyntheticDataset'."""
    return text.strip("<>").split(" at ")[0] if text else None

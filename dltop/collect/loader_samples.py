"""One LoaderSample per DataLoader of a trainer, from what every source says of it.

Which workers serve which loader is ``processes/loaders.py``'s split; the settings are what the
stack sampler read from the workers' ``_worker_loop`` (until then, what the workers showed); the
workers that went are the lifecycle's; the trainer's time split, where its own code builds the
loader, and how many parts an iterable source has come from its stacks, its source files, the
shard files it holds open and its log. What is kept of a trainer between ticks is one record,
forgotten in one call.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable, Optional

from dltop.collect.events.lifecycle import WorkerLifecycle
from dltop.collect.events.trainer_log import TrainerLogs
from dltop.collect.processes.discovery import PIN_THREAD_COMMS, JobTree
from dltop.collect.processes.loaders import LoaderGroup, loader_key, split_loaders
from dltop.collect.processes.shards import ShardFiles
from dltop.collect.procfs import thread_names
from dltop.collect.stacks.sampler import Stacks
from dltop.collect.stacks.source_lines import LoaderSite, SourceLines
from dltop.frames import dataset_kind
from dltop.frames import start_method as stack_start_method
from dltop.model import DatasetKind, LoaderSample, Pipeline, TrainerTime, WorkerThread, is_stuck
from dltop.settings import DEFAULTS

PIN_TTL_S = 5.0


@dataclass
class _SeenWorkers:
    """What a loader's workers showed while alive, for settings not read from them yet."""

    most_alive: int = 0
    start_method: str = "unknown"

    def update(self, alive: int, methods: set) -> None:
        self.most_alive = max(self.most_alive, alive)
        if len(methods) == 1:
            (self.start_method,) = methods


@dataclass
class _Kept:
    """What is kept of one trainer's loaders from tick to tick."""

    known: dict = field(default_factory=dict)  # loader key -> config (split_loaders keeps a loader seen once)
    seen: dict = field(default_factory=dict)  # loader key -> _SeenWorkers
    parts: dict = field(default_factory=dict)  # dataset class -> (parts, where counted): known stays known
    sites: dict[Optional[str], Optional[LoaderSite]] = field(default_factory=dict)  # dataset class -> its call
    last_time: Optional[TrainerTime] = None  # the time split last measured
    pin: Optional[tuple[float, Optional[bool]]] = None  # (clock, pin_memory) last read
    most_thread_workers: int = 0  # a thread pipeline's worker threads, the most seen at once


@dataclass(frozen=True)
class _Trainer:
    """What one tick knows of a trainer, shared by its loaders."""

    pid: int
    kept: _Kept
    keys: list  # its loaders' keys, in the order of the groups
    methods: dict  # live worker pid -> start method
    configs: dict  # live worker pid -> loader config read from it, or None
    exited: list  # ExitedWorker, all loaders'
    respawns: int
    time: Optional[TrainerTime]
    pin_memory: Optional[bool]
    pipeline: Optional[Pipeline]
    threads: list[WorkerThread]  # the threads its pipeline runs on, stuck ones judged so
    threads_exited: list[WorkerThread]


class LoaderSamples:
    """The loaders of a job's trainers, tick by tick: ``sample`` one trainer's, ``forget`` one."""

    def __init__(
        self,
        stacks: Stacks,
        lifecycle: WorkerLifecycle,
        logs: TrainerLogs,
        sources: SourceLines,
        clock: Callable[[], float],
        hang_after_s: float = DEFAULTS.hang_after_s,
    ) -> None:
        """``hang_after_s``: the run's hang threshold, past which a pipeline thread is stuck."""
        self.stacks, self.lifecycle, self.logs, self.sources = stacks, lifecycle, logs, sources
        self._clock, self.hang_after_s = clock, hang_after_s
        self.shards = ShardFiles(clock)
        self._kept: dict[int, _Kept] = {}  # trainer pid -> what is kept of it

    def forget(self, trainer: int) -> None:
        """Everything kept of a trainer that is history (a restart's old rank)."""
        self._kept.pop(trainer, None)
        self.shards.forget(trainer)
        self.sources.forget(trainer)

    def sample(self, trainer: int, tree: JobTree, by_pid: dict) -> list[LoaderSample]:
        """One LoaderSample per DataLoader of this trainer (one per trainer until stacks tell them apart).

        Settings not read from a worker's ``_worker_loop`` yet are what the workers showed: the
        most alive at once, the start method of the last ones seen (short epochs leave moments
        with no worker alive at all).
        """
        kept = self._kept.setdefault(trainer, _Kept())
        worker_pids = [p for p in tree.workers_of(trainer) if p in by_pid and by_pid[p].state != "zombie"]
        methods = {p: tree.members[p].start_method or stack_start_method(by_pid[p].stack or []) for p in worker_pids}
        configs = {p: self.stacks.loader_config(p) for p in worker_pids}
        keyed = split_loaders(worker_pids, configs, methods, kept.known)
        threads, threads_exited = (
            judge_stuck(rows, self.hang_after_s) for rows in self.stacks.pipeline_threads(trainer)
        )
        kept.most_thread_workers = max(kept.most_thread_workers, sum(t.kind == "worker" for t in threads))
        seen = _Trainer(
            pid=trainer,
            kept=kept,
            keys=[key for key, _ in keyed],
            methods=methods,
            configs=configs,
            exited=self.lifecycle.exited(trainer),
            respawns=self.lifecycle.respawns(trainer),
            time=self._trainer_time(trainer, kept),
            pin_memory=self._pin_memory(trainer, kept, tree.names_expected),
            pipeline=self.stacks.trainer_pipeline(trainer),
            threads=threads,
            threads_exited=threads_exited,
        )
        return [self._loader(seen, index, key, group, by_pid) for index, (key, group) in enumerate(keyed)]

    def _loader(
        self, trainer: _Trainer, index: int, key: Optional[tuple], group: LoaderGroup, by_pid: dict
    ) -> LoaderSample:
        """One loader's sample: its settings, the workers that went from it, its source."""
        config, pids = group.config, group.worker_pids
        mine = [w for w in trainer.exited if self._exit_group(w, trainer.keys) == index]
        persistent = config.get("persistent_workers", self.lifecycle.persistent(trainer.pid))
        seen = trainer.kept.seen.setdefault(key, _SeenWorkers())
        seen.update(len(pids), {trainer.methods[p] for p in pids} - {None})
        dataset = _class_name(config.get("dataset"))
        site = self._loader_site(trainer.pid, trainer.kept, dataset) or _NO_SITE
        kind = _dataset_kind(config, pids or [trainer.pid], by_pid)
        parts, parts_source = self._parts(trainer, dataset, kind, group)
        # a pipeline on threads alone: its worker threads are its workers (the knob's value)
        on_threads = index == 0 and not pids and not seen.most_alive and trainer.kept.most_thread_workers > 0
        return LoaderSample(
            trainer_pid=trainer.pid,
            num_workers=trainer.kept.most_thread_workers if on_threads else config.get("num_workers", seen.most_alive),
            worker_pids=pids,
            persistent_workers=persistent,
            pin_memory=trainer.pin_memory,
            start_method="thread" if on_threads else seen.start_method,
            data_wait_percent=_data_wait(trainer.time),
            worker_respawns=0 if persistent else min(len(mine), trainer.respawns),
            workers_exited=mine,
            trainer_time=trainer.time,
            dataset=dataset,
            built_at=site.where,
            built_by=site.call,
            workers_keyword=site.keyword,
            workers_flag=site.flag,
            batch_size=config.get("batch_size"),
            dataset_kind=kind,
            pipeline=trainer.pipeline,
            worker_threads=trainer.threads if index == 0 else [],
            threads_exited=trainer.threads_exited if index == 0 else [],
            parts=parts,
            parts_source=parts_source,
            parts_seen=self.shards.seen((trainer.pid, dataset or "")) if parts is not None else None,
        )

    def _parts(
        self, trainer: _Trainer, dataset: Optional[str], kind: Optional[DatasetKind], group: LoaderGroup
    ) -> tuple[Optional[int], Optional[str]]:
        """(parts, where counted) of an iterable loader's source; (None, None) for a map-style one."""
        if kind != "iterable":
            return None, None
        configs = [trainer.configs.get(p) for p in group.worker_pids]
        key, pids = (trainer.pid, dataset or ""), group.worker_pids or [trainer.pid]
        found = self.shards.parts(key, pids, configs, group.config.get("num_workers", 0))
        return self._iterable_parts(trainer.pid, trainer.kept, dataset, found)

    def _iterable_parts(self, trainer: int, kept: _Kept, dataset: Optional[str], found: tuple) -> tuple:
        """(parts, where counted) of an iterable loader's source: the dataset's own account or the
        shard files its workers (or its trainer, with num_workers=0) hold open (``found``), else
        what its library told the trainer's log. Once known, a count stays (a log's message
        scrolls away, a shard is closed between files)."""
        if found[0] is None:
            found = self.logs.shard_limit(trainer)
        if found != (None, None):
            known = kept.parts.get(dataset or "", (None, None))
            kept.parts[dataset or ""] = found if found[0] is not None or known[0] is None else known
        return kept.parts.get(dataset or "", (None, None))

    def _loader_site(self, trainer: int, kept: _Kept, dataset: Optional[str]) -> Optional[LoaderSite]:
        """The call in the trainer's own code that builds this loader or sets its workers (a
        DataLoader, or a library's builder: timm's create_loader, transformers' TrainingArguments),
        looked for in the user files on its stacks; retried while not found (the stacks fill in)."""
        if kept.sites.get(dataset) is None:
            stacks = self.stacks.trainer_stacks(trainer)
            files = sorted({f.file for stack in stacks for f in stack if f.kind == "user"})
            kept.sites[dataset] = self.sources.loader_call(trainer, files, dataset) if files else None
        return kept.sites.get(dataset)

    def _trainer_time(self, trainer: int, kept: _Kept) -> Optional[TrainerTime]:
        """The trainer's time split; after it exited, the last one measured (a job that exits
        mid-window keeps what was seen)."""
        spent = self.stacks.trainer_time(trainer)
        if spent is not None:
            kept.last_time = spent
        return spent or kept.last_time

    def _exit_group(self, worker, keys: list) -> int:
        """Index of the loader an exited worker served (its last config), else the first."""
        last = self.stacks.departed_stack(worker.pid)
        if last is not None and last.loader_config:
            method = stack_start_method(list(last.frames)) if last.frames else None
            key = loader_key(last.loader_config, method)
            if key in keys:
                return keys.index(key)
        return 0

    def _pin_memory(self, trainer: int, kept: _Kept, names_expected: bool) -> Optional[bool]:
        """Re-checked every PIN_TTL_S: reading every thread's name each tick costs a file per thread."""
        now = self._clock()
        if kept.pin is None or now - kept.pin[0] > PIN_TTL_S:
            kept.pin = (now, self._read_pin_memory(trainer, names_expected))
        return kept.pin[1]

    def _read_pin_memory(self, trainer: int, names_expected: bool) -> Optional[bool]:
        """A ``pt_data_pin`` thread means pin_memory=True; its absence is proof only on named torch."""
        try:
            names = thread_names(trainer)
        except OSError:
            return None
        if any(name.startswith(PIN_THREAD_COMMS) for name in names):
            return True
        seen = self.stacks.pin_thread(trainer)
        if seen is not None:
            return seen  # a _pin_memory_loop thread in the last sample window
        return False if names_expected else None


@dataclass(frozen=True)
class _NoSite:
    """A loader whose building call was not found: its sample names none."""

    where: None = None
    call: None = None
    keyword: None = None
    flag: None = None


_NO_SITE = _NoSite()


def judge_stuck(threads: list[WorkerThread], hang_after_s: float) -> list[WorkerThread]:
    """Pipeline threads with the run's verdict, as worker processes get theirs: ``stuck`` past its
    hang threshold (``is_stuck``)."""
    return [dataclasses.replace(t, activity="stuck") if is_stuck(t, hang_after_s) else t for t in threads]


def _data_wait(spent: Optional[TrainerTime]) -> Optional[float]:
    """The share of the trainer's time waiting for a batch, collating included."""
    return spent.waiting_for_data_percent + spent.collating_percent if spent else None


def _dataset_kind(config: dict, pids: list, by_pid: dict) -> Optional[DatasetKind]:
    """map | iterable: from _worker_loop's arguments, else the fetcher on a stack of theirs."""
    if config.get("dataset_kind"):
        return config["dataset_kind"]
    return next((k for p in pids if p in by_pid and (k := dataset_kind(by_pid[p].stack or []))), None)


def _class_name(text: Optional[str]) -> Optional[str]:
    """'<SyntheticDataset at 0x7f...>' -> 'SyntheticDataset'."""
    return text.strip("<>").split(" at ")[0] if text else None

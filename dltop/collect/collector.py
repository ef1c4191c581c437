"""One Snapshot per tick: walks the job, reads every source, turns counters into rates."""

from __future__ import annotations

import time
from typing import Callable, Optional

from dltop.collect.disk import DiskSampler
from dltop.collect.gpu import GpuSampler
from dltop.collect.lifecycle import WorkerLifecycle
from dltop.collect.process_stats import ProcessSampler, iso
from dltop.collect.procfs import thread_names
from dltop.collect.procs import PIN_THREAD_COMMS, Discovery, JobTree
from dltop.collect.system import SystemSampler
from dltop.model import JobInfo, LoaderSample, Snapshot

# CPU time per tick for smaps_rollup reads (USS/PSS): the rest are refreshed on later ticks.
MEMORY_BUDGET_S = 0.006


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
    ) -> None:
        self._clock, self._wall = clock, wall
        self.memory_budget_s = memory_budget_s
        self.discovery = Discovery()
        self.tree: JobTree = self.discovery.resolve(pid)
        self.processes = ProcessSampler(clock, wall)
        self.system = SystemSampler()
        self.disks = DiskSampler(clock)
        self.gpu = gpu if gpu is not None else GpuSampler()
        self.lifecycle = WorkerLifecycle()
        self._last_tick: Optional[float] = None
        self._job_started_at: Optional[str] = None

    def tick(self, full_memory: bool = False) -> Snapshot:
        """One sample of the job. ``full_memory`` re-reads every USS/PSS whatever it costs."""
        now = self._clock()
        window = 0.0 if self._last_tick is None else now - self._last_tick
        self._last_tick = now
        tree = self.tree = self.discovery.refresh(self.tree)
        stats = self.discovery.table.stats

        samples = self._sample_processes(tree, stats, full_memory)
        self.processes.forget_except({(s.pid, stats[s.pid].start_ticks) for s in samples})
        by_pid = {s.pid: s for s in samples}
        if tree.root_pid in by_pid and self._job_started_at is None:
            self._job_started_at = by_pid[tree.root_pid].started_at

        workers = {s.pid: s.trainer_pid for s in samples if s.role == "worker"}
        zombies = {s.pid: s.exit_code for s in samples if s.state == "zombie"}
        self.lifecycle.update(now, iso(self._wall()), workers, zombies)

        running_trainers = [p for p in tree.trainer_pids if p in by_pid and by_pid[p].state != "zombie"]
        loaders = [self._loader(trainer, tree, by_pid) for trainer in running_trainers]
        live_pids = [s.pid for s in samples if s.state != "zombie"]
        anchor = running_trainers[0] if running_trainers else tree.root_pid
        system = self.system.sample(anchor) if live_pids else None
        return Snapshot(
            taken_at=iso(self._wall()),
            window_s=window,
            job=JobInfo(
                pid=tree.root_pid,
                requested_pid=tree.requested_pid,
                cmdline=" ".join(self.discovery.cmdline(tree.root_pid)),
                state="running" if running_trainers else "exited",
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
        )

    def _sample_processes(self, tree: JobTree, stats: dict, full_memory: bool) -> list:
        """Every member's figures; USS/PSS re-read oldest first while the CPU budget lasts."""
        read_at = self.processes.memory_read_at
        members = [(pid, m) for pid, m in tree.members.items() if pid in stats]
        members.sort(key=lambda item: read_at.get((item[0], stats[item[0]].start_ticks), float("-inf")))
        spent, samples = 0.0, []
        for pid, member in members:
            read_memory = full_memory or spent < self.memory_budget_s
            started = time.process_time()
            sample = self.processes.sample(
                member, stats[pid], " ".join(self.discovery.cmdline(pid)), self.discovery.rank(pid), read_memory
            )
            if read_memory:
                spent += time.process_time() - started
            if sample is not None:
                samples.append(sample)
        return sorted(samples, key=lambda s: s.pid)

    def _loader(self, trainer: int, tree: JobTree, by_pid: dict) -> LoaderSample:
        worker_pids = [p for p in tree.workers_of(trainer) if p in by_pid and by_pid[p].state != "zombie"]
        methods = {tree.members[p].start_method for p in worker_pids}
        return LoaderSample(
            trainer_pid=trainer,
            num_workers=len(worker_pids),
            worker_pids=worker_pids,
            persistent_workers=self.lifecycle.persistent(trainer),
            pin_memory=self._pin_memory(trainer),
            start_method=methods.pop() if len(methods) == 1 else "unknown",
            data_wait_percent=None,  # needs stack samples
            worker_respawns=self.lifecycle.respawns(trainer),
            workers_exited=self.lifecycle.exited(trainer),
        )

    def _pin_memory(self, trainer: int) -> Optional[bool]:
        """A ``pt_data_pin`` thread means pin_memory=True; its absence is proof only on named torch."""
        try:
            names = thread_names(trainer)
        except OSError:
            return None
        if any(name.startswith(PIN_THREAD_COMMS) for name in names):
            return True
        return False if self.tree.names_expected else None

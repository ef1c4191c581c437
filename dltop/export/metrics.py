"""Metric families from the newest view of the node, built when Prometheus scrapes.

A prometheus-client custom collector (``collect()`` yields families): nothing is registered
per series, so an exited job's series are simply not yielded again, and a scrape reads
nothing but the view the last pass left (it never triggers collection). Names follow
Prometheus's conventions: base units, ``_seconds``/``_bytes``, ``_total`` for counters, ratios
0-1, ``_info`` series of value 1 that carry text as labels.
"""

from __future__ import annotations

import platform
from typing import Iterator, get_args

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from dltop import __version__
from dltop.diagnose.stopped import run_ranks
from dltop.export.labels import GPU, LOADER, PROCESS, RANK, TRAINER, gpu_values, text
from dltop.export.state import ExporterState, JobView
from dltop.model import PHASES, Activity, ThreadKind, sampling_broken, still_for
from dltop.model.findings import is_hang

# ProcessSample fields that can be unreadable -> the series that lacks them then
UNAVAILABLE_METRICS = {
    "uss_bytes": "dltop_process_unique_memory_bytes",
    "num_fds": "dltop_process_open_fds",
    "fd_limit": "dltop_process_max_fds",
    "read_bytes_per_s": "dltop_process_read_bytes_total",
}
COMMAND_CHARS = 200
# what a pipeline's thread can be doing (WorkerThread.activity): every one a series, 0 included
THREAD_ACTIVITIES: tuple[Activity, ...] = ("idle", "fetching", "sending", "stuck", "unknown")
THREAD_KINDS: tuple[ThreadKind, ...] = get_args(ThreadKind)


def _gauge(name: str, doc: str, labels: tuple) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


def _counter(name: str, doc: str, labels: tuple) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, labels=list(labels))


class NodeCollector:
    """Yields every family of ``dltop exporter`` from ``state.view`` (see README for the list)."""

    def __init__(self, state: ExporterState, hostname: str) -> None:
        self.state = state
        self.hostname = hostname

    def describe(self) -> list:
        return []  # families vary with the jobs on the node: registering must not call collect()

    def collect(self) -> Iterator[Metric]:
        view = self.state.view
        build = InfoMetricFamily("dltop_build", "dltop's version", labels=[])
        build.add_metric([], {"version": __version__, "python": platform.python_version()})
        yield build
        yield GaugeMetricFamily("dltop_jobs", "Training jobs this exporter follows on the node", value=len(view.jobs))
        if view.collected_at is not None:
            yield GaugeMetricFamily(
                "dltop_last_collection_timestamp_seconds",
                "When the newest pass over the node's jobs ended (Unix time)",
                value=view.collected_at,
            )
            yield GaugeMetricFamily(
                "dltop_collection_duration_seconds",
                "Wall time of the newest pass over the node's jobs",
                value=view.collection_s,
            )
        yield CounterMetricFamily(
            "dltop_collection_failures",
            "Jobs that could not be followed or whose collection failed, or whose stack sampling broke",
            value=view.collection_failures,
        )
        yield from self._jobs(view.jobs)
        yield from self._trainers(view.jobs)
        yield from self._ranks(view.jobs)
        yield from self._loaders(view.jobs)
        yield from self._processes(view.jobs)
        yield from self._findings(view.jobs)
        yield from self._gpus(view.jobs)

    def _jobs(self, jobs: list) -> Iterator[Metric]:
        info = InfoMetricFamily("dltop_job", "A training job followed on this node", labels=["job_pid"])
        unavailable = InfoMetricFamily(
            "dltop_unavailable",
            "A figure dltop cannot read for some of a job's processes, and why (another user's job)",
            labels=["job_pid", "metric", "reason"],
        )
        for job in jobs:
            snap = job.snapshot
            info.add_metric(
                [text(snap.job.pid)],
                {
                    "command": snap.job.cmdline[:COMMAND_CHARS],
                    "start_method": snap.job.start_method,
                    "torch_version": text(snap.job.torch_version),
                    "stacks_status": snap.stacks_status,
                    "gpu_status": snap.gpu_status,
                },
            )
            reasons = {
                (UNAVAILABLE_METRICS[name], reason)
                for process, _ in job.roster.processes
                for name, reason in process.unavailable.items()
                if name in UNAVAILABLE_METRICS
            }
            if sampling_broken(snap.stacks_status):
                reasons.add(("stacks", snap.stacks_fix or snap.stacks_status))
            for metric, reason in sorted(reasons):
                unavailable.add_metric([text(snap.job.pid), metric, reason], {})
        yield info
        yield unavailable

    def _trainers(self, jobs: list) -> Iterator[Metric]:
        ratio = _gauge(
            "dltop_trainer_data_wait_ratio",
            "Share of the trainer's main thread waiting for the DataLoader (incl. collating) over the last 30 s",
            TRAINER,
        )
        waited = _counter(
            "dltop_trainer_data_wait_seconds",
            "Seconds the trainer waited for data (its sampled share times the time watched)",
            TRAINER,
        )
        phases = _gauge(
            "dltop_trainer_time_ratio",
            "Share of the trainer's main thread in each phase over the last 30 s",
            (*TRAINER, "phase"),
        )
        hung = _gauge("dltop_trainer_hung_workers", "The trainer's DataLoader workers that are hung", TRAINER)
        for job in jobs:
            hung_pids = _hung_workers(job)
            for values, loader in job.roster.first_loaders().items():
                if loader.data_wait_percent is not None:
                    ratio.add_metric(values, loader.data_wait_percent / 100)
                shares = loader.trainer_time
                for phase in PHASES if shares is not None else ():
                    phases.add_metric([*values, phase], shares.percent(phase) / 100)
            for values, seconds in job.wait_s.items():
                waited.add_metric(values, seconds)
            for pid, values in job.roster.trainers.items():
                workers = [p for p, _ in job.roster.processes if p.role == "worker" and p.trainer_pid == pid]
                hung.add_metric(values, sum(1 for w in workers if w.pid in hung_pids))
        yield from (ratio, waited, phases, hung)

    def _ranks(self, jobs: list) -> Iterator[Metric]:
        """Each rank of a distributed run by where it is, and how long it has been still there: a
        rule joins the ranks of every node (which rank is not in the collective the rest wait in)."""
        still = _gauge(
            "dltop_rank_still_seconds",
            "Seconds the rank's main thread has kept its stack without CPU (0 while it runs), by where it is: "
            "collective (call: which), sync (a collective completing), data, blocked or running",
            RANK,
        )
        world = _gauge("dltop_run_world_size", "The run's ranks on every node together (WORLD_SIZE)", ("run_id",))
        sizes: dict[str, int] = {}
        for job in jobs:
            for run, ranks in run_ranks(job.snapshot).items():  # run: its run id, else its launcher's job
                for at in ranks:
                    still.add_metric((run, text(at.trainer.rank), at.position.where, text(at.position.call)),
                                     round(at.still_s, 1))  # fmt: skip
                    place = at.trainer.placement
                    if place is not None and place.world_size:
                        sizes[run] = place.world_size
        for run_id, size in sizes.items():
            world.add_metric([run_id], size)
        yield from (still, world)

    def _loaders(self, jobs: list) -> Iterator[Metric]:
        info = InfoMetricFamily("dltop_loader", "A trainer's DataLoader and its settings as read", labels=list(LOADER))
        alive = _gauge("dltop_loader_workers", "The loader's workers alive now", LOADER)
        respawns = _counter("dltop_loader_worker_respawns", "Workers started to replace workers that went away", LOADER)
        deaths = _counter(
            "dltop_loader_worker_deaths", "Workers that died (a signal or non-zero exit) while the trainer ran", LOADER
        )
        threads = _gauge(
            "dltop_loader_threads",
            "The threads a pipeline beyond DataLoader runs on now, by kind (worker, feeder) and activity",
            (*LOADER, "kind", "activity"),
        )
        for job in jobs:
            for loader, values in job.roster.loaders:
                info.add_metric(
                    values,
                    {
                        "num_workers": text(loader.num_workers),
                        "start_method": loader.start_method,
                        "persistent_workers": _flag(loader.persistent_workers),
                        "pin_memory": _flag(loader.pin_memory),
                        "dataset_kind": text(loader.dataset_kind),
                        "parts": text(loader.parts),
                        "pipeline": text(loader.pipeline),
                    },
                )
                alive.add_metric(values, len(loader.worker_pids))
                respawns.add_metric(values, job.respawns.get(values, 0))
                deaths.add_metric(values, job.deaths.get(values, 0))
                if loader.pipeline not in (None, "dataloader"):
                    for kind in THREAD_KINDS:
                        mine = [t.activity for t in loader.worker_threads if t.kind == kind]
                        for activity in THREAD_ACTIVITIES:
                            threads.add_metric([*values, kind, activity], mine.count(activity))
        yield from (info, alive, respawns, deaths, threads)

    def _processes(self, jobs: list) -> Iterator[Metric]:
        info = InfoMetricFamily("dltop_process", "A trainer or worker process now (its pid)", labels=list(PROCESS))
        cpu = _counter("dltop_process_cpu_seconds", "CPU seconds used (user and system), while watched", PROCESS)
        rss = _gauge("dltop_process_resident_memory_bytes", "Resident memory (RSS)", PROCESS)
        uss = _gauge("dltop_process_unique_memory_bytes", "Memory only this process holds (USS)", PROCESS)
        fds = _gauge("dltop_process_open_fds", "Open file descriptors", PROCESS)
        max_fds = _gauge("dltop_process_max_fds", "Soft limit of open file descriptors", PROCESS)
        read = _counter("dltop_process_read_bytes", "Bytes read from storage, while watched", PROCESS)
        stuck = _gauge(
            "dltop_process_stuck_seconds",
            "Seconds the main thread has kept one stack without using CPU (not counting idle waits for work or data)",
            PROCESS,
        )
        hung = _gauge("dltop_worker_hung", "1 while the worker is hung (worker-hung finding), else 0", PROCESS)
        for job in jobs:
            hung_pids = _hung_workers(job)
            for process, values in job.roster.processes:
                info.add_metric(values, {"pid": text(process.pid)})
                for family, value in (
                    (rss, process.rss_bytes),
                    (uss, process.uss_bytes),
                    (fds, process.num_fds),
                    (max_fds, process.fd_limit),
                    (stuck, still_for(process)),
                    (cpu, job.cpu_s.get(values)),
                    (read, job.read_bytes.get(values)),
                ):
                    if value is not None:
                        family.add_metric(values, value)
                if process.role == "worker":
                    hung.add_metric(values, int(process.pid in hung_pids))
        yield from (info, cpu, rss, uss, fds, max_fds, read, stuck, hung)

    def _findings(self, jobs: list) -> Iterator[Metric]:
        family = _gauge(
            "dltop_finding",
            "1 while a finding (see README's Findings) is raised for the trainer or job, 0 once it cleared",
            (*TRAINER, "id", "severity"),
        )
        for job in jobs:
            for (values, finding_id, severity), active in sorted(job.findings.items()):
                family.add_metric([*values, finding_id, severity], active)
        yield family

    def _gpus(self, jobs: list) -> Iterator[Metric]:
        util = _gauge("dltop_gpu_utilization_ratio", "Share of time a kernel ran on the GPU (NVML)", GPU)
        used = _gauge("dltop_gpu_memory_used_bytes", "GPU memory in use, all processes", GPU)
        total = _gauge("dltop_gpu_memory_total_bytes", "GPU memory", GPU)
        held = _gauge(
            "dltop_trainer_gpu_memory_bytes", "GPU memory the trainer holds on that GPU", (*TRAINER, "gpu", "UUID")
        )
        newest: dict = {}  # every job's Snapshot sees every GPU: one series per GPU
        for job in jobs:
            for gpu in job.snapshot.gpus:
                newest[gpu.index] = gpu
                for process in gpu.processes:
                    trainer = job.roster.trainers.get(process.pid)
                    if trainer is not None and process.used_memory_bytes is not None:
                        held.add_metric([*trainer, text(gpu.index), text(gpu.uuid)], process.used_memory_bytes)
        for gpu in newest.values():
            values = gpu_values(gpu, self.hostname)
            for family, value in (
                (util, gpu.util_percent / 100 if gpu.util_percent is not None else None),
                (used, gpu.mem_used_bytes),
                (total, gpu.mem_total_bytes),
            ):
                if value is not None:
                    family.add_metric(values, value)
        yield from (util, used, total, held)


def _hung_workers(job: JobView) -> set:
    """The processes a hang names (the gauge counts those that are workers)."""
    return {pid for f in job.snapshot.findings if is_hang(f.id) for pid in f.pids}


def _flag(value: object) -> str:
    return "" if value is None else str(value).lower()

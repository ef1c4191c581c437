"""Advice: DataLoader settings that waste time or resources, each with the change to paste.

Pure rules over a window of Snapshots (newest last); thresholds in ``Settings``.
"""

from __future__ import annotations

import math

from dltop.diagnose.figures import (
    WorkerFigures,
    bench_args,
    loader_call,
    saturated_disks,
    trusted_wait,
    worker_figures,
)
from dltop.diagnose.settings import Settings
from dltop.frames import user_frame
from dltop.model import Finding, LoaderSample, Snapshot
from dltop.units import human_bytes


def workers_respawning(window: list, settings: Settings) -> list:
    latest: Snapshot = window[-1]
    findings = []
    for loader in latest.loaders:
        workers = loader.num_workers  # 0 between epochs when the setting was not read yet: wait
        if not workers or loader.persistent_workers is not False:
            continue
        if loader.worker_respawns < workers * settings.respawn_epochs:
            continue
        spent = loader.trainer_time
        startup = spent.starting_workers_percent if spent else None
        cost = f" Starting workers took {startup:.1f}% of the trainer's time." if startup is not None else ""
        findings.append(
            Finding(
                id="workers-respawning",
                severity="warning" if startup is not None and startup >= settings.respawn_cost_percent else "info",
                title=f"DataLoader workers of trainer {loader.trainer_pid} are restarted every epoch",
                detail=f"{loader.worker_respawns} worker processes replaced so far ({loader.start_method} start: each"
                f" epoch pays process start-up, dataset pickling and worker_init_fn again).{cost}",
                pids=[loader.trainer_pid],
                evidence={
                    "trainer_pid": loader.trainer_pid,
                    "respawns": loader.worker_respawns,
                    "num_workers": loader.num_workers,
                    "start_method": loader.start_method,
                    "starting_workers_percent": startup,
                },
                suggestion=f"{loader_call(loader, persistent_workers=True)}  # workers live across epochs",
            )
        )
    return findings


def pin_memory(window: list, settings: Settings) -> list:
    """Pinned host memory makes host-to-GPU copies async; it only helps a job that uses a GPU."""
    latest: Snapshot = window[-1]
    on_gpu = {p.pid for gpu in latest.gpus for p in gpu.processes}
    findings = []
    for loader in latest.loaders:
        uses_gpu = loader.trainer_pid in on_gpu
        if uses_gpu and loader.pin_memory is False:
            findings.append(
                _pin_finding(
                    loader,
                    "info",
                    "Batches are not pinned although the trainer uses a GPU",
                    "Without pin_memory each host-to-GPU copy is synchronous and staged through a bounce "
                    "buffer; pinned batches copy asynchronously while the GPU computes.",
                    f"{loader_call(loader, pin_memory=True)}  # and batch.to(device, non_blocking=True)",
                )
            )
        elif loader.pin_memory and not uses_gpu and latest.gpu_status == "ok":
            findings.append(
                _pin_finding(
                    loader,
                    "warning",
                    "pin_memory=True but the trainer uses no GPU",
                    "A pin-memory thread copies every batch into page-locked memory that nothing reads "
                    "asynchronously: CPU time and locked RAM for nothing.",
                    loader_call(loader, pin_memory=False),
                )
            )
    return findings


def _pin_finding(loader: LoaderSample, severity: str, title: str, detail: str, suggestion: str) -> Finding:
    return Finding(
        id="pin-memory",
        severity=severity,
        title=title,
        detail=detail,
        pids=[loader.trainer_pid],
        evidence={"trainer_pid": loader.trainer_pid, "pin_memory": loader.pin_memory},
        suggestion=suggestion,
    )


def input_bound(window: list, settings: Settings) -> list:
    """The trainer waits for data: how many workers would keep up, from a model, within the caps.

    With data-wait share W and N workers busy a share u of the time, producing at the rate the
    trainer consumes, the trainer's own time per batch is (1 - W) of it; workers needed to keep up
    with that alone: N * u / (1 - W) (num_workers=0: W / (1 - W), the fetch then runs in the
    trainer). Capped by the CPUs the job may use (minus what the trainers use), by memory (the
    workers' private memory), and not raised at all when a disk the job reads is saturated.
    """
    latest: Snapshot = window[-1]
    findings = []
    for loader in latest.loaders:
        wait = trusted_wait(loader, settings.min_stack_samples)
        if wait is not None and wait * 100 >= settings.input_bound_percent:
            findings.append(_input_bound_finding(window, latest, loader, wait, settings))
    return findings


def _input_bound_finding(window: list, latest: Snapshot, loader: LoaderSample, wait: float, settings: Settings):
    pids = set(loader.worker_pids)
    workers = max(loader.num_workers, len(pids))
    figures = worker_figures(window, pids)
    busy = figures.busy
    needed = math.ceil(round((workers * busy if workers else 1) / max(1 - wait, 0.05) * settings.workers_headroom, 6))
    caps = _caps(window, loader, figures, settings)
    suggested = max(workers, min([needed, *caps.values()]))
    binding = min(caps, key=caps.get) if caps and min(caps.values()) < needed else None
    hot = _hottest_user_frame(window, pids or {loader.trainer_pid})
    evidence = {
        "trainer_pid": loader.trainer_pid,
        "data_wait_percent": round(wait * 100, 1),
        "num_workers": workers,
        "worker_busy_percent": round(busy * 100, 1),
        "worker_cpu_percent": round(figures.cpu * 100, 1),
        "workers_needed": needed,
        "suggested_workers": suggested,
        "caps": caps,
        "hottest_user_frame": hot,
    }
    replay = None
    if suggested > workers:
        limit = f" (capped by {binding})" if binding else ""
        suggestion = f"{loader_call(loader, num_workers=suggested)}  # from {workers}{limit}"
        replay = bench_args(loader, figures, wait, _trainer_cpu(window, loader.trainer_pid), num_workers=suggested)
    elif binding == "disk":
        suggestion = "More workers will not help: the disk is saturated (see disk-saturated)."
    else:
        suggestion = (
            f"More workers will not fit ({binding or 'model'} limit): make each sample cheaper"
            + (f", starting with {hot}" if hot else "")
            + " (decode smaller images, cache preprocessed samples, move augmentation to the GPU)."
        )
    return Finding(
        id="input-bound",
        severity="warning" if wait * 100 >= settings.input_bound_warning_percent else "info",
        title=f"Trainer {loader.trainer_pid} waits for data {wait * 100:.0f}% of the time",
        detail=f"{workers} worker(s), busy {busy * 100:.0f}% of the time; keeping up would take about {needed}"
        f" worker(s).",
        pids=[loader.trainer_pid],
        evidence=evidence,
        suggestion=suggestion,
        bench_args=replay,
    )


def _trainer_cpu(window: list, trainer_pid: int) -> float:
    """The trainer's mean CPU share of a core over the window."""
    shares = [p.cpu_percent / 100 for s in window[1:] for p in s.processes if p.pid == trainer_pid and p.cpu_percent]
    return sum(shares) / len(shares) if shares else 0.0


def _caps(window: list, loader: LoaderSample, figures: WorkerFigures, settings: Settings) -> dict:
    caps = {}
    latest: Snapshot = window[-1]
    system = latest.system
    if system is not None and figures.busy > 0 and figures.cpu / figures.busy > 0.05:
        trainers = sum((p.cpu_percent or 0) / 100 for p in latest.processes if p.role == "trainer")
        # a quarter of a worker's CPU over is fine: the trainers' share is a mean, not a reservation
        caps["cpus"] = max(1, math.floor((system.cpus_allowed - trainers) / (figures.cpu / figures.busy) + 0.25))
    if system is not None and figures.memory:
        caps["memory"] = len(loader.worker_pids) + math.floor(0.5 * system.mem_available_bytes / figures.memory)
    if saturated_disks(window, settings.disk_util_percent, settings.disk_await_ms):
        caps["disk"] = loader.num_workers
    return caps


def _hottest_user_frame(window: list, pids: set):
    counts: dict = {}
    for snap in window:
        for p in snap.processes:
            if p.pid in pids and p.stack:
                frame = user_frame(p.stack)
                if frame is not None:
                    counts[frame.where()] = counts.get(frame.where(), 0) + 1
    return max(counts, key=counts.get) if counts else None


def too_many_workers(window: list, settings: Settings) -> list:
    """The trainer never waits and the workers idle: the fewest workers that still keep up.

    Same model as input-bound with W ~ 0: N workers working a share u of the time supply what
    N * u workers working flat out would, so ceil(N * u * headroom) keep up; the headroom is
    generous (1.5) because a loader must absorb slow samples, not just the mean.
    """
    latest: Snapshot = window[-1]
    findings = []
    for loader in latest.loaders:
        wait = trusted_wait(loader, settings.min_stack_samples)
        workers = loader.num_workers
        if wait is None or wait * 100 >= settings.too_many_wait_percent or workers < 2:
            continue
        figures = worker_figures(window, set(loader.worker_pids))
        # Workers that did nothing at all belong to a loader not being iterated now (a validation
        # loader between passes): nothing to judge.
        if not 0.01 <= figures.working < settings.idle_workers_percent / 100:
            continue
        suggested = max(1, math.ceil(round(workers * figures.working * settings.fewer_workers_headroom, 6)))
        if suggested >= workers:
            continue
        freed = (workers - suggested) * figures.memory
        findings.append(
            Finding(
                id="too-many-workers",
                severity="info",
                title=f"{workers} workers of trainer {loader.trainer_pid} idle {100 - figures.working * 100:.0f}%"
                " of the time",
                detail=f"The trainer waits for data {wait * 100:.1f}% of the time and its workers work"
                f" {figures.working * 100:.0f}% of theirs: {suggested} would keep up"
                + (f", freeing about {human_bytes(freed)} of worker memory" if freed else "")
                + f" and {workers - suggested} process(es).",
                pids=[loader.trainer_pid],
                evidence={
                    "trainer_pid": loader.trainer_pid,
                    "data_wait_percent": round(wait * 100, 1),
                    "num_workers": workers,
                    "worker_busy_percent": round(figures.working * 100, 1),
                    "suggested_workers": suggested,
                    "memory_freed_bytes": round(freed),
                },
                suggestion=f"{loader_call(loader, num_workers=suggested)}  # from {workers}",
                bench_args=bench_args(
                    loader, figures, wait, _trainer_cpu(window, loader.trainer_pid), num_workers=suggested
                ),
            )
        )
    return findings

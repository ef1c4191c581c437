"""Findings about the machine's resources as the job uses them: CPUs, disks, memory, /dev/shm,
open files, GPUs. Pure rules over a window of Snapshots (newest last); thresholds in ``Settings``.
"""

from __future__ import annotations

import math
from typing import Optional

from dltop.diagnose.advice import input_bound
from dltop.diagnose.figures import (
    elapsed,
    loader_call,
    mean_over,
    saturated_disks,
    worker_figures,
)
from dltop.diagnose.settings import Settings
from dltop.model import Finding, Snapshot
from dltop.units import human_bytes

JOB_ROLES = ("trainer", "worker")


def fd_near_limit(window: list, settings: Settings) -> list:
    latest: Snapshot = window[-1]
    findings = []
    for proc in latest.processes:
        if not proc.num_fds or not proc.fd_limit or proc.num_fds < settings.fd_limit_share * proc.fd_limit:
            continue
        kinds = proc.fd_kinds or {}
        shm, files = kinds.get("shm", 0), kinds.get("file", 0)
        share = 100 * proc.num_fds / proc.fd_limit
        if shm >= files:
            what = f"{shm} of them shared-memory batch tensors (/dev/shm/torch_*, deleted)"
            fix = (
                "torch.multiprocessing.set_sharing_strategy('file_system') at the top of the training script "
                f"(tensors then travel by name, not by fd), or raise the limit: `ulimit -n {proc.fd_limit * 4}`"
            )
        else:
            what = f"{files} of them regular files"
            fix = (
                "Close files after reading each sample (`with open(...)`), or open each file once per worker "
                "in worker_init_fn and reuse it; raise the limit only if the dataset truly needs that many"
            )
        findings.append(
            Finding(
                id="fd-near-limit",
                severity="error" if share >= 95 else "warning",
                title=f"{proc.role.capitalize()} {proc.pid} uses {share:.0f}% of its open-file limit",
                detail=f"{proc.num_fds} open fds of a soft limit of {proc.fd_limit}: {what}. At the limit torch "
                "fails with 'Too many open files' (received 0 items of ancdata).",
                pids=[proc.pid],
                evidence={"pid": proc.pid, "num_fds": proc.num_fds, "fd_limit": proc.fd_limit, "fd_kinds": kinds},
                suggestion=fix,
            )
        )
    return findings


def cpu_oversubscribed(window: list, settings: Settings) -> list:
    """The job wants more CPU than it may use: processes sit runnable, waiting for a core.

    CPU% alone cannot show it (it tops out at the CPUs allowed); the run-queue wait of each
    process's main thread (schedstat) can. CPU wanted = used + waiting, summed over the job.
    """
    latest: Snapshot = window[-1]
    if latest.system is None or len(window) < 2:
        return []
    allowed = latest.system.cpus_allowed
    used = mean_over(window[1:], lambda s: _job_sum(s, "cpu_percent"))
    waiting = mean_over(window[1:], lambda s: _job_sum(s, "cpu_wait_percent"))
    if used is None or waiting is None or used + waiting < settings.oversubscribed_ratio * allowed:
        return []
    trainers = [p for p in latest.processes if p.role == "trainer" and p.state != "zombie"]
    ranks = max(1, len(trainers))
    per_rank = allowed / ranks
    trainer_cpu = mean_over(window[1:], lambda s: _job_sum(s, "cpu_percent", ("trainer",))) or 0.0
    per_trainer = trainer_cpu / ranks
    advice = []
    for loader in latest.loaders:
        figures = worker_figures(window, set(loader.worker_pids))
        wants = min(1.0, figures.cpu + figures.cpu_wait) or 1.0
        fit = max(1, math.floor(max(per_rank - min(per_trainer, per_rank - 1), 1) / wants))
        if loader.num_workers and fit < loader.num_workers:
            advice.append(f"{loader_call(loader, num_workers=fit)}  # trainer {loader.trainer_pid}")
    threads = ""
    if per_trainer > 1.5:
        threads = (
            f" Each trainer uses {per_trainer:.1f} cores itself (intra-op threads): set OMP_NUM_THREADS="
            f"{max(1, math.floor(per_rank / 2))} (or torch.set_num_threads) so ranks and workers share {per_rank:.1f}"
            " CPUs each."
        )
    ranks_text = f" across {ranks} ranks ({per_rank:.1f} CPUs per rank)" if ranks > 1 else ""
    return [
        Finding(
            id="cpu-oversubscribed",
            severity="warning",
            title=f"The job wants {used + waiting:.1f} CPUs and may use {allowed:g}",
            detail=f"Its processes used {used:.1f} CPUs and waited runnable for a CPU {waiting:.1f} CPUs' worth of the"
            f" time{ranks_text}: workers and trainers slow each other down, so adding workers makes it worse.",
            pids=[p.pid for p in trainers],
            evidence={
                "cpus_allowed": allowed,
                "cpu_used": round(used, 2),
                "cpu_waiting": round(waiting, 2),
                "ranks": ranks,
                "trainer_cpu_per_rank": round(per_trainer, 2),
                "host_cpu_busy_percent": latest.system.cpu_busy_percent,
            },
            suggestion=("; ".join(advice) or "Fewer workers per trainer.") + threads,
        )
    ]


def _job_sum(snap: Snapshot, attr: str, roles: tuple = JOB_ROLES) -> Optional[float]:
    """Sum of a per-process percentage over the job's processes, in cores; None if none has it."""
    values = [getattr(p, attr) for p in snap.processes if p.role in roles and getattr(p, attr) is not None]
    return sum(values) / 100 if values else None


def disk_saturated(window: list, settings: Settings) -> list:
    """A device the job reads from is busy nearly all the time and requests queue: more workers
    only lengthen the queue."""
    latest: Snapshot = window[-1]
    waits = [ld.data_wait_percent for ld in latest.loaders if ld.data_wait_percent is not None]
    starving = bool(waits) and max(waits) >= settings.input_bound_percent
    findings = []
    for disk in saturated_disks(window, settings.disk_util_percent, settings.disk_await_ms):
        reads = human_bytes(disk.read_bytes_per_s, "/s")
        findings.append(
            Finding(
                id="disk-saturated",
                severity="warning" if starving else "info",
                title=f"Disk {disk.name} is {disk.util_percent:.0f}% busy with {disk.r_await_ms:.0f} ms per read",
                detail=f"The job reads {reads} from {disk.name}; each read waits {disk.r_await_ms:.0f} ms"
                + (" while the trainer waits for data." if starving else ".")
                + " More workers will not help: they only queue more reads.",
                pids=[],
                evidence={
                    "device": disk.device,
                    "name": disk.name,
                    "util_percent": round(disk.util_percent, 1),
                    "r_await_ms": round(disk.r_await_ms, 1),
                    "read_bytes_per_s": round(disk.read_bytes_per_s),
                },
                suggestion=f"Read less from {disk.name}: fewer, larger reads (pack samples into shards: WebDataset,"
                " LMDB, arrow), cache decoded samples in RAM or on local NVMe, or move the dataset to faster storage.",
            )
        )
    return findings


def worker_memory_growth(window: list, settings: Settings) -> list:
    """Workers' private memory rises in a straight line: a leak, or copy-on-read under fork
    (every read of a Python object writes its refcount, so its page is copied into the worker)."""
    latest: Snapshot = window[-1]
    times = elapsed(window)
    findings = []
    for loader in latest.loaders:
        growing = {}
        for pid in loader.worker_pids:
            slope = _steady_slope(times, window, pid, settings)
            if slope is not None:
                growing[pid] = slope
        if not growing:
            continue
        rate = sum(growing.values())
        available = _memory_available(latest)
        to_exhaust = available / rate if available else None
        fork = loader.start_method == "fork"
        why = (
            "Under fork, reading Python objects (lists, dicts, strings) of the dataset copies their pages into each"
            " worker (refcounts are writes): each worker grows toward its own copy."
            if fork
            else "Each worker keeps more memory as it runs: a cache or a leak in the dataset or collate code."
        )
        fix = (
            "Keep per-sample metadata in numpy arrays, pyarrow tables or torch tensors instead of Python "
            "lists/dicts of objects (no refcounts to touch); if it is your own cache, bound it"
            if fork
            else "Bound any per-worker cache (functools.lru_cache(maxsize=...)) and drop references to decoded samples"
        )
        findings.append(
            Finding(
                id="worker-memory-growth",
                severity="error" if to_exhaust is not None and to_exhaust < 600 else "warning",
                title=f"Workers of trainer {loader.trainer_pid} grow by {human_bytes(rate * 60)}/min",
                detail=f"{len(growing)} of {len(loader.worker_pids)} workers' private memory rises steadily"
                + (f"; at this rate available memory runs out in {_duration(to_exhaust)}" if to_exhaust else "")
                + f". {why}",
                pids=sorted(growing),
                evidence={
                    "trainer_pid": loader.trainer_pid,
                    "bytes_per_s": round(rate),
                    "per_worker_bytes_per_s": {pid: round(s) for pid, s in sorted(growing.items())},
                    "memory_available_bytes": available,
                    "seconds_to_exhaustion": round(to_exhaust) if to_exhaust else None,
                    "start_method": loader.start_method,
                },
                suggestion=fix + ".",
            )
        )
    return findings


def _steady_slope(times: list, window: list, pid: int, settings: Settings) -> Optional[float]:
    """Bytes/s of a worker's private memory when it rises along a straight line, else None.

    USS when dltop can read it, else RSS (never a mix: RSS counts shared pages). Memory is re-read
    within a CPU budget, so a reading can repeat: only changed readings count.
    """
    rows = [(t, p) for t, snap in zip(times, window) for p in snap.processes if p.pid == pid]
    field = "uss_bytes" if any(p.uss_bytes is not None for _, p in rows) else "rss_bytes"
    points: list = []
    for t, proc in rows:
        value = getattr(proc, field)
        if value is not None and (not points or value != points[-1][1]):
            points.append((t, value))
    if len(points) < 4 or points[-1][0] - points[0][0] < settings.memory_growth_min_s:
        return None
    n = len(points)
    mean_t, mean_v = sum(t for t, _ in points) / n, sum(v for _, v in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    var_v = sum((v - mean_v) ** 2 for _, v in points)
    if not var_t or not var_v:
        return None
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / var_t
    fit = slope * slope * var_t / var_v  # R^2 of the least-squares line
    rise = slope * (points[-1][0] - points[0][0])
    return slope if fit >= settings.memory_growth_fit and rise >= settings.memory_growth_min_bytes else None


def _memory_available(latest: Snapshot) -> Optional[int]:
    system = latest.system
    if system is None:
        return None
    available = system.mem_available_bytes
    if system.mem_limit_bytes:
        used = sum(p.pss_bytes or p.rss_bytes or 0 for p in latest.processes)
        available = min(available, max(0, system.mem_limit_bytes - used))
    return available


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds < 3 * 3600 else f"{seconds / 3600:.0f} h"


def shm_low(window: list, settings: Settings) -> list:
    """/dev/shm is nearly full at its peak: each batch a worker sends lives there until the trainer
    has used it, and the next one that does not fit kills the worker with SIGBUS."""
    latest: Snapshot = window[-1]
    workers = sum(ld.num_workers for ld in latest.loaders)
    rows = [s.system for s in window if s.system and s.system.shm_total_bytes and s.system.shm_used_bytes is not None]
    if not rows or not workers:
        return []
    peak = max(r.shm_used_bytes for r in rows)
    total = rows[-1].shm_total_bytes
    if peak < settings.shm_full_share * total:
        return []
    size_gb = max(1, math.ceil(2 * peak / (1 << 30)))
    return [
        Finding(
            id="shm-low",
            severity="error" if peak >= 0.95 * total else "warning",
            title=f"/dev/shm was {100 * peak / total:.0f}% full ({human_bytes(peak)} of {human_bytes(total)})",
            detail=f"{workers} worker(s) put every batch in /dev/shm until the trainer takes it (num_workers x"
            " prefetch_factor batches in flight); a batch that does not fit ends the worker with a bus error.",
            pids=[ld.trainer_pid for ld in latest.loaders],
            evidence={"shm_total_bytes": total, "shm_peak_used_bytes": peak, "workers": workers},
            suggestion=f"Give the container more: `docker run --shm-size={size_gb}g` (or `--ipc=host`); or keep fewer "
            "batches in flight: DataLoader(..., prefetch_factor=1) or fewer workers.",
        )
    ]


def gpu_underutilized(window: list, settings: Settings) -> list:
    """A GPU the job holds is idle much of the time; tied to input-bound when the trainer on it
    waits for data ("starved by input"), else the bottleneck is in the training step itself."""
    latest: Snapshot = window[-1]
    if latest.gpu_status != "ok" or elapsed(window)[-1] < settings.gpu_min_s:
        return []
    starved = {f.evidence["trainer_pid"]: f for f in input_bound(window, settings)}
    findings = []
    for gpu in latest.gpus:
        holders = [p.pid for p in gpu.processes]
        util = mean_over(window, lambda s, i=gpu.index: _gpu_util(s, i))
        if not holders or util is None or util >= settings.gpu_busy_percent:
            continue
        starving = [starved[pid] for pid in holders if pid in starved]
        if starving:
            cause = (
                f"starved by input: trainer {starving[0].pids[0]} waits for data"
                f" {starving[0].evidence['data_wait_percent']:.0f}% of the time"
            )
            suggestion = f"Feed it faster (see input-bound): {starving[0].suggestion}"
        else:
            cause = "the trainer does not wait for data, so the training step itself leaves it idle"
            suggestion = (
                "Profile a few steps with torch.profiler: look for host-side work between kernels (.item(), "
                ".cpu(), logging every step), small batches, or CPU-side augmentation in the step."
            )
        findings.append(
            Finding(
                id="gpu-underutilized",
                severity="warning" if starving else "info",
                title=f"GPU {gpu.index} is busy {util:.0f}% of the time: {cause.split(':')[0]}",
                detail=f"GPU {gpu.index} ({gpu.name}) held by pid(s) {', '.join(map(str, holders))}; {cause}.",
                pids=holders,
                evidence={"gpu": gpu.index, "util_percent": round(util, 1), "input_bound": bool(starving)},
                suggestion=suggestion,
            )
        )
    return findings


def _gpu_util(snap: Snapshot, index: int) -> Optional[float]:
    return next((g.util_percent for g in snap.gpus if g.index == index), None)

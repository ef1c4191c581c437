"""Findings about the machine's resources as the job uses them: CPUs, disks, memory, /dev/shm,
open files, GPUs. Pure rules over a window of Snapshots (newest last); thresholds in ``Settings``.
"""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass
from typing import Optional

from dltop.diagnose.advice import input_bound
from dltop.diagnose.capacity import THREADS_CPU, capacities
from dltop.diagnose.figures import (
    elapsed,
    job_load,
    loader_change,
    means_over,
    per_snapshot,
    saturated_disks,
    wait_error,
)
from dltop.model import Finding, Snapshot
from dltop.settings import Settings
from dltop.units import human_bytes, rough_span


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
                impact=share / 100,
            )
        )
    return findings


def cpu_oversubscribed(window: list, settings: Settings) -> list:
    """The job wants more CPU than it may use: processes sit runnable, waiting for a core.

    CPU% alone cannot show it (it tops out at the CPUs allowed); the run-queue wait of each
    process's main thread (schedstat) can. CPU wanted = used + waiting, summed over the job.
    What to change depends on who starves: a trainer that waits for data needs its workers (so
    never fewer of them); its own intra-op threads are what to cut. A trainer that never waits
    has workers to spare.
    """
    latest: Snapshot = window[-1]
    if latest.system is None or len(window) < 2:
        return []
    allowed = latest.system.cpus_allowed
    used, waiting = means_over(window[1:], job_load, width=2)
    if used is None or waiting is None or used + waiting < settings.oversubscribed_ratio * allowed:
        return []
    trainers = [p for p in latest.processes if p.role == "trainer" and p.state != "zombie"]
    ranks = max(1, len(trainers))
    per_rank = allowed / ranks
    caps = capacities(window, settings)
    # a trainer that waits for data at all (beyond its noise) is held back by its workers: fewer
    # of them starve it more (4 CPU-bound workers on 2 CPUs, the trainer waiting 26%: cutting to
    # 2 measured 0.76x). Only below too-many-workers' line does it have workers to spare.
    starving = [c for c in caps if c.wait is not None
                and c.wait - (wait_error(c.loader) or 0.0) >= settings.too_many_wait_percent / 100]  # fmt: skip
    threads = next((c for c in caps if c.trainer_threads_cpu >= THREADS_CPU), None)
    advice = []
    if threads is not None:
        count = max(1, math.floor(per_rank - threads.workers * threads.figures.cpu))
        advice.append(
            f"OMP_NUM_THREADS={count} for the trainer(s) (or torch.set_num_threads({count})): each runs intra-op"
            f" threads using {threads.trainer_threads_cpu:.1f} cores beside its main thread, on CPUs its workers need"
        )
    if starving:
        advice.append(
            "keep num_workers: the trainer waits for data, and fewer workers would starve it more; make samples"
            " cheaper or give the job more CPUs"
        )
    elif threads is not None:
        advice.append("then watch again before changing num_workers (the threads may be all it takes)")
    else:
        for cap in caps:
            wants = min(1.0, cap.figures.cpu + cap.figures.cpu_wait) or 1.0
            trainer_share = min(cap.trainer_cpu, per_rank - 1)
            fit = max(1, math.floor(max(per_rank - trainer_share, 1) / wants))
            if cap.loader.num_workers and fit < cap.loader.num_workers:
                rank = f", trainer {cap.loader.trainer_pid}" if ranks > 1 else ""
                advice.append(loader_change(cap.loader, num_workers=fit) + rank)
    ranks_text = f" across {ranks} ranks ({per_rank:.1f} CPUs per rank)" if ranks > 1 else ""
    return [
        Finding(
            id="cpu-oversubscribed",
            severity="warning",
            title=f"The job wants {used + waiting:.1f} CPUs and may use {allowed:g}",
            detail=f"Its processes used {used:.1f} CPUs and waited runnable for a CPU {waiting:.1f} CPUs' worth of the"
            f" time{ranks_text}: workers and trainers slow each other down"
            + (", and the trainer still waits for data." if starving else "; the trainer does not wait for data."),
            pids=[p.pid for p in trainers],
            evidence={
                "cpus_allowed": allowed,
                "cpu_used": round(used, 2),
                "cpu_waiting": round(waiting, 2),
                "ranks": ranks,
                "trainer_threads_cpu": round(threads.trainer_threads_cpu, 2) if threads else 0.0,
                "trainer_waits_for_data": bool(starving),
                "host_cpu_busy_percent": latest.system.cpu_busy_percent,
            },
            suggestion="; ".join(advice) or "Fewer workers per trainer.",
            impact=waiting / (used + waiting),
        )
    ]


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
                impact=max(waits) / 100 if starving else 0.05,
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
        series = memory_points(times, window, set(loader.worker_pids))
        lines = {pid: steady_growth(points, settings) for pid, points in series.items()}
        growing = {pid: line.bytes_per_s for pid, line in lines.items() if line is not None}
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
                + (f"; at this rate available memory runs out in {rough_span(to_exhaust)}" if to_exhaust else "")
                + f". {why}",
                pids=sorted(growing),
                evidence={
                    "trainer_pid": loader.trainer_pid,
                    "bytes_per_s": round(rate),
                    "per_worker_bytes_per_s": {pid: round(s) for pid, s in sorted(growing.items())},
                    "memory_available_bytes": available,
                    "seconds_to_exhaustion": round(to_exhaust) if to_exhaust else None,
                    "start_method": loader.start_method,
                    "confidence": {pid: lines[pid].evidence() for pid in sorted(growing)},
                },
                suggestion=fix + ".",
                impact=min(1.0, 600 / to_exhaust) if to_exhaust else 0.1,
            )
        )
    return findings


@dataclass(frozen=True)
class Growth:
    """A least-squares line through a worker's distinct memory readings, and how sure it is."""

    bytes_per_s: float
    points: int
    span_s: float
    r2: float
    t: float  # the slope over its standard error: large for a steep clean line, small for noise

    def evidence(self) -> dict:
        return {"points": self.points, "span_s": round(self.span_s, 1), "r2": round(self.r2, 3), "t": round(self.t, 1)}


def memory_points(times: list, window: list, pids: set) -> dict:
    """{pid: [(seconds, bytes)]} of each worker's private memory each time its reading changed.

    USS when dltop can read it, else RSS (never a mix: RSS counts shared pages). Memory is re-read
    within a CPU budget, so a reading can repeat: only changed readings are points.
    """
    readings = [memory_readings(snap) for snap in window]
    series = {}
    for pid in pids:
        seen = [(t, reading[pid]) for t, reading in zip(times, readings) if pid in reading]
        field = 0 if any(uss is not None for _, (uss, _rss) in seen) else 1  # USS, else RSS
        known = [(t, values[field]) for t, values in seen if values[field] is not None]
        points = [next(run) for _, run in itertools.groupby(known, key=operator.itemgetter(1))]
        series[pid] = points
    return series


@per_snapshot
def memory_readings(snap: Snapshot) -> dict:
    """{pid: (USS, RSS)} of every process at one tick."""
    return {p.pid: (p.uss_bytes, p.rss_bytes) for p in snap.processes}


def steady_growth(points: list, settings: Settings) -> Optional[Growth]:
    """The line, when it rises steadily enough to be sure of: judged by its evidence (a slope many
    standard errors from zero, a good fit, a real rise), not by how long it was watched, so a steep
    clean line is reported within seconds and a shallow noisy one only once it has built up."""
    n = len(points)
    if n < settings.memory_growth_points:
        return None
    mean_t, mean_v = sum(t for t, _ in points) / n, sum(v for _, v in points) / n
    var_t = sum((t - mean_t) ** 2 for t, _ in points)
    var_v = sum((v - mean_v) ** 2 for _, v in points)
    if not var_t or not var_v:
        return None
    slope = sum((t - mean_t) * (v - mean_v) for t, v in points) / var_t
    r2 = min(1.0, slope * slope * var_t / var_v)
    t_stat = math.sqrt(r2 / max(1 - r2, 1e-12) * (n - 2))
    span = points[-1][0] - points[0][0]
    if (
        r2 < settings.memory_growth_fit
        or t_stat < settings.memory_growth_t
        or slope * span < settings.memory_growth_min_bytes
    ):
        return None
    return Growth(slope, n, span, r2, t_stat)


def _memory_available(latest: Snapshot) -> Optional[int]:
    system = latest.system
    if system is None:
        return None
    available = system.mem_available_bytes
    if system.mem_limit_bytes:
        used = sum(p.pss_bytes or p.rss_bytes or 0 for p in latest.processes)
        available = min(available, max(0, system.mem_limit_bytes - used))
    return available


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
            "batches in flight: prefetch_factor=1 in the DataLoader, or fewer workers.",
            impact=peak / total,
        )
    ]


def gpu_underutilized(window: list, settings: Settings) -> list:
    """A GPU the job holds is idle much of the time; tied to input-bound when the trainer on it
    waits for data ("starved by input"), else the bottleneck is in the training step itself."""
    latest: Snapshot = window[-1]
    if latest.gpu_status != "ok":
        return []
    starved = {f.evidence["trainer_pid"]: f for f in input_bound(window, settings)}
    findings = []
    for gpu in latest.gpus:
        holders = [p.pid for p in gpu.processes]
        readings = [u for u in (_gpu_util(s, gpu.index) for s in window) if u is not None]
        util = sum(readings) / len(readings) if readings else None
        if not holders or len(readings) < settings.gpu_min_readings or util >= settings.gpu_busy_percent:
            continue
        starving = [starved[pid] for pid in holders if pid in starved]
        starting = [ld for ld in latest.loaders if ld.trainer_pid in holders and ld.trainer_time
                    and ld.trainer_time.starting_workers_percent >= settings.input_bound_percent]  # fmt: skip
        if starving:
            cause = (
                f"starved by input: trainer {starving[0].pids[0]} waits for data"
                f" {starving[0].evidence['data_wait_percent']:.0f}% of the time"
            )
            suggestion = f"Feed it faster (see input-bound): {starving[0].suggestion}"
        elif starting:
            spent = starting[0].trainer_time.starting_workers_percent
            cause = f"idle while workers start: trainer {starting[0].trainer_pid} spends {spent:.0f}% of its time there"
            suggestion = loader_change(starting[0], persistent_workers=True)
        else:
            waits = _settled_waits(latest, holders, settings)
            if waits is None and latest.stacks_status == "ok":
                continue  # a trainer's data wait is not judged yet (pending says so): no cause to name
            if waits is None:
                cause = "cause unknown: without stacks dltop cannot tell a wait for data from a slow step"
            elif waits:
                cause = f"the training step itself leaves it idle: its trainer waits for data only {max(waits):.0f}%"
            else:
                cause = "the training step itself leaves it idle"
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
                evidence={
                    "gpu": gpu.index,
                    "util_percent": round(util, 1),
                    "input_bound": bool(starving),
                    "trainer_pids": holders,
                    "readings": len(readings),
                },  # fmt: skip
                suggestion=suggestion,
                impact=1 - util / 100,
            )
        )
    return findings


def _settled_waits(latest: Snapshot, holders: list, settings: Settings) -> Optional[list]:
    """Data-wait shares of the trainers on a GPU, each measured and below input-bound's line; None
    while any is unknown or above that line but not yet surely (a GPU starved by input must not be
    blamed on the training step before the wait is judged)."""
    waits = []
    for loader in (ld for ld in latest.loaders if ld.trainer_pid in holders):
        spent, wait = loader.trainer_time, loader.data_wait_percent
        if spent is None or wait is None or spent.samples < settings.min_stack_samples:
            return None
        if wait >= settings.input_bound_percent:  # input-bound's, or pending until it is sure
            return None
        waits.append(wait)
    return waits


def _gpu_util(snap: Snapshot, index: int) -> Optional[float]:
    return next((g.util_percent for g in snap.gpus if g.index == index), None)

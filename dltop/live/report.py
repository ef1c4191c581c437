"""Fold the per-tick Snapshots of an observation window into one report Snapshot.

Rates become time-weighted means over the ticks where they were read, which equals the rate
over the whole window; disk awaits are weighted by I/O count, so they equal iostat's figure
for the window. Processes that left keep their last reading: a job that exits while watched
is reported with what was seen before (docs/json.md#dltopsnapshot1).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from dltop.model import DiskSample, GpuSample, ProcessSample, Snapshot

PROCESS_RATES = (
    "cpu_percent",
    "cpu_wait_percent",
    "main_thread_cpu_percent",
    "python_threads_cpu_percent",
    "unseen_children_cpu_percent",
    "read_bytes_per_s",
    "write_bytes_per_s",
    "read_chars_per_s",
    "write_chars_per_s",
)
GPU_RATES = ("util_percent", "pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s", "power_w")
DISK_RATES = (
    "reads_per_s",
    "writes_per_s",
    "read_bytes_per_s",
    "write_bytes_per_s",
    "aqu_sz",
    "util_percent",
)


def _weighted_mean(pairs: list) -> Optional[float]:
    """Mean of (value, weight) pairs, skipping missing values; None when nothing was read."""
    pairs = [(v, w) for v, w in pairs if v is not None and w > 0]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


def _fold_rates(samples: list, fields: tuple) -> dict:
    """samples: [(record, seconds)] for one entity -> {field: window mean}."""
    return {name: _weighted_mean([(getattr(rec, name), dt) for rec, dt in samples]) for name in fields}


def _fold_process(samples: list, present_at_end: bool, job_exited: bool) -> ProcessSample:
    last = samples[-1][0]
    rates = {k: v for k, v in _fold_rates(samples, PROCESS_RATES).items() if v is not None}
    unavailable = {k: v for k, v in last.unavailable.items() if k not in rates}
    state = last.state if present_at_end or last.state == "zombie" else ("exited" if job_exited else "gone")
    return dataclasses.replace(last, state=state, unavailable=unavailable, **rates)


def _fold_disk(samples: list) -> DiskSample:
    last = samples[-1][0]
    folded = {k: v for k, v in _fold_rates(samples, DISK_RATES).items() if v is not None}
    folded["r_await_ms"] = _weighted_mean([(d.r_await_ms, d.reads_per_s * dt) for d, dt in samples])
    folded["w_await_ms"] = _weighted_mean([(d.w_await_ms, d.writes_per_s * dt) for d, dt in samples])
    folded["used_by_job"] = any(d.used_by_job for d, _ in samples)
    return dataclasses.replace(last, **folded)


def _fold_gpu(samples: list) -> GpuSample:
    return dataclasses.replace(samples[-1][0], **_fold_rates(samples, GPU_RATES))


def _group(snapshots: list, attr: str, key: str) -> dict:
    groups: dict = {}
    for snap in snapshots:
        for record in getattr(snap, attr):
            groups.setdefault(getattr(record, key), []).append((record, snap.window_s))
    return groups


def summarize(snapshots: list) -> Snapshot:
    """One Snapshot for the whole window. The first tick (window 0) only supplies identities."""
    last = snapshots[-1]
    if len(snapshots) == 1:
        return last
    exited = last.job.state == "exited"
    final_pids = {p.pid for p in last.processes}
    processes = []
    for pid, samples in sorted(_group(snapshots, "processes", "pid").items()):
        record = samples[-1][0]
        # Workers that came and went are listed in loaders[].workers_exited; the rest stay.
        if pid in final_pids or exited or record.role != "worker":
            processes.append(_fold_process(samples, pid in final_pids, exited))
    loaders = {}
    for snap in snapshots:
        loaders.update({loader.trainer_pid: loader for loader in snap.loaders})
    trainers = sorted({pid for snap in snapshots for pid in snap.job.trainer_pids})
    return dataclasses.replace(
        last,
        window_s=sum(s.window_s for s in snapshots),
        job=dataclasses.replace(last.job, trainer_pids=trainers),
        system=last.system or next((s.system for s in reversed(snapshots) if s.system), None),
        processes=processes,
        loaders=[loaders[t] for t in sorted(loaders)],
        gpus=[_fold_gpu(samples) for _, samples in sorted(_group(snapshots, "gpus", "index").items())],
        disks=[_fold_disk(samples) for _, samples in sorted(_group(snapshots, "disks", "device").items())],
    )

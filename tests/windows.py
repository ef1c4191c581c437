"""Hand-built windows of Snapshots for the rule tests: one loader of a trainer (pid 1) with
workers 10, 11, ..., each figure a keyword so a test says only what it is about."""

from __future__ import annotations

import dataclasses

from dltop.frames import make_frame
from dltop.model import (
    DiskSample,
    GpuProcess,
    GpuSample,
    JobInfo,
    LoaderSample,
    ProcessSample,
    Snapshot,
    SystemSample,
    TrainerTime,  # noqa: I001
)

GiB = 1 << 30
TORCH = "/venv/lib/python3.11/site-packages/torch/utils/data"
# a forked worker's stack: the trainer's own loop inherited below _worker_loop, then the fetch
STACK = [
    make_frame("main", "/home/me/train.py", 80),
    make_frame("_worker_loop", f"{TORCH}/_utils/worker.py", 300),
    make_frame("_MapDatasetFetcher.fetch", f"{TORCH}/_utils/fetch.py", 50),
    make_frame("Images.__getitem__", "/home/me/data.py", 12),
    make_frame("decode", "/home/me/img.py", 40),
]


def bound_window(wait, workers=2, cpu=90.0, activity="fetching", cpus_allowed=8.0, util=10.0, samples=100,
                 r_await=20.0, ticks=2, cpu_wait=None, trainer_cpu=100.0, gpu_util=None, shm=None,
                 trainer_main_cpu=None, startup=0.0, built_at=None, trainer_cpu_wait=None):  # fmt: skip
    """``ticks`` snapshots 1 s apart. ``gpu_util``: a GPU held by the trainer; ``shm``: (used, total) bytes;
    ``trainer_main_cpu``: the trainer's main thread alone (the rest of ``trainer_cpu`` is intra-op threads);
    ``trainer_cpu_wait``: the share of the time that main thread waits runnable for a CPU."""
    shm_used, shm_total = shm or (None, None)
    system = SystemSample(8, 4, cpus_allowed, list(range(8)), None, 1.0, 32 * GiB, 16 * GiB, None, 0, shm_total,
                          shm_used)  # fmt: skip
    pids = list(range(10, 10 + workers))
    procs = [ProcessSample(1, 0, "trainer", 1, "python", "", "running", cpu_percent=trainer_cpu,
                           main_thread_cpu_percent=trainer_main_cpu, cpu_wait_percent=trainer_cpu_wait)] + [
        ProcessSample(p, 1, "worker", 1, "pt_data_worker", "", "running", cpu_percent=cpu, cpu_wait_percent=cpu_wait,
                      uss_bytes=200 << 20, activity=activity, stack=STACK)
        for p in pids
    ]  # fmt: skip
    spent = TrainerTime(samples, 30.0, wait, 0.0, startup, 100.0 - wait - startup)
    ld = LoaderSample(1, workers, pids, True, False, "fork", wait, 0, trainer_time=spent, dataset="Images",
                      built_at=built_at)  # fmt: skip
    disk = DiskSample("vda", 100.0, 0.0, 1e7, 0.0, r_await, None, 1.0, util, True)
    gpus = [] if gpu_util is None else [GpuSample(0, "H200", gpu_util, 1, 2, None, None, None, None,
                                                  [GpuProcess(1, GiB, None)])]  # fmt: skip
    job = JobInfo(1, 1, "python train.py", "running", "fork", [1])
    snap = Snapshot(
        "2026-01-01T00:00:10+00:00",
        1.0,
        job,
        system,
        procs,
        [ld],
        gpus,
        "ok" if gpus else "no-nvml",
        [disk],
        stacks_status="ok",
    )
    return [snap] * ticks


def with_worker_memory(window, memory_of):
    """The window with each worker's USS replaced by ``memory_of(tick_index, pid)``."""
    return [
        dataclasses.replace(snap, processes=[
            dataclasses.replace(p, uss_bytes=memory_of(i, p.pid)) if p.role == "worker" else p
            for p in snap.processes
        ])
        for i, snap in enumerate(window)
    ]  # fmt: skip


def ids(findings):
    return [f.id for f in findings]


def input_bound_finding():
    """The input-bound finding of 2 workers fetching all the time on 5% CPU (waiting on storage)
    while the trainer waits 80%: its suggestion is the one ``dltop bench`` live-tests."""
    from dltop.diagnose import diagnose

    (finding,) = [f for f in diagnose(bound_window(80.0, cpu=5.0)) if f.id == "input-bound"]
    return finding

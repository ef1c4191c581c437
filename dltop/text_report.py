"""The plain-text form of a report Snapshot, for ``dltop snapshot`` without ``--json``."""

from __future__ import annotations

from typing import Optional, Union

from dltop.diagnose.relations import grouped
from dltop.model import LoaderSample, ProcessSample, Snapshot, WorkerThread, gpus_read, sampling_broken, still_for
from dltop.model.findings import RANK_STRAGGLER, RUN_STOPPED
from dltop.settings import DEFAULTS
from dltop.units import NA, cpu_list, human_bytes, number, percent

GPU_STATUS_TEXT = {
    "no-nvml": "no NVIDIA GPU (NVML library not found)",
    "no-devices": "no NVIDIA GPU (NVML sees no devices)",
}


def _fds(num: object, limit: object) -> str:
    return f"{num if num is not None else NA}/{limit if limit is not None else '∞'}"


def render(snapshot: Snapshot) -> str:
    """The report, section by section: the job, its machine, its processes, loaders and disks, then
    the findings and what is not judged yet."""
    lines = _job(snapshot) + _system(snapshot) + _gpus(snapshot)
    lines += [""] + _processes(snapshot) + [""] + _loaders(snapshot) + _disks(snapshot)
    lines += _findings(snapshot) + _pending(snapshot)
    if sampling_broken(snapshot.stacks_status):
        lines.append(f"stacks: {snapshot.stacks_status}" + (f" ({snapshot.stacks_fix})" if snapshot.stacks_fix else ""))
    return "\n".join(lines)


def _job(snapshot: Snapshot) -> list[str]:
    """The job: its state, start method, torch, the window watched, its command and ranks."""
    job = snapshot.job
    lines = [
        f"job {job.pid} · {job.state} · start method {job.start_method} · torch {job.torch_version or NA}"
        f" · window {snapshot.window_s:.1f}s · {snapshot.taken_at}",
        f"  {job.cmdline}",
    ]
    if job.launcher_pid:
        lines.append(f"  launcher {job.launcher_pid}, trainers (ranks) {', '.join(_ranks(snapshot)) or 'none running'}")
    return lines


def _system(snapshot: Snapshot) -> list[str]:
    """The CPUs the job may use, memory and /dev/shm: what the advice's capacity model reads."""
    system = snapshot.system
    if not system:
        return []
    quota = f", quota {system.cpu_quota:g}" if system.cpu_quota else ""
    return [
        f"system: CPUs allowed {system.cpus_allowed:g} of {system.cpus_logical}"
        f" (affinity {cpu_list(system.cpu_affinity)}{quota}) · load {system.load_1m:.2f}"
        f" · mem available {human_bytes(system.mem_available_bytes)}"
        f" of {human_bytes(system.mem_total_bytes)} · swap used {human_bytes(system.swap_used_bytes)}"
        f" · /dev/shm {human_bytes(system.shm_used_bytes)} of {human_bytes(system.shm_total_bytes)}"
    ]


def _gpus(snapshot: Snapshot) -> list[str]:
    """Each GPU with the job's share of its memory, or why there are none to show."""
    lines = []
    if not gpus_read(snapshot.gpu_status):
        lines.append(f"gpu: {GPU_STATUS_TEXT.get(snapshot.gpu_status, snapshot.gpu_status)}")
    for gpu in snapshot.gpus:
        mine = sum(p.used_memory_bytes or 0 for p in gpu.processes)
        lines.append(
            f"gpu {gpu.index} {gpu.name}: util {percent(gpu.util_percent)} · mem {human_bytes(gpu.mem_used_bytes)}"
            f" of {human_bytes(gpu.mem_total_bytes)} (job {human_bytes(mine)}) · pcie rx"
            f" {human_bytes(gpu.pcie_rx_bytes_per_s, '/s')} tx {human_bytes(gpu.pcie_tx_bytes_per_s, '/s')}"
            f" · {number(gpu.power_w, 0)} W · {number(gpu.temperature_c, 0)} °C"
        )
    return lines


def _processes(snapshot: Snapshot) -> list[str]:
    """The process table, one row per process of the job; a trainer's pipeline threads after the
    last process of its tree, as its workers (the PID column holds a thread's tid, PPID its process)."""
    lines = [
        f"{'PID':>7} {'PPID':>7} {'ROLE':<8} {'STATE':<9} {'CPU%':>6} {'RSS':>7} {'USS':>7}"
        f" {'FDS/LIMIT':>11} {'THR':>4} {'READ/s':>8} {'RCHAR/s':>8}  {'ACTIVITY':<16} NAME"
    ]
    threads = pipeline_threads(snapshot)
    last = {p.trainer_pid or p.pid: p.pid for p in snapshot.processes}  # each tree's last process
    for p in snapshot.processes:
        state = p.state if p.exit_code is None else f"{p.state}({p.exit_code})"
        lines.append(
            f"{p.pid:>7} {p.ppid:>7} {p.role:<8} {state:<9} {number(p.cpu_percent):>6} {human_bytes(p.rss_bytes):>7}"
            f" {human_bytes(p.uss_bytes):>7} {_fds(p.num_fds, p.fd_limit):>11} {p.num_threads or NA:>4}"
            f" {human_bytes(p.read_bytes_per_s):>8} {human_bytes(p.read_chars_per_s):>8}  {_activity(p):<16} {p.name}"
        )
        tree = p.trainer_pid or p.pid
        if last.get(tree) == p.pid:
            lines.extend(_thread_line(tree, t) for t in threads.pop(tree, ()))
    return lines + [_thread_line(trainer, t) for trainer, rest in threads.items() for t in rest]


def pipeline_threads(snapshot: Snapshot) -> dict[int, list[WorkerThread]]:
    """Each trainer's pipeline threads, workers first, then feeders (the threads that only move items)."""
    threads: dict[int, list[WorkerThread]] = {}
    for loader in snapshot.loaders:
        threads.setdefault(loader.trainer_pid, []).extend(loader.worker_threads)
    return {trainer: sorted(rows, key=lambda t: (t.kind != "worker", t.tid)) for trainer, rows in threads.items()}


def _thread_line(trainer_pid: int, t: WorkerThread) -> str:
    """A thread's row: its memory and files are its process's (on the trainer's row)."""
    role = "thread" if t.kind == "worker" else t.kind
    return (
        f"{t.tid:>7} {trainer_pid:>7} {role:<8} {NA:<9} {number(t.cpu_percent):>6} {NA:>7} {NA:>7} {NA:>11} {NA:>4}"
        f" {NA:>8} {NA:>8}  {_activity(t):<16} {t.name or ''}"
    )


def _loaders(snapshot: Snapshot) -> list[str]:
    """Each loader's settings as read, and where its trainer's time goes."""
    lines = []
    for loader in snapshot.loaders:
        kind = f" · {loader.dataset_kind} dataset {loader.dataset or ''}".rstrip() if loader.dataset_kind else ""
        read = f", {loader.parts_read} seen read" if loader.parts_read is not None else ""
        parts = f" · {loader.parts_source}{read}" if loader.parts_source else ""
        summary = workers_summary(loader) + _settings(loader)
        lines.append(f"loader of trainer {loader.trainer_pid}{kind}{parts}: {summary}")
        spent = loader.trainer_time
        if spent:
            lines.append(
                f"  trainer time ({spent.samples} samples over {spent.window_s:.0f}s): waiting for data"
                f" {spent.waiting_for_data_percent:.0f}% · collate/pin {spent.collating_percent:.0f}%"
                f" · epoch start {spent.starting_workers_percent:.0f}% · running {spent.running_percent:.0f}%"
            )
        lines.extend(_stopped_here(snapshot, loader.trainer_pid))
    return lines


def workers_summary(loader: LoaderSample) -> str:
    """What runs the loader's work: '2 workers (fork)' for a DataLoader; '4 threads (spdl)' for a
    pipeline of threads; '2 workers (torchdata.nodes, processes)' for one of processes."""
    if loader.pipeline in (None, "dataloader"):
        return f"{loader.num_workers} workers ({loader.start_method})"
    if loader.start_method == "thread":
        return f"{loader.num_workers} threads ({loader.pipeline})"
    return f"{loader.num_workers} workers ({loader.pipeline}, processes)"


def _settings(loader: LoaderSample) -> str:
    """A DataLoader's settings as read; another pipeline has none of them, only its exits."""
    if loader.pipeline not in (None, "dataloader"):
        feeders = sum(t.kind == "feeder" for t in loader.worker_threads)
        return f" · feeders {feeders} · exited {len(loader.workers_exited) + len(loader.threads_exited)}"
    return (
        f" · respawns {loader.worker_respawns} · exited {len(loader.workers_exited)}"
        f" · pin_memory {_tri(loader.pin_memory)} · persistent_workers {_tri(loader.persistent_workers)}"
    )


def _on(blocked_on: Optional[str]) -> Optional[str]:
    return f"on {blocked_on}" if blocked_on else None


def _stopped_here(snapshot: Snapshot, trainer_pid: int) -> list[str]:
    """Where a rank of a stopped run is: its time reads 'running' while it waits for the others."""
    return [
        f"  stopped ({finding.id}): {' '.join(filter(None, (rank['where'], rank['call'], _on(rank['blocked_on']))))},"
        f" still {rank['still_s']:.0f}s at {rank['site'] or rank['frame']}"
        for finding in snapshot.findings
        if finding.id == RUN_STOPPED
        for rank in finding.evidence.get("ranks") or ()
        if rank["pid"] == trainer_pid
    ]


def _disks(snapshot: Snapshot) -> list[str]:
    """Every block device as iostat shows it, the job's marked."""
    if not snapshot.disks:
        return []
    lines = [
        "",
        f"{'DEVICE':<12} {'r/s':>7} {'w/s':>7} {'rkB/s':>9} {'wkB/s':>9} {'r_await':>8} {'w_await':>8}"
        f" {'aqu-sz':>7} {'%util':>6}",
    ]
    for d in snapshot.disks:
        mark = "*" if d.used_by_job else " "
        lines.append(
            f"{mark}{d.device:<11} {d.reads_per_s:>7.1f} {d.writes_per_s:>7.1f} {d.read_bytes_per_s / 1024:>9.1f}"
            f" {d.write_bytes_per_s / 1024:>9.1f} {number(d.r_await_ms, 2):>8} {number(d.w_await_ms, 2):>8}"
            f" {d.aqu_sz:>7.2f} {d.util_percent:>6.1f}"
        )
    lines.append("(* = a device the job has files open on)")
    return lines


def _pending(snapshot: Snapshot) -> list[str]:
    """What the window was too short to judge: a silent report must not read as healthy."""
    if not snapshot.pending:
        return []
    lines = ["", "not judged yet (watch longer):"]
    for waiting in snapshot.pending:
        ready = f"; about {waiting.ready_in_s:g}s more" if waiting.ready_in_s is not None else ""
        lines.append(f"  {waiting.id}: needs {waiting.needs}{ready}")
    return lines


def _ranks(snapshot: Snapshot) -> list[str]:
    """Each trainer as ``12345 (rank 1)``, the rank holding its run back marked."""
    by_pid = {p.pid: p for p in snapshot.processes}
    slowest = {pid for f in snapshot.findings if f.id == RANK_STRAGGLER for pid in f.pids}
    named = []
    for pid in snapshot.job.trainer_pids:
        rank = by_pid[pid].rank if pid in by_pid else None
        mark = ", the slowest" if pid in slowest else ""
        named.append(f"{pid} (rank {rank}{mark})" if rank is not None else str(pid))
    return named


def _findings(snapshot: Snapshot) -> list:
    """Each root cause with its fix, and under it what it explains (with no fix of its own)."""
    if not snapshot.findings:
        return []
    lines = [""]
    for entry in grouped(snapshot.findings):
        finding = entry.cause
        lines.append(f"[{finding.severity}] {finding.id}: {finding.title}")
        lines.append(f"  {finding.detail}")
        if finding.suggestion:
            lines.append(f"  fix: {finding.suggestion}")
        for consequence in entry.consequences:
            lines.append(f"  consequence [{consequence.severity}] {consequence.id}: {consequence.title}")
            lines.append(f"    {consequence.detail}")
    return lines


def _activity(p: Union[ProcessSample, WorkerThread]) -> str:
    still = still_for(p)
    return f"{p.activity} {still:.0f}s" if still is not None and still >= DEFAULTS.still_notice_s else p.activity


def _tri(value: Optional[bool]) -> str:
    return "unknown" if value is None else "yes" if value else "no"

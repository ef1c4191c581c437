"""What the screen shows, from a Snapshot: the state badge, header figures, worker rows grouped
by trainer, GPU, disk and system lines. Pure functions (no Textual), so they are tested alone
and each refresh does no more work than the figures need."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from typing import Optional

from dltop.model import ExitedWorker, ProcessSample, Snapshot
from dltop.units import NA, cpu_list, human_bytes, percent, signal_name

FAULTS_HUNG = ("worker-hung", "trainer-stalled")
STILL_S = 5.0  # a stack held this long without CPU is shown with its age


@dataclass(frozen=True)
class Badge:
    state: str  # healthy | input-bound | attention | hung | dead | exited | starting
    text: str


def badge(snapshot: Snapshot) -> Badge:
    ids = {f.id for f in snapshot.findings}
    if snapshot.job.state == "exited":
        code = snapshot.job.exit_code
        return Badge("exited", "EXITED" + (f" ({code})" if code is not None else ""))
    if ids & set(FAULTS_HUNG):
        return Badge("hung", "HUNG")
    if "worker-died" in ids:
        return Badge("dead", "WORKER DIED")
    if "input-bound" in ids:
        return Badge("input-bound", "INPUT-BOUND")
    if any(f.severity in ("warning", "error") for f in snapshot.findings):
        return Badge("attention", "ATTENTION")
    return Badge("healthy", "HEALTHY")


def data_wait(snapshot: Snapshot) -> Optional[float]:
    """The highest data-wait share of the job's loaders (the trainer that starves most)."""
    waits = [ld.data_wait_percent for ld in snapshot.loaders if ld.data_wait_percent is not None]
    return max(waits) if waits else None


def gpu_util(snapshot: Snapshot) -> Optional[float]:
    """Mean busy share of the GPUs the job holds (all GPUs when it holds none known)."""
    held = [g for g in snapshot.gpus if g.processes] or snapshot.gpus
    values = [g.util_percent for g in held if g.util_percent is not None]
    return sum(values) / len(values) if values else None


def uptime(snapshot: Snapshot) -> str:
    """How long the job has run, at the snapshot's time (not the wall clock: recordings replay)."""
    if not snapshot.job.started_at:
        return NA
    seconds = (_parse(snapshot.taken_at) - _parse(snapshot.job.started_at)).total_seconds()
    return duration(seconds)


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 3600:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def header_line(snapshot: Snapshot) -> str:
    job = snapshot.job
    ranks = f" · {len(job.trainer_pids)} ranks" if len(job.trainer_pids) > 1 else ""
    program, _, rest = job.cmdline.partition(" ")
    command = f"{os.path.basename(program)} {rest}".strip()
    return f"job {job.pid} · up {uptime(snapshot)} · {job.start_method}{ranks} · {command}"


# -- the workers table ------------------------------------------------------------------------------

COLUMNS = {  # key -> (label, width); the narrow set fits 80 columns
    "pid": ("PID", 7),
    "role": ("ROLE", 10),
    "state": ("STATE", 9),
    "activity": ("ACTIVITY", 16),
    "cpu": ("CPU%", 5),
    "rss": ("RSS", 6),
    "uss": ("USS", 6),
    "fds": ("FDS", 9),
    "read": ("READ/s", 7),
    "age": ("AGE", 6),
}
NARROW = ("pid", "role", "activity", "cpu", "uss", "fds", "read")
WIDE = ("pid", "role", "state", "activity", "cpu", "rss", "uss", "fds", "read", "age")
SORTS = ("group", "cpu", "uss", "read", "pid")  # "group": trainers, each followed by its workers


@dataclass(frozen=True)
class Row:
    key: str  # the pid (and "x" for an exited worker)
    pid: int
    cells: dict  # column key -> text
    alert: Optional[str] = None  # hung | dead | exited: the row must stand out
    group: tuple = ()  # (trainer pid, role order, pid): trainers, each followed by its workers
    metrics: tuple = (0.0, 0, 0.0)  # (cpu %, private memory, read bytes/s) to sort by


def rows(snapshot: Snapshot, sort: str = "group") -> list:
    """Table rows: each trainer followed by its workers (and workers that died), by ``sort``."""
    taken = _parse(snapshot.taken_at)
    live = [_process_row(p, taken, snapshot) for p in snapshot.processes]
    gone = [
        _exited_row(w)
        for loader in snapshot.loaders
        for w in loader.workers_exited
        if w.cause == "died" and w.pid not in {p.pid for p in snapshot.processes}
    ]
    everything = live + gone
    if sort == "group":
        return sorted(everything, key=lambda r: r.group)
    if sort == "pid":
        return sorted(everything, key=lambda r: r.pid)
    metric = ("cpu", "uss", "read").index(sort)
    return sorted(everything, key=lambda r: -r.metrics[metric])


def _process_row(p: ProcessSample, taken: datetime, snapshot: Snapshot) -> Row:
    role_order = {"launcher": 0, "trainer": 1, "helper": 3}.get(p.role, 2)
    trainer = p.trainer_pid if p.role != "launcher" else 0
    rank = f" r{p.rank}" if p.rank is not None and p.role == "trainer" else ""
    role = f"{p.role}{rank}" if p.role in ("trainer", "launcher") else f" └ {p.role}"
    alert = None
    activity = p.activity if p.activity != "unknown" else ""
    long_still = p.stuck_s is not None and p.stuck_s >= STILL_S
    if p.activity == "waiting-for-data" and long_still:
        activity = f"waiting {duration(p.stuck_s)}"  # the trainer is not at fault: its workers are
    elif p.activity == "stuck" or (long_still and p.activity not in ("idle", "unknown")):
        activity = f"STUCK {duration(p.stuck_s or 0)}"
    if _named_hung(snapshot, p.pid):
        alert = "hung"
    if p.state == "zombie":
        alert = "dead" if (p.exit_code or 0) != 0 else "exited"
    cells = {
        "pid": str(p.pid),
        "role": role,
        "state": p.state if p.exit_code is None else f"{p.state}({p.exit_code})",
        "activity": activity,
        "cpu": NA if p.cpu_percent is None else f"{p.cpu_percent:.0f}",
        "rss": human_bytes(p.rss_bytes),
        "uss": human_bytes(p.uss_bytes),
        "fds": f"{p.num_fds if p.num_fds is not None else NA}/{p.fd_limit or '∞'}",
        "read": human_bytes(p.read_bytes_per_s),
        "age": duration((taken - _parse(p.started_at)).total_seconds()) if p.started_at else NA,
    }
    metrics = (p.cpu_percent or 0.0, p.uss_bytes or p.rss_bytes or 0, p.read_bytes_per_s or 0.0)
    return Row(str(p.pid), p.pid, cells, alert, (trainer or p.pid, role_order, p.pid), metrics)


def _named_hung(snapshot: Snapshot, pid: int) -> bool:
    return any(f.id in FAULTS_HUNG and pid in f.pids for f in snapshot.findings)


def _exited_row(w: ExitedWorker) -> Row:
    code = w.exit_code
    cells = {k: "" for k in COLUMNS}
    cells.update(pid=str(w.pid), role=" └ worker", state="dead", activity=f"DIED {_code_text(code)}", cpu="", fds="")
    return Row(f"{w.pid}x", w.pid, cells, "dead", (w.trainer_pid, 2, w.pid))


def _code_text(code: Optional[int]) -> str:
    if code is None:
        return "(code unknown)"
    if code < 0:
        return signal_name(-code)
    return f"exit {code}"


# -- panels --------------------------------------------------------------------------------------

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list, top: float = 100.0) -> str:
    return "".join(SPARK[min(len(SPARK) - 1, int(len(SPARK) * max(0.0, v) / top))] if v is not None else " "
                   for v in values)  # fmt: skip


def system_lines(snapshot: Snapshot) -> list:
    s = snapshot.system
    if s is None:
        return ["system figures unavailable"]
    busy = sum((p.cpu_percent or 0) for p in snapshot.processes) / 100
    quota = f" quota {s.cpu_quota:g}" if s.cpu_quota else ""
    limit = f" (limit {human_bytes(s.mem_limit_bytes)})" if s.mem_limit_bytes else ""
    lines = [  # short lines: two panels side by side must fit 80 columns
        f"CPU  job {busy:.1f}/{s.cpus_allowed:g} [{cpu_list(s.cpu_affinity)}]{quota} · load {s.load_1m:.1f}",
        f"mem  {human_bytes(s.mem_available_bytes)} free of {human_bytes(s.mem_total_bytes)}{limit}",
        f"shm  {human_bytes(s.shm_used_bytes)} used of {human_bytes(s.shm_total_bytes)}",
    ]
    for d in snapshot.disks:
        if d.used_by_job:
            lines.append(
                f"{d.name or d.device:<4} {human_bytes(d.read_bytes_per_s, '/s')} await {_ms(d.r_await_ms)}"
                f" util {d.util_percent:.0f}%"
            )
    return lines


def _ms(value: Optional[float]) -> str:
    return NA if value is None else f"{value:.1f}ms"


def gpu_line(gpu, history: list) -> str:
    mine = sum(p.used_memory_bytes or 0 for p in gpu.processes)
    return (
        f"GPU{gpu.index} {percent(gpu.util_percent):>4} {sparkline(history)}\n"
        f"     mem {human_bytes(gpu.mem_used_bytes)}/{human_bytes(gpu.mem_total_bytes)} (job {human_bytes(mine)})"
    )


def _parse(iso: str) -> datetime:
    return datetime.fromisoformat(iso)

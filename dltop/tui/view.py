"""What the screen shows, from a Snapshot: the state badge, header figures, worker rows grouped
by trainer, GPU, disk and system lines. Pure functions (no Textual), so they are tested alone
and each refresh does no more work than the figures need."""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from itertools import zip_longest
from typing import Literal, Optional, Union

from dltop.diagnose.relations import root_cause
from dltop.model import (
    PHASES,
    ROLES,
    BadgeState,
    ExitedWorker,
    Pending,
    Phase,
    ProcessSample,
    Snapshot,
    TrainerTime,
    WorkerThread,
    gpus_read,
    judged_stuck,
    sampling_works,
    still_for,
)
from dltop.model.findings import (
    HANGS,
    INPUT_BOUND,
    RANK_STRAGGLER,
    RANKS_RESTARTED,
    RUN_STOPPED,
    WORKER_DIED,
    is_hang,
)
from dltop.settings import DEFAULTS
from dltop.text_report import pipeline_threads, workers_summary
from dltop.units import NA, clock, cpu_list, human_bytes, percent, signal_name


@dataclass(frozen=True)
class Badge:
    state: BadgeState
    text: str


# every badge the view can show, with what it means (the help screen lists these)
BADGES: tuple[tuple[str, str], ...] = (
    ("HEALTHY", "no problem found"),
    ("MEASURING", "no verdict yet: the data wait is still measured, or a finding holds its few seconds"),
    ("NO STACKS", "stacks cannot be read: no data wait, activity or hang checks"),
    ("INPUT-BOUND", "the trainer waits for data"),
    ("ATTENTION", "a warning"),
    ("RESTARTED", "the launcher started the ranks again"),
    ("HUNG", "a worker or trainer stuck on one frame"),
    ("WORKER DIED", "a worker exited with a signal or an error"),
    ("STOPPED", "the run's ranks wait for one another and none moves; the rank that stopped it is named"),
    ("EXITED", "the job ended: its last view stays until you quit"),
)
# a root cause with a badge of its own (a hang has HUNG; any other warning or error, ATTENTION)
CAUSE_BADGES: dict[str, Badge] = {
    WORKER_DIED: Badge("dead", "WORKER DIED"),
    RUN_STOPPED: Badge("stopped", "STOPPED"),
    RANKS_RESTARTED: Badge("attention", "RESTARTED"),
    INPUT_BOUND: Badge("input-bound", "INPUT-BOUND"),
}


def badge(snapshot: Snapshot) -> Badge:
    if snapshot.job.state == "exited":
        code = snapshot.job.exit_code
        return Badge("exited", "EXITED" + (f" ({code})" if code is not None else ""))
    cause = root_cause(snapshot.findings)
    if cause is not None:
        if is_hang(cause.id):
            return Badge("hung", "HUNG")
        return CAUSE_BADGES.get(cause.id, Badge("attention", "ATTENTION"))
    if data_wait(snapshot) is None and not sampling_works(snapshot.stacks_status):
        return Badge("no-stacks", "NO STACKS")
    if data_wait(snapshot) is None or verdict_open(snapshot) is not None:
        return Badge("measuring", "MEASURING")  # never HEALTHY before the verdict is in
    return Badge("healthy", "HEALTHY")


def verdict_open(snapshot: Snapshot) -> Optional[Pending]:
    """What keeps the verdict open: a finding held back until it proves steady (first), or the
    trainer's data wait not yet judged (a wait near the threshold, too few samples), the longest."""
    open_ = [p for p in snapshot.pending if p.held or p.id == INPUT_BOUND]
    return max(open_, key=lambda p: (p.held, p.ready_in_s or 0.0), default=None)


def headline(snapshot: Snapshot) -> str:
    """What the badge means in words: the root cause, or what is still being measured and how
    long yet (never a verdict the window cannot give yet)."""
    state = badge(snapshot).state
    if state == "exited":
        return "the job ended: its last view (q quits)"
    cause = root_cause(snapshot.findings)
    if cause is not None:
        return cause.title
    if state == "measuring":
        judging = verdict_open(snapshot)
        if judging is not None and judging.held:
            return f"judging {judging.id}: {judging.needs}{_yet(judging)}"
        what = judging.needs if judging else "samples of the trainer's time"
        return f"measuring the trainer's data wait: {what}{_yet(judging)}"
    pending = _longest_pending(snapshot)
    if state == "no-stacks":
        return f"stacks {snapshot.stacks_status}: no data wait, activity or hang checks"
    if pending is not None:
        return f"no problem found; still judging {pending.id}{_yet(pending)}"
    return "no problem found"


def _longest_pending(snapshot: Snapshot) -> Optional[Pending]:
    return max(snapshot.pending, key=lambda p: p.ready_in_s or 0.0, default=None)


def _yet(pending: Optional[Pending]) -> str:
    if pending is None or pending.ready_in_s is None:
        return "…"
    return f", about {math.ceil(pending.ready_in_s)} s yet"


def figures_line(snapshot: Snapshot) -> str:
    """The headline figures: data wait, GPU busy share, stacks when they are not running."""
    gpu = f"GPU {percent(gpu_util(snapshot))}" if snapshot.gpus else "no GPU"
    stacks = f" · stacks {snapshot.stacks_status}" if not sampling_works(snapshot.stacks_status) else ""
    return f"data wait {percent(data_wait(snapshot))} · {gpu}{stacks}"


def fit_words(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns at a word boundary, marked with …; never mid-word
    unless a single word is wider than the line."""
    if len(text) <= width:
        return text
    cut = text[: max(0, width - 1)]
    space = cut.rfind(" ")
    return (cut[:space] if space > width // 3 else cut).rstrip(" ·") + "…"


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
    return clock(seconds)


def header_line(snapshot: Snapshot) -> str:
    job = snapshot.job
    ranks = f" · {len(job.trainer_pids)} ranks" if len(job.trainer_pids) > 1 else ""
    program, _, rest = job.cmdline.partition(" ")
    command = f"{os.path.basename(program)} {rest}".strip()
    return f"job {job.pid} · up {uptime(snapshot)} · {pipeline_text(snapshot)}{ranks} · {command}"


def pipeline_text(snapshot: Snapshot) -> str:
    """How the job's input runs: the start method of DataLoader workers, or what runs another
    pipeline ('4 threads (spdl)', as the text report's loader line)."""
    other = next((ld for ld in snapshot.loaders if ld.pipeline not in (None, "dataloader")), None)
    return workers_summary(other) if other is not None else snapshot.job.start_method


# -- the workers table ------------------------------------------------------------------------------

COLUMNS = {  # key -> (label, width); the narrow set fits 80 columns
    "pid": ("PID", 7),
    "role": ("ROLE", 10),
    "state": ("STATE", 9),
    "activity": ("ACTIVITY", 16),
    "cpu": ("CPU%", 5),
    "rss": ("RSS", 6),
    "uss": ("USS", 9),  # wide enough for "measuring"
    "fds": ("FDS", 9),
    "read": ("READ/s", 7),
    "age": ("AGE", 6),
    "name": ("NAME", 22),  # wide enough for "spdl_worker_thread__0", "Thread-2 (_apply_udf)"
}
NARROW = ("pid", "role", "activity", "cpu", "uss", "fds", "read")
WIDE = ("pid", "role", "state", "activity", "cpu", "rss", "uss", "fds", "read", "age")
# with pipeline threads, NAME after CPU% (at 80 columns in place of FDS and READ/s, n/a on every thread row)
NARROW_THREADS = ("pid", "role", "activity", "cpu", "name", "uss")
WIDE_THREADS = ("pid", "role", "state", "activity", "cpu", "name", "rss", "uss", "fds", "read", "age")
WIDE_FROM = 110  # columns from which the table shows WIDE
# "group": trainers, each followed by its workers; the others sort within that tree (htop's tree
# view sorted: trainers by the figure, each trainer's workers under it by the same figure)
SORTS = ("group", "cpu", "uss", "read", "pid")
MEASURING = "measuring"  # a figure dltop has not read yet for a new process (not n/a: it will come)


Alert = Literal["hung", "dead", "exited", "straggler", "stopper", "feeder"]  # why a row stands out (or back)
# a pipeline thread's ROLE cell: one that runs the per-sample function is the pipeline's worker; a
# feeder (an event loop, a source or prefetch thread) only moves items and is drawn dim
THREAD_ROLES = {"worker": " └ thread", "feeder": " └ feeder"}
# the ROLE cell of a rank that stands out for the run, in the column's 10 cells
RANK_MARKS: dict[Alert, str] = {"straggler": "slowest", "stopper": "stopper"}


@dataclass(frozen=True)
class Row:
    key: str  # the pid (and "x" for an exited worker, "t" for a thread)
    pid: int  # a thread's tid
    cells: dict  # column key -> text
    alert: Optional[Alert] = None  # the row must stand out
    # (trainer pid, role order, 0 for a process or 1 a worker thread and 2 a feeder, pid): trainers,
    # each followed by its workers, its pipeline threads and its helpers
    group: tuple = ()
    metrics: tuple = (0.0, 0, 0.0)  # (cpu %, private memory, read bytes/s) to sort by
    thread_of: Optional[int] = None  # a pipeline thread's row: the trainer it runs in


def table_columns(width: int, threads: bool) -> tuple:
    """The columns ``width`` holds; NAME where the table shows threads: a thread's name ('Thread-2
    (_apply_udf)', 'spdl_event_loop_thread') says what it runs, where every worker process is
    'pt_data_worker' and the column would only cost room."""
    if width >= WIDE_FROM:
        return WIDE_THREADS if threads else WIDE
    return NARROW_THREADS if threads else NARROW


def rows(snapshot: Snapshot, sort: str = "group") -> list:
    """Table rows: each trainer followed by its workers (and workers that died), then its pipeline
    threads, by ``sort``."""
    taken = _parse(snapshot.taken_at)
    # a rank's stall that a stopped run explains is its wait for the rank that stopped it: not a hang
    hung, marks = _named(snapshot, HANGS, causes_only=True), _rank_marks(snapshot)
    live = [_process_row(p, taken, marks.get(p.pid), p.pid in hung) for p in snapshot.processes]
    pids = {p.pid for p in snapshot.processes}
    gone = [
        _exited_row(w)
        for loader in snapshot.loaders
        for w in loader.workers_exited
        if w.cause == "died" and w.pid not in pids
    ]
    threads = [_thread_row(t, trainer, t.tid in hung) for trainer, ts in pipeline_threads(snapshot).items() for t in ts]
    everything = live + gone + threads
    if sort == "group":
        return sorted(everything, key=lambda r: r.group)
    value = (lambda r: r.pid) if sort == "pid" else partial(_descending, ("cpu", "uss", "read").index(sort))
    heads = {r.pid: r for r in everything if r.group[0] == r.pid and r.group[1] <= 1}

    def in_tree(row: Row) -> tuple:
        head = heads.get(row.group[0])
        group = (0 if head is not None and head.group[1] == 0 else 1, value(head) if head else 0, row.group[0])
        return (*group, row is not head, value(row), row.pid)

    return sorted(everything, key=in_tree)


def _descending(metric: int, row: Row) -> float:
    return -row.metrics[metric]


def _rank_marks(snapshot: Snapshot) -> dict[int, Alert]:
    """The ranks that stand out for their run: the straggler that sets its pace, and the rank
    that stopped it (not the ranks that only wait for it)."""
    marks: dict[int, Alert] = dict.fromkeys(_named(snapshot, (RANK_STRAGGLER,)), "straggler")
    for finding in snapshot.findings:
        if finding.id == RUN_STOPPED:
            marks.update(dict.fromkeys(finding.evidence.get("cause_pids") or (), "stopper"))
    return marks


def _process_row(p: ProcessSample, taken: datetime, mark: Optional[Alert], hung: bool) -> Row:
    role, alert = _role_cell(p, mark)
    activity = activity_text(p)
    if hung and mark is None:  # a rank marked for its run says why it stands out (its stall is part of that)
        alert = "hung"
    if p.state == "zombie":  # exited, its parent has not reaped it yet
        alert = "dead" if (p.exit_code or 0) != 0 else "exited"
        activity = "ZOMBIE" if p.exit_code is None else f"ZOMBIE {exit_text(p.exit_code)}"
    metrics = (p.cpu_percent or 0.0, p.uss_bytes or p.rss_bytes or 0, p.read_bytes_per_s or 0.0)
    trainer = p.trainer_pid if p.role != "launcher" else 0
    group = (trainer or p.pid, ROLES.index(p.role), 0, p.pid)
    return Row(str(p.pid), p.pid, _cells(p, taken, role, activity), alert, group, metrics)


def _thread_row(t: WorkerThread, trainer_pid: int, hung: bool) -> Row:
    """A pipeline thread as a worker's row: the PID column holds its tid (as htop's and ``ps -L``'s
    do) and ROLE says "thread"; its memory, files and reads are its process's (n/a here)."""
    alert: Optional[Alert] = "hung" if hung or judged_stuck(t) else "feeder" if t.kind == "feeder" else None
    cells = dict.fromkeys(COLUMNS, NA)
    cpu = NA if t.cpu_percent is None else f"{t.cpu_percent:.0f}"
    cells.update(pid=str(t.tid), role=THREAD_ROLES[t.kind], activity=activity_text(t), cpu=cpu, name=t.name or "")
    group = (trainer_pid, ROLES.index("worker"), 1 if t.kind == "worker" else 2, t.tid)
    return Row(f"{t.tid}t", t.tid, cells, alert, group, (t.cpu_percent or 0.0, 0, 0.0), trainer_pid)


def _role_cell(p: ProcessSample, mark: Optional[Alert]) -> tuple[str, Optional[Alert]]:
    """The ROLE cell and the row's alert: a trainer with its rank, a worker under its trainer,
    and a rank that stands out for its run (``mark``) called so (RANK_MARKS)."""
    rank = f" r{p.rank}" if p.rank is not None and p.role == "trainer" else ""
    if mark is not None:
        return f"{RANK_MARKS[mark]}{rank}", mark
    return (f"{p.role}{rank}" if p.role in ("trainer", "launcher") else f" └ {p.role}"), None


def activity_text(p: Union[ProcessSample, WorkerThread]) -> str:
    """The ACTIVITY cell. STUCK only where the model judged it stuck (past --hang-after: what the
    JSON and the text report say); a stack held still for less shows as ``still 0:07``, so a
    worker in a slow read is not called stuck before it is; a trainer waiting for its workers
    shows how long, since its workers, not it, are at fault."""
    notice = DEFAULTS.still_notice_s
    if p.activity == "waiting-for-data" and (p.stuck_s or 0) >= notice:
        return f"waiting {clock(p.stuck_s or 0)}"
    if judged_stuck(p):
        return f"STUCK {clock(p.stuck_s or 0)}"
    still = still_for(p)
    if still is not None and still >= notice:
        return f"still {clock(still)}"
    return p.activity if p.activity != "unknown" else ""


def _cells(p: ProcessSample, taken: datetime, role: str, activity: str) -> dict:
    """The row's texts by column key, figures not read yet shown as such."""
    return {
        "pid": str(p.pid),
        "role": role,
        "state": p.state if p.exit_code is None else f"{p.state}({p.exit_code})",
        "activity": activity,
        "cpu": NA if p.cpu_percent is None else f"{p.cpu_percent:.0f}",
        "rss": human_bytes(p.rss_bytes),
        "uss": _uss(p),
        "fds": f"{p.num_fds if p.num_fds is not None else NA}/{p.fd_limit or '∞'}",
        "read": human_bytes(p.read_bytes_per_s),
        "age": clock((taken - _parse(p.started_at)).total_seconds()) if p.started_at else NA,
        "name": p.name,
    }


def _uss(p: ProcessSample) -> str:
    if p.uss_bytes is None and p.unavailable.get("uss_bytes", "").startswith("not read yet"):
        return MEASURING
    return human_bytes(p.uss_bytes)


def _named(snapshot: Snapshot, ids: Collection[str], causes_only: bool = False) -> set[int]:
    """The processes a finding of one of these ids names (once a refresh, not once a row);
    ``causes_only``: not where another finding explains it."""
    return {pid for f in snapshot.findings if f.id in ids and not (causes_only and f.explained_by) for pid in f.pids}


def _exited_row(w: ExitedWorker) -> Row:
    code = w.exit_code
    cells = {k: "" for k in COLUMNS}
    cells.update(pid=str(w.pid), role=" └ worker", state="dead", activity=f"DIED {exit_text(code)}", cpu="", fds="")
    return Row(f"{w.pid}x", w.pid, cells, "dead", (w.trainer_pid, 2, 0, w.pid))


def exit_text(code: Optional[int]) -> str:
    if code is None:
        return "(code unknown)"
    if code < 0:
        return signal_name(-code)
    return f"exit {code}"


# -- panels --------------------------------------------------------------------------------------

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[Optional[float]], top: float = 100.0) -> str:
    """``values`` as one row of eighth blocks (a chart one row high)."""
    return chart(values, 1, top)[0]


# a trainer's phases as a stacked bar: the cell character and colour of each (the legend's order)
PHASE_CELLS: dict[Phase, tuple[str, str]] = {
    "waiting-for-data": ("█", "yellow"),
    "collating": ("█", "magenta"),
    "starting-workers": ("█", "blue"),
    "running": ("█", "green"),
}
PHASE_WORDS: dict[Phase, str] = {
    "waiting-for-data": "wait",
    "collating": "collate",
    "starting-workers": "epoch start",
    "running": "step",
}


def phase_bar(spent: TrainerTime, width: int) -> list[tuple[str, str]]:
    """(text, colour) runs of a ``width``-cell bar split as the trainer's time is, largest
    remainders rounding up, so the cells always add up to the width."""
    shares = [(phase, spent.percent(phase) / 100 * width) for phase in PHASES]
    cells = {phase: int(share) for phase, share in shares}
    for phase, _ in sorted(shares, key=lambda item: item[1] - int(item[1]), reverse=True):
        if sum(cells.values()) >= width:
            break
        cells[phase] += 1
    return [(PHASE_CELLS[phase][0] * cells[phase], PHASE_CELLS[phase][1]) for phase in PHASES if cells[phase]]


def phase_words(spent: TrainerTime) -> str:
    """wait 86% · collate 0% · epoch start 0% · step 14%"""
    return " · ".join(f"{PHASE_WORDS[phase]} {spent.percent(phase):.0f}%" for phase in PHASES)


def chart(values: list[Optional[float]], rows: int, top: float = 100.0) -> list[str]:
    """``values`` as a bar chart ``rows`` high, top row first, in eighth blocks: a value read at
    all shows at least the lowest block (0 is a reading, not a gap); a missing one is blank."""
    heights = [None if v is None else min(rows * 8, int(rows * 8 * max(0.0, v) / top) + 1) for v in values]
    lines = []
    for row in range(rows - 1, -1, -1):
        cells = (" " if h is None or h <= row * 8 else SPARK[min(8, h - row * 8) - 1] for h in heights)
        lines.append("".join(cells))
    return lines


def cpu_meters(snapshot: Snapshot) -> dict[Optional[int], str]:
    """Per trainer, one cell per live worker of it (a process or a pipeline's worker thread), as
    full as its CPU use (100% = one core)."""
    workers: dict[Optional[int], list[Optional[float]]] = {}
    for p in snapshot.processes:
        if p.role == "worker" and p.state != "zombie":
            workers.setdefault(p.trainer_pid, []).append(p.cpu_percent)
    for trainer, threads in pipeline_threads(snapshot).items():
        workers.setdefault(trainer, []).extend(t.cpu_percent for t in threads if t.kind == "worker")
    return {trainer: sparkline(cpus) for trainer, cpus in workers.items()}


def trainer_label(snapshot: Snapshot, trainer_pid: int) -> str:
    """``r0 12345`` for a rank, ``12345`` for a trainer without one."""
    trainer = next((p for p in snapshot.processes if p.pid == trainer_pid), None)
    rank = trainer.rank if trainer is not None else None
    return f"r{rank} {trainer_pid}" if rank is not None else str(trainer_pid)


def system_lines(snapshot: Snapshot) -> list:
    s = snapshot.system
    if s is None:
        return ["system figures unavailable"]
    # with what children used between two ticks (workers of short epochs: in no reading of their own)
    busy = sum((p.cpu_percent or 0) + (p.unseen_children_cpu_percent or 0) for p in snapshot.processes) / 100
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
    if not has_gpus(snapshot):
        lines.append(no_gpu_line(snapshot))
    return lines


def has_gpus(snapshot: Snapshot) -> bool:
    return gpus_read(snapshot.gpu_status) and bool(snapshot.gpus)


def no_gpu_line(snapshot: Snapshot) -> str:
    reason = {"no-nvml": "no NVML library", "no-devices": "NVML sees none"}
    return f"GPU  none ({reason.get(snapshot.gpu_status, snapshot.gpu_status)})"


def columns(lines: list, width: int, gap: int = 3) -> list:
    """``lines`` laid out top to bottom in as many columns as ``width`` holds (one at least)."""
    for count in range(len(lines), 1, -1):
        height = math.ceil(len(lines) / count)
        cols = [lines[i : i + height] for i in range(0, len(lines), height)]
        widths = [max(map(len, col)) for col in cols]
        if sum(widths) + gap * (len(cols) - 1) <= width:
            pad = " " * gap
            return [
                pad.join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in zip_longest(*cols, fillvalue="")
            ]
    return list(lines)


def _ms(value: Optional[float]) -> str:
    return NA if value is None else f"{value:.1f}ms"


def gpu_line(gpu, history: list) -> str:
    mine = sum(p.used_memory_bytes or 0 for p in gpu.processes)
    return (
        f"GPU{gpu.index} {percent(gpu.util_percent):>4} {sparkline(history)}\n"
        f"     mem {human_bytes(gpu.mem_used_bytes)}/{human_bytes(gpu.mem_total_bytes)} (job {human_bytes(mine)})"
    )


@functools.lru_cache(maxsize=4096)  # a row's start time, parsed every refresh: the same few strings
def _parse(iso: str) -> datetime:
    return datetime.fromisoformat(iso)

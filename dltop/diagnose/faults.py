"""Faults: a hung worker, a dead worker, ranks restarted, a stalled trainer, and stacks that cannot be read.

These say *which process* is wrong and *where*; they stay silent on healthy jobs: idle
workers, epoch boundaries (workers exit 0 together) and a job killed as a whole are normal.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from dltop.diagnose.window import Window
from dltop.frames import is_dataloader_machinery, user_frame, waits_on_lock
from dltop.model import ENDED, ExitedWorker, Finding, Frame, ProcessSample, Snapshot, is_stuck, sampling_broken
from dltop.model.findings import RANKS_RESTARTED, STACKS_UNAVAILABLE, TRAINER_STALLED, WORKER_DIED, WORKER_HUNG
from dltop.pipelines import input_call
from dltop.settings import Settings
from dltop.units import signal_name

DEADLOCK_FIX = (
    "Do not hold locks or start threads/thread pools in the trainer before the workers fork: create them "
    "lazily inside each worker (worker_init_fn), or use DataLoader(..., multiprocessing_context='forkserver') "
    "(or 'spawn'); and set DataLoader(..., timeout=120) so a stuck worker raises instead of stalling forever."
)
BLOCKED_FIX = (
    "Find why this call blocks (a network or storage read without a timeout, a sleep, a queue); give it a "
    "timeout, and set DataLoader(..., timeout=120) so a stuck worker raises instead of stalling forever."
)
FORK_DEADLOCK = (
    "Under fork a worker inherits every lock the trainer's other threads held at that moment, with no thread left "
    "to release it."
)
SIGNAL_HINTS: dict[int, str] = {
    signal.SIGKILL: "SIGKILL usually means the kernel's OOM killer (see `dmesg`) or a container memory limit: "
    "lower num_workers or per-worker memory (keep dataset metadata in numpy/arrow, not Python lists)",
    signal.SIGBUS: "SIGBUS in a worker usually means /dev/shm is full: raise it (`docker run --shm-size=8g` "
    "or `--ipc=host`) or lower prefetch_factor/num_workers",
    signal.SIGSEGV: "SIGSEGV is a crash in native code called by the dataset (image decoders, OpenCV/OpenMP "
    "used before fork): try multiprocessing_context='spawn' and cv2.setNumThreads(0)",
}


def stacks_unavailable(window: Window, settings: Settings) -> list[Finding]:
    latest = window.latest
    if not sampling_broken(latest.stacks_status):
        return []
    reason = {
        "no-py-spy": "py-spy is not installed",
        "denied": "py-spy may not read this job's memory (ptrace permission)",
    }.get(latest.stacks_status, latest.stacks_status)
    return [
        Finding(
            id=STACKS_UNAVAILABLE,
            severity="warning",
            title="Stacks unavailable: cannot see what workers do or detect hangs",
            detail=f"{reason}. Figures from /proc and NVML still show; data-wait share, activity and "
            "hung-worker detection need stacks.",
            pids=[latest.job.pid],
            evidence={"stacks_status": latest.stacks_status},
            suggestion=latest.stacks_fix or "run dltop as root",
            impact=0.5,
        )
    ]


def worker_hung(window: Window, settings: Settings) -> list[Finding]:
    latest = window.latest
    by_pid = {p.pid: p for p in latest.processes}
    waits = {ld.trainer_pid: ld.data_wait_percent for ld in latest.loaders}
    findings = []
    for worker in latest.processes:
        if worker.role != "worker" or not worker.stack or not is_stuck(worker, settings.hang_after_s):
            continue
        trainer = by_pid.get(worker.trainer_pid) if worker.trainer_pid is not None else None
        if trainer is None or not waits_for_data(trainer, waits.get(trainer.pid), settings):
            continue
        hung = Hung(f"Worker {worker.pid}", "Its main thread", worker.stuck_s or 0.0, worker.stack, [worker.pid],
                    {"pid": worker.pid, "state": worker.state})  # fmt: skip
        findings.append(hung_finding(hung, trainer, FORK_DEADLOCK, (DEADLOCK_FIX, BLOCKED_FIX)))
    return findings


def waits_for_data(
    trainer: ProcessSample, wait_percent: Optional[float], settings: Settings, starting: bool = True
) -> bool:
    """The trainer waits for a batch (or, with ``starting``, for an epoch's first batches)."""
    if trainer.state in ENDED:
        return False
    if trainer.activity != "unknown":
        return trainer.activity == "waiting-for-data" or (starting and trainer.activity == "starting-workers")
    return wait_percent is not None and wait_percent >= settings.trainer_waiting_percent


@dataclass(frozen=True)
class Hung:
    """What is stuck (a worker process, a pipeline's thread), in the words and figures its finding takes."""

    who: str  # "Worker 12", "Worker thread ThreadPoolExecutor-0_1 (tid 4242)"
    whose: str  # the thread whose stack stands still, as the detail names it
    stuck_s: float
    stack: list[Frame]
    pids: list[int]
    evidence: dict[str, Any]


def hung_finding(hung: Hung, trainer: ProcessSample, deadlock_why: str, fixes: tuple[str, str]) -> Finding:
    """worker-hung for what ``hung`` names: its leaf, the user's frame, whether it waits on a lock
    (``deadlock_why`` says how that comes about, ``fixes``: for a deadlock, for a blocked call)."""
    stack, stuck_s = hung.stack, hung.stuck_s
    leaf = stack[-1]
    mine = user_frame(stack) or leaf
    deadlock = waits_on_lock(stack, leaf.code)
    code = f" (`{leaf.code}`)" if leaf.code else ""
    kind = "deadlocked on a lock" if deadlock else "hung"
    return Finding(
        id=WORKER_HUNG,
        severity="error",
        title=f"{hung.who} {kind} for {stuck_s:.0f}s in {mine.function}",
        detail=f"{hung.whose} has kept the same stack without using CPU for {stuck_s:.0f}s, stuck at "
        f"{leaf.where()}{code}, while trainer {trainer.pid} waits for data."
        + (f" The leaf waits on a lock or condition: a deadlock. {deadlock_why}" if deadlock else ""),
        pids=hung.pids,
        evidence={
            **hung.evidence,
            "trainer_pid": trainer.pid,
            "stuck_s": round(stuck_s, 1),
            "stuck_frame": leaf.where(),
            "user_frame": mine.where(),
            "code": leaf.code,
            "deadlock": deadlock,
        },
        suggestion=fixes[0] if deadlock else fixes[1],
        impact=1.0,  # its trainer waits for the batch it holds, for ever
    )


def worker_died(window: Window, settings: Settings) -> list[Finding]:
    latest = window.latest
    findings = []
    for loader in latest.loaders:
        exits = loader.workers_exited
        for gone in exits:
            if gone.cause != "died" or _killed_with_trainer(gone, exits, latest, settings):
                continue
            findings.append(_died_finding(gone, latest))
    return findings


def _killed_with_trainer(gone: ExitedWorker, exits: list[ExitedWorker], latest: Snapshot, settings: Settings) -> bool:
    """Killed at once with its trainer, not a death of its own: kill -9 of the job's group, or
    torchrun's SIGTERM to a rank's group when another rank failed. Every exit around it shares
    its signal (or is unknown), and the job ended with that signal (or unseen), or its trainer
    had ended by the tick the worker was seen gone, with other workers or by SIGTERM (the OOM
    killer's SIGKILL of a lone worker takes its trainer down after it). A death torch reported in
    the trainer's log was not that."""
    if gone.in_trainer_log:
        return False
    around = [e for e in exits if abs(seconds_between(e.gone_at, gone.gone_at)) <= settings.same_event_s]
    if not all(e.exit_code in (gone.exit_code, None) for e in around):
        return False
    with_job = latest.job.state == "exited" and latest.job.exit_code in (gone.exit_code, None)
    with_trainer = not gone.trainer_running and (len(around) > 1 or gone.exit_code == -signal.SIGTERM)
    return with_job or with_trainer


def _died_finding(gone: ExitedWorker, latest: Snapshot) -> Finding:
    code = gone.exit_code
    how = _ending(code, "exited unexpectedly (torch says; its exit status was not seen)")
    hint = SIGNAL_HINTS.get(-code) if code is not None and code < 0 else None
    last = gone.last_stack[-1].where() if gone.last_stack else None
    doing = f" It was last seen {gone.last_activity}" + (f" at {last}." if last else ".")
    after = " The trainer then exited." if latest.job.state == "exited" or not gone.trainer_running else ""
    if gone.in_trainer_log:
        after += " torch reported it in the trainer's log."
    return Finding(
        id=WORKER_DIED,
        severity="error",
        title=f"Worker {gone.pid} {how}",
        detail=f"DataLoader worker {gone.pid} of trainer {gone.trainer_pid} {how} at {gone.gone_at}, "
        f"outside an epoch end (workers leave with 0 there).{doing if gone.last_activity != 'unknown' else ''}"
        f"{after}",
        pids=[gone.pid],
        evidence={
            "pid": gone.pid,
            "trainer_pid": gone.trainer_pid,
            "exit_code": code,
            "signal": signal_name(-code) if code is not None and code < 0 else None,
            "gone_at": gone.gone_at,
            "lived_s": gone.seen_for_s,
            "last_activity": gone.last_activity,
            "last_frame": last,
            "in_trainer_log": gone.in_trainer_log,
        },
        suggestion=hint
        or "Look at the trainer's log for the worker's traceback; torch reports "
        "'DataLoader worker (pid N) exited unexpectedly'.",
        impact=1.0,
    )


def _ending(code: Optional[int], unseen: str) -> str:
    if code is None:
        return unseen
    return f"killed by {signal_name(-code)}" if code < 0 else f"exited with code {code}"


def ranks_restarted(window: Window, settings: Settings) -> list[Finding]:
    """Ranks started again by their launcher. torchrun --max-restarts takes every rank down when
    one fails and starts them all again, one higher in TORCHELASTIC_RESTART_COUNT: the job has
    not exited, but each restart repeats start-up and loses the training since the last
    checkpoint. The evidence is that count: ranks running now with a higher one than ranks of the
    window that ended (a rank that ended while others run, or no rank while torchrun waits for
    other nodes, is no restart). The launcher's log names the rank that failed first; dltop sees
    which ranks went, and their status where it caught it."""
    latest = window.latest
    launcher = latest.job.launcher_pid
    if latest.job.state != "running" or launcher is None:
        return []
    alive = {p.pid: p for p in latest.processes if p.state not in ENDED}
    running = [p for p in alive.values() if p.role == "trainer"]
    starts = [count for count in map(_restart, running) if count is not None]
    if not starts:
        return []
    restart = max(starts)
    went = _ended_before(window, alive, restart)
    if not went:
        return []
    allowed = next((p.placement.max_restarts for p in running if p.placement and p.placement.max_restarts), None)
    listed = "; ".join(f"{_rank_name(p)} {_ending(p.exit_code, 'ended (status not seen)')}" for p in went)
    return [
        Finding(
            id=RANKS_RESTARTED,
            severity="warning",
            title=f"The launcher restarted the ranks (restart {restart}" + (f" of {allowed})" if allowed else ")"),
            detail=f"Ranks of the start before that ended while launcher {launcher} ran on: {listed}. It started "
            f"{len(running)} again: " + ", ".join(_rank_name(p) for p in sorted(running, key=lambda p: p.pid)) + ".",
            pids=[p.pid for p in went],
            evidence={
                "launcher_pid": launcher,
                "ended": [{"pid": p.pid, "rank": p.rank, "exit_code": p.exit_code} for p in went],
                "running": sorted(p.pid for p in running),
                "restart": restart,
                "max_restarts": allowed,
            },
            suggestion="The launcher's log names the rank that failed first with its traceback (torchrun: "
            "'failed (exitcode: N) local_rank: R'). Each restart repeats every rank's start-up and the "
            "training since the script's last checkpoint.",
            impact=0.5,
        )
    ]


def _ended_before(window: Window, alive: dict[int, ProcessSample], restart: int) -> list[ProcessSample]:
    """The trainers of the window no longer running that belonged to an earlier start than
    ``restart``, by rank: a rank that ended beside others of its own start is no restart."""
    ended: dict[int, ProcessSample] = {}
    for tick in window.ticks:
        ended.update({p.pid: p for p in tick.processes if p.role == "trainer" and p.pid not in alive})
    return sorted(
        (p for p in ended.values() if _started_before(p, restart)),
        key=lambda p: (p.rank is None, p.rank, p.pid),
    )


def _restart(trainer: ProcessSample) -> Optional[int]:
    return trainer.placement.restart if trainer.placement is not None else None


def _started_before(trainer: ProcessSample, restart: int) -> bool:
    count = _restart(trainer)
    return count is not None and count < restart


def _rank_name(trainer: ProcessSample) -> str:
    return f"rank {trainer.rank} (pid {trainer.pid})" if trainer.rank is not None else f"trainer {trainer.pid}"


def trainer_stalled(window: Window, settings: Settings) -> list[Finding]:
    latest = window.latest
    workers = [p for p in latest.processes if p.role == "worker" and p.state not in ENDED]
    findings = []
    for trainer in latest.processes:
        if not _stalled_outside_input(trainer, latest, workers, settings):
            continue
        findings.append(_stalled_finding(trainer, [w for w in workers if w.trainer_pid == trainer.pid]))
    return findings


def _stalled_outside_input(
    trainer: ProcessSample, latest: Snapshot, workers: list[ProcessSample], settings: Settings
) -> bool:
    """A trainer stuck past the hang threshold outside its input pipeline, whose workers (processes
    or threads) all wait: the cause is its own call, not the input."""
    if trainer.role != "trainer" or not trainer.stack or trainer.state in ENDED:
        return False
    if not is_stuck(trainer, settings.hang_after_s):
        return False
    if is_dataloader_machinery(trainer.stack) or input_call(trainer.stack) is not None:
        return False  # waiting in its input pipeline: a worker's problem, reported by worker-hung
    mine = [w.activity for w in workers if w.trainer_pid == trainer.pid]
    threads = [t.activity for ld in latest.loaders if ld.trainer_pid == trainer.pid for t in ld.worker_threads]
    return all(a in ("idle", "unknown") for a in mine + threads)


def _stalled_finding(trainer: ProcessSample, mine: list[ProcessSample]) -> Finding:
    stack = trainer.stack or []
    leaf = stack[-1]
    where = user_frame(stack) or leaf
    code = f" (`{leaf.code}`)" if leaf.code else ""
    return Finding(
        id=TRAINER_STALLED,
        severity="warning",
        title=f"Trainer {trainer.pid} stalled {trainer.stuck_s:.0f}s in {where.function} (not the DataLoader)",
        detail=f"Its main thread has kept one stack without using CPU for {trainer.stuck_s:.0f}s, at "
        f"{leaf.where()}{code}; its {len(mine)} workers are idle with batches ready. The input "
        "pipeline is not the cause: look at this call (a collective waiting for another rank, a lock, "
        "I/O).",
        pids=[trainer.pid],
        evidence={
            "pid": trainer.pid,
            "stuck_s": round(trainer.stuck_s or 0.0, 1),  # is_stuck: set
            "stuck_frame": leaf.where(),
            "user_frame": where.where(),
            "code": leaf.code,
            "workers_idle": len(mine),
        },
        suggestion="Do not change the DataLoader for this. If the call is a collective, find the rank "
        "that has not arrived (dltop --pid on each rank; py-spy dump on the others).",
        impact=1.0,
    )


def seconds_between(a: str, b: str) -> float:
    try:
        return (datetime.fromisoformat(a) - datetime.fromisoformat(b)).total_seconds()
    except ValueError:
        return 0.0

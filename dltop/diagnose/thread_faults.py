"""Faults of a thread pipeline's threads, as a worker process's: one stuck while its trainer waits
for data (worker-hung), one gone that nothing replaced while its trainer waits on (worker-died).

The ids are the worker's own: the fault is the same (the batch the trainer waits for never comes),
so the badge, the recorder's incidents and the relations treat it alike. Its ``pids`` is the
trainer's (a thread has no process of its own); the thread is named in its evidence (``tid``,
``thread``). An epoch's reset (torchdata starts new threads) and a pool shut down at the end
(the trainer no longer waits) are no deaths.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from dltop.diagnose.faults import Hung, hung_finding, seconds_between, waits_for_data
from dltop.diagnose.figures import loader_at, processes_by_pid
from dltop.diagnose.threads import thread_named
from dltop.diagnose.window import Window
from dltop.model import Finding, LoaderSample, Snapshot, WorkerThread, is_stuck, judged_stuck
from dltop.model.findings import WORKER_DIED
from dltop.settings import Settings

THREAD_DEADLOCK = (
    "Another thread of the trainer holds that lock and does not release it (locks taken in different orders, or "
    "held across a blocking call)."
)
THREAD_DEADLOCK_FIX = (
    "Find the thread that holds the lock (`dltop dump --pid` shows every thread's stack); take locks in one order "
    "and never hold one across a blocking call; and let the trainer wait with a timeout (queue.get(timeout=...), "
    "future.result(timeout=...)) so a stuck pipeline raises instead of stalling forever."
)
THREAD_BLOCKED_FIX = (
    "Find why this call blocks (a network or storage read without a timeout, a queue nobody fills); give it a "
    "timeout, and let the trainer wait with one too (queue.get(timeout=...), future.result(timeout=...)) so a "
    "stuck pipeline raises instead of stalling forever."
)
THREAD_DIED_FIX = (
    "A thread ends when its function returns or raises: the trainer's stderr holds the traceback "
    "('Exception in thread <name>'). Catch errors in the thread and hand them to the consumer (put the exception "
    "on the queue and raise it in the trainer), and wait with a timeout (queue.get(timeout=...)), so a dead "
    "thread stops the job instead of stalling it."
)


def thread_hung(window: Window, settings: Settings) -> list[Finding]:
    """A pipeline's thread stuck past --hang-after while its trainer waits for data."""
    latest = window.latest
    by_pid = processes_by_pid(latest)
    findings = []
    for loader in latest.loaders:
        trainer = by_pid.get(loader.trainer_pid)
        if trainer is None or not waits_for_data(trainer, loader.data_wait_percent, settings):
            continue
        for thread in loader.worker_threads:
            if not thread.stack or not (judged_stuck(thread) or is_stuck(thread, settings.hang_after_s)):
                continue
            hung = Hung(f"{_first_up(thread_named(thread))} of trainer {trainer.pid}", f"The {thread_named(thread)}",
                        thread.stuck_s or 0.0, thread.stack, [trainer.pid], _evidence(loader, thread))  # fmt: skip
            findings.append(hung_finding(hung, trainer, THREAD_DEADLOCK, (THREAD_DEADLOCK_FIX, THREAD_BLOCKED_FIX)))
    return findings


def thread_died(window: Window, settings: Settings) -> list[Finding]:
    """A pipeline's thread gone for ``thread_gone_s``, none of its kind in its place, while the
    trainer still waits for a batch (not for an epoch's start: torchdata's reset replaces them)."""
    latest = window.latest
    if latest.job.state != "running":
        return []
    by_pid = processes_by_pid(latest)
    findings = []
    for loader in latest.loaders:
        trainer = by_pid.get(loader.trainer_pid)
        if trainer is None or not waits_for_data(trainer, loader.data_wait_percent, settings, starting=False):
            continue
        alive = Counter(t.kind for t in loader.worker_threads)
        peak = _most_alive(window, loader)
        for gone in loader.threads_exited:
            replaced = alive[gone.kind] and alive[gone.kind] >= peak.get(gone.kind, 0)
            since = seconds_between(latest.taken_at, gone.gone_at) if gone.gone_at else None
            if replaced or since is None or since < settings.thread_gone_s:
                continue
            findings.append(_died_finding(loader, gone, since))
    return findings


def _most_alive(window: Window, loader: LoaderSample) -> dict[str, int]:
    """The most threads of each kind the loader had alive at once over the window."""
    peak: Counter[str] = Counter()
    for alive in window.per_tick(_alive_threads, loader.trainer_pid, loader.dataset):
        peak |= alive
    return dict(peak)


def _alive_threads(snap: Snapshot, trainer_pid: int, dataset: Optional[str]) -> Counter[str]:
    loader = loader_at(snap, trainer_pid, dataset)
    return Counter(t.kind for t in loader.worker_threads) if loader is not None else Counter()


def _first_up(text: str) -> str:
    return text[:1].upper() + text[1:]


def _evidence(loader: LoaderSample, thread: WorkerThread) -> dict[str, Any]:
    """The thread a finding is about: its process is the trainer."""
    return {"pid": loader.trainer_pid, "tid": thread.tid, "thread": thread.name, "kind": thread.kind,
            "pipeline": loader.pipeline}  # fmt: skip


def _died_finding(loader: LoaderSample, gone: WorkerThread, since: float) -> Finding:
    last = gone.stack[-1].where() if gone.stack else None
    doing = (
        f" It was last seen {gone.activity}" + (f" at {last}." if last else ".") if gone.activity != "unknown" else ""
    )
    return Finding(
        id=WORKER_DIED,
        severity="error",
        title=f"{_first_up(thread_named(gone))} of trainer {loader.trainer_pid} is gone; the trainer waits on",
        detail=f"Its {thread_named(gone)} went at {gone.gone_at}, {since:.0f}s ago, and no"
        f" thread took its place, while trainer {loader.trainer_pid} still waits for data.{doing}",
        pids=[loader.trainer_pid],
        evidence={
            **_evidence(loader, gone),
            "trainer_pid": loader.trainer_pid,
            "exit_code": None,
            "signal": None,
            "gone_at": gone.gone_at,
            "gone_s": round(since, 1),
            "last_activity": gone.activity,
            "last_frame": last,
        },
        suggestion=THREAD_DIED_FIX,
        impact=1.0,
    )

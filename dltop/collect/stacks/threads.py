"""The threads a trainer's input pipeline runs on (torchdata.nodes' thread mappers, SPDL's executor
and event loop, a user's thread pool): one row each under the trainer
(docs/how-it-works.md#how-stacks-are-sampled).

The trainer's sampling windows sample every thread; per OS thread id a window gives its samples
by stack and its newest one (``ThreadWindow``). Only threads ``dltop.pipelines.thread_kind``
marks are kept, and only for a trainer whose pipeline runs on threads (the sampler asks), so a
DataLoader job reads nothing more. Each tick reads a kept thread's ``/proc/<pid>/task/<tid>/stat``
(its CPU, its comm) and ``schedstat``: whether it ran since its stack was sampled is the
``HangEvidence`` a worker process's main thread has. A thread whose files went is kept a while
as exited: torchdata starts new threads at every epoch.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Optional

from dltop.collect import procfs
from dltop.collect.processes.stats import iso
from dltop.collect.stacks.hangs import HangEvidence, RunStart
from dltop.collect.stacks.pyspy import Stack, ThreadWindow
from dltop.collect.stacks.trainer_time import TRAINER_TIME_HISTORY_S
from dltop.model import Activity, Frame, ThreadKind, WorkerThread
from dltop.pipelines import thread_activity, thread_kind

EXITED_KEEP_S = 60.0  # an exited thread's last row is kept this long...
EXITED_MAX = 64  # ... and at most this many per trainer (an epoch's churn of torchdata's threads)
NAMES_EVERY_S = 10.0  # a dump for the names of threads seen unnamed, at most this often per trainer
JUDGED_MAX = 4096  # distinct stacks whose kind and activity are kept


@dataclass
class _Thread:
    """What is kept of one pipeline thread between ticks."""

    tid: int
    kind: ThreadKind
    stack: Stack
    comm: Optional[str] = None
    windows: deque[tuple[float, int, int]] = field(default_factory=deque)  # (ended, samples, busy), newest last
    hang: HangEvidence = field(default_factory=HangEvidence)
    began: Optional[RunStart] = None  # its reading at the last tick: a window's samples were taken since
    cpu: Optional[tuple[float, int]] = None  # (clock, CPU ticks) of the last reading
    cpu_percent: Optional[float] = None


class PipelineThreads:
    """One trainer's pipeline threads: fed by its windows (``add_window``) and dumps (``named``),
    read from /proc every tick (``read``), listed as rows (``rows``, ``exited``)."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}  # tid -> Python's name, from py-spy
        self.names_asked_at: Optional[float] = None  # when a dump for names was last started
        self._threads: dict[int, _Thread] = {}
        self._exited: deque[tuple[float, WorkerThread]] = deque()  # (clock when seen gone, its last row)
        self._judged: dict[Stack, tuple[Optional[ThreadKind], Activity]] = {}

    def named(self, names: dict[int, str]) -> None:
        """Python's names of the trainer's threads (a dump's, or a record window's)."""
        self.names.update({tid: name for tid, name in names.items() if name})

    def add_window(self, others: dict[int, ThreadWindow], now: float) -> None:
        """A window of the trainer's other threads that ended ``now``: each pipeline thread's
        samples (busy: not idle) and newest stack, which is evidence for its hang since the
        reading of the tick before (its samples were taken since)."""
        for tid, window in others.items():
            if window.name:
                self.names[tid] = window.name
            kinds = {self._judge(stack)[0] for stack in window.counts}
            kind: Optional[ThreadKind] = "worker" if "worker" in kinds else "feeder" if "feeder" in kinds else None
            thread = self._threads.get(tid)
            if thread is None and kind is None:
                continue
            if thread is None:
                thread = self._threads[tid] = _Thread(tid, kind or "feeder", window.newest)
            elif thread.began is not None:
                thread.hang.add_dump(window.newest == thread.stack, thread.began)
            thread.kind = "worker" if kind == "worker" else thread.kind
            thread.stack = window.newest
            busy = sum(count for stack, count in window.counts.items() if self._judge(stack)[1] != "idle")
            thread.windows.append((now, sum(window.counts.values()), busy))
            while now - thread.windows[0][0] > TRAINER_TIME_HISTORY_S:
                thread.windows.popleft()

    def read(
        self, pid: int, now: float, wall: float, schedstats: Optional[dict[int, tuple[int, int, int]]] = None
    ) -> None:
        """Each kept thread's CPU since the last tick and whether it ran (its schedstat from
        ``schedstats`` where this tick read it already); one whose files went
        (``/proc/<pid>/task/<tid>`` no longer there) is exited from ``wall``."""
        for tid, thread in list(self._threads.items()):
            try:
                stat = procfs.read_thread_stat(pid, tid)
                run_ns, _, slices = (schedstats or {}).get(tid) or procfs.read_thread_schedstat(pid, tid)
            except (FileNotFoundError, ProcessLookupError):
                del self._threads[tid]
                self._exited.append((now, self._row(thread, gone_at=iso(wall))))
                continue
            except (OSError, ValueError, IndexError):
                continue  # another user's trainer: its stacks still show
            if thread.cpu is not None and now > thread.cpu[0]:
                used_s = (stat.cpu_ticks - thread.cpu[1]) / procfs.CLOCK_TICKS
                thread.cpu_percent = max(0.0, used_s / (now - thread.cpu[0]) * 100)
            thread.cpu, thread.comm = (now, stat.cpu_ticks), stat.comm
            thread.hang.read(run_ns, slices, now)
            thread.began = thread.hang.began(now, wall)
        while self._exited and (now - self._exited[0][0] > EXITED_KEEP_S or len(self._exited) > EXITED_MAX):
            self._exited.popleft()

    def wants_names(self, now: float) -> bool:
        """A kept thread has no Python name yet (Austin's samples give none) and no dump was
        asked for names in the last ``NAMES_EVERY_S``."""
        asked = self.names_asked_at
        return (asked is None or now - asked >= NAMES_EVERY_S) and any(t not in self.names for t in self._threads)

    def stacks(self) -> list[list[Frame]]:
        """The newest stack of each kept thread (what names their pipeline), without their rows."""
        return [list(thread.stack) for thread in self._threads.values()]

    def rows(self) -> list[WorkerThread]:
        """The pipeline's threads now: workers first, then feeders, each by tid."""
        threads = sorted(self._threads.values(), key=lambda t: (t.kind != "worker", t.tid))
        return [self._row(thread) for thread in threads]

    def exited(self) -> list[WorkerThread]:
        """Its threads seen and gone in the last ``EXITED_KEEP_S`` (the newest ``EXITED_MAX``), oldest first."""
        return [row for _, row in self._exited]

    def _row(self, thread: _Thread, gone_at: Optional[str] = None) -> WorkerThread:
        """A thread's row: its activity is its newest stack's (``stuck`` is the collector's
        verdict); ``stuck_s`` counts only for a thread that is not idle."""
        activity = self._judge(thread.stack)[1]
        samples = sum(s for _, s, _ in thread.windows)
        return WorkerThread(
            tid=thread.tid,
            name=self.names.get(thread.tid) or thread.comm,
            kind=thread.kind,
            activity=activity,
            cpu_percent=thread.cpu_percent,
            busy_percent=100.0 * sum(b for _, _, b in thread.windows) / samples if samples else None,
            stack=list(thread.stack),
            stuck_s=thread.hang.stuck_s if activity != "idle" else None,
            gone_at=gone_at,
        )

    def _judge(self, stack: Stack) -> tuple[Optional[ThreadKind], Activity]:
        """(kind, activity) of a stack, worked out once: a thread repeats a handful."""
        judged = self._judged.get(stack)
        if judged is None:
            if len(self._judged) >= JUDGED_MAX:
                self._judged.clear()
            judged = self._judged[stack] = (thread_kind(list(stack)), thread_activity(list(stack)))
        return judged

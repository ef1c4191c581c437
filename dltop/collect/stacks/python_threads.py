"""The CPU a trainer's Python threads beside its main one use (a queue's feeder, pin memory, a
logger, a thread pool): what of its CPU is not intra-op work, which ``OMP_NUM_THREADS`` cuts.

Its stack samples name every thread that runs Python (Austin's lines carry each one's OS thread
id); each tick reads those threads' ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds on a CPU).
A thread is counted from its second reading; one whose file went is forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Optional

from dltop.collect import procfs

MAX_THREADS = 256  # threads read per trainer and tick, at most (a pool of hundreds costs its reads)


class PythonThreads:
    """One trainer's Python threads beside its main one: named by its samples (``saw``), their
    CPU read every tick (``read``)."""

    def __init__(self) -> None:
        self._last: dict[int, Optional[tuple[float, int]]] = {}  # tid -> (clock, run ns) of its last reading
        self.cpu_percent: Optional[float] = None  # all of them, 100 = one core, since the tick before
        self._fed = False  # samples came: no thread named is none
        self.schedstats: dict[
            int, tuple[int, int, int]
        ] = {}  # tid -> this tick's schedstat (a pipeline's threads reuse it)

    def saw(self, tids: Iterable[int]) -> None:
        """Threads a window of its samples showed running Python (its main thread excluded by the caller)."""
        self._fed = True
        for tid in tids:
            if len(self._last) >= MAX_THREADS:
                return
            self._last.setdefault(tid, None)

    def read(self, pid: int, now: float) -> None:
        """Their CPU since the tick before, of the threads read both times: 0 where its samples named
        none, None where none was read twice yet."""
        used_ns, spans = 0, []
        self.schedstats = {}
        for tid, last in list(self._last.items()):
            try:
                self.schedstats[tid] = procfs.read_thread_schedstat(pid, tid)
            except (FileNotFoundError, ProcessLookupError):
                del self._last[tid]
                continue
            except (OSError, ValueError, IndexError):
                continue  # another user's trainer
            run_ns = self.schedstats[tid][0]
            if last is not None and now > last[0]:
                used_ns += max(0, run_ns - last[1])
                spans.append(now - last[0])
            self._last[tid] = (now, run_ns)
        none = self._fed and not self._last
        self.cpu_percent = used_ns / 1e9 / max(spans) * 100 if spans else 0.0 if none else None

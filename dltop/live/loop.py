"""One job's live loop: collector ticks, a rolling window, findings decided once.

Every sink reads what this yields: the TUI, ``dltop snapshot``, the recorder and the exporter.
None of them reads /proc or runs py-spy itself, so watching a job costs the same whichever sinks
are attached. No textual, no torch.

More: docs/how-it-works.md#one-live-loop-many-sinks.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import threading
import time
from collections import deque
from typing import Callable, Iterator, Optional

from dltop.collect.stacks.budget import LIVE_VIEW, Watcher
from dltop.diagnose import diagnose, pending, relate
from dltop.diagnose.stable import StableFindings
from dltop.diagnose.window import MemoryReadings, ShownAdvice
from dltop.live.last_view import last_view
from dltop.live.report import summarize
from dltop.live.schedule import FRAME_S, WINDOW_S, ticks, ticks_in_window
from dltop.model import Finding, Pending, Snapshot
from dltop.model.findings import INPUT_BOUND
from dltop.settings import DEFAULTS, Settings

# objects allocated (net) between young collections: Python's 700 made a live view collect about
# once a second at ~0.3 ms each, plus an older-generation pass every ten (~1.3 ms); a tick's
# objects mostly die together, so collecting after 10 000 finds as much for ~40 % of the CPU
YOUNG_COLLECTION_AFTER = 10_000


class LiveLoop:
    """A collector's ticks, diagnosed over a rolling window, with findings held steady for views.

    ``step`` returns the tick's Snapshot with the findings a live view shows (raised after they
    held a few seconds, kept a while after they clear: no flicker); ``report`` folds the window
    into one Snapshot judged as a whole (``dltop snapshot``).
    """

    def __init__(
        self,
        collector,
        settings: Optional[Settings] = None,
        window_ticks: Optional[int] = ticks_in_window(FRAME_S),
        clock: Callable[[], float] = time.monotonic,
        judge_every_tick: bool = True,
    ) -> None:
        """``window_ticks`` None keeps every tick (a report over a fixed duration);
        ``judge_every_tick`` False leaves ticks without findings until ``report``."""
        self.collector = collector
        self.judge_every_tick = judge_every_tick
        self.settings = settings or collector.settings
        self.window: deque = deque(maxlen=window_ticks)
        self.memory = MemoryReadings()  # longer than the window: USS is re-read within a budget
        self._stable = StableFindings()
        self._advice: dict[tuple[int, str], ShownAdvice] = {}  # (trainer pid, dataset) -> num_workers shown
        self._clock = clock
        self.latest: Optional[Snapshot] = None

    @property
    def pid(self) -> int:
        return self.collector.tree.root_pid

    def step(self, final: bool = False) -> Snapshot:
        """One tick. ``final``: let py-spy runs under way finish and re-read every USS first, so a
        report ending here has the newest stacks and memory."""
        if final:
            self.collector.settle()
        snap = self.collector.tick(full_memory=final)
        if not self.window:
            settle_gc()
        self.window.append(snap)
        self.memory.add(snap)
        if self.judge_every_tick:
            ticks, now = list(self.window), self._clock()
            raw = diagnose(ticks, self.settings, related=False, shown_advice=self._advice, memory=self.memory)
            shown = relate(self._stable.update(now, raw))
            self._hold_advice(shown, snap.taken_at)
            held = [
                Pending(f.id, f"{f.title}; shown once it holds {self._stable.raise_after_s:g} s", round(ready, 1), True)
                for f, ready in self._stable.held(now)
                if f.severity != "info"  # an info finding never changes the verdict
            ]
            snap = dataclasses.replace(snap, findings=shown, pending=pending(ticks, self.settings, self.memory) + held)
        if snap.job.state == "exited" and self.latest is not None and self.latest.job.state != "exited":
            snap = last_view(self.latest, snap)  # judge nothing anew from processes that are gone
        self.latest = snap
        return self.latest

    def _hold_advice(self, shown: list[Finding], taken_at: str) -> None:
        """Remember the num_workers each loader was shown more of, when it changed and why (the rules
        keep it while the evidence stays within its noise); forget it once no such advice shows."""
        advised: set[tuple[int, str]] = set()
        for finding in shown:
            evidence = finding.evidence
            workers, now = evidence.get("suggested_workers"), evidence.get("num_workers")
            if finding.id != INPUT_BOUND or workers is None or now is None or workers <= now:
                continue  # no count to add workers to: nothing to hold
            key = (evidence["trainer_pid"], evidence.get("dataset") or "")
            advised.add(key)
            before = self._advice.get(key)
            if before is None or before.workers != workers:
                previous = before.workers if before is not None else None
                self._advice[key] = ShownAdvice(workers, taken_at, previous, evidence.get("change_reason"))
        for key in set(self._advice) - advised:
            del self._advice[key]

    def report(self) -> Snapshot:
        """The window as one Snapshot, its findings judged over the whole window (not held)."""
        ticks = list(self.window)
        return dataclasses.replace(
            summarize(ticks),
            findings=diagnose(ticks, self.settings, memory=self.memory),
            pending=pending(ticks, self.settings, self.memory),
        )

    def run(self, interval_s: float, stop: Optional[threading.Event] = None) -> Iterator[Snapshot]:
        """Snapshots every ``interval_s`` (on the schedule) until the job exits (its last Snapshot
        is yielded) or ``stop`` is set."""
        for _ in ticks(interval_s, stop, self._clock):
            snap = self.step()
            yield snap
            if snap.job.state == "exited":
                return

    def watch(self, pid: Optional[int]) -> None:
        """The process a person is looking at gets a fresh (non-blocking) stack every tick."""
        self.collector.watch(pid)

    def share_budget(self, share: float) -> None:
        """This job's part (0-1) of one live view's stack budget: a node watcher splits it between jobs."""
        self.collector.share_budget(share)

    def members(self) -> set[int]:
        """Every pid of the job now (its launcher, trainers, workers and helpers)."""
        return set(self.collector.tree.members)

    def log_tail(self, trainer_pid: int) -> str:
        """The newest lines the trainer wrote to its log file, where it writes to one."""
        return self.collector.logs.tail(trainer_pid)

    def close(self) -> None:
        self.collector.close()


def open_loop(
    pid: int,
    settings: Settings = DEFAULTS,
    stacks: bool = True,
    show_secrets: bool = False,
    watcher: Watcher = LIVE_VIEW,
    **loop_options,
) -> LiveLoop:
    """Attach to the job ``pid`` belongs to (DltopError if none). ``show_secrets``: command lines
    whole (the caller checked the user owns the job); else redacted. ``watcher``: who the stack
    sampler's budget is spent for (a snapshot's few seconds buy more samples)."""
    from dltop.collect.collector import Collector

    collector = Collector(pid, stacks=stacks, settings=settings, show_secrets=show_secrets, keep_ended_s=WINDOW_S)
    collector.stacks.watcher = watcher
    return LiveLoop(collector, **loop_options)


@functools.cache  # once a process: its start-up happens once
def settle_gc() -> None:
    """A watcher runs for hours: what its start-up made (imports, Textual, the first tick's
    caches) lives as long as it does, so it is frozen out of every later collection (a full
    collection otherwise rescans it all), and young objects are collected less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_AFTER, *gc.get_threshold()[1:])

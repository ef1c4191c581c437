"""Where the app's Snapshots come from: a live job (collector + diagnosis with stable findings)
or a recording (tests, screenshots). ``next()`` may block on /proc reads: the app calls it
from a worker thread, never from the UI thread."""

from __future__ import annotations

import dataclasses
import time
from collections import deque

from dltop.diagnose import Settings, diagnose
from dltop.diagnose.stable import StableFindings
from dltop.model import Snapshot

WINDOW_TICKS = 120  # ticks the live diagnosis looks back over


class LiveSource:
    """A collector's ticks, diagnosed over a rolling window; findings held steady (no flicker)."""

    def __init__(self, collector, hang_after_s: float = 20.0) -> None:
        self.collector = collector
        self.pid = collector.tree.root_pid
        self.settings = Settings(hang_after_s=hang_after_s)
        self._window: deque = deque(maxlen=WINDOW_TICKS)
        self._stable = StableFindings()

    def next(self) -> Snapshot:
        snap = self.collector.tick()
        self._window.append(snap)
        found = self._stable.update(time.monotonic(), diagnose(list(self._window), self.settings))
        return dataclasses.replace(snap, findings=found)

    def watch(self, pid) -> None:
        """The process the user is looking at gets a fresh (non-blocking) stack every tick."""
        if self.collector.stacks is not None:
            self.collector.stacks.requested = {pid} if pid else set()

    def close(self) -> None:
        self.collector.close()


class RecordedSource:
    """Snapshots played back in order; the last one repeats (a finished recording holds still)."""

    def __init__(self, snapshots: list) -> None:
        self._snapshots = list(snapshots)
        self._index = 0
        self.pid = self._snapshots[0].job.pid if self._snapshots else 0

    def next(self) -> Snapshot:
        snap = self._snapshots[min(self._index, len(self._snapshots) - 1)]
        self._index += 1
        return snap

    def watch(self, pid) -> None:
        pass

    def close(self) -> None:
        pass


def open_live(pid: int, hang_after_s: float = 20.0, stacks: bool = True) -> LiveSource:
    from dltop.collect.collector import Collector

    return LiveSource(Collector(pid, stacks=stacks, hang_after_s=hang_after_s), hang_after_s)

"""Where the app's Snapshots come from. A Source has ``step() -> Snapshot`` (may block on /proc
reads: the app calls it from a worker thread, never the UI thread), ``watch(pid)`` and
``close()``. A live job is ``dltop.live.LiveLoop``; this module holds the recorded one."""

from __future__ import annotations

from dltop.model import Snapshot


class RecordedSource:
    """Snapshots played back in order; the last one repeats (a finished recording holds still)."""

    def __init__(self, snapshots: list) -> None:
        self._snapshots = list(snapshots)
        self._index = 0
        self.pid = self._snapshots[0].job.pid if self._snapshots else 0

    def step(self) -> Snapshot:
        snap = self._snapshots[min(self._index, len(self._snapshots) - 1)]
        self._index += 1
        return snap

    def watch(self, pid) -> None:
        pass

    def close(self) -> None:
        pass

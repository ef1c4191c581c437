"""Every training job on this node, one live loop each: the exporter's source.

Jobs are found the way ``dltop jobs`` finds them, again every ``discover_every_s``; a new job
gets a ``LiveLoop`` of its own, an exited one is reported once more (its last Snapshot, state
``exited``) and dropped. One stack budget is split between the jobs, and its floors are the
node's (``budget.NODE``: it holds as trainers multiply, where a live view keeps 3 Hz for every
trainer), so watching a node costs about what watching one small job does. No textual, no torch.

More: docs/how-it-works.md#one-live-loop-many-sinks.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from dltop.collect.host.gpu import GpuSampler
from dltop.collect.processes.discovery import Discovery, find_jobs
from dltop.collect.stacks.budget import NODE
from dltop.collect.stacks.pyspy import reap_killed
from dltop.errors import DltopError
from dltop.live.loop import LiveLoop
from dltop.live.schedule import FRAME_S, WINDOW_S, ticks, ticks_in_window
from dltop.model import sampling_broken
from dltop.settings import Settings

DISCOVER_EVERY_S = 10.0


@dataclass
class NodeTick:
    """One pass over the node: the newest Snapshot of every job followed (exited ones once more)."""

    snapshots: list = field(default_factory=list)  # dltop.model.Snapshot, one per job
    started: list = field(default_factory=list)  # root pids of jobs followed from this pass on
    ended: list = field(default_factory=list)  # root pids of jobs that exited and are dropped
    failures: dict = field(default_factory=dict)  # root pid -> why a job could not be followed
    took_s: float = 0.0  # wall time of the pass: discovery and every job's tick


class NodeWatcher:
    """Follows every job on the node; ``step()`` ticks them all once."""

    def __init__(
        self,
        settings: Optional[Settings] = None,
        stacks: bool = True,
        discover_every_s: float = DISCOVER_EVERY_S,
        gpu: Optional[GpuSampler] = None,
        clock: Callable[[], float] = time.monotonic,
        loop_factory: Optional[Callable[[int], LiveLoop]] = None,
        window_ticks: int = ticks_in_window(FRAME_S),
    ) -> None:
        """``window_ticks``: ticks each job's diagnosis looks back over (a watcher ticking less
        often than a live view keeps fewer, so rules judge the same span of time)."""
        self.settings = settings or Settings()
        self.window_ticks = window_ticks
        self.stacks = stacks
        self.discover_every_s = discover_every_s
        self.gpu = gpu if gpu is not None else GpuSampler()
        self._clock = clock
        self._loop_factory = loop_factory or self._open
        self._discovery = Discovery()
        self._discovered_at: Optional[float] = None
        self.loops: dict[int, LiveLoop] = {}  # root pid -> its live loop
        self._stacks_status: dict[int, str] = {}  # root pid -> its stack sampling's last status

    def _open(self, pid: int) -> LiveLoop:
        from dltop.collect.collector import Collector

        collector = Collector(pid, gpu=self.gpu, stacks=self.stacks, settings=self.settings, keep_ended_s=WINDOW_S)
        collector.stacks.watcher = NODE  # all day on every node: the budget holds, the floors give way
        return LiveLoop(collector, self.settings, window_ticks=self.window_ticks)

    def step(self) -> NodeTick:
        tick = NodeTick()
        now = self._clock()
        if self._discovered_at is None or now - self._discovered_at >= self.discover_every_s:
            self._discovered_at = now
            self._discover(tick)
        share = 1.0 / max(1, len(self.loops))
        for root, loop in list(self.loops.items()):
            loop.share_budget(share)
            try:
                snap = loop.step()
            except Exception as error:  # noqa: BLE001 - one job's trouble must not stop the others
                tick.failures[root] = f"collection failed: {error}"
                self._drop(root, tick)
                continue
            tick.snapshots.append(snap)
            self._note_stacks(root, snap.stacks_status, tick)
            if snap.job.state == "exited":
                self._drop(root, tick)
        reap_killed()  # runs of the jobs dropped in this pass that outlived their kill (no job may tick after)
        tick.took_s = self._clock() - now
        return tick

    def run(self, interval_s: float, stop: threading.Event, sink: Callable[[NodeTick], None]) -> None:
        """``sink(tick)`` every ``interval_s`` until ``stop`` is set, on the schedule (no drift)."""
        for _ in ticks(interval_s, stop, self._clock):
            sink(self.step())

    def close(self) -> None:
        for root in list(self.loops):
            self.loops.pop(root).close()

    def _discover(self, tick: NodeTick) -> None:
        followed = {pid for loop in self.loops.values() for pid in loop.members()}
        for tree in find_jobs(self.gpu.holders(), self._discovery, skip=followed):
            try:
                self.loops[tree.root_pid] = self._loop_factory(tree.root_pid)
            except DltopError as error:  # it ended, or is not a job after all, since the scan
                tick.failures[tree.root_pid] = str(error)
                continue
            tick.started.append(tree.root_pid)

    def _note_stacks(self, root: int, status: str, tick: NodeTick) -> None:
        """A job whose stack sampling broke (py-spy denied, failing, missing) is a failed collection,
        counted once each time it breaks: its figures still come, its data wait and hangs do not."""
        if sampling_broken(status) and not sampling_broken(self._stacks_status.get(root, "ok")):
            tick.failures[root] = f"stacks: {status}"
        self._stacks_status[root] = status

    def _drop(self, root: int, tick: NodeTick) -> None:
        self._stacks_status.pop(root, None)
        self.loops.pop(root).close()
        tick.ended.append(root)

    def latest(self) -> list:
        """The newest Snapshot of every job followed now."""
        return [loop.latest for loop in self.loops.values() if loop.latest is not None]

"""Trainer time: where a trainer's main thread spends its time, from windows of its samples
(docs/how-it-works.md#how-stacks-are-sampled).

Each window (an Austin stream's samples since the last tick, or a ``py-spy record`` window) is
judged sample by sample in time order (``dltop.frames.trainer_phases``: waiting for data,
collating, starting workers, running the step) and kept for ``TRAINER_TIME_HISTORY_S``; the
phases over those windows are ``TrainerTime``, and the newest window's commonest phase is what
the trainer is doing.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Optional

from dltop import frames as stackframes
from dltop.model import PHASES, Frame, Phase, Pipeline, TrainerTime
from dltop.pipelines import input_call
from dltop.settings import DEFAULTS

TRAINER_TIME_HISTORY_S = 30.0
WAITED: frozenset[Phase] = frozenset({"waiting-for-data", "collating"})  # the data wait's phases
# torch rebuilding a worker's tensors in the trainer as it unpickles a batch (its default
# file-descriptor sharing makes a handshake with the worker for each storage): inside the wait, but
# a cost of each batch that more workers shorten only by its wait for the worker's GIL
# (capacity.receiving)
REBUILD = "torch/multiprocessing/reductions.py"


@dataclass(frozen=True)
class TrainerWindow:
    began: float
    ended: float
    phases: Counter[Phase]  # phase -> main-thread samples
    stacks: Counter[tuple[Frame, ...]]  # frames -> main-thread samples
    flips: int = 0  # neighbouring samples of which one waited for data and the other not
    pairs: int = 0  # neighbouring samples
    receiving: int = 0  # samples waiting for data that were rebuilding the batch's tensors
    handling: int = 0  # samples waiting for data that were handling a worker's batch (receiving among them)

    @property
    def samples(self) -> int:
        return sum(self.phases.values())


@dataclass
class TrainerSamples:
    """A trainer's main-thread samples over the last ``history_s``, and what its samples showed of
    its DataLoader."""

    windows: deque[TrainerWindow] = field(default_factory=deque)  # newest last
    # how long windows are kept: a live view's recent past; None, a snapshot's whole watch (the
    # figures it reports are over all of it, and a longer watch than the history narrows nothing)
    history_s: Optional[float] = TRAINER_TIME_HISTORY_S
    windows_done: int = 0
    in_epoch_start: bool = False  # the last sample was in an epoch's start-up
    pin_thread: Optional[bool] = None  # a thread of the last window ran _pin_memory_loop
    worker_loader: bool = False  # seen inside a DataLoader iterator with worker processes
    first_pipeline: Optional[Pipeline] = None  # the pipeline its first stacks were seen in, before any window
    _pipelines: dict[tuple[Frame, ...], Optional[Pipeline]] = field(default_factory=dict)  # stack -> its pipeline

    def add(
        self,
        samples: list[tuple[Frame, ...]],
        others: set[tuple[Frame, ...]],
        began: float,
        now: float,
        starting: Optional[list[bool]],
    ) -> None:
        """``samples``: the main thread's, in time order, from ``began`` to ``now``; ``others``: the
        distinct stacks of its other threads (the pin-memory thread's among them); ``starting``:
        per sample, whether one of its workers was still starting then (``workers_starting``)."""
        self.pin_thread = any(stackframes.has_pin_memory_loop(list(s)) for s in others | set(samples))
        self.saw(set(samples))
        phases, self.in_epoch_start = stackframes.trainer_phases(samples, self.in_epoch_start, starting)
        waited = [phase in WAITED for phase in phases]
        flips = sum(a != b for a, b in zip(waited, waited[1:]))
        waits = Counter(s for s, p in zip(samples, phases) if p == "waiting-for-data")
        receiving = sum(n for s, n in waits.items() if rebuilding(s))
        handling = sum(n for s, n in waits.items() if stackframes.handles_batch(list(s)))
        pairs = max(0, len(waited) - 1)
        self.windows.append(
            TrainerWindow(began, now, Counter(phases), Counter(samples), flips, pairs, receiving, handling)
        )
        self.windows_done += 1
        while self.windows and self.history_s is not None and now - self.windows[0].ended > self.history_s:
            self.windows.popleft()

    def saw(self, stacks: set[tuple[Frame, ...]]) -> None:
        """Main-thread stacks (a window's, or a dump's)."""
        self.worker_loader = self.worker_loader or any(stackframes.uses_worker_processes(list(s)) for s in stacks)
        if self.first_pipeline is None:
            self.first_pipeline = next((p for s in stacks if (p := self._pipeline_of(s))), None)

    def pipeline(self) -> Optional[Pipeline]:
        """The input pipeline the main thread waited on in most samples of its windows, else
        the one its first stacks showed; None where none was seen."""
        waits: Counter[Pipeline] = Counter()
        for window in self.windows:
            for stack, count in window.stacks.items():
                if (pipeline := self._pipeline_of(stack)) is not None:
                    waits[pipeline] += count
        return waits.most_common(1)[0][0] if waits else self.first_pipeline

    def _pipeline_of(self, stack: tuple[Frame, ...]) -> Optional[Pipeline]:
        if stack not in self._pipelines:
            if len(self._pipelines) > 4096:
                self._pipelines.clear()
            call = input_call(list(stack))
            self._pipelines[stack] = call.pipeline if call else None
        return self._pipelines[stack]

    def time(self) -> Optional[TrainerTime]:
        if not self.windows:
            return None
        phases: Counter[Phase] = Counter()
        for window in self.windows:
            phases.update(window.phases)
        total = sum(phases.values())
        if not total:
            return None
        flips = sum(w.flips for w in self.windows)
        pairs = sum(w.pairs for w in self.windows)
        share = sum(phases[p] for p in WAITED) / total
        blocks = [(w.samples, sum(w.phases[p] for p in WAITED)) for w in self.windows]
        return TrainerTime(
            samples=total,
            window_s=self.windows[-1].ended - self.windows[0].began,
            **{name: 100.0 * phases[phase] / total for phase, name in PHASES.items()},
            effective_samples=min(effective_samples(total, share, flips, pairs), between_windows(blocks)),
            receiving_percent=100.0 * sum(w.receiving for w in self.windows) / total,
            handling_percent=100.0 * sum(w.handling for w in self.windows) / total,
        )

    def activity(self, stack: tuple[Frame, ...]) -> Phase:
        """The newest window's commonest phase; before any window, its first-sight dump's."""
        latest = self.windows[-1] if self.windows else None
        if latest and latest.samples:
            return latest.phases.most_common(1)[0][0]
        return stackframes.trainer_phase(list(stack))


def rebuilding(stack: tuple[Frame, ...]) -> bool:
    """The main thread is rebuilding tensors a worker sent (``REBUILD``)."""
    return any(frame.file.endswith(REBUILD) for frame in stack)


def effective_samples(samples: int, share: float, flips: int, pairs: int) -> float:
    """The independent samples ``samples`` are worth: a 0/1 series whose neighbours differ in
    ``flips`` of ``pairs`` has lag-1 autocorrelation rho = 1 - flips / (pairs 2 p (1 - p)) (a
    two-state chain's), and n (1 - rho) / (1 + rho) effective samples. A series that never changes
    tells nothing of its runs: it counts in full (the error's floor covers it)."""
    spread = 2 * share * (1 - share)
    if not pairs or not spread:
        return float(samples)
    rho = min(max(1 - flips / pairs / spread, 0.0), DEFAULTS.max_autocorrelation)
    return samples * (1 - rho) / (1 + rho)


def between_windows(blocks: list[tuple[int, int]]) -> float:
    """The independent samples windows of (samples, waited) are worth by how their waits differ
    (batch means): p (1 - p) over the variance of the overall share, read from the windows' spread
    about it. It sees what neighbouring samples cannot: samples at a fixed interval near a simple
    ratio of a periodic step's period visit a few of its phases, so a window's share strays far
    and its neighbours still differ. Infinite (no evidence) under ``min_error_windows`` windows or for a
    share that never changes."""
    total, waited = sum(n for n, _ in blocks), sum(w for _, w in blocks)
    share = waited / total if total else 0.0
    if len(blocks) < DEFAULTS.min_error_windows or not 0 < share < 1:
        return math.inf
    k = len(blocks)
    variance = k / (k - 1) * sum((w - share * n) ** 2 for n, w in blocks) / total**2
    return share * (1 - share) / variance if variance > 0 else math.inf


def workers_starting(
    intervals: list[tuple[float, Optional[float]]], count: int, began: float, rate: float
) -> Optional[list[bool]]:
    """Per sample of a window: was one of this trainer's workers still starting then (between one
    of ``intervals``' start and ready)? Samples are ``1/rate`` apart from the window's start."""
    if not intervals:
        return None
    times = [began + (i + 0.5) / max(rate, 1) for i in range(count)]
    return [any(start <= t and (ready is None or t < ready) for start, ready in intervals) for t in times]

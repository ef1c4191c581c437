"""Hang evidence: how long a process's main-thread stack has provably stayed the same without CPU
(docs/how-it-works.md#how-stacks-are-sampled).

Its schedstat (CPU time and timeslice count, read every tick) proves what no sample can: a main
thread that has not been scheduled since a dump still has that dump's stack, so a hung process
costs one dump and its ``stuck_s`` keeps growing for free. A streak is the same stack while the
thread used under ``STUCK_CPU_SHARE`` of a core and woke at most ``STUCK_WAKEUPS_PER_S``; a worker
quiet for ``SUSPECT_QUIET_S`` after working is a hang to confirm, worth a dump at once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional

from dltop.frames import worker_activity
from dltop.model import Frame

# Quiet this long after working: worth a dump at once. Workers between batches are quiet for less;
# a hang's stuck time still counts from the moment it went quiet (its stack is proven since then).
SUSPECT_QUIET_S = 3.0
IDLE_WAKE_NS = 5_000_000  # CPU an idle worker may use between dumps and still be idle
STUCK_CPU_SHARE = 0.01  # a main thread using less than this share of a core is not running
# ... nor one that wakes more often than this: a worker reading slow storage in small blocking
# reads has the same stack and no CPU, but is scheduled tens of times a second; a hung one never
# is (a timed wait in a loop wakes once every few seconds)
STUCK_WAKEUPS_PER_S = 1.0


@dataclass(frozen=True)
class RunStart:
    """What was known of the main thread when a dump or a sampling window began: its stack, once
    sampled, has been current at least since ``at`` (since ``quiet_since`` when that is set)."""

    at: float  # monotonic
    wall: float  # time.time()
    run_ns: int
    slices: Optional[int]
    quiet_since: Optional[float]


@dataclass
class HangEvidence:
    """A process's main thread: its newest schedstat reading, and the streak of its stack."""

    run_ns: int = 0  # main-thread CPU, newest reading
    slices: Optional[int] = None  # main-thread timeslices, newest reading
    seen_at: Optional[float] = None  # when read (monotonic)
    quiet_since: Optional[float] = None  # main thread has not run since then
    slices_at_stack: Optional[int] = None  # main-thread timeslices when the newest dump began
    streak_since: Optional[float] = None  # the stack unchanged, without CPU, since then (monotonic)
    streak_run_ns: int = 0
    streak_slices: int = 0
    confirmed_at: Optional[float] = None  # the stack was last known current then

    @property
    def stuck_s(self) -> Optional[float]:
        if self.streak_since is None or self.confirmed_at is None:
            return None
        return max(0.0, self.confirmed_at - self.streak_since)

    @property
    def ran_since_stack(self) -> bool:
        """Scheduled since its newest dump began: that stack may have changed."""
        return self.slices != self.slices_at_stack

    def began(self, at: float, wall: float) -> RunStart:
        return RunStart(at, wall, self.run_ns, self.slices, self.quiet_since)

    def read(self, run_ns: int, slices: int, now: float) -> None:
        """A schedstat reading taken ``now``: a streak ends when the thread ran, and is confirmed
        when it has not run at all since the dump that gave the stack."""
        if self.slices is not None and slices == self.slices:
            if self.quiet_since is None:
                self.quiet_since = self.seen_at
        else:
            self.quiet_since = None
        if self.streak_since is not None:
            if not self._idle_since_streak(run_ns, slices, now):
                self.streak_since = self.confirmed_at = None  # it is running again
            elif slices == self.slices_at_stack:
                self.confirmed_at = now  # has not run since the dump: the stack is still current
        self.run_ns, self.slices, self.seen_at = run_ns, slices, now

    def add_dump(self, same_stack: bool, began: RunStart) -> None:
        """A dump that began at ``began`` gave a stack (``same_stack``: the one known before)."""
        if (
            same_stack
            and self.streak_since is not None
            and self._idle_since_streak(began.run_ns, began.slices, began.at)
        ):
            self.confirmed_at = max(self.confirmed_at or began.at, began.at)
        else:
            # Quiet since before the dump began: this stack has been current since then.
            self.streak_since = began.quiet_since if began.quiet_since is not None else began.at
            self.streak_run_ns, self.streak_slices, self.confirmed_at = began.run_ns, began.slices or 0, began.at
        self.slices_at_stack = began.slices

    def add_trainer_window(
        self, stacks: Counter[tuple[Frame, ...]], known: Optional[tuple[Frame, ...]], began: float, now: float
    ) -> None:
        """A trainer's stack is 'stuck' while every sample of consecutive windows is the same stack
        (``stacks``: main-thread samples of the window from ``began`` to ``now``; ``known``: the
        stack before it)."""
        if len(stacks) == 1 and next(iter(stacks)) == known and self.streak_since is not None:
            self.confirmed_at = now
        elif len(stacks) == 1:
            self.streak_since, self.confirmed_at, self.streak_run_ns = began, now, self.run_ns
            self.streak_slices = self.slices or 0
        else:
            self.streak_since = self.confirmed_at = None

    def to_confirm(self, stack: Optional[tuple[Frame, ...]], run_ns_at_dump: int) -> bool:
        """Worked, then stayed quiet for ``SUSPECT_QUIET_S``: a hang to confirm (or a worker waiting
        long for work). ``stack``, ``run_ns_at_dump``: what its newest dump gave, and its CPU then."""
        return self._quiet_for() >= SUSPECT_QUIET_S and _worked_since_dump(stack, self.run_ns - run_ns_at_dump)

    def _quiet_for(self) -> float:
        if self.quiet_since is None or self.seen_at is None:
            return 0.0
        return self.seen_at - self.quiet_since

    def _idle_since_streak(self, run_ns: int, slices: Optional[int], at: float) -> bool:
        """Since its streak began the main thread used under STUCK_CPU_SHARE of a core (plus 10 ms
        slack) and was scheduled at most STUCK_WAKEUPS_PER_S times a second (plus 2)."""
        assert self.streak_since is not None
        elapsed = at - self.streak_since
        woke = (slices or 0) - self.streak_slices
        return run_ns - self.streak_run_ns <= STUCK_CPU_SHARE * elapsed * 1e9 + 1e7 and woke <= (
            STUCK_WAKEUPS_PER_S * elapsed + 2
        )


def _worked_since_dump(stack: Optional[tuple[Frame, ...]], run_ns_since: int) -> bool:
    """Not idle at its last dump, or used CPU since (an idle worker's 5 s wake-ups use ~none)."""
    if stack is None:
        return True
    return worker_activity(list(stack)) != "idle" or run_ns_since > IDLE_WAKE_NS

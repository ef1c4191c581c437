"""The stack sampler's CPU budget and what it buys, as small pure pieces
(docs/how-it-works.md#how-stacks-are-sampled).

Kept apart from the sampler so the numbers and the decisions they drive can be read, and tested,
without a job: which dump goes first and on which budget (``dump_rank``, ``DumpBudget``), how
many may be under way, what rate a trainer's next sampling window affords (``Pricing``), and how
often workers are swept. A node watcher following several jobs gives each a ``share`` of one
budget: every rate here is multiplied by it. Who watches sets the floors (``Watcher``): a live
view, one person looking, keeps 3 Hz and a sweep every 10 s for up to 3 trainers whatever that
costs, and more trainers share those (8 ranks: ~1.1 Hz, a sweep every ~27 s); the exporter, on
every node all day, holds its budget: the floor gives way to 1 Hz (its data wait is over 30 s)
and sweeps thin out as trainers multiply.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Optional

from dltop.collect.stacks.trainer_time import TRAINER_TIME_HISTORY_S

DUMPS_PER_S = 0.3  # routine worker dumps per second on average, all workers together
URGENT_DUMPS_PER_S = 0.5  # new workers, and workers that went quiet after working (hangs to confirm)
DUMP_BURST = 4  # dumps that may start at once after a quiet spell (new workers, a hang)
MAX_IN_FLIGHT = 4
# py-spy reads every thread of the trainer per sample (a 16-worker trainer has 17 threads: ~2 ms a
# sample): the rate is set from the last window's measured cost to stay within this CPU share.
RECORD_CPU_SHARE = 0.006  # of one core, all trainers together
RECORD_STARTUP_S = 0.015  # py-spy's CPU to attach, paid once per window
MIN_SAMPLES_TO_PRICE = 20
# Hz of a py-spy window at most (its default is 100; this is the middle of what it took before
# Austin), dithered from window to window as Austin's are: a periodic training step cannot alias
# with the sampling
RECORD_RATE = 13.0
RECORD_WINDOW_MAX_S = 8  # windows grow 1, 2, 3 ... 8 s: a first share within a second, then cheap
MIN_RECORD_RATE = 3  # a live view's floor: a trainer is sampled this often whatever it costs...
# ... for this many trainers; more share what they would cost (8 ranks at 3 Hz each, and their
# sweeps, cost a live view more than htop takes to show the same processes)
LIVE_TRAINERS_IN_FULL = 3
NODE_FLOOR_HZ = 1.0  # 30 samples over a trainer's 30 s of data wait: a rank's to ~±9 points
# Austin streams (collect/stacks/austin.py): a sample of that 17-thread trainer costs ~0.4 ms, so a third
# of py-spy's share buys more samples than py-spy's whole share did (~4 a second against ~3)
STREAM_CPU_SHARE = 0.002
STREAM_STARTUP_S = 0.008  # Austin's CPU to attach, paid once per window
STREAM_WINDOW_S = 15  # samples arrive every tick whatever the length: windows only re-price the rate
# ... and lengthen with the trainers that share the budget (15 s each: 2 min for 8), so the
# start-ups of all of them stay ~a quarter of it (8 ms / 15 s = 0.053%) however many there are
STREAM_WINDOW_MAX_S = 300
# until a window has priced a sample: py-spy's middle rate, for a few seconds (a snapshot's first
# seconds sample a small trainer no less often than py-spy's windows did)
STREAM_FIRST_RATE = 13.0
STREAM_FIRST_WINDOW_S = 3
MIN_SAMPLE_COST_S = 1e-5
STREAM_MAX_RATE = 17.0
# a snapshot is one question asked once, its answer read from a few seconds of samples: the data
# wait of 15 s at 17 Hz is +-3.5 points, which moves the count a job at a 75% wait needs by ~8%.
# For its length it samples as py-spy does by default (100 Hz), within 2% of a core, a first
# window at 50 Hz (docs/performance.md#stack-sampling)
SNAPSHOT_CPU_SHARE = 0.02
SNAPSHOT_MAX_RATE = 100.0
SNAPSHOT_FIRST_RATE = 50.0
# a snapshot's windows are this long (a tick's gap between them while the next attaches): its 15 s
# hold several, each at its own rate and phase. A training step is periodic, and samples at a fixed
# interval near a simple ratio of its period see a few of its phases only: one 15 s window at such a
# rate read a 77% wait as 70.5-84.6% (docs/how-it-works.md#how-stacks-are-sampled)
SNAPSHOT_STREAM_WINDOW_S = 3
# each window's rate is the affordable one times a factor drawn afresh from 1 +- this (1 on average,
# so is the budget): no rate a periodic step aliases with holds past one window
STREAM_RATE_DITHER = 0.2
# Workers' routine stacks: each worker every 10 s, where one dump at 0.3 a second reached each of
# 16 workers every ~53 s
SWEEP_INTERVAL_S = 10.0
# ... and a snapshot's every second: their busy share is read from its few seconds alone (15 s of 3
# workers: ~45 stacks, the share to +-5 points, where the dumps alone read ~12, +-13), its CPU unchanged
SNAPSHOT_SWEEP_INTERVAL_S = 1.0
# re-attaching (found children included) costs ~70 ms: paid once a window; an Austin orphaned by
# a killed dltop still ends by itself
SWEEP_WINDOW_S = 300
# sweeps thinned as trainers multiply (Watcher.thinning) are attached longer, up to this (the
# exporter's 8 trainers: every 80 s, attached for 40 min, capped at 30)
SWEEP_WINDOW_MAX_S = 1800

# Dump ranks, first served first: what the user looks at (no budget), a hang to confirm and a new
# process (the urgent budget first, then the routine one), routine refreshes (the routine budget).
REQUESTED, HANG_TO_CONFIRM, NEW, ROUTINE = 0, 1, 2, 3


def dump_rank(requested: bool, hang_to_confirm: bool, new: bool) -> int:
    if requested:
        return REQUESTED
    if hang_to_confirm:
        return HANG_TO_CONFIRM
    return NEW if new else ROUTINE


class DumpBudget:
    """Two token buckets of dumps: routine ones refilled at ``dumps_per_s``, urgent ones at
    ``URGENT_DUMPS_PER_S``, both times the share and both up to ``DUMP_BURST``."""

    def __init__(self) -> None:
        self.routine = self.urgent = float(DUMP_BURST)

    def refill(self, elapsed_s: float, dumps_per_s: float, share: float) -> None:
        self.routine = min(float(DUMP_BURST), self.routine + elapsed_s * dumps_per_s * share)
        self.urgent = min(float(DUMP_BURST), self.urgent + elapsed_s * URGENT_DUMPS_PER_S * share)

    def take(self, rank: int) -> bool:
        """May a dump of this rank start now? Spends its token: urgent ranks take an urgent one
        while any is left, then a routine one; what the user looks at takes none."""
        if rank in (HANG_TO_CONFIRM, NEW) and self.urgent >= 1:
            self.urgent -= 1
        elif rank != REQUESTED and self.routine >= 1:
            self.routine -= 1
        elif rank != REQUESTED:
            return False
        return True


@dataclass(frozen=True)
class Watcher:
    """Who the budget is spent for, and so what it keeps when it cannot pay for more."""

    floor_hz: float  # a trainer's lowest sampling rate, whatever the budget affords...
    # ... and every SWEEP_INTERVAL_S its workers swept, for up to this many trainers sharing the
    # budget; more share what these would cost
    trainers_in_full: float
    record_window_max_s: int  # py-spy's longest window (start-up over it; its samples come at its end)
    # the trainers' Austin streams together: this share of a core, each at most this rate, a first
    # window (before a sample is priced) at that one
    stream_cpu_share: float = STREAM_CPU_SHARE
    stream_max_rate: float = STREAM_MAX_RATE
    stream_first_rate: float = STREAM_FIRST_RATE
    stream_window_s: int = STREAM_WINDOW_S  # an Austin window's length for one trainer
    sweep_every_s: float = SWEEP_INTERVAL_S  # each trainer's workers swept this often, in full
    trainer_history_s: Optional[float] = TRAINER_TIME_HISTORY_S  # a trainer's samples kept this long (None: all)

    def thinning(self, share: float, trainers: int) -> float:
        """How many times sparser a trainer's floor and sweeps are than in full: 1 up to
        ``trainers_in_full`` trainers sharing the budget, then in proportion."""
        return max(1.0, trainers_sharing(share, trainers) / self.trainers_in_full)

    def floor(self, share: float, trainers: int) -> float:
        """A trainer's floor, never under the exporter's 1 Hz (8 ranks in a live view: 1.125 Hz)."""
        return max(NODE_FLOOR_HZ, self.floor_hz / self.thinning(share, trainers))


# one person looking at one job: 3 trainers at 3 Hz at least and their workers swept every 10 s
LIVE_VIEW = Watcher(MIN_RECORD_RATE, LIVE_TRAINERS_IN_FULL, record_window_max_s=RECORD_WINDOW_MAX_S)
# the exporter, all day on every node: one budget whatever the trainers; a trainer's data wait
# over 30 s holds at 1 Hz (30 samples), py-spy's windows are priced over up to 30 s, each
# trainer's workers are swept less often as trainers multiply
NODE = Watcher(NODE_FLOOR_HZ, trainers_in_full=1, record_window_max_s=30)
# a snapshot: a live view's floors, and for its few seconds the samples of py-spy's default rate
# and its workers swept every second; a trainer's samples kept for all of its watch, which its
# report is over (a 190 s watch read the wait from its last 30 s: ±1.3 points, not ±0.5)
SNAPSHOT = dataclasses.replace(LIVE_VIEW, stream_cpu_share=SNAPSHOT_CPU_SHARE, stream_max_rate=SNAPSHOT_MAX_RATE,
                               stream_first_rate=SNAPSHOT_FIRST_RATE, stream_window_s=SNAPSHOT_STREAM_WINDOW_S,
                               sweep_every_s=SNAPSHOT_SWEEP_INTERVAL_S, trainer_history_s=None)  # fmt: skip


def trainers_sharing(share: float, trainers: int) -> float:
    """The trainers one budget pays for: this job's, over its share (the node's, jobs alike)."""
    return max(1.0, trainers / max(share, 0.01))


def sweep_interval_s(share: float, trainers: int = 1, watcher: Watcher = LIVE_VIEW) -> float:
    """Each trainer's workers are swept less often past the trainers the watcher sweeps in full,
    so its sweeps cost what theirs did (the exporter's 8 trainers: every 80 s; a live view's: ~27 s;
    a snapshot's: ~2.7 s)."""
    return watcher.sweep_every_s * watcher.thinning(share, trainers)


def sweep_window_s(share: float, trainers: int = 1, watcher: Watcher = LIVE_VIEW) -> int:
    """How long one sweep stays attached: its attach (~6 ms a process) is paid once a window, so
    windows lengthen as sweeps thin out (up to 30 min)."""
    return min(SWEEP_WINDOW_MAX_S, round(SWEEP_WINDOW_S * watcher.thinning(share, trainers)))


def stream_window_s(share: float, trainers: int, watcher: Watcher = LIVE_VIEW) -> int:
    """An Austin window's length: the watcher's (15 s; a snapshot's 3 s) for each trainer the
    budget pays for (up to 5 min)."""
    return min(STREAM_WINDOW_MAX_S, round(watcher.stream_window_s * trainers_sharing(share, trainers)))


def dithered() -> float:
    """A window's rate factor: uniform over 1 +- ``STREAM_RATE_DITHER``."""
    return random.uniform(1 - STREAM_RATE_DITHER, 1 + STREAM_RATE_DITHER)


def first_stream_rate(share: float, trainers: int, watcher: Watcher) -> float:
    """A window's rate before a sample is priced: the watcher's, shared by the trainers past one,
    never under a live view's (a snapshot of 8 ranks samples each at 13 Hz at first, not 50)."""
    shared = watcher.stream_first_rate / trainers_sharing(share, trainers)
    return min(watcher.stream_first_rate, max(STREAM_FIRST_RATE, shared))


def record_window_max_s(share: float, trainers: int, watcher: Watcher) -> int:
    """py-spy's longest window: 8 s for each trainer the budget pays for, up to the watcher's cap."""
    scaled = round(RECORD_WINDOW_MAX_S * trainers_sharing(share, trainers))
    return max(RECORD_WINDOW_MAX_S, min(watcher.record_window_max_s, scaled))


@dataclass
class Pricing:
    """A trainer's sampling window: the rate and length of the one under way, priced by what a
    sample cost the sampler in the last window that sampled enough."""

    sample_cost_s: float = 0.0  # the sampler's CPU per sample in the last priced window (0: not priced)
    rate: float = 0.0  # samples a second of the window under way
    seconds: int = 0  # its planned length
    samples: int = 0  # main-thread samples of the Austin window under way

    def plan_record(self, windows_done: int, share: float, trainers: int, watcher: Watcher = LIVE_VIEW) -> None:
        """A ``py-spy record`` window: 1, 2, 3 ... 8 s long (longer as trainers multiply, up to the
        watcher's cap), at ``RECORD_RATE`` or what its share affords, not below the watcher's floor,
        dithered from window to window (py-spy takes whole rates: 1 at least)."""
        longest = record_window_max_s(share, trainers, watcher)
        self.seconds = min(longest, 1 + windows_done)
        # py-spy's start-up is priced over a full-length window: the first short windows (an answer
        # within a second) would otherwise all run at the minimum rate
        budget = RECORD_CPU_SHARE * share / trainers - RECORD_STARTUP_S / longest
        affordable = budget / self.sample_cost_s if self.sample_cost_s else RECORD_RATE
        self.rate = max(1, round(max(watcher.floor(share, trainers), min(RECORD_RATE, affordable)) * dithered()))

    def plan_stream(self, share: float, trainers: int, watcher: Watcher = LIVE_VIEW) -> None:
        """An Austin window at the rate its share affords, not below the watcher's floor, dithered
        from window to window; windows lengthen as trainers multiply, so the start-ups of them all
        cost a fixed part of the budget (and the rest buys samples)."""
        seconds = stream_window_s(share, trainers, watcher)
        budget = watcher.stream_cpu_share * share / trainers - STREAM_STARTUP_S / seconds
        affordable = budget / self.sample_cost_s if self.sample_cost_s else first_stream_rate(share, trainers, watcher)
        self.rate = max(watcher.floor(share, trainers), min(watcher.stream_max_rate, affordable)) * dithered()
        self.seconds = seconds if self.sample_cost_s else STREAM_FIRST_WINDOW_S
        self.samples = 0

    def price_record(self, cpu_s: float, ran_s: float) -> None:
        """A record window that ran ``ran_s`` (cut short, or its whole length) cost ``cpu_s``."""
        planned = max(1.0, min(ran_s, self.seconds) * self.rate)
        if planned >= MIN_SAMPLES_TO_PRICE:
            self.sample_cost_s = max(0.0, cpu_s - RECORD_STARTUP_S) / planned

    def price_stream(self, cpu_s: float) -> None:
        """An Austin window that ended cost ``cpu_s`` for its ``samples``: priced, however cheap
        (a small trainer's window may cost less than its start-up estimate)."""
        if self.samples >= MIN_SAMPLES_TO_PRICE:
            self.sample_cost_s = max(MIN_SAMPLE_COST_S, (cpu_s - STREAM_STARTUP_S) / self.samples)

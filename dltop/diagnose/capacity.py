"""How fast a job could go, and with how many workers: one model that every advice rule reads,
so their suggestions agree (no rule undoes another's).

A trainer fed by N0 workers runs at rate X0 (batches/s, unknown in absolute terms) and waits for
data a share W of its time. Per batch it needs (1 - W) / X0 seconds of its own; each batch costs
the job J / X0 CPU-seconds, J being the cores its trainers and workers use now (window means). With
N workers its pace, relative to now, is the predicted speed-up

    S(N) = min(1 / (1 - W + R),  A / J,  N / (N0 * busy),  the caps)   (before the wait for a CPU)

its own pace (R: of the wait, the share spent handling a batch, which stays at any count; see
``receiving``); what the CPUs allow (A the CPUs free for the job: those it may use by affinity and
cgroup quota, less what the machine's other processes keep; every process of the job summed, so
ranks sharing a node share its CPUs; a batch costs the same CPU whatever N, and N workers never use
more than N cores, which the third term keeps); what N workers supply, each working the share
``busy`` of its time now (all of it where the trainer surely waits for its workers' work:
``working``); and what stops more workers from helping (memory, a saturated disk, an iterable
source's parts, a GIL: ``caps``, workers at most). With num_workers=0 the trainer fetches itself:
the fetch, a share W of its time, moves to the workers (N / W), and its CPU is already in J.

A faster job keeps its CPUs busier, and its processes that sleep between bursts of CPU wait longer
for one each time they wake (``queueing.py``): each second of such a process's CPU per batch
costs the batch that much more wait at S than now, for the trainer's own time and for a worker's.
The terms then depend on S itself, so S(N) is the pace where the job's own slowing meets it
(found by halving: every term falls as S grows).

Every input carries one standard error, counted by its effective samples (neighbouring samples
and ticks are alike): the wait's from the trainer's samples, the workers' busy share from their
distinct stacks, the CPU figures from their spread over the ticks; a figure's error is what each
input moved alone by its error changes of it, added in quadrature. The best is the largest S the
model sees; the suggestion is the fewest N whose S is within that best's error (at least the
``same_pace_share`` that ``dltop bench`` allows a measurement): more would not measurably help.
Now's pace is measured, not modelled: where even the low end of the best's interval (with the
model's own error) is not a pace ``dltop bench`` tells from now's, the count stays as it is.
Where the counts at the inputs' errors lie more than one step of ``PREFERRED_WORKERS`` apart, the
window is too short for one answer: the count is still given, marked provisional, with how long would settle it.

A thread pipeline's workers are threads of the trainer: their figures are the threads' own, their
CPU is in J already, and they share one GIL, which caps them where their Python work fills a core
(``gil.py``).

When the CPUs bind and the trainer runs intra-op threads beside its main thread (torch's
default: one per core), those threads take CPUs the workers need: fewer trainer threads is the
change that helps, not fewer workers. The model then reads the job as that change leaves it: its
CPU less all the threads use, the workers' busy share less their wait for a CPU (at most: the
threads' useful work moves to the main thread).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Optional

from dltop.diagnose.figures import (
    WorkerFigures,
    cpu_figures,
    cpu_means,
    cpus_free,
    input_bound_wait,
    saturated_disks,
    source_parts,
    surely_above,
    tick_error,
    trusted_wait,
    wait_error,
    worker_figures,
)
from dltop.diagnose.gil import gil_load
from dltop.diagnose.knobs import on_threads
from dltop.diagnose.queueing import servers_of, sleeping_share, wait_per_cpu_second
from dltop.diagnose.threads import doers, pipeline_cores, thread_figures
from dltop.diagnose.window import ShownAdvice, Window
from dltop.model import ENDED, LoaderSample
from dltop.settings import DEFAULTS, Settings

# the yardstick of one answer (about 25% apart, as Renard's series): the counts the inputs' two
# ends ask for may lie one step of it apart, no more; the count itself is the fewest that does
PREFERRED_WORKERS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256)
# caps that no CPU freed for the workers lifts: the disk they read is saturated, or their GIL is full
UNHELPED_BY_CPUS = frozenset({"disk", "gil"})
# S(N) of a pace-bound trainer: its own pace at most 20x (a wait read as 100% is not infinite room)
MAX_PACE = 20.0
# S(N) is found to this share of itself (the halving stops there)
SETTLED = 1e-4


class Inputs(NamedTuple):
    """The model's inputs at one point of their errors."""

    wait: float  # the trainer's data-wait share
    busy: float  # the share of its time a worker works (the larger of its stacks' and its CPU's)
    job_cpu: Optional[float]  # cores the job uses


class Prediction(NamedTuple):
    """S(N) for the suggested N, less and plus its error."""

    speedup: float
    low: float
    high: float


@dataclass(frozen=True)
class Capacity:
    """One loader's figures and what the model makes of them. Shares are 0..1, CPUs in cores."""

    loader: LoaderSample
    wait: Optional[float]  # data wait (start-up excluded) once enough samples back it
    workers: int
    figures: WorkerFigures
    cpus_allowed: Optional[float]
    cpus_per_rank: Optional[float]  # the CPUs allowed shared by the trainers (ranks) on them
    job_cpu: Optional[float]  # cores the job's trainers and workers use (figures.job_cpu), window mean
    trainer_cpu: float  # this trainer, window mean
    trainer_threads_cpu: float  # its native threads beyond the main one (intra-op), window mean
    caps: dict[str, int]  # memory | disk | parts | gil -> workers at most
    missing: Optional[str]  # what the model lacks to give a number, in words
    job_cpu_error: float = 0.0  # one standard error of job_cpu
    shown: Optional[ShownAdvice] = None  # what a live view showed for this trainer so far
    ranks: int = 1  # trainers (ranks) on this node sharing its CPUs: one script, one change for all
    parts_source: Optional[str] = None  # how caps["parts"] (an iterable source's parts) was learnt
    settings: Settings = DEFAULTS  # the thresholds the model was worked out with
    # the CPUs the job could grow into: those it may use, less what the machine's other processes
    # keep (figures.cpus_free)
    cpus_free: Optional[float] = None
    error_scale: float = 1.0  # the inputs' errors times this (a longer window's: settled_in_s's estimate)
    trainer_main_cpu: float = 0.0  # the trainer's main thread, window mean: the CPU on its own path
    trainer_main_wait: float = 0.0  # the share of the time its main thread waits runnable for a CPU, window mean
    queueing: bool = True  # count the wait for a CPU a faster job brings (False: the CPUs' share alone)
    trainer_threads_error: float = 0.0  # one standard error of trainer_threads_cpu
    threads_cut: Optional[bool] = None  # the model read with its intra-op threads cut or not (None: as advised)

    @property
    def speedup_pace(self) -> Optional[float]:
        """1 / (1 - W + R): the trainer's own pace (R: ``receiving``)."""
        return _pace(self._own(self.wait)) if self.wait is not None else None

    @property
    def receiving(self) -> float:
        """The share of the trainer's time handling a batch that stays at any count: of its data
        wait, the samples not blocked until a batch comes (receiving it, unpickling it, asking for
        the next), less, of those rebuilding the tensors its workers send (torch's handshake with
        the sending worker for each storage), the part that waits for that worker's GIL. The
        handshake is answered by a thread of the worker, which waits for the GIL while the worker's
        own Python holds it; more workers give each slack, and that wait goes. The worker holds the
        GIL at most the share of its time it is on a CPU or waiting for one (a thread the kernel
        preempts keeps the GIL), so that share of the receiving goes. (Workers that read,
        then compute in Python, show the other side, unseen here: now the handshake comes as a
        worker starts its read; with workers to spare, anywhere in its cycle: docs/findings.md.)"""
        rebuilding, handling = self._handling
        f = self.figures
        return handling - rebuilding * min(1.0, f.cpu + f.cpu_wait)

    @functools.cached_property
    def _handling(self) -> tuple[float, float]:
        """(rebuilding, handling): of the trainer's time, the shares it rebuilds a batch's tensors and
        handles a batch that came at all (rebuilding included), 0..1."""
        spent = self.loader.trainer_time
        if spent is None:
            return 0.0, 0.0
        rebuilding = (spent.receiving_percent or 0.0) / 100
        return rebuilding, max(rebuilding, (spent.handling_percent or 0.0) / 100)

    @property
    def speedup_cpus(self) -> Optional[float]:
        """A / J: what the CPUs free for the job allow, the job's CPU less what the advice frees
        (``threads_freed``)."""
        return _cpus_allow(self.cpus_free, self.job_cpu_advised)

    @property
    def speedup(self) -> Optional[float]:
        """The reachable speed-up before any cap: the smaller of the pace and the CPUs' (with the
        wait for a CPU it brings, where the model has its inputs)."""
        if self.central is not None:
            return self._reach(self.central)
        known = [s for s in (self.speedup_pace, self.speedup_cpus) if s is not None]
        return min(known) if known else None

    @property
    def limited_by_cpus(self) -> bool:
        """The CPUs, not the trainer's own pace, set how much faster it could go."""
        by_cpus, reach = self.speedup_cpus, self.speedup
        return by_cpus is not None and reach is not None and by_cpus <= reach * (1 + SETTLED)

    @property
    def cpu_bound(self) -> bool:
        """The CPUs bind, the trainer's intra-op threads kept as they are (what asks for fewer of
        them: ``trainer_threads``): they leave little room to go faster as the job runs now, or they
        set the best the workers can reach (the count asked for fills them, and the threads then
        take CPUs those workers need)."""
        kept = self._threads_kept
        by_cpus, pace = _cpus_allow(kept.cpus_free, kept.job_cpu), kept.speedup_pace
        if by_cpus is not None and (pace is None or by_cpus < pace) and by_cpus < self.settings.cpu_bound_speedup:
            return True
        return kept.binding == "cpus"

    @functools.cached_property
    def _threads_kept(self) -> Capacity:
        """The model with the trainer's intra-op threads left as they are (nothing freed)."""
        return dataclasses.replace(self, threads_cut=False, shown=None)

    # -- the model ------------------------------------------------------------------------------

    @functools.cached_property
    def central(self) -> Optional[Inputs]:
        """The inputs as measured; None where the model lacks one (``missing``)."""
        if self.missing is not None or self.wait is None:
            return None
        busy = max(self.figures.cpu, self.working - self.busy_freed)
        return Inputs(min(self.wait, self.settings.max_wait_share), busy, self.job_cpu_advised)

    @property
    def working(self) -> float:
        """The share of its time a worker works, as the model reads it: all of it where the trainer
        surely waits for its workers' work (``_starved``), for its workers then deliver all it
        gets; one idle meanwhile has done the batches it was given and waits while the trainer
        waits for an earlier one from another (batches come in order): no slack a busier worker
        would use, and N workers deliver N / N0 of now. Else the larger of its stacks' and its
        CPU's share."""
        return 1.0 if self._starved else self.figures.working

    @functools.cached_property
    def _starved(self) -> bool:
        """The trainer waits for its workers beyond its noise and too-many-workers' line: its wait
        less the handling of batches that stays at any count (``receiving``). A trainer that only
        handles what comes has workers to spare, however its wait reads; one whose handshake waits
        for its workers' GIL waits for their work (cpu-bound workers that fill it)."""
        if not self.workers or self.wait is None:
            return False
        waiting = self.wait - self.receiving
        return surely_above(waiting, wait_error(self.loader), self.settings.too_many_wait_percent)

    @property
    def job_cpu_advised(self) -> Optional[float]:
        """The job's cores once the advice is applied: now's, less what it frees (``threads_freed``)."""
        return max(self.job_cpu - self.threads_freed, 1e-3) if self.job_cpu else self.job_cpu

    @functools.cached_property
    def threads_freed(self) -> float:
        """The cores the advice frees where it asks for fewer trainer threads (``trainer_threads``):
        at most all its intra-op threads use, whose spinning at each parallel region's barrier, with
        the workers on the same CPUs, goes with them (their useful work moves to the main thread).
        Nothing where a saturated disk or a GIL caps the workers: no CPU freed makes them faster."""
        capped = bool(UNHELPED_BY_CPUS & self.caps.keys())
        cut = self.trainer_threads() is not None if self.threads_cut is None else self.threads_cut
        return self.trainer_threads_cpu if cut and not capped else 0.0

    @property
    def busy_freed(self) -> float:
        """The share of a worker's busy time it then stops waiting for a CPU: all of its run-queue
        wait where the advice frees CPUs (``threads_freed``), none otherwise (more workers alone
        leave the CPUs as full as they are)."""
        return self.figures.cpu_wait if self.threads_freed else 0.0

    def _own(self, wait: float) -> float:
        """The trainer's own time per batch (in batches' times now) once the advice is applied: its
        main thread then stops waiting for a CPU, as a worker does (``busy_freed``), where the
        advice frees CPUs: its intra-op threads are what it waited behind (at each parallel
        region's barrier a thread waits for the others to get a CPU)."""
        own = _own_time(wait, self.receiving)
        return own - self._main_waiting(own) if self.threads_freed else own

    def _main_waiting(self, own: float) -> float:
        """Of the trainer's own time ``own``, what its main thread waits runnable for a CPU (with
        num_workers=0 its fetch, the rest of its time, waits alike)."""
        return self.trainer_main_wait * (1.0 if self.workers else own)

    @functools.cached_property
    def moves(self) -> list[tuple[Inputs, Inputs]]:
        """The central inputs with one of them moved down and up by ``capacity_errors`` of its
        standard errors (the others as measured): each input's share of a figure's error."""
        if self.central is None:
            return []
        k, f, x = self.settings.capacity_errors * self.error_scale, self.figures, self.central
        w_err = k * (wait_error(self.loader) or 0.0)
        wait = (max(0.0, x.wait - w_err), min(x.wait + w_err, self.settings.max_wait_share))
        # a worker's working share: all of it where the trainer surely waits (``working``); else its
        # CPU is a floor of it, and its stacks say at most all of its time
        busy = (x.busy, x.busy) if self._starved else (
            max(0.0, f.busy - self.busy_freed - k * f.busy_error, f.cpu - k * f.cpu_error),
            max(min(1.0, f.busy - self.busy_freed + k * f.busy_error), f.cpu + k * f.cpu_error))  # fmt: skip
        moved = [
            (x._replace(wait=wait[0]), x._replace(wait=wait[1])),
            (x._replace(busy=busy[0]), x._replace(busy=busy[1])),
        ]
        if x.job_cpu:
            cpu = k * self.job_cpu_error
            moved.append((x._replace(job_cpu=max(x.job_cpu - cpu, 1e-3)), x._replace(job_cpu=x.job_cpu + cpu)))
        return moved

    def interval(self, figure: Callable[[Inputs], float]) -> tuple[float, float, float]:
        """(figure, less and plus its error): each input moved alone, the changes it makes added in
        quadrature (the inputs' errors are independent)."""
        assert self.central is not None
        value = figure(self.central)
        downs, ups = [], []
        for low, high in self.moves:
            ends = (figure(low), figure(high))
            downs.append(max(0.0, value - min(ends)))
            ups.append(max(0.0, max(ends) - value))
        return value, value - math.hypot(*downs), value + math.hypot(*ups)

    @property
    def floor(self) -> int:
        """The fewest workers advised: those running now (too-many-workers judges fewer), or the
        parts of an iterable source where there are fewer."""
        return min(self.workers, self.caps.get("parts", self.workers))

    @property
    def ceiling(self) -> Optional[int]:
        """The most workers that help (the tightest cap), never under the floor; None: no cap."""
        return max(self.floor, min(self.caps.values())) if self.caps else None

    def speedup_at(self, workers: int, inputs: Inputs) -> float:
        """S(N): the trainer's pace with ``workers`` workers, relative to now."""
        ceiling = self.ceiling
        count = min(workers, ceiling) if ceiling is not None else workers

        def pace(speedup: float) -> float:
            demand = self._worker_time(inputs, speedup)
            return min(self._reach_at(inputs, speedup), count / demand if demand > 0 else math.inf)

        return _settle(pace)

    def best(self, inputs: Inputs) -> float:
        """The largest S the model sees: at the tightest cap, else wherever supply meets the reach."""
        ceiling = self.ceiling
        return self.speedup_at(ceiling, inputs) if ceiling is not None else self._reach(inputs)

    def _reach(self, inputs: Inputs) -> float:
        """The trainer's pace on its own and the CPUs', whatever the workers."""
        return _settle(lambda speedup: self._reach_at(inputs, speedup))

    def _reach_at(self, inputs: Inputs, speedup: float) -> float:
        """The trainer's own pace and the CPUs' where the job runs ``speedup`` times as fast as now."""
        queued = self._sleeping_cpu(inputs)[0] * self._more_wait(inputs, speedup)
        pace = _pace(self._own(inputs.wait) + queued)
        by_cpus = _cpus_allow(self.cpus_free, inputs.job_cpu)
        return min(pace, by_cpus) if by_cpus is not None else pace

    def each_busy(self, speedup: float, count: int, wait: float) -> float:
        """The share of its time each of ``count`` workers works at ``speedup``, once the advice is
        applied (its wait for a CPU then included); ``wait``, the trainer's fetch where none runs."""
        if self.central is None:
            return min(1.0, (self.workers * self.figures.working if self.workers else wait) * speedup / count)
        return min(1.0, self._worker_time(self.central, speedup) * speedup / count)

    def _worker_time(self, inputs: Inputs, speedup: float) -> float:
        """The workers' time per batch (in batches' times now) at ``speedup``: what they work now,
        and the more wait for a CPU their sleeping brings."""
        return self._demand(inputs) + self._sleeping_cpu(inputs)[1] * self._more_wait(inputs, speedup)

    def _demand(self, inputs: Inputs) -> float:
        """The workers' time per batch now (in batches' times now): each works the share ``busy``
        of its time; with num_workers=0, the trainer's fetch."""
        return self.workers * inputs.busy if self.workers else inputs.wait

    def _sleeping_cpu(self, inputs: Inputs) -> tuple[float, float]:
        """(the trainer's, the workers') CPU per batch (in batches' times now) that waits for a CPU
        each time it wakes: each one's CPU times the share of its busy time it sleeps (neither on a
        CPU nor waiting for one). With num_workers=0 the fetch is the trainer's own."""
        own = self._own(inputs.wait)
        waiting = 0.0 if self.threads_freed else self._main_waiting(own)
        trainer = self.trainer_main_cpu * sleeping_share(self.trainer_main_cpu + waiting, own)
        if not self.workers:
            return trainer, 0.0
        f = self.figures
        return trainer, self.workers * f.cpu * sleeping_share(f.cpu + f.cpu_wait, inputs.busy)

    def _load(self, speedup: float, count: int) -> float:
        """The share of the CPUs free that delays a waking process, the job running ``speedup``
        times as fast as now on ``count`` workers: each process's CPU up to its fair share of them
        (the kernel lets a waking process go before one that has run beyond that share)."""
        assert self.cpus_free
        fair = self.cpus_free / (count + 1)
        worker = self.workers * self.figures.cpu * speedup / count if count and self.workers else 0.0
        trainer = (self.trainer_cpu - self.threads_freed) * speedup
        return (count * min(worker, fair) + min(trainer, fair)) / self.cpus_free

    def _more_wait(self, inputs: Inputs, speedup: float) -> float:
        """How much longer, per second of CPU, a waking process waits for a CPU at ``speedup`` than
        now, on the workers that pace needs (a count, not more: workers beyond it idle)."""
        if not self.queueing or not self.cpus_free or speedup <= 1:
            return 0.0
        count = max(self.workers, math.ceil(speedup * self._demand(inputs)))
        waits = wait_per_cpu_second(servers_of(self.cpus_free), self._load(speedup, count), count + 1)
        return max(0.0, waits - self._wait_now)

    @functools.cached_property
    def _wait_now(self) -> float:
        """The wait for a CPU per second of CPU as the job runs now (what ``_more_wait`` adds to)."""
        assert self.cpus_free
        return wait_per_cpu_second(servers_of(self.cpus_free), self._load(1.0, self.workers), self.workers + 1)

    def wanted(self, inputs: Inputs, tolerance: float, capped: bool = True) -> float:
        """The workers (a real number) whose S is ``tolerance`` below the best; the floor at least."""
        best = self.best(inputs) if capped else self._reach(inputs)
        target = best - tolerance
        wanted = max(float(self.floor), target * self._worker_time(inputs, target))
        ceiling = self.ceiling
        return min(wanted, ceiling) if capped and ceiling is not None else wanted

    @functools.cached_property
    def tolerance(self) -> Optional[float]:
        """How far below the best a pace still counts as the best: the best's error, at least
        ``same_pace_share`` of it."""
        if self.central is None:
            return None
        best, low, _ = self.interval(self.best)
        return max(best - low, self.settings.same_pace_share * best)

    @functools.cached_property
    def best_interval(self) -> Optional[Prediction]:
        """The best and its interval: its inputs' errors and the model's own."""
        return self._with_model_error(*self.interval(self.best)) if self.central is not None else None

    @functools.cached_property
    def best_surely_helps(self) -> bool:
        """Even the low end of the best's interval is a pace ``dltop bench`` tells from now's (more
        than ``same_pace_share`` faster): now's pace is measured, the best modelled, so no count
        beyond now's is asked for otherwise. A window too short for one count is exempt: its count
        is provisional, and a longer window narrows the error that is wide there."""
        best = self.best_interval
        return best is not None and (self.too_uncertain or self._told_from_now(best))

    @functools.cached_property
    def chosen(self) -> Optional[int]:
        """The model's count, caps applied: the fewest within the error of the best; no more than
        now's where the best cannot surely be told from now's pace."""
        if self.central is None or self.tolerance is None:
            return None
        count = _count(self.wanted(self.central, self.tolerance))
        return count if self.best_surely_helps else min(count, self.workers)

    @property
    def needed(self) -> Optional[int]:
        """The workers the model wants before the caps (whether they bind: ``binding``)."""
        if self.central is None or self.tolerance is None:
            return None
        return _count(self.wanted(self.central, self.tolerance, capped=False))

    @functools.cached_property
    def needed_range(self) -> Optional[tuple[int, int]]:
        """The counts (caps applied) at the inputs' errors: the fewest within ``same_pace_share`` of
        the best, less and plus its error."""
        if self.central is None:
            return None
        share = self.settings.same_pace_share
        _, low, high = self.interval(lambda x: self.wanted(x, share * self.best(x)))
        return _count(low), _count(high)

    @property
    def suggested_range(self) -> Optional[tuple[int, int]]:
        """Every count that fits the inputs' errors: from the ends' and the model's own."""
        if self.needed_range is None or self.chosen is None:
            return None
        low, high = min(self.needed_range[0], self.chosen), max(self.needed_range[1], self.chosen)
        if not self.best_surely_helps:  # a live view holds no count the best cannot be told from
            high = min(high, self.workers)  # chosen is no more than now's count then
            low = min(low, high)
        if self.chosen > self.workers:  # the model asks for more: so does the count, whatever its noise
            low = max(low, self.workers + 1)
        return low, max(low, high)

    @property
    def too_uncertain(self) -> bool:
        """The counts at the inputs' errors, each as its nearest preferred count, lie more than one
        step of the series apart: no one answer yet."""
        if self.needed_range is None:
            return False
        low, high = (_preferred_step(n) for n in self.needed_range)
        return high - low > 1

    @property
    def held(self) -> bool:
        """A live view keeps the count it showed while it stays in the range."""
        span = self.suggested_range
        return self.shown is not None and span is not None and span[0] <= self.shown.workers <= span[1]

    @property
    def suggested(self) -> Optional[int]:
        """One number that holds while the job does: what was shown, while it stays in the range;
        else the fewest within the error of the best (provisional where ``too_uncertain``: a count
        in the range is still a change worth making, and the advice says how long settles it)."""
        if self.shown is not None and self.held:
            return self.shown.workers
        return self.chosen

    @functools.cached_property
    def prediction(self) -> Optional[Prediction]:
        """S at the suggested count, its interval the inputs' errors and the model's own
        (``model_error_share``) added in quadrature."""
        count = self.suggested
        if count is None or self.central is None:
            return None
        return self._with_model_error(*self.interval(lambda x: self.speedup_at(count, x)))

    def _told_from_now(self, prediction: Prediction) -> bool:
        """Even its low end is a pace ``dltop bench`` tells from now's: more than ``same_pace_share`` faster."""
        return prediction.low > 1 + self.settings.same_pace_share

    def _with_model_error(self, speedup: float, low: float, high: float) -> Prediction:
        """A pace and its inputs' interval, the model's own error (``model_error_share``) added in quadrature."""
        model = self.settings.capacity_errors * self.settings.model_error_share * speedup
        down, up = math.hypot(speedup - low, model), math.hypot(high - speedup, model)
        return Prediction(speedup, speedup - down, speedup + up)

    @property
    def surely_helps(self) -> bool:
        """The suggestion adds workers and even its prediction's low end is a pace ``dltop bench``
        tells from now's (more than ``same_pace_share`` faster): worth saying below input-bound's
        line too, where a 25% wait that one more worker removes is 1.33x."""
        prediction, count = self.prediction, self.suggested
        return (prediction is not None and count is not None and count > self.workers
                and self._told_from_now(prediction))  # fmt: skip

    @functools.cached_property
    def queueing_loss(self) -> Optional[float]:
        """The share of the predicted pace the wait for a CPU takes (``queueing.py``): 1 less the
        prediction over what the CPUs' share alone gives at the same count."""
        prediction, count = self.prediction, self.suggested
        if prediction is None or count is None or self.central is None:
            return None
        alone = dataclasses.replace(self, queueing=False).speedup_at(count, self.central)
        return max(0.0, 1 - prediction.speedup / alone) if alone > 0 else None

    @property
    def binding(self) -> Optional[str]:
        """What sets the best: cpus | memory | disk | parts | gil | pace (the trainer's own) | None
        (no model)."""
        if self.central is None:
            return None
        tightest = min(self.caps, key=self.caps.__getitem__) if self.caps else None
        if tightest is not None and self.best(self.central) < self._reach(self.central) * (1 - 1e-9):
            return tightest
        return "cpus" if self.limited_by_cpus else "pace"

    def settled_in_s(self) -> Optional[float]:
        """Seconds more of watching for one answer: errors shrink as the square root of the window
        (its effective samples grow with it), so a window ``1 / f**2`` as long as now gives the
        errors times f; f found by halving. None where the window's length is unknown."""
        spent = self.loader.trainer_time
        if not self.too_uncertain or spent is None or not spent.window_s:
            return None
        low, high = 0.0, 1.0
        for _ in range(20):
            middle = (low + high) / 2
            settled = not dataclasses.replace(self, error_scale=middle, shown=None).too_uncertain
            low, high = (middle, high) if settled else (low, middle)
        return spent.window_s / max(low, 0.05) ** 2 - spent.window_s

    @property
    def io_bound_workers(self) -> bool:
        """Busy workers that mostly wait (storage, network) rather than compute; with num_workers=0
        the trainer's fetch, whose CPU is at most the trainer's while it fetched."""
        f, line = self.figures, self.settings.io_bound_cpu_share
        if not self.workers:
            return self.wait is not None and self.wait != 0 and self.trainer_cpu / self.wait < line
        return f.busy > 0 and f.cpu / f.busy < line

    @property
    def intra_op_threads(self) -> bool:
        """The trainer's native threads beside its main one (its Python threads are not counted:
        ``trainer_threads_cpu``) surely use CPU: what cutting them gains decides (``trainer_threads``)."""
        return self._threads_low > 0

    @property
    def threads_take_cpus(self) -> bool:
        """Its intra-op threads surely use more of a rank's CPUs than ``dltop bench`` tells from noise
        (``same_pace_share`` of them): cutting them frees CPUs that matter, whatever the job waits for."""
        per_rank = self.cpus_per_rank
        return per_rank is not None and self._threads_low >= self.settings.same_pace_share * per_rank

    @property
    def _threads_low(self) -> float:
        """The cores its intra-op threads use, less their error."""
        return self.trainer_threads_cpu - self.settings.capacity_errors * self.error_scale * self.trainer_threads_error

    def trainer_threads(self) -> Optional[int]:
        """OMP_NUM_THREADS for the trainer when its intra-op threads take CPUs its workers need: the
        CPUs bind, and cutting them makes the best the workers reach faster by more than ``dltop
        bench`` tells from noise (``same_pace_share``). The gain, not the threads' CPU against a
        line, decides: two reads of one job either side of the line then give one answer."""
        if not self.intra_op_threads or not self.cpu_bound:
            return None
        return self.threads_left if self._cutting_threads_helps else None

    @functools.cached_property
    def _cutting_threads_helps(self) -> bool:
        """The best the model sees with the intra-op threads cut beats it with them kept by more
        than ``same_pace_share`` (true where the model lacks its inputs: the CPUs bind)."""
        kept, cut = self._threads_kept, dataclasses.replace(self, threads_cut=True, shown=None)
        if kept.central is None or cut.central is None:
            return True
        return cut.best(cut.central) > kept.best(kept.central) * (1 + self.settings.same_pace_share)

    @property
    def threads_left(self) -> Optional[int]:
        """The intra-op threads a rank's CPUs leave its trainer (1 at least): those CPUs less what
        its fetching uses at the best the model sees with the threads kept (the workers' CPU, or
        with num_workers=0 the main thread's share fetching); None where the CPUs are unknown."""
        if self.cpus_per_rank is None:
            return None
        kept = self._threads_kept
        pace = kept.best(kept.central) if kept.central is not None else 1.0
        fetching = self.workers * self.figures.cpu if self.workers else self.trainer_main_cpu * (self.wait or 0.0)
        return max(1, math.floor(self.cpus_per_rank - fetching * max(1.0, pace)))


def capacities(window: Window, settings: Settings) -> list[Capacity]:
    """The capacity of every loader of the window's newest tick, worked out once per window:
    several rules read it."""
    return window.once(_every_capacity, settings)


def starved_wait(cap: Capacity) -> Optional[float]:
    """The trainer's data-wait share (0..1) where it waits for data as input-bound judges it, else
    None: surely above input-bound's line (``input_bound_wait``), or below it where more workers
    surely make it faster (``surely_helps``). The one test input-bound and pending share (an idle
    GPU is blamed on the input only above the line: gpu.py)."""
    wait = input_bound_wait(cap.loader, cap.settings)
    return cap.wait if wait is None and cap.wait is not None and cap.surely_helps else wait


def _every_capacity(window: Window, settings: Settings) -> list[Capacity]:
    return [capacity(window, loader, settings) for loader in window.latest.loaders]


def capacity(window: Window, loader: LoaderSample, settings: Settings) -> Capacity:
    """One loader's capacity: its figures over the window, the workers it needs, and what caps them."""
    latest = window.latest
    wait = trusted_wait(loader, settings.min_stack_samples)
    threads = on_threads(loader)
    seen = len(doers(loader.worker_threads)) if threads else len(set(loader.worker_pids))
    workers = max(loader.num_workers, seen)
    figures = _worker_figures(window, loader, workers, wait, settings)
    system = latest.system
    allowed = system.cpus_allowed if system is not None else None
    ranks = max(1, sum(1 for p in latest.processes if p.role == "trainer" and p.state not in ENDED))
    job_cores, trainer_cpu, main_cpu, main_wait, python_cpu = cpu_means(window, loader.trainer_pid)
    cpu_ticks = window.per_tick(cpu_figures, loader.trainer_pid)[1:]  # rates need a tick before them
    job_error = tick_error([t[0] for t in cpu_ticks if t[0] is not None], settings.max_autocorrelation)
    native = [t[1] - t[2] - (t[4] or 0.0) for t in cpu_ticks if t[1] is not None and t[2] is not None]
    threads_error = tick_error(native, settings.max_autocorrelation)
    trainer_cpu = trainer_cpu or 0.0
    # not intra-op work: its Python threads (a pipeline's among them), or, unread, its pipeline's threads
    if python_cpu is None:
        python_cpu = (pipeline_cores(window, loader) or 0.0) if threads else 0.0
    threads_cpu = max(0.0, trainer_cpu - main_cpu - python_cpu) if main_cpu is not None else 0.0
    missing = _missing(wait, workers, figures, allowed, job_cores, threads)
    caps, parts_source = _caps(window, loader, workers, figures, settings)
    per_rank = allowed / ranks if allowed else None
    return Capacity(loader, wait, workers, figures, allowed, per_rank, job_cores, trainer_cpu, threads_cpu, caps,
                    missing, job_error, window.shown_advice.get(advice_key(loader)), ranks, parts_source,
                    settings, cpus_free(window, allowed, job_cores),
                    trainer_main_cpu=main_cpu if main_cpu is not None else trainer_cpu - threads_cpu,
                    trainer_main_wait=main_wait or 0.0, trainer_threads_error=threads_error)  # fmt: skip


def _worker_figures(
    window: Window, loader: LoaderSample, workers: int, wait: Optional[float], settings: Settings
) -> WorkerFigures:
    """The workers' figures over the window; busy all the time where none of their stacks was read
    yet and the trainer waits: short-lived workers exit before their first dump, and workers that
    cannot keep up work all the time, whatever their CPU says (they may wait on I/O); an idle one
    would have a batch ready and the trainer would not wait (prefetch_factor)."""
    rho = settings.max_autocorrelation
    pids = set(loader.worker_pids)
    figures = thread_figures(window, loader, rho) if on_threads(loader) else worker_figures(window, pids, rho)
    if workers and not figures.sampled and wait is not None and wait * 100 >= settings.input_bound_percent:
        return dataclasses.replace(figures, busy=1.0, busy_error=0.0)
    return figures


def _caps(
    window: Window, loader: LoaderSample, workers: int, figures: WorkerFigures, settings: Settings
) -> tuple[dict[str, int], Optional[str]]:
    """(workers at most by memory | disk | parts, how the parts were learnt): what stops more
    workers from helping whatever the model asks for."""
    system = window.latest.system
    caps: dict[str, int] = {}
    if system is not None and figures.memory and workers:
        room = settings.workers_memory_share * system.mem_available_bytes
        caps["memory"] = workers + math.floor(room / figures.memory)
    if window.once(saturated_disks, settings.disk_util_percent, settings.disk_await_ms):  # the job's: every loader's
        caps["disk"] = workers
    parts, parts_source = source_parts(window, loader, settings)
    if parts is not None:  # an iterable source: a worker beyond its parts gets nothing
        caps["parts"] = max(1, parts)
    if gil_load(window, loader, settings) is not None:  # threads whose Python work fills the one core
        caps["gil"] = workers
    return caps, parts_source


def advice_key(loader: LoaderSample) -> tuple[int, str]:
    """Which loader a suggestion is for: its trainer and the Dataset it serves (a train and a val
    loader of one trainer are told apart)."""
    return loader.trainer_pid, loader.dataset or ""


def _count(wanted: float) -> int:
    """Whole workers for a real number of them (rounding noise aside)."""
    return math.ceil(round(wanted, 6))


def _preferred_step(count: int) -> int:
    """The place in ``PREFERRED_WORKERS`` of the preferred count nearest ``count`` (the larger on a tie)."""
    return min(range(len(PREFERRED_WORKERS)), key=lambda i: (abs(PREFERRED_WORKERS[i] - count), -i))


def _settle(pace: Callable[[float], float]) -> float:
    """The S where S = pace(S): ``pace`` falls as S grows (the wait for a CPU lengthens), so halving
    between now and the pace with no more wait finds it."""
    low, high = 1.0, pace(1.0)
    if high <= low or pace(high) >= high:
        return high
    while high - low > SETTLED * high:
        middle = (low + high) / 2
        low, high = (middle, high) if pace(middle) >= middle else (low, middle)
    return low


def _own_time(wait: float, receiving: float) -> float:
    """The trainer's own time per batch (in batches' times now), 1 - W + R: of the wait, the share
    it spends receiving batches stays its own."""
    return 1 - wait + min(receiving, wait)


def _pace(own_time: float) -> float:
    """How much faster the trainer could go on its own pace, X0 / its own time a batch (at most 20x)."""
    return min(1 / max(own_time, 1e-9), MAX_PACE)


def _cpus_allow(cpus: Optional[float], job_cpu: Optional[float]) -> Optional[float]:
    """A / J: how much faster the CPUs ``cpus`` let a job of ``job_cpu`` cores go; None where either is unknown."""
    return cpus / job_cpu if cpus and job_cpu else None


def _missing(
    wait: Optional[float],
    workers: int,
    figures: WorkerFigures,
    allowed: Optional[float],
    job_cpu: Optional[float],
    threads: bool,
) -> Optional[str]:
    if wait is None:
        return "the trainer's data-wait share (py-spy stacks of the trainer)"
    if allowed is None:
        return "the CPUs the job may use (its affinity and cgroup quota could not be read)"
    if job_cpu is None:
        return "the CPU time of the job's processes (two ticks of /proc readings)"
    if threads and not workers:
        return "its pipeline's threads (their stacks)"
    if workers and not (figures.busy or figures.cpu):
        return "how busy the workers are (their stacks or CPU time)"
    return None

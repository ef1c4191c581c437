"""How fast a job could go, and with how many workers: one model that every advice rule reads,
so their suggestions agree (no rule undoes another's).

A trainer fed by N workers runs at rate X0 (batches/s, unknown in absolute terms) and waits for
data a share W of its time. Per batch it needs (1 - W) / X0 seconds of its own; each batch costs
T / X0 CPU-seconds in the trainer and K / X0 in the workers, T and K being the cores they use now
(window means). Faster than X0 it cannot go beyond its own pace, X0 / (1 - W), nor beyond what
the CPUs allow, A / (T + K) * X0 with A the CPUs the job may use (affinity, cgroup quota) — every
figure of the job's processes summed, so ranks sharing a node share its CPUs. The reachable
speed-up is the smaller of the two; the workers for it, N * busy * speed-up (with a headroom),
busy being the share of time a worker works. With num_workers=0 the trainer fetches itself: the
fetch, a share W of its time, moves to the workers, and its CPU is already in T.

A thread pipeline's workers are threads of the trainer: their figures are the threads' own, their
CPU is in T already, and they share one GIL, which caps them where their Python work fills a core
(``gil.py``).

When the CPUs bind and the trainer runs intra-op threads beside its main thread (torch's
default: one per core), those threads take CPUs the workers need: fewer trainer threads is the
change that helps, not fewer workers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional

from dltop.diagnose.figures import (
    WorkerFigures,
    cpu_means,
    saturated_disks,
    source_parts,
    trusted_wait,
    wait_error,
    worker_figures,
)
from dltop.diagnose.gil import gil_load
from dltop.diagnose.knobs import on_threads
from dltop.diagnose.threads import doers, pipeline_cores, thread_figures
from dltop.diagnose.window import ShownAdvice, Window
from dltop.model import ENDED, LoaderSample
from dltop.settings import DEFAULTS, Settings

# the counts a suggestion prefers where its range holds several (about 25% apart, as Renard's
# series): two reports of one steady job then name the same count, not 38 and 44
PREFERRED_WORKERS = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256)


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
    trainer_threads_cpu: float  # its threads beyond the main one (intra-op), window mean
    speedup_pace: Optional[float]  # 1 / (1 - W)
    speedup_cpus: Optional[float]  # A / job_cpu
    needed: Optional[int]  # workers to keep up at the reachable speed-up, before the caps
    caps: dict[str, int]  # memory | disk | parts | gil -> workers at most
    missing: Optional[str]  # what the model lacks to give a number, in words
    # ``needed`` at the data wait minus and plus its spread of standard errors: every count in it fits
    needed_range: Optional[tuple[int, int]] = None
    shown: Optional[ShownAdvice] = None  # what a live view showed for this trainer so far
    ranks: int = 1  # trainers (ranks) on this node sharing its CPUs: one script, one change for all
    parts_source: Optional[str] = None  # how caps["parts"] (an iterable source's parts) was learnt
    settings: Settings = DEFAULTS  # the thresholds the model was worked out with

    @property
    def speedup(self) -> Optional[float]:
        known = [s for s in (self.speedup_pace, self.speedup_cpus) if s is not None]
        return min(known) if known else None

    @property
    def limited_by_cpus(self) -> bool:
        """The CPUs, not the trainer's own pace, set how much faster it could go."""
        by_cpus, pace = self.speedup_cpus, self.speedup_pace
        return by_cpus is not None and (pace is None or by_cpus < pace)

    @property
    def cpu_bound(self) -> bool:
        """The CPUs bind and leave little room to go faster."""
        by_cpus = self.speedup_cpus
        return self.limited_by_cpus and by_cpus is not None and by_cpus < self.settings.cpu_bound_speedup

    def _capped(self, needed: int) -> int:
        return max(min(self.workers, self.caps.get("parts", self.workers)), min([needed, *self.caps.values()]))

    @property
    def suggested_range(self) -> Optional[tuple[int, int]]:
        """The workers to suggest at either end of the data wait's noise, caps applied; where the
        CPUs bind, what they fit is the ceiling (not a point in the noise)."""
        if self.needed_range is None or self.needed is None:
            return None
        low, high = self.needed_range
        high = min(high, self.needed) if self.limited_by_cpus else high
        return self._capped(low), self._capped(high)

    @property
    def suggested(self) -> Optional[int]:
        """One number that holds while the job does: what was shown, while it stays in the range;
        else the preferred number in the range nearest the model's own (two reports of one steady
        job agree), or the model's own where the range holds none."""
        if self.needed is None or self.suggested_range is None:
            return None
        low, high = self.suggested_range
        central = self._capped(self.needed)
        if central > self.workers:  # the model asks for more: so does the count, whatever its noise
            low = max(low, self.workers + 1)
        if self.shown is not None and low <= self.shown.workers <= high:
            return self.shown.workers
        fitting = [n for n in PREFERRED_WORKERS if low <= n <= high]
        return min(fitting, key=lambda n: (abs(n - central), n)) if fitting else central

    @property
    def binding(self) -> Optional[str]:
        """What stops more workers from helping: cpus | memory | disk | parts | gil | None (the model's own count)."""
        if self.needed is None:
            return None
        tightest = min(self.caps, key=self.caps.__getitem__) if self.caps else None
        if tightest is not None and self.caps[tightest] < self.needed:
            return tightest
        return "cpus" if self.limited_by_cpus else None

    @property
    def io_bound_workers(self) -> bool:
        """Busy workers that mostly wait (storage, network) rather than compute; with num_workers=0
        the trainer's fetch, whose CPU is at most the trainer's while it fetched."""
        f, line = self.figures, self.settings.io_bound_cpu_share
        if not self.workers:
            return self.wait is not None and self.wait != 0 and self.trainer_cpu / self.wait < line
        return f.busy > 0 and f.cpu / f.busy < line

    def trainer_threads(self) -> Optional[int]:
        """OMP_NUM_THREADS for the trainer when its intra-op threads take CPUs its workers need."""
        if self.trainer_threads_cpu < self.settings.intra_op_cpu or self.cpus_per_rank is None or not self.cpu_bound:
            return None
        return max(1, math.floor(self.cpus_per_rank - self.workers * self.figures.cpu))


def capacities(window: Window, settings: Settings) -> list[Capacity]:
    """The capacity of every loader of the window's newest tick, worked out once per window:
    several rules read it."""
    return window.once(_every_capacity, settings)


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
    job_cores, trainer_cpu, main_cpu = cpu_means(window, loader.trainer_pid)
    trainer_cpu = trainer_cpu or 0.0
    pipeline_cpu = (pipeline_cores(window, loader) or 0.0) if threads else 0.0  # not intra-op work
    threads_cpu = max(0.0, trainer_cpu - main_cpu - pipeline_cpu) if main_cpu is not None else 0.0
    pace = _pace(wait) if wait is not None else None
    by_cpus = allowed / job_cores if allowed and job_cores else None
    missing = _missing(wait, workers, figures, allowed, job_cores, threads)
    needed, needed_range = None, None
    if missing is None and wait is not None:  # nothing missing: the wait is known
        needed, needed_range = _needed(loader, wait, workers, figures, by_cpus, settings)
    caps, parts_source = _caps(window, loader, workers, figures, settings)
    per_rank = allowed / ranks if allowed else None
    return Capacity(loader, wait, workers, figures, allowed, per_rank, job_cores, trainer_cpu, threads_cpu, pace,
                    by_cpus, needed, caps, missing, needed_range,
                    window.shown_advice.get(advice_key(loader)), ranks, parts_source, settings)  # fmt: skip


def _worker_figures(
    window: Window, loader: LoaderSample, workers: int, wait: Optional[float], settings: Settings
) -> WorkerFigures:
    """The workers' figures over the window; busy all the time where none of their stacks was read
    yet and the trainer waits: short-lived workers exit before their first dump, and workers that
    cannot keep up work all the time, whatever their CPU says (they may wait on I/O); an idle one
    would have a batch ready and the trainer would not wait (prefetch_factor)."""
    figures = thread_figures(window, loader) if on_threads(loader) else worker_figures(window, set(loader.worker_pids))
    if workers and not figures.sampled and wait is not None and wait * 100 >= settings.input_bound_percent:
        return dataclasses.replace(figures, busy=1.0)
    return figures


def _needed(
    loader: LoaderSample,
    wait: float,
    workers: int,
    figures: WorkerFigures,
    by_cpus: Optional[float],
    settings: Settings,
) -> tuple[int, tuple[int, int]]:
    """(workers needed at the measured wait, at the wait minus and plus its spread): every count in
    the range fits the measurement, so advice need not move with its noise."""
    spread = settings.advice_spread_errors * (wait_error(loader) or 0.0)
    low, central, high = (
        _workers_needed(max(0.0, min(w, settings.max_wait_share)), workers, figures.busy, by_cpus, settings)
        for w in (wait - spread, wait, wait + spread)
    )
    return central, (low, high)


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


def _pace(wait: float) -> float:
    """How much faster the trainer could go on its own pace, X0 / (1 - W) (at most 20x)."""
    return 1 / max(1 - wait, 0.05)


def _workers_needed(wait: float, workers: int, busy: float, by_cpus: Optional[float], settings: Settings) -> int:
    """The workers that keep a trainer waiting ``wait`` of its time up with its reachable speed-up."""
    pace = _pace(wait)
    reach = min(pace, by_cpus) if by_cpus is not None else pace
    demand = workers * busy if workers else wait
    needed = math.ceil(round(demand * reach * settings.workers_headroom, 6))
    return min(needed, workers) if reach < settings.min_gain else needed  # no room to go faster: no headroom alone


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

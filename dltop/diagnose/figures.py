"""Window figures the rules share: per-worker averages, the job's CPU, saturated disks, the trainer's
data wait and whether it is input-bound, a paste-ready DataLoader line.

A figure of one tick is a plain function of that tick; a rule reads it over the window through
``Window.per_tick``, which works it out once per tick."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple, Optional

from dltop.diagnose.knobs import command_line_change, found_site, pipeline_change
from dltop.diagnose.window import Window, of_tick
from dltop.model import JOB_ROLES, LoaderSample, ProcessSample, Snapshot
from dltop.settings import Settings

BUSY = ("fetching", "collating", "sending", "stuck")


@dataclass(frozen=True)
class WorkerFigures:
    """A loader's workers averaged over the window: busy share (stacks; their CPU share when no
    stack of theirs was sampled: ``sampled`` False), CPU share of a core, run-queue wait share,
    private memory (USS, else RSS) per worker in bytes; one standard error of the busy share and of
    the CPU share (what the capacity model reads them with)."""

    busy: float
    cpu: float
    cpu_wait: float
    memory: float
    sampled: bool = True
    busy_error: float = 0.0
    cpu_error: float = 0.0

    @property
    def working(self) -> float:
        """The larger of the stack-sampled busy share and the CPU share: a sparse or stale stack
        sample cannot make a CPU-busy worker look idle."""
        return max(self.busy, self.cpu)


class _WorkerTick(NamedTuple):
    """One snapshot's readings of a set of workers, as sums the window adds up (a tuple: the window
    adds each column up at once)."""

    stacked: int  # workers with a stack and a known activity
    busy: int  # ... of them fetching, collating, sending or stuck
    rated: int  # workers with a CPU share
    cpu: float  # sum of their CPU shares (0..1 each)
    waited: int  # workers with a run-queue wait share
    wait: float
    dumps: frozenset[tuple[int, Optional[str]]]  # (pid, when its stack was sampled) of the stacked ones


def _worker_tick(snap: Snapshot, pids: frozenset[int]) -> _WorkerTick:
    rows = [p for p in snap.processes if p.pid in pids]
    stacked = [p for p in rows if p.activity != "unknown" and p.stack]
    cpus = [p.cpu_percent / 100 for p in rows if p.cpu_percent is not None]
    waits = [p.cpu_wait_percent / 100 for p in rows if p.cpu_percent is not None and p.cpu_wait_percent is not None]
    return _WorkerTick(len(stacked), sum(p.activity in BUSY for p in stacked), len(cpus), sum(cpus), len(waits),
                       sum(waits), frozenset((p.pid, p.stack_at) for p in stacked))  # fmt: skip


def worker_figures(window: Window, pids: set[int], max_rho: float = 0.95) -> WorkerFigures:
    ticks = window.per_tick(_worker_tick, frozenset(pids))
    stacked, busy, rated, cpu, waited, wait, _ = zip(*ticks)
    # rates need a tick before them: the first tick's are left out
    cpu_share = sum(cpu[1:]) / max(1, sum(rated[1:]))
    waits = sum(wait[1:]) / max(1, sum(waited[1:]))
    memory = _mean([m for p in window.latest.processes if p.pid in pids and (m := private_memory(p))])
    stacked_total, busy_total = sum(stacked), sum(busy)
    share = busy_total / stacked_total if stacked_total else min(1.0, cpu_share)
    cpu_error = tick_error([t.cpu / t.rated for t in ticks[1:] if t.rated], max_rho)
    busy_error = share_error(share, _stacks_read(ticks)) if stacked_total else cpu_error
    return WorkerFigures(share, cpu_share, waits, memory or 0.0, bool(stacked_total), busy_error, cpu_error)


def _stacks_read(ticks: list[_WorkerTick]) -> int:
    """The distinct stacks behind the ticks' busy counts: a worker's stack is read every few
    seconds and shown at every tick until the next, so a stack shown at ten ticks is one sample
    (one whose time is unknown counts at each tick)."""
    dated = {dump for tick in ticks for dump in tick.dumps if dump[1] is not None}
    return len(dated) + sum(1 for tick in ticks for dump in tick.dumps if dump[1] is None)


def share_error(share: float, samples: float) -> float:
    """One standard error of a share read from ``samples`` independent samples, sqrt(p (1 - p) / n);
    a share of all or nothing is still +-1/n (its floor)."""
    return math.sqrt(max(share * (1 - share), 1 / samples) / samples) if samples > 0 else 1.0


def tick_error(values: list[float], max_rho: float = 0.95) -> float:
    """One standard error of the mean of per-tick readings: their spread over the ticks' effective
    count, n (1 - rho) / (1 + rho) for their lag-1 autocorrelation rho (neighbouring ticks are
    alike: a CPU reading spans the tick before). 0 where fewer than two readings show a spread."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    squares = sum((v - mean) ** 2 for v in values)
    if not squares:
        return 0.0
    rho = sum((a - mean) * (b - mean) for a, b in zip(values, values[1:])) / squares
    rho = min(max(rho, 0.0), max_rho)
    return math.sqrt(squares / (n - 1) / (n * (1 - rho) / (1 + rho)))


def private_memory(proc: ProcessSample) -> Optional[int]:
    """USS (what the process alone holds); RSS where USS cannot be read (another user's job)."""
    return proc.uss_bytes if proc.uss_bytes is not None else proc.rss_bytes


def job_sum(snap: Snapshot, attr: str, roles: tuple[str, ...] = JOB_ROLES) -> Optional[float]:
    """Sum of a per-process percentage over the job's processes, in cores; None if none has it."""
    values = [getattr(p, attr) for p in snap.processes if p.role in roles and getattr(p, attr) is not None]
    return sum(values) / 100 if values else None


def job_cpu(snap: Snapshot) -> Optional[float]:
    """Cores the job used at this tick: its trainers' and workers' CPU, and what children that
    lived and exited between two ticks used (workers respawned every short epoch, under a
    trainer or its forkserver: in no reading of their own, only in their parent's cutime)."""
    used = job_sum(snap, "cpu_percent", JOB_ROLES)
    unseen = job_sum(snap, "unseen_children_cpu_percent", (*JOB_ROLES, "helper"))
    return used + (unseen or 0.0) if used is not None else None


def process_share(snap: Snapshot, pid: int, attr: str = "cpu_percent") -> Optional[float]:
    """One process's percentage figure at this tick, in cores (None if it has none)."""
    proc = of_tick(snap, processes_by_pid).get(pid)
    value = getattr(proc, attr) if proc is not None else None
    return value / 100 if value is not None else None


def processes_by_pid(snap: Snapshot) -> dict[int, ProcessSample]:
    """The tick's processes by pid (the first of a pid listed twice, as a search in order finds it)."""
    found: dict[int, ProcessSample] = {}
    for proc in snap.processes:
        found.setdefault(proc.pid, proc)
    return found


def column_means(rows: Iterable[tuple[Optional[float], ...]], width: int) -> tuple[Optional[float], ...]:
    """Per column of ``width`` figures a tick (one pass over the window for all of them), its mean
    over the ticks where it is not None."""
    columns = list(zip(*rows)) or [()] * width
    return tuple(_mean([v for v in column if v is not None]) for column in columns)


def cpu_figures(snap: Snapshot, trainer_pid: int) -> tuple[Optional[float], ...]:
    """(job's cores, the trainer's cores, its main thread's cores, the share of the time its main
    thread waits runnable for a CPU, its Python threads' cores beside the main one) at one tick
    (the job's worked out once a tick, not once per trainer)."""
    main_thread = process_share(snap, trainer_pid, "main_thread_cpu_percent")
    waiting = process_share(snap, trainer_pid, "cpu_wait_percent")
    python = process_share(snap, trainer_pid, "python_threads_cpu_percent")
    return of_tick(snap, job_cpu), process_share(snap, trainer_pid), main_thread, waiting, python


def cpu_means(window: Window, trainer_pid: int) -> tuple[Optional[float], ...]:
    """``cpu_figures``' window means (rates: from the second tick, which has one before it), worked
    out once per window: the capacity model and the GIL rule read the same."""
    return window.once(_cpu_means, trainer_pid)


def _cpu_means(window: Window, trainer_pid: int) -> tuple[Optional[float], ...]:
    return column_means(window.per_tick(cpu_figures, trainer_pid)[1:], width=5)


def others_cores(snap: Snapshot) -> Optional[float]:
    """Cores the machine's other processes used at this tick: its busy CPUs less the job's and
    dltop's own (its sampling leaves with it)."""
    system, job = snap.system, of_tick(snap, job_cpu)
    if system is None or system.cpu_busy_percent is None or job is None:
        return None
    busy = system.cpu_busy_percent / 100 * system.cpus_logical
    return max(0.0, busy - job - (system.monitor_cpu_percent or 0.0) / 100)


def cpus_free(window: Window, allowed: Optional[float], used: Optional[float]) -> Optional[float]:
    """The CPUs the job could grow into over the window: those it may use, less what the machine's
    other processes keep of all of them (as they use them now: under the kernel's fair share more
    workers would win some back, so this errs low), and never fewer than the ``used`` it uses now;
    ``allowed`` where the host's load is unread."""
    system = window.latest.system
    (others,) = column_means(((o,) for o in window.per_tick(others_cores)[1:]), width=1)
    if not allowed or system is None or others is None:
        return allowed
    return min(allowed, max(system.cpus_logical - others, used or 0.0))


def job_load(snap: Snapshot) -> tuple[Optional[float], Optional[float]]:
    """(cores the job used, cores its processes waited for in the run queue) at one tick."""
    return of_tick(snap, job_cpu), job_sum(snap, "cpu_wait_percent")


@dataclass(frozen=True)
class DiskLoad:
    """A device the job reads from, averaged over the window."""

    device: str
    name: str
    util_percent: float
    r_await_ms: float
    read_bytes_per_s: float


def saturated_disks(window: Window, util_percent: float, await_ms: float) -> list[DiskLoad]:
    """Devices the job uses that were busy at least ``util_percent`` of the window with reads
    waiting at least ``await_ms`` each (util alone misleads on devices that serve requests in
    parallel, such as NVMe)."""
    found = []
    for device in sorted({d.device for snap in window.ticks for d in snap.disks if d.used_by_job}):
        rows = [d for snap in window.ticks for d in snap.disks if d.device == device]
        util = sum(d.util_percent for d in rows) / len(rows)
        r_await = _mean([d.r_await_ms for d in rows if d.r_await_ms is not None])
        if util >= util_percent and r_await is not None and r_await >= await_ms:
            read = sum(d.read_bytes_per_s for d in rows) / len(rows)
            found.append(DiskLoad(device, rows[-1].name or device, util, r_await, read))
    return found


def _mean(values: list[float]) -> Optional[float]:
    return sum(values) / len(values) if values else None


def trusted_wait(loader: LoaderSample, min_samples: int) -> Optional[float]:
    """The loader's data-wait share (0..1) once enough trainer samples back it, else None."""
    spent = loader.trainer_time
    if spent is None or spent.samples < min_samples or loader.data_wait_percent is None:
        return None
    return loader.data_wait_percent / 100


def wait_error(loader: LoaderSample) -> Optional[float]:
    """One standard error (0..1) of the loader's sampled data-wait share: sqrt(p (1 - p) / n) for
    the trainer's effective samples (neighbouring samples are alike: a wait comes in runs), its raw
    count where the collector did not say."""
    spent = loader.trainer_time
    if spent is None or not spent.samples or loader.data_wait_percent is None:
        return None
    samples = spent.effective_samples if spent.effective_samples is not None else spent.samples
    return share_error(loader.data_wait_percent / 100, samples)


def surely_above(wait: float, error: Optional[float], percent: float) -> bool:
    """The sampled share clears the threshold by one standard error (a share read from 90 samples
    is +-5 points: 33% of them is not yet evidence of 30%)."""
    return (wait - (error or 0.0)) * 100 >= percent


def input_bound_wait(loader: LoaderSample, settings: Settings) -> Optional[float]:
    """The trainer's data-wait share (0..1) when it surely clears input-bound's line, else None:
    the one test of "this trainer waits for data" that input-bound and gpu-underutilized share."""
    wait = trusted_wait(loader, settings.min_stack_samples)
    if wait is None or not surely_above(wait, wait_error(loader), settings.input_bound_percent):
        return None
    return wait


def loader_change(loader: LoaderSample, **changes: object) -> str:
    """The change to make, paste-ready, where the user makes it: the keyword arguments of the
    DataLoader (its dataset's class as the job's code spells it and the line that builds it), or of
    the library call that builds it (timm's create_loader, transformers' TrainingArguments and its
    dataloader_num_workers), or the command-line flag the script reads the count from; and the
    values they replace, where known. Another pipeline's worker count is spelt as its own call
    spells it (``knobs``)."""
    workers = changes.get("num_workers")
    if isinstance(workers, int) and set(changes) == {"num_workers"}:
        other = pipeline_change(loader, workers)
        if other is not None:
            return other
    current = {"num_workers": loader.num_workers, "persistent_workers": loader.persistent_workers,
               "pin_memory": loader.pin_memory}  # fmt: skip
    was = ", ".join(f"{k}={current[k]!r}" for k in changes if current.get(k) is not None)
    now = f"; now {was}" if was else ""
    over = f" over {loader.dataset}" if loader.dataset else ""
    site = found_site(loader, None)  # a DataLoader's, not another pipeline's call
    where = f" ({loader.built_at})" if site and loader.built_at else ""
    builder = loader.built_by if site and loader.built_by != "DataLoader" else None
    if workers is not None and set(changes) == {"num_workers"} and site and loader.workers_flag:
        return command_line_change(loader, workers, now)  # the script reads the count from its command line
    if builder is not None:
        # a library builds the DataLoader: the change goes in the user's call to it, its keywords
        # spelt as that call spells num_workers (transformers: dataloader_num_workers, _pin_memory...)
        prefix = (loader.workers_keyword or "num_workers").removesuffix("num_workers")
        kwargs = ", ".join(f"{prefix}{k}={v!r}" for k, v in changes.items())
        return f"{kwargs}  # in {builder}(...){where}, which builds the DataLoader{over}{now}"
    kwargs = ", ".join(f"{k}={v!r}" for k, v in changes.items())
    return f"{kwargs}  # in the DataLoader{over}{where}{now}"


def _worker_activities(snap: Snapshot, pids: frozenset[int]) -> dict[int, bool]:
    """{worker pid: busy} for the workers among ``pids`` whose stack at this tick says what they do."""
    return {p.pid: p.activity in BUSY for p in snap.processes if p.pid in pids and p.stack and p.activity != "unknown"}


def loader_at(snap: Snapshot, trainer_pid: int, dataset: Optional[str]) -> Optional[LoaderSample]:
    """A loader (its trainer and Dataset) as this tick saw it."""
    return next((x for x in snap.loaders if x.trainer_pid == trainer_pid and x.dataset == dataset), None)


def _alive_workers(snap: Snapshot, trainer_pid: int, dataset: Optional[str]) -> Optional[int]:
    """How many workers this loader had alive at this tick (None where it had none: between epochs)."""
    loader = loader_at(snap, trainer_pid, dataset)
    return len(loader.worker_pids) or None if loader is not None else None


@dataclass(frozen=True)
class Starving:
    """Workers of an iterable loader that get no part of its source: idle ones (persistent workers,
    told their part is done) and, under non-persistent workers, those torch shut down for it."""

    idle_pids: list[int]
    ended: int  # workers fewer than num_workers for most of the window: ended early, their part done
    ended_pids: list[int] = field(default_factory=list)  # those of them seen exit, while seen

    @property
    def count(self) -> int:
        return len(self.idle_pids) + self.ended

    @property
    def pids(self) -> list[int]:
        return sorted(self.idle_pids + self.ended_pids)


def starving_workers(window: Window, loader: LoaderSample, settings: Settings) -> Starving:
    """An iterable dataset splits its source among the workers (get_worker_info): a worker with no
    part stops at once. Torch then leaves a persistent worker idle, and shuts a non-persistent one
    down while its siblings go on; both show here, against siblings that work."""
    if loader.dataset_kind != "iterable" or loader.num_workers < 2:
        return Starving([], 0)
    idle = _idle_beside_working(window, loader, settings)
    if idle is None:
        return Starving([], 0)
    ended, left = _ended_early(window, loader)
    return Starving(idle, ended, left)


def _idle_beside_working(window: Window, loader: LoaderSample, settings: Settings) -> Optional[list[int]]:
    """The workers idle in every one of enough stacks, where their siblings work: None when the
    siblings idle too (a loader between passes starves no one)."""
    busy: dict[int, list[bool]] = {}
    for tick in window.per_tick(_worker_activities, frozenset(loader.worker_pids)):
        for pid, fetching in tick.items():
            busy.setdefault(pid, []).append(fetching)
    shares = {pid: sum(seen) / len(seen) for pid, seen in busy.items() if len(seen) >= settings.starving_min_stacks}
    idle = sorted(pid for pid, share in shares.items() if share == 0)
    working = [share for pid, share in shares.items() if pid not in idle]
    if not working or sum(working) / len(working) * 100 < settings.starving_siblings_busy_percent:
        return None
    return idle


def _ended_early(window: Window, loader: LoaderSample) -> tuple[int, list[int]]:
    """(workers fewer than num_workers for most of the window, those of them seen leave): torch
    shuts down a non-persistent worker whose part is done while its siblings go on."""
    alive = [n for n in window.per_tick(_alive_workers, loader.trainer_pid, loader.dataset) if n is not None]
    typical = sorted(alive)[len(alive) // 2] if alive else loader.num_workers
    ended = max(0, loader.num_workers - typical) if not loader.persistent_workers else 0
    # the workers seen leave cleanly while the trainer ran: the newest ones are those of this epoch
    left = sorted((w for w in loader.workers_exited if w.cause == "ended" and w.trainer_running),
                  key=lambda w: w.gone_at)  # fmt: skip
    return ended, sorted(w.pid for w in left[-ended:]) if ended else []


def source_parts(window: Window, loader: LoaderSample, settings: Settings) -> tuple[Optional[int], Optional[str]]:
    """(parts, how known) of an iterable loader's source: the fewest of what the collector counted
    and what its starving workers imply — torch's convention (webdataset's split_by_worker,
    datasets' shards) deals parts round-robin, so with k of N workers starving there are N - k (a
    directory may hold more shards than the loader reads). Shard files counted in a folder of
    which its workers were seen reading only some are no count: the loader may read all of them or
    only those (webdataset over 2 of 4), and the files seen read are a floor, which caps nothing
    (``LoaderSample.parts_read`` says it)."""
    if loader.dataset_kind != "iterable":
        return None, None
    parts, how = (loader.parts, loader.parts_source) if loader.parts_read is None else (None, None)
    starving = starving_workers(window, loader, settings)
    implied = loader.num_workers - starving.count if starving.count else None
    if implied is not None and (parts is None or implied < parts):
        return implied, f"{starving.count} of its {loader.num_workers} workers get no data"
    return parts, how

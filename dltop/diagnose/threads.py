"""A thread pipeline's threads over the window (torchdata.nodes' thread mappers, SPDL's executor, a
pool of the user's): the figures the capacity model reads of worker processes, from the threads'
own rows (``LoaderSample.worker_threads``), since they are no processes of their own."""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple, Optional

from dltop.diagnose.figures import BUSY, WorkerFigures, column_means, loader_at, share_error, tick_error
from dltop.diagnose.window import Window
from dltop.frames import costly_frame
from dltop.model import LoaderSample, Snapshot, WorkerThread


def doers(threads: list[WorkerThread]) -> list[WorkerThread]:
    """The threads that do a pipeline's work: its workers, else its feeders (threads of the user's
    own that fill a queue)."""
    workers = [t for t in threads if t.kind == "worker"]
    return workers or [t for t in threads if t.kind == "feeder"]


def thread_named(thread: WorkerThread) -> str:
    """'worker thread ThreadPoolExecutor-0_1 (tid 4242)'."""
    return f"{thread.kind} thread {thread.name or '?'} (tid {thread.tid})"


class _ThreadTick(NamedTuple):
    """One tick's readings of a loader's threads, as sums the window adds up."""

    stacked: int  # doers with a stack and a known activity
    busy: int  # ... of them not idle
    rated: int  # doers with a CPU share
    cpu: float  # their CPU shares summed (0..1 each)
    all_cpu: Optional[float]  # every thread of the pipeline (workers and feeders), in cores


def _thread_tick(snap: Snapshot, trainer_pid: int, dataset: Optional[str]) -> _ThreadTick:
    loader = loader_at(snap, trainer_pid, dataset)
    threads = loader.worker_threads if loader is not None else []
    mine = doers(threads)
    activities = [t.activity for t in mine if t.stack and t.activity != "unknown"]
    cpus = [t.cpu_percent / 100 for t in mine if t.cpu_percent is not None]
    every = [t.cpu_percent / 100 for t in threads if t.cpu_percent is not None]
    return _ThreadTick(len(activities), sum(a in BUSY for a in activities), len(cpus), sum(cpus),
                       sum(every) if every else None)  # fmt: skip


def thread_figures(window: Window, loader: LoaderSample, max_rho: float = 0.95) -> WorkerFigures:
    """The pipeline's working threads as a loader's workers: busy share (the collector's share of
    their samples not idle, else their stacks over the window, else their CPU), CPU share of a
    core each; no memory of their own (threads share the trainer's). Their errors as a worker
    process's: a busy share read from the trainer's effective samples (its threads are sampled with
    it), or from one stack a tick; the CPU's from its spread over the ticks."""
    ticks = window.per_tick(_thread_tick, loader.trainer_pid, loader.dataset)
    stacked, busy, rated, cpu, _ = zip(*ticks)
    cpu_share = sum(cpu) / max(1, sum(rated))
    cpu_error = tick_error([t.cpu / t.rated for t in ticks if t.rated], max_rho)
    shares = [t.busy_percent / 100 for t in doers(loader.worker_threads) if t.busy_percent is not None]
    if shares:
        share = sum(shares) / len(shares)
        samples = _trainer_samples(loader) * len(shares)
        return WorkerFigures(share, cpu_share, 0.0, 0.0, True, share_error(share, samples), cpu_error)
    stacked_total = sum(stacked)
    share = sum(busy) / stacked_total if stacked_total else min(1.0, cpu_share)
    busy_error = share_error(share, sum(1 for n in stacked if n)) if stacked_total else cpu_error
    return WorkerFigures(share, cpu_share, 0.0, 0.0, bool(stacked_total), busy_error, cpu_error)


def _trainer_samples(loader: LoaderSample) -> float:
    """The trainer's effective samples (its raw count where unsaid; one where it has none)."""
    spent = loader.trainer_time
    if spent is None:
        return 1.0
    return spent.effective_samples if spent.effective_samples is not None else float(spent.samples or 1)


def pipeline_cores(window: Window, loader: LoaderSample) -> Optional[float]:
    """Cores every thread of the pipeline used together, window mean (None where none was read)."""
    rows = [(tick.all_cpu,) for tick in window.per_tick(_thread_tick, loader.trainer_pid, loader.dataset)]
    return column_means(rows, width=1)[0]


def hot_thread_frame(window: Window, loader: LoaderSample) -> Optional[str]:
    """Where the pipeline's threads spend their work: the user's frame above their loop seen most
    often over the window."""
    counts: Counter[str] = Counter()
    for frames in window.per_tick(_thread_frames, loader.trainer_pid, loader.dataset):
        counts.update(frames)
    return max(counts, key=counts.__getitem__) if counts else None


def _thread_frames(snap: Snapshot, trainer_pid: int, dataset: Optional[str]) -> Counter[str]:
    loader = loader_at(snap, trainer_pid, dataset)
    threads = doers(loader.worker_threads) if loader is not None else []
    found = (costly_frame(t.stack) for t in threads if t.stack and t.activity in BUSY)
    return Counter(frame.where() for frame in found if frame is not None)

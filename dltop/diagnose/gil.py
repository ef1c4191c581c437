"""The GIL: a thread pipeline whose threads are CPU-bound in Python (gil-bound). Threads of one
process run Python one at a time: when they and the trainer's main thread together use about one
core, the threads at least as much as the main thread, the pipeline runs at the pace its GIL
allows, and the trainer waits for it, for data in ``next()`` or for the lock in its own step,
whatever its data wait shows; more threads only queue for the same lock. The capacity
model reads the same judgement (``gil_load``) as a cap, so input-bound never asks for more threads
this rule says will not help.

Free-threaded Python (3.13t and later) has no GIL: a trainer whose executable says so (``python3.13t``)
is not judged; one started through another name is (docs/findings.md#gil-bound)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from dltop.diagnose.figures import cpu_means, loader_at, processes_by_pid, trusted_wait
from dltop.diagnose.knobs import NAMES, found_site, knob_of, on_threads
from dltop.diagnose.threads import doers, hot_thread_frame, pipeline_cores, thread_figures
from dltop.diagnose.window import Window
from dltop.model import Finding, LoaderSample, ProcessSample, WorkerThread
from dltop.model.findings import GIL_BOUND
from dltop.settings import Settings

_FREE_THREADED = re.compile(r"(?:^|/)python3\.\d+t(?:\s|$)")
RELEASE_GIL = "or move the per-sample work into code that releases the GIL (numpy and torch ops, PIL decoding, I/O)"


@dataclass(frozen=True)
class GilLoad:
    """A thread pipeline's Python work against the one core its GIL allows, window means in cores."""

    wait: float  # the trainer's data wait (0..1)
    threads_cores: float  # every thread of the pipeline
    main_cores: float  # the trainer's main thread
    busy: float  # the working threads' busy share
    workers: int

    @property
    def cores(self) -> float:
        return self.threads_cores + self.main_cores


def free_threaded(trainer: ProcessSample) -> bool:
    """The trainer runs a free-threaded Python (no GIL), as its executable's name says."""
    return any(_FREE_THREADED.search(text) for text in (trainer.name, trainer.cmdline.split(" ", 1)[0]))


def gil_load(window: Window, loader: LoaderSample, settings: Settings) -> Optional[GilLoad]:
    """The loader's GIL load where the GIL binds it (else None): worked out once per window."""
    return window.once(_gil_load, loader.trainer_pid, loader.dataset, settings)


def _gil_load(window: Window, trainer_pid: int, dataset: Optional[str], settings: Settings) -> Optional[GilLoad]:
    loader = loader_at(window.latest, trainer_pid, dataset)
    trainer = processes_by_pid(window.latest).get(trainer_pid)
    if loader is None or trainer is None or not on_threads(loader) or free_threaded(trainer):
        return None
    wait = trusted_wait(loader, settings.min_stack_samples)
    figures = thread_figures(window, loader)
    threads = pipeline_cores(window, loader)
    if wait is None or threads is None or figures.busy * 100 < settings.gil_busy_percent:
        return None
    main = cpu_means(window, trainer_pid)[2] or 0.0
    if threads < main:
        return None  # the trainer's own step takes most of the core (its compute may run outside the GIL)
    load = GilLoad(wait, threads, main, figures.busy, len(doers(loader.worker_threads)) or loader.num_workers)
    return load if settings.gil_cores <= load.cores <= settings.gil_cores_max else None


def gil_bound(window: Window, settings: Settings) -> list[Finding]:
    findings = []
    for loader in window.latest.loaders:
        load = gil_load(window, loader, settings)
        if load is not None:
            findings.append(_finding(window, loader, load, settings))
    return findings


def _finding(window: Window, loader: LoaderSample, load: GilLoad, settings: Settings) -> Finding:
    hot = hot_thread_frame(window, loader)
    fix, change = _fix(loader, load.workers)
    pipeline = NAMES[loader.pipeline] if loader.pipeline is not None else "input"
    return Finding(
        id=GIL_BOUND,
        severity="warning",
        title=f"Trainer {loader.trainer_pid}'s {pipeline} threads are bound by the GIL: {load.cores:.2f} cores of"
        f" Python while it waits for data {load.wait * 100:.0f}% of the time"
        + ("" if load.wait * 100 >= settings.input_bound_percent else " and for the GIL in its step"),
        detail=f"{load.workers} thread(s), busy {load.busy * 100:.0f}% of their samples, use {load.threads_cores:.2f}"
        f" cores together and the trainer's main thread {load.main_cores:.2f}: about the one core Python lets the"
        " threads of one process run at once (they share one GIL). More threads will not help: they would queue"
        " for the same lock. The work must leave the GIL: worker processes, or code that releases it"
        + (f"; most of it runs in {hot}." if hot else "."),
        pids=[loader.trainer_pid],
        evidence={
            "trainer_pid": loader.trainer_pid,
            "pipeline": loader.pipeline,
            "data_wait_percent": round(load.wait * 100, 1),
            "python_cores": round(load.cores, 2),
            "threads_cores": round(load.threads_cores, 2),
            "main_thread_cores": round(load.main_cores, 2),
            "worker_busy_percent": round(load.busy * 100, 1),
            "num_workers": load.workers,
            "threads": [_thread_row(t) for t in loader.worker_threads],
            "hottest_user_frame": hot,
            "change": change,
        },
        suggestion=f"{fix}; {RELEASE_GIL}" + (f", starting with {hot}" if hot else ""),
        impact=load.wait,
    )


def _thread_row(thread: WorkerThread) -> dict[str, Any]:
    return {"tid": thread.tid, "name": thread.name, "kind": thread.kind, "cpu_percent": thread.cpu_percent,
            "busy_percent": thread.busy_percent}  # fmt: skip


def _fix(loader: LoaderSample, workers: int) -> tuple[str, dict[str, Any]]:
    """(the change that takes the work out of the GIL, as data), in the pipeline's own call."""
    knob = knob_of(loader)
    where = f" ({loader.built_at})" if knob is not None and found_site(loader, knob.call) and loader.built_at else ""
    if loader.pipeline == "torchdata.nodes":
        return (f'method="process"  # in ParallelMapper(...){where}: its {workers} workers become processes, each'
                " with its own GIL (a map_fn and its items must pickle)", {"method": "process"})  # fmt: skip
    pool = f"ProcessPoolExecutor(max_workers={workers})"
    if loader.pipeline == "spdl":
        return (f".pipe(fn, concurrency={workers}, executor={pool})  # the costly stage{where}: its function runs"
                " in processes (it and its items must pickle)", {"executor": "ProcessPoolExecutor"})  # fmt: skip
    if knob is not None and any(t.kind == "worker" for t in loader.worker_threads):
        return (f"{pool} instead of ThreadPoolExecutor{where}: the function and its items must pickle",
                {"executor": "ProcessPoolExecutor"})  # fmt: skip
    return ("run the work that fills the queue in processes (multiprocessing, or a ProcessPoolExecutor)",
            {"executor": "ProcessPoolExecutor"})  # fmt: skip

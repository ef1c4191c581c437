"""The knob that sets an input pipeline's worker count, spelt where the user edits it: a
DataLoader's ``num_workers`` (``figures.loader_change``), torchdata.nodes' ``ParallelMapper``
``num_workers`` (threads, or processes with ``method="process"``), an SPDL stage's ``concurrency``
(which the pool of ``build(num_threads=...)`` caps), a ``ThreadPoolExecutor``'s ``max_workers``; or
the command-line flag the script reads it from. Advice in another pipeline's words is no advice."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from dltop.model import LoaderSample, Pipeline

# pipelines whose workers may be threads of the trainer (torchdata.nodes' also processes)
THREAD_PIPELINES: tuple[Pipeline, ...] = ("torchdata.nodes", "spdl", "threads")


@dataclass(frozen=True)
class Knob:
    call: str  # the call as the user's code spells it (LoaderSample.built_by where dltop found it)
    keyword: str  # the keyword that sets the count there
    spelt: str  # the call as a suggestion names it


KNOBS: dict[Pipeline, Knob] = {
    "torchdata.nodes": Knob("ParallelMapper", "num_workers", "ParallelMapper(...)"),
    "spdl": Knob("pipe", "concurrency", "the stage's .pipe(...)"),
    "threads": Knob("ThreadPoolExecutor", "max_workers", "ThreadPoolExecutor(...)"),
}
# a pipeline as a sentence names it ("Trainer 1's SPDL threads")
NAMES: dict[Pipeline, str] = {"dataloader": "DataLoader", "torchdata.nodes": "torchdata.nodes", "spdl": "SPDL",
                              "threads": "input"}  # fmt: skip
# the calls of the other pipelines: a DataLoader's advice never names one of them as its site
PIPELINE_CALLS = frozenset(knob.call for knob in KNOBS.values())
SPDL_THREADS = (
    "; build(num_threads=...) must be at least the concurrency of every stage summed, or its thread pool caps them"
)


def knob_of(loader: LoaderSample) -> Optional[Knob]:
    """The knob of its pipeline; None for a DataLoader's (``num_workers``, ``figures.loader_change``)."""
    return KNOBS.get(loader.pipeline) if loader.pipeline is not None else None


def is_dataloader(loader: LoaderSample) -> bool:
    """A DataLoader's (or a loader whose pipeline the stacks have not named yet)."""
    return loader.pipeline in (None, "dataloader")


def on_threads(loader: LoaderSample) -> bool:
    """Its workers are threads of the trainer, not processes: they share one GIL and one memory."""
    return loader.start_method == "thread" or (loader.pipeline in THREAD_PIPELINES and not loader.worker_pids)


def count_keyword(loader: LoaderSample) -> str:
    """The keyword its worker count goes by, as ``evidence.change`` names it."""
    knob = knob_of(loader)
    return knob.keyword if knob is not None else "num_workers"


def thread_unit(loader: LoaderSample) -> str:
    return "thread(s)" if on_threads(loader) else "worker(s)"


def found_site(loader: LoaderSample, call: Optional[str]) -> bool:
    """Whether the call dltop found in the user's code is this pipeline's (``call``; None: a
    DataLoader's or its builders')."""
    return loader.built_by == call if call is not None else loader.built_by not in PIPELINE_CALLS


def command_line_change(loader: LoaderSample, workers: object, now: str) -> str:
    """The count as the flag the script reads it from: what the user edits."""
    passes = f"{loader.built_at} passes it to {loader.built_by} as {loader.workers_keyword}" if (
        loader.built_at) else f"the script passes it to {loader.built_by} as {loader.workers_keyword}"  # fmt: skip
    return f"{loader.workers_flag} {workers} on the command line  # {passes}{now}"


def pipeline_change(loader: LoaderSample, workers: int) -> Optional[str]:
    """The worker count of a pipeline other than DataLoader, as its own call spells it; None for a
    DataLoader's."""
    knob = knob_of(loader)
    if knob is None:
        return None
    count = loader.num_workers or len(loader.worker_threads)
    if loader.pipeline == "torchdata.nodes":
        now = f"; now num_workers={count}" if count else ""
    else:
        now = f"; now {count} worker thread(s)" if count else ""
    if loader.pipeline == "threads" and not any(t.kind == "worker" for t in loader.worker_threads):
        # threads of the user's own (threading.Thread) fill its queue: no pool to size
        return f"start {workers} of the threads that fill the queue{now}"
    site = found_site(loader, knob.call)
    if site and loader.workers_flag:
        return command_line_change(loader, workers, now)
    where = f" ({loader.built_at})" if site and loader.built_at else ""
    method = ', method="process"' if loader.pipeline == "torchdata.nodes" and not on_threads(loader) else ""
    pool = SPDL_THREADS if loader.pipeline == "spdl" else ""
    return f"{knob.keyword}={workers}{method}  # in {knob.spelt}{where}{now}{pool}"

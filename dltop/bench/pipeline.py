"""The user's own input pipeline, built by their factory for a worker count (``--pipeline
pkg.module:make_loader``, ``make_loader(workers: int)``), trained on as their loop would, and
stopped after every trial, so no trial's threads compete with the next one's.

The factory may return a torchdata.nodes ``Loader`` (or node), an SPDL ``Pipeline`` (started and
stopped through its ``auto_stop()``, as its users must) or any iterable of batches: a prefetcher
of the user's own, closed after each trial when it can be (a generator, or an object with
``close()``). Threads or processes still running after that are counted, and said.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import psutil

from dltop.bench.config import Config, PipelineConfig
from dltop.bench.factory import call_factory, import_factory
from dltop.bench.results import TrialResult
from dltop.bench.step import Step
from dltop.bench.trial import Epochs, Timing, measure
from dltop.errors import DltopError

OPTION = "--pipeline"
LEAST_WORKERS = 1  # a thread pool, a ParallelMapper or an SPDL stage needs one at least
PIPELINE_MAX_WORKERS = 32  # the search's default top: threads waiting on I/O are cheap, past 2 x CPUs too
LEFTOVER_WAIT_S = 2.0  # how long a stopped pipeline's threads may take to end before they count as left


@dataclass(frozen=True)
class Library:
    """A pipeline's library and where its worker count goes, in the library's own words."""

    name: str
    knob: str  # what the count is called: num_workers, concurrency (or the factory's parameter)
    setting: str  # where the user sets it, with {n}; empty for a pipeline of their own


def library_of(made: object, parameter: str) -> Library:
    """What the factory built: told by its type's module (torchdata) or SPDL's ``auto_stop``."""
    if _from_torchdata(made):
        return Library("torchdata.nodes", "num_workers", "ParallelMapper(..., num_workers={n})")
    if hasattr(made, "auto_stop"):
        return Library("SPDL", "concurrency", ".pipe(..., concurrency={n})")
    return Library("own", parameter, "")


class Pipeline:
    """The factory of ``--pipeline``, checked once: it takes a count and builds something iterable."""

    least = LEAST_WORKERS

    def __init__(self, target: str) -> None:
        self.target = self.name = target
        self.factory = import_factory(OPTION, target, "an iterable of batches")
        self.function = target.partition(":")[2]
        self.parameter, self._by_keyword = _count_parameter(target, self.function, self.factory)
        probe = self.build(LEAST_WORKERS)
        self.library = library_of(probe, self.parameter)
        try:  # one batch read: the pipeline works (and an SPDL pipeline whose stages never ran warns)
            with contextlib.ExitStack() as stops:
                first = next(_start(probe, stops), None)
        except Exception as err:
            raise self.failed(LEAST_WORKERS, err) from None
        if first is None:
            raise DltopError(f"{OPTION} {target}: the pipeline {self.function}({LEAST_WORKERS}) made no batch")
        self.params = {"library": self.library.name, "knob": self.library.knob, "parameter": self.parameter}

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def build(self, workers: int) -> Any:
        made = call_factory(OPTION, self.target, self.factory, workers)
        if not hasattr(made, "__iter__"):
            raise DltopError(
                f"{OPTION} {self.target}: the factory returned {type(made).__name__}; expected an iterable of batches"
                " (a torchdata Loader, an SPDL Pipeline, or an iterator of your own)"
            )
        return made

    def failed(self, workers: int, err: Exception) -> DltopError:
        """The user's pipeline raised while the bench read it: one line."""
        where = f"{self.function}({workers})"
        return DltopError(f"{OPTION} {self.target}: reading {where} raised {type(err).__name__}: {err}")

    def named(self, config: Config) -> PipelineConfig:
        """A count as the library names it: 'concurrency=6'."""
        return PipelineConfig(config.num_workers, self.library.knob)

    def describe(self) -> str:
        """'SPDL; its concurrency from spdl_pipeline(concurrency)'."""
        kind = self.library.name if self.library.setting else "your own pipeline"
        return f"{kind}; its {self.library.knob} from {self.function}({self.parameter})"

    def trial(self, config: PipelineConfig, step: Step, timing: Timing,
              gpu_util: Optional[Callable[[], Optional[float]]] = None) -> TrialResult:  # fmt: skip
        return run_pipeline_trial(self, config, step, timing, gpu_util)

    def knobs(self, base: Config, step: Step, methods: list[str]) -> tuple[dict[str, Any], ...]:
        return ()  # the factory builds the rest: only the count varies

    def max_workers(self, cpus: int) -> int:
        return max(2 * cpus, PIPELINE_MAX_WORKERS)

    def ceiling(self, step: Step, cpus: int) -> Optional[dict[str, Any]]:
        return None  # one sample's cost cannot be taken out of a whole pipeline

    def code(self, config: Config) -> str:
        """The call to use: 'make_loader(workers=6)  # ParallelMapper(..., num_workers=6)'."""
        n = config.num_workers
        call = f"{self.function}({self.parameter}={n})" if self._by_keyword else f"{self.function}({n})"
        return f"{call}  # {self.library.setting.format(n=n)}" if self.library.setting else call


def run_pipeline_trial(pipeline: Pipeline, config: PipelineConfig, step: Step, timing: Timing,
                       gpu_util: Optional[Callable[[], Optional[float]]] = None) -> TrialResult:  # fmt: skip
    """One worker count, in batches/s; then what the stopped pipeline left running."""
    before = _running()
    try:
        result = measure(lambda: _PipelineEpochs(pipeline, config.num_workers), config, step, timing, gpu_util,
                         in_flight=config.num_workers, count=_one_batch)  # fmt: skip
    except DltopError:
        raise
    except Exception as err:
        raise pipeline.failed(config.num_workers, err) from None
    return dataclasses.replace(result, left_running=_left_running(*before))


class _PipelineEpochs(Epochs):
    """A pipeline built for each epoch: when its batches end, it is stopped and built again."""

    def __init__(self, pipeline: Pipeline, workers: int) -> None:
        self.pipeline, self.workers = pipeline, workers
        self._stops = contextlib.ExitStack()
        self.iterator = self._start_epoch()

    def _start_epoch(self) -> Iterator[Any]:
        return _start(self.pipeline.build(self.workers), self._stops)

    def _end_epoch(self) -> None:
        self._stops.close()

    def close(self) -> None:
        self._stops.close()


def _start(made: Any, stops: contextlib.ExitStack) -> Iterator[Any]:
    """Its iterator; ``stops`` closes that iterator, leaves SPDL's auto_stop, then shuts the rest down."""
    stops.callback(_shut_down, made)
    if hasattr(made, "auto_stop"):  # SPDL: its threads start here and are joined on exit
        stops.enter_context(made.auto_stop())
    iterator = iter(made)
    stops.callback(_close, iterator)
    return iterator


def _one_batch(batch: Any) -> int:
    return 1


def _count_parameter(target: str, name: str, factory: Callable[..., Any]) -> tuple[str, bool]:
    """(the name of the factory's worker-count parameter, whether it can be passed by keyword)."""
    try:
        parameters = list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a builtin or extension type without a signature: trust it
        return "workers", False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in parameters if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if not positional or len(required) > 1:
        raise DltopError(
            f"{OPTION} {target}: {name}{inspect.signature(factory)} does not take one worker count; expected"
            f" {name}(workers: int) returning an iterable of batches"
        )
    return positional[0].name, positional[0].kind is positional[0].POSITIONAL_OR_KEYWORD


def _close(iterator: Any) -> None:
    """A generator (or an iterator with ``close()``) ends here: its finally blocks stop its threads."""
    close = getattr(iterator, "close", None)
    if callable(close):
        close()


def _shut_down(made: Any) -> None:
    if _from_torchdata(made):
        _shut_down_nodes(made, set())
    _close(made)


def _shut_down_nodes(node: object, seen: set[int]) -> None:
    """torchdata has no public stop: its iterators stop their threads and join their processes in
    ``_shutdown``, which only their ``__del__`` calls. Call it on every node the loader reaches."""
    if id(node) in seen or not hasattr(node, "__dict__"):
        return
    seen.add(id(node))
    shutdown = getattr(node, "_shutdown", None)
    if callable(shutdown):
        shutdown()
    for value in vars(node).values():
        children = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
        for child in children:
            if _from_torchdata(child):
                _shut_down_nodes(child, seen)


def _from_torchdata(thing: object) -> bool:
    """A torchdata.nodes object, or a node of the user's own built on torchdata's BaseNode."""
    return any(cls.__module__.startswith("torchdata.nodes") for cls in type(thing).__mro__)


def _running() -> tuple[set[threading.Thread], set[int]]:
    """The threads and child processes alive now."""
    return set(threading.enumerate()), {child.pid for child in _children()}


def _left_running(threads_before: set[threading.Thread], children_before: set[int]) -> int:
    """Threads and child processes started since and still running after LEFTOVER_WAIT_S."""
    deadline = time.monotonic() + LEFTOVER_WAIT_S
    gc.collect()  # a multiprocessing queue's feeder thread ends when the queue is collected
    threads = [t for t in threading.enumerate() if t not in threads_before]
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    children = 0
    for child in _children():
        with contextlib.suppress(psutil.Error):
            children += child.pid not in children_before and child.status() != psutil.STATUS_ZOMBIE
    return sum(t.is_alive() for t in threads) + children


def _children() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []

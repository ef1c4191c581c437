"""One measured configuration: time to first batch, steady-state samples/s in chunks (median and
spread), the trainer's data-wait share, epoch start-up, and the memory the workers held."""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import psutil
from torch.utils.data import DataLoader

from dltop.bench.config import Config, LoaderConfig
from dltop.bench.results import TrialResult
from dltop.bench.step import Step, count_samples
from dltop.bench.workloads import Workload

RSS_EVERY_S = 0.5


@dataclass(frozen=True)
class Timing:
    """How long a trial measures: warm-up, then ``chunks`` chunks of ``chunk_s`` each."""

    warmup_s: float = 1.0
    chunk_s: float = 1.0
    chunks: int = 3


def run_trial(workload: Workload, config: LoaderConfig, batch_size: int, step: Step, timing: Timing,
              gpu_util: Optional[Callable[[], Optional[float]]] = None) -> TrialResult:  # fmt: skip
    """One DataLoader config: its queue holds num_workers x prefetch_factor batches."""
    loader = DataLoader(**{"batch_size": batch_size, **workload.base, **config.loader_kwargs()})
    in_flight = config.num_workers * (config.prefetch_factor or 2)
    return measure(lambda: _Epochs(loader), config, step, timing, gpu_util, in_flight)


def measure(start: Callable[[], Epochs], config: Config, step: Step, timing: Timing,
            gpu_util: Optional[Callable[[], Optional[float]]] = None, in_flight: int = 0,
            count: Callable[[Any], int] = count_samples) -> TrialResult:  # fmt: skip
    """Train on the batches of ``start()`` (a DataLoader's epochs or a pipeline's) and time them;
    ``count`` says what a batch adds to the rate (its samples, or 1 where batches are counted)."""
    watch = MemoryWatch(gpu_util)
    began = time.perf_counter()
    epochs = start()
    try:
        batch = next(epochs)
        first_batch_s = time.perf_counter() - began
        step(batch)
        watch.start()
        # the queue is full after the first batch: drain it (2 x what it holds at least) before
        # measuring, or a many-worker config is credited with batches made during start-up
        warm = _run_for(epochs, step, timing.warmup_s, count)
        while warm.batches < 2 * in_flight:
            warm.batches += _run_for(epochs, step, timing.warmup_s / 4, count).batches
        rates, waited, spent, batches = [], 0.0, 0.0, 0
        for _ in range(timing.chunks):
            chunk = _run_for(epochs, step, timing.chunk_s, count)
            rates.append(chunk.samples / chunk.elapsed_s)
            waited, spent, batches = waited + chunk.waited_s, spent + chunk.elapsed_s, batches + chunk.batches
        # after the chunks, never between them: workers keep producing while the main thread reads,
        # and batches made outside a chunk but consumed inside it would inflate the next one
        watch.read_uss()
        epoch_start_s = epochs.restart_time()
    finally:
        epochs.close()
        watch.stop()
    return TrialResult(
        config=config,
        samples_per_s=statistics.median(rates),
        low=min(rates),
        high=max(rates),
        first_batch_s=first_batch_s,
        epoch_start_s=epoch_start_s,
        data_wait_percent=100 * waited / spent if spent else 0.0,
        batches=batches,
        workers_peak_rss_bytes=watch.workers_rss,
        workers_peak_uss_bytes=watch.worker_uss,
        total_peak_rss_bytes=watch.total_rss,
        shm_peak_bytes=watch.shm_peak,
        gpu_util_percent=watch.gpu_mean(),
        chunk_rates=rates,
    )


@dataclass
class _Chunk:
    samples: int = 0
    batches: int = 0
    waited_s: float = 0.0
    elapsed_s: float = 0.0


def _run_for(epochs: Epochs, step: Step, seconds: float, count: Callable[[Any], int] = count_samples) -> _Chunk:
    """Train on batches for about ``seconds``: the time inside next() is the data wait."""
    clock = time.perf_counter
    samples = batches = 0
    waited = 0.0
    began = now = clock()
    end = began + seconds
    iterator = epochs.iterator
    while now < end:  # locals only, the loader's own iterator: the harness must cost next to nothing
        try:
            batch = next(iterator)
        except StopIteration:  # an epoch ended, as in training: the next one starts (in the wait)
            iterator = epochs.next_epoch()
            batch = next(iterator)
        fetched = clock()
        waited += fetched - now
        step(batch)
        samples += count(batch)
        batches += 1
        now = clock()
    return _Chunk(samples, batches, waited, now - began)


class Epochs:
    """Batches from epoch after epoch, as a training loop sees them (epoch ends included): what
    starts an epoch and what ends one are the subclass's (a DataLoader's iter(), a pipeline built)."""

    iterator: Iterator[Any]

    def __iter__(self) -> Epochs:
        return self

    def __next__(self):
        try:
            return next(self.iterator)
        except StopIteration:
            return next(self.next_epoch())

    def next_epoch(self) -> Iterator[Any]:
        self._end_epoch()
        self.iterator = self._start_epoch()
        return self.iterator

    def restart_time(self) -> Optional[float]:
        """Seconds from a new epoch's start to its first batch (workers started again, unless persistent)."""
        self._end_epoch()
        began = time.perf_counter()
        self.iterator = self._start_epoch()
        try:
            next(self.iterator)
        except StopIteration:
            return None
        return time.perf_counter() - began

    def _start_epoch(self) -> Iterator[Any]:
        raise NotImplementedError

    def _end_epoch(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Stop every worker now (Ctrl-C must leave none behind)."""
        raise NotImplementedError


class _Epochs(Epochs):
    """A DataLoader's epochs."""

    def __init__(self, loader: DataLoader) -> None:
        self.loader = loader
        self.iterator = self._start_epoch()

    def _start_epoch(self) -> Iterator[Any]:
        return iter(self.loader)

    def _end_epoch(self) -> None:
        shutdown = getattr(self.iterator, "_shutdown_workers", None)
        if shutdown is not None and not getattr(self.loader, "persistent_workers", False):
            shutdown()

    def close(self) -> None:
        """Persistent workers too."""
        shutdown = getattr(self.iterator, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        self.loader._iterator = None  # a persistent loader keeps its iterator (and workers) otherwise
        self.iterator = iter(())


class MemoryWatch:
    """Peak memory of the bench process and its workers, /dev/shm use and GPU busy share, read
    by a thread every RSS_EVERY_S (USS, a page-table walk, once after the measured chunks)."""

    def __init__(self, gpu_util: Optional[Callable[[], Optional[float]]] = None) -> None:
        self.me = psutil.Process()
        self.workers_rss = self.worker_uss = self.total_rss = 0
        self.shm_peak: Optional[int] = None
        self._gpu_util = gpu_util
        self._gpu: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dltop-bench-memory", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(RSS_EVERY_S):
            self.read_rss()

    def read_rss(self) -> None:
        workers = 0
        for child in self._children():
            try:
                workers += child.memory_info().rss
            except psutil.Error:
                pass
        self.workers_rss = max(self.workers_rss, workers)
        self.total_rss = max(self.total_rss, workers + self.me.memory_info().rss)
        try:
            shm = os.statvfs("/dev/shm")
            used = (shm.f_blocks - shm.f_bfree) * shm.f_frsize
            self.shm_peak = max(self.shm_peak or 0, used)
        except OSError:
            pass
        if self._gpu_util is not None:
            util = self._gpu_util()
            if util is not None:
                self._gpu.append(util)

    def read_uss(self) -> None:
        for child in self._children():
            try:
                self.worker_uss = max(self.worker_uss, child.memory_full_info().uss)
            except psutil.Error:
                pass

    def gpu_mean(self) -> Optional[float]:
        return sum(self._gpu) / len(self._gpu) if self._gpu else None

    def _children(self) -> list:
        try:
            return self.me.children(recursive=True)
        except psutil.Error:
            return []

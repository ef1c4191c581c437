"""A tiny CPU training job fed by an input pipeline that is not DataLoader worker processes, for
the truth harness (bench_truth.py --subset pipelines) and tests/integration/test_pipelines.py:

    python tests/jobs/pipeline_job.py --library torchdata-thread --work io --workers 2 --report DIR
    python tests/jobs/pipeline_job.py --library spdl --work cpu --workers 2 --hang-worker-after 10

Libraries: ``torchdata-thread`` / ``torchdata-process`` (torchdata.nodes: IterableWrapper ->
ParallelMapper(method=...) -> Batcher -> Prefetcher -> Loader), ``spdl`` (PipelineBuilder: a
source, ``pipe(decode, concurrency=N)``, aggregate, a sink; ``build(num_threads=N)`` under
``auto_stop()``) and ``threads`` (a hand-written ``Prefetcher``: a filler thread submits each
sample to a ``ThreadPoolExecutor(max_workers=N)`` and puts whole batches, in order, on a
``queue.Queue`` that ``__next__`` reads). Each sample's decode either sleeps ``--io-ms`` (a slow
store: no CPU, the GIL released) or burns ``--cpu-ms`` of pure-Python CPU holding the GIL (a
loop, as a Python decode or augmentation does). The step is ``time.sleep(--step-ms)`` plus a
tiny tensor sum: a sleep, not a matmul, so two CPUs are left to the pipeline and the step's
length does not depend on what else runs.

``--hang-worker-after S``: S seconds after the start, the first decode to claim it blocks forever
on ``threading.Event().wait()`` (one hung worker thread; in torchdata-process one hung worker
process) and ``hung-<pid>.json`` says which. What follows depends on the pipeline's order:
torchdata (in_order=True) and the threads prefetcher (batches in submission order) stall for
good once the others have filled what they may buffer; spdl (output_order="completion") goes on
at N-1 workers' pace (with N=1: it stalls).

Truth (clock.py): the trainer's clock (the time inside next() is the wait), ``trainer-<pid>.json``
with kind="pipeline", library, work and workers; each decode thread of the trainer writes
``thread-<tid>-<pid>.json`` (tid, name) and each worker process ``worker-<pid>.json``.
Exits after ``--seconds`` (0: never) or on SIGTERM, stopping the pipeline first.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import queue
import signal
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clock import Clock, busy, record  # noqa: E402

LIBRARIES = ("torchdata-thread", "torchdata-process", "spdl", "threads")
WIDTH = 16  # floats per sample
SAMPLES = 10**9  # no epoch ends in any run
STOP_S = 2.0  # spdl's start and stop timeout
# held until the exit: spdl's finalizer stops a pipeline again with no timeout, joining a hung thread
KEPT: list = []


class Decode:
    """One sample's decode: a top-level class, so torchdata's process workers get a pickled copy."""

    def __init__(self, work: str, io_ms: float, cpu_ms: float, report: Optional[str], hang_after: Optional[float],
                 claim: str) -> None:  # fmt: skip
        self.work, self.io_ms, self.cpu_ms, self.report = work, io_ms, cpu_ms, report
        self.hang_after, self.claim = hang_after, claim
        self.trainer_pid = os.getpid()
        self.started = time.monotonic()  # system-wide: the same moment in a forked worker
        self._seen: set = set()

    def __call__(self, index: int) -> list:
        self._note()
        if self.hang_after is not None and time.monotonic() - self.started >= self.hang_after and self._claim():
            record(self.report, "hung", tid=threading.get_native_id(), name=threading.current_thread().name,
                   trainer_pid=self.trainer_pid, at=time.time())  # fmt: skip
            threading.Event().wait()
        if self.work == "io":
            time.sleep(self.io_ms / 1000)
        else:
            busy(self.cpu_ms)
        return [float(index)] * WIDTH

    def _note(self) -> None:
        """The truth of who decodes: a worker process once, each decode thread of the trainer once."""
        key = (os.getpid(), threading.get_native_id())
        if key in self._seen:
            return
        self._seen.add(key)
        if os.getpid() != self.trainer_pid:
            record(self.report, "worker", worker_id=None, loader="train", trainer_pid=self.trainer_pid)
        else:
            tid = threading.get_native_id()
            record(self.report, f"thread-{tid}", tid=tid, name=threading.current_thread().name)

    def _claim(self) -> bool:
        """True for exactly one call, in whichever thread or process gets there first."""
        try:
            os.close(os.open(self.claim, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        return True


class Prefetcher:
    """A hand-written prefetcher: a filler thread submits each sample's decode to a thread pool and
    puts each batch, once all its samples are decoded, on a bounded queue (in submission order);
    the training loop's next() is ``self.queue.get()``."""

    def __init__(self, decode: Callable, workers: int, batch: int, depth: int = 2) -> None:
        self.decode, self.batch, self.depth = decode, batch, depth
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.executor = ThreadPoolExecutor(max_workers=workers)
        self.filler: Optional[threading.Thread] = None

    def __iter__(self) -> Prefetcher:
        if self.filler is None:
            self.filler = threading.Thread(target=self._fill, name="prefetch-filler", daemon=True)
            self.filler.start()
        return self

    def __next__(self) -> list:
        return self.queue.get()

    def _fill(self) -> None:
        pending: collections.deque = collections.deque()
        for start in range(0, SAMPLES, self.batch):
            pending.append([self.executor.submit(self.decode, i) for i in range(start, start + self.batch)])
            if len(pending) >= self.depth:
                self.queue.put([future.result() for future in pending.popleft()])

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def torchdata_loader(decode: Decode, workers: int, batch: int, method: str):
    from torchdata.nodes import Batcher, IterableWrapper, Loader, ParallelMapper
    from torchdata.nodes import Prefetcher as TdPrefetcher

    node = ParallelMapper(IterableWrapper(range(SAMPLES)), map_fn=decode, num_workers=workers, method=method)
    return Loader(TdPrefetcher(Batcher(node, batch_size=batch), prefetch_factor=2))


def spdl_pipeline(decode: Decode, workers: int, batch: int):
    from spdl.pipeline import PipelineBuilder

    builder = PipelineBuilder().add_source(range(SAMPLES)).pipe(decode, concurrency=workers)
    return builder.aggregate(batch).add_sink(3).build(num_threads=workers)


def train(clock: Clock, source, step_ms: float, seconds: float) -> None:
    """The training loop: next() on the pipeline (the clock's wait), then the step."""
    weight = torch.zeros(WIDTH)
    began = time.monotonic()
    batches: Iterator = clock.start(source)
    while not seconds or time.monotonic() - began < seconds:
        batch = clock.next(batches)
        if batch is None:
            batches = clock.start(source)
            continue
        weight += torch.tensor(batch).sum(0)
        time.sleep(step_ms / 1000)


def stop_on_sigterm() -> None:
    """SIGTERM ends the loop like Ctrl-C; a forked worker process that inherited it just exits."""
    trainer = os.getpid()

    def handler(signum, frame) -> None:
        if os.getpid() != trainer:
            os._exit(0)
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--library", choices=LIBRARIES, required=True)
    parser.add_argument("--work", choices=("io", "cpu"), default="io")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--io-ms", type=float, default=30.0)
    parser.add_argument("--cpu-ms", type=float, default=6.0)
    parser.add_argument("--seconds", type=float, default=0.0, help="0: run until killed")
    parser.add_argument("--report")
    parser.add_argument("--hang-worker-after", type=float, help="one worker's decode blocks forever after S s")
    args = parser.parse_args()

    torch.set_num_threads(1)
    stop_on_sigterm()
    claim = str(Path(args.report or tempfile.gettempdir()) / f"hang-claim-{os.getpid()}")
    decode = Decode(args.work, args.io_ms, args.cpu_ms, args.report, args.hang_worker_after, claim)
    clock = Clock(args.report, kind="pipeline", library=args.library, work=args.work, workers=args.workers)
    code = 0
    try:
        run(args, decode, clock)
    except SystemExit as stopped:
        code = stopped.code if isinstance(stopped.code, int) else 0
    except BaseException:  # noqa: BLE001 (printed, then the exit below: a hung thread must not hold it)
        traceback.print_exc()
        code = 1
    shut_down(code, None if args.report else claim)


def run(args: argparse.Namespace, decode: Decode, clock: Clock) -> None:
    if args.library.startswith("torchdata"):
        method = args.library.split("-")[1]
        train(clock, torchdata_loader(decode, args.workers, args.batch, method), args.step_ms, args.seconds)
    elif args.library == "spdl":
        pipeline = spdl_pipeline(decode, args.workers, args.batch)
        KEPT.append(pipeline)
        with contextlib.suppress(TimeoutError):  # stop() cannot join a hung decode thread: it gives up
            with pipeline.auto_stop(timeout=STOP_S):
                train(clock, pipeline, args.step_ms, args.seconds)
    else:
        prefetcher = Prefetcher(decode, args.workers, args.batch)
        try:
            train(clock, prefetcher, args.step_ms, args.seconds)
        finally:
            prefetcher.close()


def shut_down(code: int, temporary_claim: Optional[str]) -> None:
    """Ends the process without waiting for a hung decode thread (the interpreter joins a thread
    pool's threads at exit): worker processes are terminated and joined first."""
    import multiprocessing

    for child in multiprocessing.active_children():
        child.terminate()
        child.join(5)
    if temporary_claim:
        Path(temporary_claim).unlink(missing_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()

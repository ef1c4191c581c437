"""The truth every job in this folder writes, and the one copy of the job's own clock (no dltop
import: the timm job runs in a venv without dltop, the notebook's loop inside a kernel).

Files in the job's ``--report`` folder, as the tests and benchmarks/truth_observe.py read them:

* ``trainer-<pid>.json``: {pid, ppid, rank, world_size, threads, kind} of each training process;
* ``worker-<pid>.json``: {pid, ppid, worker_id, loader, trainer_pid} of each DataLoader worker
  (written by ``worker_init`` or by ``chain_worker_init`` around a library's own init function);
* ``served-<pid>.json``: {pid, samples} of a worker that produced samples (``Served``), so a worker
  that never gets any (an iterable source with fewer parts than workers) is known;
* ``timing-<pid>.json``: the trainer's own clock (``Clock``), published ten times a second:
  wait_s (inside next()), startup_s (iter(), and each epoch's first num_workers next() calls and
  its last one where workers are not persistent: what the epoch's worker start-up costs), total_s,
  batches, epochs, the call open now (open_id, open_s), and named spans (``spans``: seconds inside
  ``clock.span(name)``, e.g. DDP's backward, where a fast rank waits for a slow one), at.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Optional

PUBLISH_S = 0.1


def record(report: Optional[str], what: str, **fields) -> None:
    if report:
        path = Path(report) / f"{what}-{os.getpid()}.json"
        partial = path.with_suffix(".part")
        partial.write_text(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), **fields}))
        os.replace(partial, path)


def worker_init(report: Optional[str], loader: str, trainer_pid: int, worker_id: int) -> None:
    record(report, "worker", worker_id=worker_id, loader=loader, trainer_pid=trainer_pid)


class chain_worker_init:  # noqa: N801 (used like a function)
    """A library's own worker_init_fn (timm seeds its workers) followed by the truth record:
    picklable, so it works under spawn too."""

    def __init__(self, first, report: Optional[str], loader: str, trainer_pid: int) -> None:
        self.first, self.report, self.loader, self.trainer_pid = first, report, loader, trainer_pid

    def __call__(self, worker_id: int) -> None:
        if self.first is not None:
            self.first(worker_id)
        worker_init(self.report, self.loader, self.trainer_pid, worker_id)


class Served:
    """Counts the samples this process produced; writes ``served-<pid>.json`` at the first one and
    every ``every`` after (called from a per-sample function that runs in the workers)."""

    def __init__(self, report: Optional[str], every: int = 50) -> None:
        self.report, self.every = report, every
        self.pid, self.count = None, 0

    def __call__(self) -> None:
        if self.pid != os.getpid():  # a new worker (fork copies the counter)
            self.pid, self.count = os.getpid(), 0
        self.count += 1
        if self.count == 1 or self.count % self.every == 0:
            record(self.report, "served", samples=self.count)


def busy(ms: float) -> int:
    """``ms`` of CPU, as a decode or an augmentation costs: CPU time (the thread's), not wall time,
    so it costs the same however many processes or threads share the cores."""
    deadline = time.thread_time() + ms / 1000
    x = 0
    while time.thread_time() < deadline:
        x += 1
    return x


class Clock:
    """The trainer's own clock around iter() and next(), published continuously (the file atomically
    replaced). The call the trainer is inside now is published apart (``open_id``, ``open_s``): which
    counter it belongs to is known only when it returns (an epoch's first batches and its end are
    start-up), so the truth harness reads that from the next record after it closed."""

    def __init__(self, report: Optional[str], rank: int = 0, world_size: int = 1, **fields) -> None:
        import torch

        self.report = report
        self.started = time.perf_counter()
        self.waited = self.startup = 0.0
        self.batches = self.epochs = 0
        self.spans: dict = {}
        self._first = 0
        self._persistent = True
        self._calls = 0
        self._open: Optional[tuple] = None
        record(report, "trainer", rank=rank, world_size=world_size, threads=torch.get_num_threads(), **fields)
        if report:
            self.path = Path(report) / f"timing-{os.getpid()}.json"
            threading.Thread(target=self._publish_forever, name="truth-clock", daemon=True).start()

    # the names start/next/_timed are what truth_observe.pyspy_in_next looks for in the stacks
    def start(self, loader):
        return self._timed(self._start, loader)

    def next(self, batches):
        return self._timed(self._next, batches)

    def _timed(self, call, argument):
        self._calls += 1
        self._open = (self._calls, time.perf_counter(), self.waited, self.startup)
        try:
            return call(argument)
        finally:
            self._open = None

    def _start(self, loader):
        began = time.perf_counter()
        batches = iter(loader)
        self.startup += time.perf_counter() - began
        workers = getattr(loader, "num_workers", 0)
        self._persistent = bool(getattr(loader, "persistent_workers", False)) or not workers
        self._first = 0 if self._persistent else workers
        self.epochs += 1
        return batches

    def _next(self, batches):
        began = time.perf_counter()
        batch = next(batches, None)
        now = time.perf_counter()
        ending = batch is None and self._first == 0 and not self._persistent
        if self._first or ending:
            self.startup += now - began
            self._first = max(0, self._first - 1)
        else:
            self.waited += now - began
        self.batches += batch is not None
        return batch

    @contextlib.contextmanager
    def span(self, name: str):
        began = time.perf_counter()
        try:
            yield
        finally:
            self.spans[name] = self.spans.get(name, 0.0) + time.perf_counter() - began

    def figures(self) -> dict:
        now = time.perf_counter()
        opened, waited, startup = self._open, self.waited, self.startup
        still_open = opened is not None and (opened[2], opened[3]) == (waited, startup)
        return dict(
            pid=os.getpid(),
            wait_s=waited,
            startup_s=startup,
            total_s=now - self.started,
            batches=self.batches,
            epochs=self.epochs,
            open_id=opened[0] if still_open else None,
            open_s=now - opened[1] if still_open else 0.0,
            spans=dict(self.spans),
            at=time.time(),
        )

    def _publish_forever(self) -> None:
        partial = self.path.with_suffix(".part")
        while True:
            partial.write_text(json.dumps(self.figures()))
            os.replace(partial, self.path)
            time.sleep(PUBLISH_S)

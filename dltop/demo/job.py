"""A tiny, real PyTorch training job: dltop demo runs it and the tests drive its knobs.

Every knob a test needs to reproduce a DataLoader shape: worker count, start method,
persistent workers, a second (validation) loader, torchrun ranks, per-sample CPU cost,
and a file each worker reads. With ``--report DIR`` the job writes the ground truth
(trainer and worker pids) as small files, so tests compare dltop against what really ran.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from dltop.uncached import read_uncached

# Held by a "log flusher" thread of the trainer while workers fork: a fork child gets the lock
# locked, with no thread to ever release it (the classic fork-while-locked deadlock).
_FLUSH_LOCK = threading.Lock()


class SyntheticDataset(Dataset):
    """Samples that cost ``sample_ms`` of CPU each; optionally read a file once per worker, or
    hang worker 0 after ``hang_at`` samples (``hang``: lock | sleep). With ``objects_mb`` the
    dataset holds that much in small Python objects and each sample reads its share of them:
    under fork every read writes a refcount, so workers copy those pages (copy-on-read)."""

    def __init__(
        self,
        length: int,
        sample_ms: float,
        sample_kb: int,
        read_file: str | None = None,
        read_after: str | None = None,
        hang: str | None = None,
        hang_at: int = 0,
        slow_every: int = 0,
        slow_ms: float = 0.0,
        report: str | None = None,
        open_files: int = 0,
        objects_mb: float = 0.0,
    ):
        self.length = length
        self.sample_ms = sample_ms
        self.sample_kb = sample_kb
        self.read_file = read_file
        self.read_after = read_after
        self.hang = hang
        self.hang_at = hang_at
        self.slow_every = slow_every
        self.slow_ms = slow_ms
        self.report = report
        self.open_files = open_files
        self._held: list = []
        # ~141 bytes each (a 100-byte bytes object and its list slot), allocated before the fork
        self.objects = [b"%0100d" % i for i in range(int(objects_mb * 1e6 / 141))]
        self._read_done = False
        self._served = 0

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.read_file and not self._read_done and (not self.read_after or os.path.exists(self.read_after)):
            self._read_done = True
            read_uncached(self.read_file)
            Path(f"{self.read_file}.read-by-{os.getpid()}").touch()
        self._served += 1
        worker = get_worker_info()
        if self.hang and self._served > self.hang_at and worker is not None and worker.id == 0:
            _record(self.report, "hang", at=time.time())
            _hang(self.hang)
        if self.open_files and not self._held:
            # A dataset that opens a file per sample and never closes it: fds pile up.
            self._held = [open(__file__, "rb") for _ in range(self.open_files)]  # noqa: SIM115
        if self.objects:
            share = len(self.objects) // self.length
            sum(map(len, self.objects[index * share : (index + 1) * share]))
        if self.slow_every and self._served % self.slow_every == 0:
            time.sleep(self.slow_ms / 1000)  # a slow read: the worker waits without using CPU
        deadline = time.perf_counter() + self.sample_ms / 1000
        x = 0
        while time.perf_counter() < deadline:
            x += 1
        return torch.full((self.sample_kb * 256,), float(index))


def _hang(how: str) -> None:
    if how == "lock":
        with _FLUSH_LOCK:  # never returns: the lock was held when this worker forked
            pass
    time.sleep(3600)


def _hold_flush_lock() -> None:
    _FLUSH_LOCK.acquire()
    threading.Event().wait()


def _wait_for_peers(seconds: float) -> None:
    """Stands in for a collective that a slow rank holds up (all_reduce, barrier)."""
    threading.Event().wait(seconds)


def _ddp_step(features: int):
    """A real DistributedDataParallel step over gloo: each rank's backward() waits in the gradient
    all-reduce for every other rank (the slowest sets the pace)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    model = DistributedDataParallel(torch.nn.Linear(features, 1))

    def step(batch: torch.Tensor) -> None:
        model(batch).sum().backward()

    return step


def _record(report: str | None, kind: str, **fields: object) -> None:
    if report:
        path = Path(report) / f"{kind}-{os.getpid()}.json"
        path.write_text(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), **fields}))


def _worker_init(report: str | None, loader: str, trainer_pid: int, unnamed: bool, worker_id: int) -> None:
    if unnamed:
        _set_comm(b"python")  # look like torch <= 2.2, which named nothing
    _record(report, "worker", worker_id=worker_id, loader=loader, trainer_pid=trainer_pid)


def _set_comm(name: bytes) -> None:
    import ctypes

    PR_SET_NAME = 15
    ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def _make_loader(args: argparse.Namespace, name: str, workers: int) -> DataLoader:
    dataset = SyntheticDataset(
        args.batches * args.batch_size,
        args.sample_ms,
        args.sample_kb,
        args.read_file,
        args.read_after,
        args.hang if name == "train" else None,
        args.hang_at,
        args.slow_every,
        args.slow_ms,
        args.report,
        args.open_files,
        args.objects_mb if name == "train" else 0.0,
    )
    extra = {}
    if workers > 0:
        extra = dict(
            multiprocessing_context=args.start_method,
            persistent_workers=args.persistent,
            worker_init_fn=functools.partial(_worker_init, args.report, name, os.getpid(), args.unnamed_workers),
        )
    return DataLoader(dataset, batch_size=args.batch_size, num_workers=workers, pin_memory=args.pin_memory, **extra)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--val-workers", type=int, default=0, help="a validation pass after each epoch, with this many workers"
    )
    parser.add_argument("--val-step-ms", type=float, default=0.0, help="compute per validation batch")
    parser.add_argument("--start-method", choices=["fork", "spawn", "forkserver"], default="fork")
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--pin-memory", action="store_true")
    parser.add_argument("--epochs", type=int, default=0, help="0 runs until killed")
    parser.add_argument("--batches", type=int, default=20, help="batches per epoch")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--sample-ms", type=float, default=1.0)
    parser.add_argument("--sample-kb", type=int, default=4)
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--read-file", help="each worker reads this file once, uncached")
    parser.add_argument("--read-after", help="read --read-file only once this path exists")
    parser.add_argument("--unnamed-workers", action="store_true", help="reset worker names, as torch <= 2.2")
    parser.add_argument("--hang", choices=["lock", "sleep"], help="hang train worker 0 (fork for lock)")
    parser.add_argument("--hang-at", type=int, default=8, help="samples worker 0 serves before it hangs")
    parser.add_argument("--slow-every", type=int, default=0, help="every Nth sample of a worker is slow")
    parser.add_argument("--slow-ms", type=float, default=0.0, help="how long a slow sample waits")
    parser.add_argument("--open-files", type=int, default=0, help="each worker opens this many files and keeps them")
    parser.add_argument(
        "--objects-mb", type=float, default=0.0, help="dataset holds this many MB of Python objects (copy-on-read)"
    )
    parser.add_argument("--ddp", action="store_true", help="under torchrun: a DistributedDataParallel model (gloo)")
    parser.add_argument("--rank-sample-ms", action="append", default=[], metavar="RANK:MS",
                        help="this rank's samples cost MS of CPU instead (a straggler rank)")  # fmt: skip
    parser.add_argument("--stall-after", type=int, help="the trainer stalls after this many batches")
    parser.add_argument("--stall-s", type=float, default=3600.0, help="how long the trainer stalls")
    parser.add_argument("--fail-after", type=int, help="rank 0 of torchrun's first attempt exits 1 after this many "
                        "batches: a crash that `torchrun --max-restarts` restarts every rank for")  # fmt: skip
    parser.add_argument("--report", help="directory for ground-truth pid files")
    # flags it does not know are a real job's own (a token, a config): ignored, as tests of what dltop reveals need
    args, _ = parser.parse_known_args()

    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    _record(args.report, "trainer", rank=rank)
    for spec in args.rank_sample_ms:
        which, cost = spec.split(":")
        if int(which) == rank:
            args.sample_ms = float(cost)
    step = _ddp_step(args.sample_kb * 256) if args.ddp else None
    train = _make_loader(args, "train", args.workers)
    val = _make_loader(args, "val", args.val_workers) if args.val_workers else None
    weight = torch.zeros(args.sample_kb * 256)
    if args.hang == "lock":
        threading.Thread(target=_hold_flush_lock, name="log-flusher", daemon=True).start()
    clock = WaitClock(args.report)
    epoch = batches = 0
    while args.epochs == 0 or epoch < args.epochs:
        batch_iter = clock.start(train)
        while (batch := clock.next(batch_iter)) is not None:
            weight += batch.mean(0)
            if step is not None:
                step(batch)  # backward() all-reduces the gradients with every rank
            time.sleep(args.step_ms / 1000)
            batches += 1
            if args.stall_after is not None and batches == args.stall_after:
                _wait_for_peers(args.stall_s)
            if batches == args.fail_after and rank == 0 and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
                sys.exit(1)
        for _batch in val or ():
            time.sleep(args.val_step_ms / 1000)
        _record(args.report, "epoch", epoch=epoch)
        epoch += 1


class WaitClock:
    """The job's own measure of its data wait: time inside next() vs all time, written to
    ``timing-<pid>.json`` so tests compare dltop's sampled share with the truth. Time in iter()
    and, for non-persistent workers, in an epoch's first num_workers next() calls (each worker's
    first batch: workers start one after another, and batches come from them in turn) and in the
    last one (the epoch's end shuts them down) is ``startup_s`` (what persistent_workers=True
    saves); the rest of the time inside next() is ``wait_s``."""

    def __init__(self, report: str | None) -> None:
        self.report = report
        self.started = time.perf_counter()
        self.waited = 0.0
        self.startup = 0.0
        self.batches = 0
        self.epochs = 0
        self._first = 0  # next() calls still in the epoch's start-up
        self._persistent = True
        self._written = 0.0

    def start(self, loader):
        began = time.perf_counter()
        batches = iter(loader)
        self.startup += time.perf_counter() - began
        # persistent workers are only reset: what persistent_workers=True saves is already saved
        self._persistent = bool(getattr(loader, "persistent_workers", False)) or not loader.num_workers
        self._first = 0 if self._persistent else loader.num_workers
        self.epochs += 1
        return batches

    def next(self, batches):
        began = time.perf_counter()
        batch = next(batches, None)
        now = time.perf_counter()
        ending = batch is None and self._first == 0 and not self._persistent  # shutting its workers down
        if self._first or ending:
            self.startup += now - began
            self._first = max(0, self._first - 1)
        else:
            self.waited += now - began
        self.batches += batch is not None
        if self.report and now - self._written > 0.25:
            self._written = now
            spent = dict(wait_s=self.waited, startup_s=self.startup, total_s=now - self.started)
            _record(self.report, "timing", **spent, batches=self.batches, epochs=self.epochs, at=time.time())
        return batch


if __name__ == "__main__":
    main()

"""The suite's training job: the demo job (dltop/demo/job.py) with every knob a test needs beside
the demo's, and the job's own clock (clock.py) publishing its data wait to ``--report``.

Extra knobs: a second (validation) loader, pin_memory, a number of epochs, a file each worker reads
(uncached), workers renamed as torch <= 2.2 left them, files held open, a DistributedDataParallel
step under torchrun, a straggler rank, a trainer that stalls, and rank 0 failing on torchrun's first
start. With ``--report DIR`` the job writes its ground truth (trainer and worker pids, epochs, when
worker 0 hung) as small files, so tests compare what dltop found with what really ran. Flags it does
not know are a real job's own (a token, a config): ignored, as tests of what dltop reveals need.

Run as a script so tests start it like a user starts a training script (spawn and forkserver
workers load its classes from it as users' workers do). ``TRAIN_IMPORT_DELAY_S`` holds it that long
before it imports torch: a rank a watcher sees while it is still starting.
"""

from __future__ import annotations

import os
import time

if __name__ == "__main__":
    time.sleep(float(os.environ.get("TRAIN_IMPORT_DELAY_S", "0")))

# ruff: noqa: E402 (torch is imported after the delay above)
import argparse
import functools
import sys
import threading
from pathlib import Path
from typing import Any, Iterator, Optional

import torch
from clock import Clock, record
from torch.utils.data import DataLoader

from dltop.demo.job import DemoJob, SyntheticDataset, parser
from dltop.uncached import read_uncached


class SuiteDataset(SyntheticDataset):
    """The demo's samples; also reads ``read_file`` once per worker (uncached; once ``read_after``
    exists, if given) and keeps ``open_files`` files open; worker 0's hang is recorded."""

    def __init__(self, *args, read_file=None, read_after=None, open_files=0, report=None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.read_file, self.read_after = read_file, read_after
        self.open_files, self.report = open_files, report
        self._read_done = False
        self._held: list = []

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.read_file and not self._read_done and (not self.read_after or os.path.exists(self.read_after)):
            self._read_done = True
            read_uncached(self.read_file)
            Path(f"{self.read_file}.read-by-{os.getpid()}").touch()
        sample = super().__getitem__(index)
        if self.open_files and not self._held:
            # A dataset that opens a file per sample and never closes it: fds pile up.
            self._held = [open(__file__, "rb") for _ in range(self.open_files)]  # noqa: SIM115
        return sample

    def hanging(self) -> None:
        record(self.report, "hang", at=time.time())


def _worker_init(report: Optional[str], loader: str, trainer_pid: int, unnamed: bool, worker_id: int) -> None:
    if unnamed:
        _set_comm(b"python")  # look like torch <= 2.2, which named nothing
    record(report, "worker", worker_id=worker_id, loader=loader, trainer_pid=trainer_pid)


def _set_comm(name: bytes) -> None:
    import ctypes

    PR_SET_NAME = 15
    ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)


def _wait_for_peers(seconds: float) -> None:
    """Stands in for a collective that a slow rank holds up (all_reduce, barrier)."""
    threading.Event().wait(seconds)


def _compress_half_the_time() -> None:
    """A trainer's side thread that uses CPU beside its main one, as a log or checkpoint
    compressor does: Python, not torch's intra-op pool (OMP_NUM_THREADS leaves it)."""
    import zlib

    data = os.urandom(1 << 18)
    while True:
        began = time.perf_counter()
        zlib.compress(data, 6)
        time.sleep(time.perf_counter() - began)


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


def knobs() -> argparse.ArgumentParser:
    """The demo's knobs and the suite's."""
    extra = parser()
    extra.add_argument("--val-workers", type=int, default=0,
                       help="a validation pass after each epoch, with this many workers")  # fmt: skip
    extra.add_argument("--val-step-ms", type=float, default=0.0, help="compute per validation batch")
    extra.add_argument("--pin-memory", action="store_true")
    extra.add_argument("--epochs", type=int, default=0, help="0 runs until killed")
    extra.add_argument("--read-file", help="each worker reads this file once, uncached")
    extra.add_argument("--read-after", help="read --read-file only once this path exists")
    extra.add_argument("--unnamed-workers", action="store_true", help="reset worker names, as torch <= 2.2")
    extra.add_argument("--open-files", type=int, default=0, help="each worker opens this many files and keeps them")
    extra.add_argument("--ddp", action="store_true", help="under torchrun: a DistributedDataParallel model (gloo)")
    extra.add_argument("--rank-sample-ms", action="append", default=[], metavar="RANK:MS",
                       help="this rank's samples cost MS of CPU instead (a straggler rank)")  # fmt: skip
    extra.add_argument("--stall-after", type=int, help="the trainer stalls after this many batches")
    extra.add_argument("--stall-s", type=float, default=3600.0, help="how long the trainer stalls")
    extra.add_argument("--fail-after", type=int, help="rank 0 of torchrun's first attempt exits 1 after this many "
                       "batches: a crash that `torchrun --max-restarts` restarts every rank for")  # fmt: skip
    extra.add_argument("--busy-thread", action="store_true",
                       help="a Python thread of the trainer compresses (zlib, no GIL) half its time")  # fmt: skip
    extra.add_argument("--report", help="directory for ground-truth pid files")
    return extra


class SuiteJob(DemoJob):
    """The demo job with the suite's knobs, timed by the job's own clock."""

    Dataset = SuiteDataset

    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.rank = int(os.environ.get("RANK", "0"))
        for spec in args.rank_sample_ms:
            which, cost = spec.split(":")
            if int(which) == self.rank:
                args.sample_ms = float(cost)

    def dataset(self, name: str, **options: object) -> SyntheticDataset:
        args = self.args
        files = dict(read_file=args.read_file, read_after=args.read_after, open_files=args.open_files)
        return super().dataset(name, **files, report=args.report, **options)

    def worker_init(self, name: str):
        return functools.partial(_worker_init, self.args.report, name, os.getpid(), self.args.unnamed_workers)

    def loader(self, name: str, workers: int, **options: Any) -> DataLoader:
        return super().loader(name, workers, pin_memory=self.args.pin_memory, **options)

    def prepare(self) -> None:
        args = self.args
        record(args.report, "trainer", rank=self.rank)
        super().prepare()
        self.ddp = _ddp_step(args.sample_kb * 256) if args.ddp else None
        if args.busy_thread:
            threading.Thread(target=_compress_half_the_time, name="log-compressor", daemon=True).start()
        self.val = self.loader("val", args.val_workers) if args.val_workers else None
        self.clock = Clock(args.report, rank=self.rank, world_size=int(os.environ.get("WORLD_SIZE", "1")))
        self.done = 0  # batches

    def another_epoch(self, epoch: int) -> bool:
        return self.args.epochs == 0 or epoch < self.args.epochs

    def batches(self, loader: DataLoader) -> Iterator[torch.Tensor]:
        """The loader's batches, each next() timed by the job's clock."""
        batches = self.clock.start(loader)
        while (batch := self.clock.next(batches)) is not None:
            yield batch

    def step(self, batch: torch.Tensor) -> None:
        args = self.args
        if self.ddp is not None:
            self.ddp(batch)  # backward() all-reduces the gradients with every rank
        super().step(batch)
        self.done += 1
        if args.stall_after is not None and self.done == args.stall_after:
            _wait_for_peers(args.stall_s)
        if self.done == args.fail_after and self.rank == 0 and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
            sys.exit(1)

    def epoch_ended(self, epoch: int) -> None:
        for _batch in self.val or ():
            time.sleep(self.args.val_step_ms / 1000)
        record(self.args.report, "epoch", epoch=epoch)


if __name__ == "__main__":
    SuiteJob(knobs().parse_known_args()[0]).run()

"""A DistributedDataParallel run on CPU (gloo) in which one rank stops the run, in one of the ways
runs stop, or (the controls) does not:

    python -m torch.distributed.run --standalone --nproc-per-node 3 tests/jobs/stopping_run.py \
        --report DIR --stop lock --stop-rank 2 --stop-after 20

``--stop``, on rank ``--stop-rank`` after ``--stop-after`` steps:
  lock     deadlocks on a lock of its own code (flush_metrics takes a lock its caller holds)
  desync   skips a step's all-reduce and waits at a barrier of another process group
  worker   its DataLoader worker hangs: the rank waits for its input
  busy     loops in Python, never reaching the next collective
  fifo     blocks reading a FIFO that nobody writes
  slow     (a control) every step costs it --slow-ms more: slow but moving, a straggler
  none     (a control) a healthy run
The other ranks go on to the next step and wait for it in backward()'s all-reduce. Each rank writes
``rank-<rank>.json`` (its pid), and the stopping rank ``stop.json``: when it stopped (or turned
slow) and the line it stops at (file, line, function), the truth dltop's verdict is checked against.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import threading
import time
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

_log_lock = threading.Lock()


class Samples(Dataset):
    """Cheap samples; the worker of a rank told to hang sleeps for good at sample ``hang_at``."""

    def __init__(self, hang_at: Optional[int]) -> None:
        self.hang_at = hang_at

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, index: int):
        if self.hang_at is not None and index >= self.hang_at:
            time.sleep(1e9)  # the worker hangs here
        return torch.full((16,), float(index % 7)), index % 2


def _write(report: Path, name: str, record: dict) -> None:
    path = report / name
    path.with_suffix(".tmp").write_text(json.dumps(record))
    path.with_suffix(".tmp").rename(path)


def _stop_here(report: Path, how: str, rank: int, offset: int) -> None:
    """The truth: where this rank stops (its caller's line ``offset`` lines on), and when."""
    caller = inspect.currentframe().f_back  # type: ignore[union-attr]
    where = {"file": caller.f_code.co_filename, "line": caller.f_lineno + offset, "function": caller.f_code.co_name}
    _write(report, "stop.json", {"how": how, "rank": rank, "pid": os.getpid(), "at": time.time(), **where})


def flush_metrics(report: Path, rank: int) -> None:
    _stop_here(report, "lock", rank, 1)
    with _log_lock:  # already held by the caller: a deadlock in the user's own code
        pass


def stop(how: str, report: Path, rank: int, other_group) -> None:
    if how == "lock":
        with _log_lock:
            flush_metrics(report, rank)
    elif how == "desync":
        _stop_here(report, how, rank, 1)
        dist.barrier(group=other_group)  # the others are in the next all-reduce of the default group
    elif how == "busy":
        _stop_here(report, how, rank, 3)
        total = 0
        while True:
            total = (total + sum(range(1000))) % 1_000_003
    elif how == "fifo":
        fifo = report / f"fifo-{rank}"
        os.mkfifo(fifo)
        _stop_here(report, how, rank, 1)
        with open(fifo, "rb") as nobody_writes:  # open() blocks until a writer comes: none does
            nobody_writes.read()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", required=True)
    parser.add_argument("--stop", choices=["lock", "desync", "worker", "busy", "fifo", "slow", "none"], default="none")
    parser.add_argument("--stop-rank", type=int, default=1)
    parser.add_argument("--stop-after", type=int, default=20, help="steps before the rank stops")
    parser.add_argument("--slow-ms", type=float, default=150.0, help="--stop slow: extra time per step")
    parser.add_argument("--step-ms", type=float, default=20.0, help="every rank's step (after its backward)")
    args = parser.parse_args()

    report = Path(args.report)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    other_group = dist.new_group(list(range(dist.get_world_size())))
    _write(report, f"rank-{rank}.json", {"rank": rank, "pid": os.getpid()})
    stops = rank == args.stop_rank
    batch_size = 4
    hang_at = (args.stop_after + 2) * batch_size if stops and args.stop == "worker" else None
    loader = DataLoader(Samples(hang_at), batch_size=batch_size, num_workers=1, prefetch_factor=1)
    model = DistributedDataParallel(torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (inputs, labels) in enumerate(loader):
        if stops and step == args.stop_after:
            if args.stop in ("worker", "slow"):  # from here its input hangs, or every step of it is slower
                _write(report, "stop.json", {"how": args.stop, "rank": rank, "pid": os.getpid(), "at": time.time()})
            else:
                stop(args.stop, report, rank, other_group)
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()  # DDP all-reduces the gradients here: every rank must arrive
        optimizer.step()
        time.sleep(args.step_ms / 1000 + (args.slow_ms / 1000 if stops and args.stop == "slow" else 0.0))


if __name__ == "__main__":
    main()

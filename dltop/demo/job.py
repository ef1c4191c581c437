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
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset


class SyntheticDataset(Dataset):
    """Samples that cost ``sample_ms`` of CPU each; optionally read a file once per worker."""

    def __init__(self, length: int, sample_ms: float, sample_kb: int, read_file: str | None, read_after: str | None):
        self.length = length
        self.sample_ms = sample_ms
        self.sample_kb = sample_kb
        self.read_file = read_file
        self.read_after = read_after
        self._read_done = False

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.read_file and not self._read_done and (not self.read_after or os.path.exists(self.read_after)):
            self._read_done = True
            _read_uncached(self.read_file)
            Path(f"{self.read_file}.read-by-{os.getpid()}").touch()
        deadline = time.perf_counter() + self.sample_ms / 1000
        x = 0
        while time.perf_counter() < deadline:
            x += 1
        return torch.full((self.sample_kb * 256,), float(index))


def _read_uncached(path: str) -> None:
    """Read the whole file from storage, not the page cache, so /proc/<pid>/io counts it."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        while os.read(fd, 1 << 20):
            pass
    finally:
        os.close(fd)


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
        args.batches * args.batch_size, args.sample_ms, args.sample_kb, args.read_file, args.read_after
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
        "--val-workers", type=int, default=0, help="also iterate a second loader with this many workers"
    )
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
    parser.add_argument("--report", help="directory for ground-truth pid files")
    args = parser.parse_args()

    torch.set_num_threads(1)
    rank = int(os.environ.get("RANK", "0"))
    _record(args.report, "trainer", rank=rank)
    train = _make_loader(args, "train", args.workers)
    val = _make_loader(args, "val", args.val_workers) if args.val_workers else None
    val_iter = iter(val) if val else None
    weight = torch.zeros(args.sample_kb * 256)
    epoch = 0
    while args.epochs == 0 or epoch < args.epochs:
        for batch in train:
            weight += batch.mean(0)
            if val_iter is not None:
                next(val_iter, None)
            time.sleep(args.step_ms / 1000)
        _record(args.report, "epoch", epoch=epoch)
        epoch += 1


if __name__ == "__main__":
    main()

"""The bundled demo job: a tiny, real PyTorch training job that ``dltop demo`` runs with one of its
scenarios (dltop/demo/scenarios.py), each giving its DataLoader a problem dltop should catch.

Its knobs: worker count, start method, persistent workers, the CPU each sample costs and a slow
read every Nth sample, a dataset of Python objects read under fork (copy-on-read), and worker 0
hung on a lock or in a sleep. The test suite's job (tests/jobs/train.py) builds on these classes.
"""

from __future__ import annotations

import argparse
import threading
import time
from typing import Any, Callable, Iterator, Optional

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

# Held by a "log flusher" thread of the trainer while workers fork: a fork child gets the lock
# locked, with no thread to ever release it (the classic fork-while-locked deadlock).
_FLUSH_LOCK = threading.Lock()


class SyntheticDataset(Dataset):
    """Samples that cost ``sample_ms`` of CPU each; every ``slow_every``-th sample of a worker also
    waits ``slow_ms`` without CPU (a slow read); worker 0 hangs after ``hang_at`` samples (``hang``:
    lock | sleep). With ``objects_mb`` the dataset holds that much in small Python objects and each
    sample reads its share of them: under fork every read writes a refcount, so workers copy those
    pages (copy-on-read)."""

    def __init__(
        self,
        length: int,
        sample_ms: float,
        sample_kb: int,
        hang: Optional[str] = None,
        hang_at: int = 0,
        slow_every: int = 0,
        slow_ms: float = 0.0,
        objects_mb: float = 0.0,
    ):
        self.length = length
        self.sample_ms = sample_ms
        self.sample_kb = sample_kb
        self.hang = hang
        self.hang_at = hang_at
        self.slow_every = slow_every
        self.slow_ms = slow_ms
        # ~141 bytes each (a 100-byte bytes object and its list slot), allocated before the fork
        self.objects = [b"%0100d" % i for i in range(int(objects_mb * 1e6 / 141))]
        self._served = 0

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        self._served += 1
        worker = get_worker_info()
        if self.hang and self._served > self.hang_at and worker is not None and worker.id == 0:
            self.hanging()
            _hang(self.hang)
        if self.objects:
            share = len(self.objects) // self.length
            sum(map(len, self.objects[index * share : (index + 1) * share]))
        if self.slow_every and self._served % self.slow_every == 0:
            time.sleep(self.slow_ms / 1000)  # a slow read: the worker waits without using CPU
        # CPU time, not wall time: a decode costs its CPU however many processes share the cores
        deadline = time.thread_time() + self.sample_ms / 1000
        x = 0
        while time.thread_time() < deadline:
            x += 1
        return torch.full((self.sample_kb * 256,), float(index))

    def hanging(self) -> None:
        """Called in worker 0 just before it hangs."""


def _hang(how: str) -> None:
    if how == "lock":
        with _FLUSH_LOCK:  # never returns: the lock was held when this worker forked
            pass
    time.sleep(3600)


def _hold_flush_lock() -> None:
    _FLUSH_LOCK.acquire()
    threading.Event().wait()


def parser() -> argparse.ArgumentParser:
    """The demo job's knobs (what the scenarios set)."""
    knobs = argparse.ArgumentParser(description=__doc__)
    knobs.add_argument("--workers", type=int, default=2)
    knobs.add_argument("--start-method", choices=["fork", "spawn", "forkserver"], default="fork")
    knobs.add_argument("--persistent", action="store_true")
    knobs.add_argument("--batches", type=int, default=20, help="batches per epoch")
    knobs.add_argument("--batch-size", type=int, default=4)
    knobs.add_argument("--sample-ms", type=float, default=1.0)
    knobs.add_argument("--sample-kb", type=int, default=4)
    knobs.add_argument("--step-ms", type=float, default=5.0)
    knobs.add_argument("--hang", choices=["lock", "sleep"], help="hang train worker 0 (fork for lock)")
    knobs.add_argument("--hang-at", type=int, default=8, help="samples worker 0 serves before it hangs")
    knobs.add_argument("--slow-every", type=int, default=0, help="every Nth sample of a worker is slow")
    knobs.add_argument("--slow-ms", type=float, default=0.0, help="how long a slow sample waits")
    knobs.add_argument(
        "--objects-mb", type=float, default=0.0, help="dataset holds this many MB of Python objects (copy-on-read)"
    )
    return knobs


class DemoJob:
    """The loader ``args`` describe, trained until the job is killed."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args

    Dataset = SyntheticDataset

    def dataset(self, name: str, **options: Any) -> SyntheticDataset:
        """``name``'s dataset: train hangs and holds the objects, another loader does neither."""
        args = self.args
        train = name == "train"
        return self.Dataset(
            args.batches * args.batch_size,
            args.sample_ms,
            args.sample_kb,
            args.hang if train else None,
            args.hang_at,
            args.slow_every,
            args.slow_ms,
            args.objects_mb if train else 0.0,
            **options,
        )

    def worker_init(self, name: str) -> Optional[Callable[[int], None]]:
        """The worker_init_fn of ``name``'s workers (none here)."""
        return None

    def loader(self, name: str, workers: int, **options: Any) -> DataLoader:
        if workers > 0:
            options.update(
                multiprocessing_context=self.args.start_method,
                persistent_workers=self.args.persistent,
                worker_init_fn=self.worker_init(name),
            )
        return DataLoader(self.dataset(name), batch_size=self.args.batch_size, num_workers=workers, **options)

    def prepare(self) -> None:
        """Before the first loader: one intra-op thread, and the lock held while workers fork."""
        torch.set_num_threads(1)
        if self.args.hang == "lock":
            threading.Thread(target=_hold_flush_lock, name="log-flusher", daemon=True).start()

    def run(self) -> None:
        self.prepare()
        train = self.loader("train", self.args.workers)
        weight = torch.zeros(self.args.sample_kb * 256)
        epoch = 0
        while self.another_epoch(epoch):
            for batch in self.batches(train):
                weight += batch.mean(0)
                self.step(batch)
            self.epoch_ended(epoch)
            epoch += 1

    def another_epoch(self, epoch: int) -> bool:
        return True  # until the job is killed

    def batches(self, loader: DataLoader) -> Iterator[torch.Tensor]:
        return iter(loader)

    def step(self, batch: torch.Tensor) -> None:
        time.sleep(self.args.step_ms / 1000)

    def epoch_ended(self, epoch: int) -> None:
        """After each epoch (nothing here)."""


def main(argv: Optional[list] = None) -> None:
    DemoJob(parser().parse_args(argv)).run()


if __name__ == "__main__":
    main()

"""A tiny real PyTorch Lightning job on the CPU, for tests/integration/test_lightning.py and the
truth harness (bench_truth.py --subset libs):

    python tests/jobs/lightning_job.py --report DIR --workers 2

``Trainer.fit`` runs the loop: its ``_PrefetchDataFetcher`` holds one batch ahead (a loader
without a length) and calls ``next()`` on the DataLoader's iterator inside Lightning's own frames
(``fit_loop`` -> ``training_epoch_loop`` -> ``_PrefetchDataFetcher.__next__`` ->
``CombinedLoader.__next__`` -> ``_MaxSizeCycle.__next__``). The dataset is map-style; its sampler
is endless (no length: the fetcher prefetches) or, with ``--epoch-batches N``, epochs of N batches
(a length: no prefetch, and non-persistent workers restart each epoch). Each sample costs
``--sample-ms`` of CPU in ``__getitem__`` (a decode); the step ``--step-ms`` of CPU in
``training_step``.

Truth (clock.py): the DataLoader's ``__iter__`` hands Lightning an iterator whose ``__next__`` goes
through the job's clock, so the clock times exactly the main thread's calls into the DataLoader,
whatever Lightning does around them; worker records by ``worker_init``.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import sys
from pathlib import Path
from typing import Iterator

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clock import Clock, Served, busy, worker_init  # noqa: E402

WIDTH = 32  # features per sample


class SlowSamples(Dataset):
    """A map-style dataset whose ``__getitem__`` costs ``sample_ms`` of CPU."""

    def __init__(self, length: int, sample_ms: float, served: Served) -> None:
        self.length, self.sample_ms, self.served = length, sample_ms, served

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple:
        self.served()
        busy(self.sample_ms)
        return torch.randn(WIDTH), torch.tensor(index % 2, dtype=torch.float32)


class EndlessSampler(Sampler):
    """Sample indices for ever and no length (as detectron2's TrainingSampler): Lightning's fetcher
    then cannot tell an epoch's end, so it prefetches one batch ahead."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self) -> Iterator[int]:
        return (index % self.length for index in itertools.count())


class ClockedLoader(DataLoader):
    """A DataLoader whose iterators report each ``next()`` to the job's clock."""

    clock: Clock  # set once built (a DataLoader's own arguments stay as Lightning knows them)

    def __iter__(self):
        return ClockedBatches(self.clock, self.clock.start(_Unclocked(self)))


class _Unclocked:
    """The loader as ``Clock.start`` needs it: iter() without the clock, and its worker settings."""

    def __init__(self, loader: ClockedLoader) -> None:
        self.loader = loader
        self.num_workers, self.persistent_workers = loader.num_workers, loader.persistent_workers

    def __iter__(self):
        return DataLoader.__iter__(self.loader)


class ClockedBatches:
    """The iterator Lightning calls ``next()`` on: each call timed by the clock."""

    def __init__(self, clock: Clock, batches) -> None:
        self.clock, self.batches = clock, batches

    def __iter__(self) -> ClockedBatches:
        return self

    def __next__(self):
        batch = self.clock.next(self.batches)
        if batch is None:
            raise StopIteration
        return batch


class TinyModel(L.LightningModule):
    """One linear layer; the step also burns ``step_ms`` of CPU (a bigger model's forward)."""

    def __init__(self, step_ms: float) -> None:
        super().__init__()
        self.step_ms = step_ms
        self.layer = torch.nn.Linear(WIDTH, 1)

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        features, labels = batch
        busy(self.step_ms)
        return torch.nn.functional.mse_loss(self.layer(features).squeeze(1), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report")
    parser.add_argument("-j", "--workers", type=int, default=2)
    parser.add_argument("--sample-ms", type=float, default=4.0, help="CPU per sample in __getitem__")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=15.0, help="CPU per training_step")
    parser.add_argument("--epoch-batches", type=int, default=0, help="epochs this long (0: endless, no length)")
    parser.add_argument("--persistent", action="store_true")
    args = parser.parse_args()

    torch.set_num_threads(1)
    samples = SlowSamples((args.epoch_batches or 100) * args.batch_size, args.sample_ms, Served(args.report))
    extra = {}
    if args.workers:
        extra = dict(
            worker_init_fn=functools.partial(worker_init, args.report, "train", os.getpid()),
            persistent_workers=args.persistent,
        )
    sampler = None if args.epoch_batches else EndlessSampler(len(samples))
    loader = ClockedLoader(samples, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers, **extra)
    loader.clock = Clock(args.report, kind="lightning", lightning=L.__version__)
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=10**9, max_epochs=-1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, use_distributed_sampler=False)  # fmt: skip
    trainer.fit(TinyModel(args.step_ms), train_dataloaders=loader)


if __name__ == "__main__":
    main()

"""A real DistributedDataParallel job on CPU (gloo), for the truth harness (bench_truth.py --subset libs):

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/jobs/ddp_job.py \
        --report DIR --workers 1 --sample-ms 2 --slow-rank 1 --slow-factor 4

Each rank reads a map-style dataset through a DistributedSampler; a sample costs ``--sample-ms`` of
CPU, ``--slow-factor`` times that on ``--slow-rank`` (its storage or its augmentation is slower):
that rank waits for data, and the others wait for it inside backward()'s all-reduce. Each rank
writes its own truth (clock.py): time inside next(), time inside backward+step (span
"backward"), its rank, torchrun's restart count and its workers.

``--fail-rank R --fail-after-s S`` (under ``torchrun --max-restarts``): on torchrun's first start,
rank R writes ``failed-<pid>.json`` and exits 1 S seconds after its first batch, and torchrun
starts every rank again.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clock import Clock, busy, record, worker_init  # noqa: E402


class Features(Dataset):
    def __init__(self, length: int, width: int, sample_ms: float) -> None:
        self.length, self.width, self.sample_ms = length, width, sample_ms

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        busy(self.sample_ms)  # decode + augment
        generator = torch.Generator().manual_seed(index)
        return torch.randn(self.width, generator=generator), index % 10


def _init_gloo(restart: int) -> None:
    """gloo's process group, its keys under this start's own prefix of torchrun's store: a
    restarted rank that read the last start's address of a peer would connect to a dead port."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, is_master=False)
    dist.init_process_group("gloo", store=dist.PrefixStore(f"start-{restart}", store), rank=rank, world_size=world)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report")
    parser.add_argument("-j", "--workers", type=int, default=1)
    parser.add_argument("--sample-ms", type=float, default=2.0)
    parser.add_argument("--slow-rank", type=int, default=-1, help="this rank's samples cost --slow-factor times more")
    parser.add_argument("--slow-factor", type=float, default=4.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--width", type=int, default=512, help="the model's width (its step's cost)")
    parser.add_argument("--length", type=int, default=1_000_000, help="samples per epoch (long: no epoch end)")
    parser.add_argument("--fail-rank", type=int, default=-1, help="on torchrun's first start this rank exits 1 ...")
    parser.add_argument("--fail-after-s", type=float, default=0.0, help="... this long after its first batch")
    args = parser.parse_args()

    torch.set_num_threads(1)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    _init_gloo(restart)
    rank, world = dist.get_rank(), dist.get_world_size()
    cost = args.sample_ms * (args.slow_factor if rank == args.slow_rank else 1.0)
    dataset = Features(args.length, args.width, cost)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)
    extra = {}
    if args.workers:
        extra = dict(worker_init_fn=functools.partial(worker_init, args.report, "train", os.getpid()))
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers, **extra)
    model = DistributedDataParallel(
        torch.nn.Sequential(
            torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
            torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
            torch.nn.Linear(args.width, 10),
        )
    )  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    clock = Clock(args.report, rank=rank, world_size=world, sample_ms=cost, restart=restart)
    fail_at = None
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        batches = clock.start(loader)
        while (batch := clock.next(batches)) is not None:
            if rank == args.fail_rank and restart == 0:
                fail_at = fail_at or time.monotonic() + args.fail_after_s
                if time.monotonic() >= fail_at:
                    record(args.report, "failed", rank=rank, exit_code=1)
                    sys.exit(1)
            features, labels = batch
            loss = loss_fn(model(features), labels)
            optimizer.zero_grad()
            with clock.span("backward"):  # the all-reduce: a fast rank waits here for a slow one
                loss.backward()
                optimizer.step()
        epoch += 1


if __name__ == "__main__":
    main()

"""A small real training job on CUDA for tests/gpu/check.sh (by hand, never in CI).

An MLP trained on a synthetic dataset whose samples cost ``--sample-ms`` of CPU each, through a
DataLoader with ``--workers`` workers, ``pin_memory=True`` and persistent workers; batches are
copied with ``non_blocking=True``. Runs until killed (or ``--max-s``). Without CUDA it falls back
to the CPU (a smaller model) so the check script can run end to end on any machine. Once the first
steps are done it writes ``{"pid", "device", "name"}`` to ``--ready`` (if given).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class CostlySamples(Dataset):
    """Random features and a label; each sample spins ``sample_ms`` of CPU, as decoding would."""

    def __init__(self, length: int, features: int, sample_ms: float) -> None:
        self.length = length
        self.features = features
        self.sample_ms = sample_ms

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        deadline = time.perf_counter() + self.sample_ms / 1000
        x = 0
        while time.perf_counter() < deadline:
            x += 1
        generator = torch.Generator().manual_seed(index)
        return torch.randn(self.features, generator=generator), index % 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--sample-ms", type=float, default=3.0)
    parser.add_argument("--features", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=0, help="hidden width (default 4096 on CUDA, 256 on CPU)")
    parser.add_argument("--batches", type=int, default=200, help="batches per epoch")
    parser.add_argument("--max-s", type=float, default=0.0, help="exit after this many seconds (0: until killed)")
    parser.add_argument("--ready", help="write the pid and device here once training runs")
    args = parser.parse_args()

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    hidden = args.hidden or (4096 if cuda else 256)
    if not cuda:
        torch.set_num_threads(1)
    print(f"cuda_job: pid {os.getpid()} on {device} ({name}), torch {torch.__version__}", flush=True)

    model = nn.Sequential(
        nn.Linear(args.features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(
        CostlySamples(args.batches * args.batch_size, args.features, args.sample_ms),
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=True,
        persistent_workers=args.workers > 0,
    )

    started = time.monotonic()
    steps = 0
    epoch = 0
    while True:
        for inputs, labels in loader:
            inputs = inputs.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(inputs), labels)
            loss.backward()
            optimizer.step()
            steps += 1
            if steps == 3:
                if cuda:
                    torch.cuda.synchronize()
                if args.ready:
                    info = {"pid": os.getpid(), "device": device.type, "name": name}
                    with open(args.ready + ".tmp", "w") as out:
                        json.dump(info, out)
                    os.replace(args.ready + ".tmp", args.ready)
            if steps % 100 == 0:
                print(f"cuda_job: epoch {epoch} step {steps} loss {loss.item():.3f}", flush=True)
            if args.max_s and time.monotonic() - started > args.max_s:
                print(f"cuda_job: --max-s {args.max_s:g} reached after {steps} steps", flush=True)
                return
        epoch += 1


if __name__ == "__main__":
    main()

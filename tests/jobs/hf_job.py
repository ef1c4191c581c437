"""A real Hugging Face ``datasets`` job, for the truth harness (bench_truth.py --subset libs):

    python tests/jobs/hf_job.py --report DIR --workers 1                      # map-style
    python tests/jobs/hf_job.py --report DIR --streaming --num-shards 2 --workers 4

The table is built in memory (``datasets.Dataset.from_dict``: nothing downloaded). Map-style:
``set_transform`` with a per-row CPU cost (tokenising, augmenting); streaming:
``to_iterable_dataset(num_shards=M)`` and a lazy ``.map`` of the same cost. An iterable dataset
gives each DataLoader worker some of its M shards; with more workers than shards datasets logs
"Too many dataloader workers: N (max is dataset.num_shards=M). Stopping K dataloader workers."
(the job's stderr) and those workers never produce a sample. Truth as clock.py writes it.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clock import Clock, Served, busy, worker_init  # noqa: E402

WIDTH = 256


def table(rows: int):
    import datasets

    return datasets.Dataset.from_dict({"seed": list(range(rows)), "label": [i % 10 for i in range(rows)]})


def transform_batch(batch: dict, row_ms: float, served: Served) -> dict:
    """set_transform's function: a dict of columns (lists) in, the same columns out."""
    features = []
    for seed in batch["seed"]:
        served()
        busy(row_ms)
        features.append(torch.randn(WIDTH, generator=torch.Generator().manual_seed(seed)))
    return {"x": features, "label": batch["label"]}


def transform_row(row: dict, row_ms: float, served: Served) -> dict:
    """The streaming .map's function: one row in."""
    out = transform_batch({"seed": [row["seed"]], "label": [row["label"]]}, row_ms, served)
    return {"x": out["x"][0], "label": row["label"]}


def collate(rows: list) -> tuple:
    return torch.stack([torch.as_tensor(r["x"]) for r in rows]), torch.tensor([r["label"] for r in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report")
    parser.add_argument("-j", "--workers", type=int, default=1)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--row-ms", type=float, default=3.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=5.0)
    parser.add_argument("--streaming", action="store_true", help="to_iterable_dataset(num_shards=...)")
    parser.add_argument("--num-shards", type=int, default=2)
    args = parser.parse_args()

    torch.set_num_threads(1)
    served = Served(args.report)
    data = table(args.rows)
    if args.streaming:
        data = data.to_iterable_dataset(num_shards=args.num_shards)
        data = data.map(functools.partial(transform_row, row_ms=args.row_ms, served=served))
        data = data.select_columns(["x", "label"]).with_format("torch")
    else:
        data.set_transform(functools.partial(transform_batch, row_ms=args.row_ms, served=served))
    extra = {}
    if args.workers:
        extra = dict(worker_init_fn=functools.partial(worker_init, args.report, "train", os.getpid()))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=not args.streaming, num_workers=args.workers,
                        collate_fn=collate, **extra)  # fmt: skip
    weight = torch.zeros(WIDTH)
    clock = Clock(args.report, parts=args.num_shards if args.streaming else None)
    while True:
        batches = clock.start(loader)
        while (batch := clock.next(batches)) is not None:
            features, _ = batch
            weight += features.float().mean(0)
            busy(args.step_ms)


if __name__ == "__main__":
    main()

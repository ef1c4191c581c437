"""A real webdataset job over K tar shards, for the truth harness (bench_truth.py --subset libs):

    python tests/jobs/wds_job.py --report DIR --shards-dir /tmp/wds --shards 2 --workers 2
    python tests/jobs/wds_job.py --make-shards /tmp/wds --shards 2   # once

``webdataset.WebDataset`` splits its shard list among the DataLoader's workers (split_by_worker):
worker i reads shards i, i+N, ... With more workers than shards some get none; webdataset's
default ``empty_check=True`` then raises "No samples found in dataset; perhaps you have fewer
shards than workers" (``--no-empty-check`` passes empty_check=False: those workers just idle).
Each sample is a zlib-compressed array whose decode costs ``--decode-ms`` of CPU. The job writes
its truth (clock.py): its clock, its workers, and which workers served samples (served-<pid>.json).
If the loader raises, the error goes to error-<pid>.json and the job exits 3.
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import sys
import traceback
import zlib
from pathlib import Path

import numpy as np
import torch
import webdataset as wds
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clock import Clock, Served, busy, record, worker_init  # noqa: E402


def shard_urls(folder: str, shards: int) -> list:
    return [str(Path(folder) / f"train-{i:04d}.tar") for i in range(shards)]


def make_shards(folder: str, shards: int, per_shard: int) -> None:
    """K shards of ``per_shard`` samples: a compressed float16 array (.npz.zlib) and a class (.cls)."""
    Path(folder).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(29)
    for url in shard_urls(folder, shards):
        if Path(url).exists():
            continue
        with wds.TarWriter(url + ".part") as sink:
            for index in range(per_shard):
                smooth = np.cumsum(rng.normal(size=(8, 128)), axis=1).astype(np.float16)
                buffer = io.BytesIO()
                np.save(buffer, smooth)
                sink.write({"__key__": f"{Path(url).stem}-{index:06d}",
                            "arr.zlib": zlib.compress(buffer.getvalue()), "cls": str(index % 10).encode()})  # fmt: skip
        os.replace(url + ".part", url)


def decode(sample: dict, decode_ms: float, served: Served) -> tuple:
    served()
    array = np.load(io.BytesIO(zlib.decompress(sample["arr.zlib"])))
    busy(decode_ms)  # the rest of a costly decode + augmentation
    return torch.from_numpy(array.astype(np.float32)).flatten(), int(sample["cls"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report")
    parser.add_argument("--shards-dir", default="/tmp/truth-wds")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--per-shard", type=int, default=8000)
    parser.add_argument("--make-shards", metavar="DIR", help="write the shards and exit")
    parser.add_argument("-j", "--workers", type=int, default=2)
    parser.add_argument("--decode-ms", type=float, default=4.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--step-ms", type=float, default=5.0, help="the trainer's step (CPU)")
    parser.add_argument("--no-empty-check", action="store_true", help="WebDataset(empty_check=False)")
    args = parser.parse_args()
    if args.make_shards:
        make_shards(args.make_shards, args.shards, args.per_shard)
        return

    torch.set_num_threads(1)
    served = Served(args.report)
    urls = shard_urls(args.shards_dir, args.shards)
    dataset = wds.WebDataset(urls, shardshuffle=False, empty_check=not args.no_empty_check)
    dataset = dataset.map(functools.partial(decode, decode_ms=args.decode_ms, served=served))
    extra = {}
    if args.workers:
        extra = dict(worker_init_fn=functools.partial(worker_init, args.report, "train", os.getpid()))
    loader = DataLoader(dataset, batch_size=args.batch_size, num_workers=args.workers, **extra)
    weight = torch.zeros(8 * 128)
    clock = Clock(args.report, parts=args.shards)
    try:
        while True:
            batches = clock.start(loader)
            while (batch := clock.next(batches)) is not None:
                features, _ = batch
                weight += features.mean(0)
                busy(args.step_ms)
    except Exception as error:  # noqa: BLE001 (the truth: what the library raised)
        record(args.report, "error", type=type(error).__name__, message=str(error)[-2000:],
               traceback=traceback.format_exc()[-4000:], batches=clock.batches)  # fmt: skip
        print(json.dumps({"error": str(error)}), file=sys.stderr)
        sys.exit(3)


if __name__ == "__main__":
    main()

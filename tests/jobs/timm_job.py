"""timm's own input pipeline on CPU, for the truth harness (bench_truth.py --subset libs); runs in
the timm venv (/work/venv-timm: torch 2.14, torchvision, timm), while dltop runs from the main one:

    /work/venv-timm/bin/python tests/jobs/timm_job.py --make-images /tmp/truth-timm   # once
    /work/venv-timm/bin/python tests/jobs/timm_job.py --report DIR --data-dir /tmp/truth-timm -j 1

As timm's train.py: ``timm.data.create_dataset('', root=...)`` (an ImageFolder of class folders of
JPEGs) and ``timm.data.create_loader(..., is_training=True, num_workers=args.workers)`` (which builds
the DataLoader: RandomResizedCrop, flip, colour jitter, normalise; persistent workers; its own
worker_init_fn, chained here with the truth record), ``-j/--workers`` on the command line, and a
small timm model's forward/backward on CPU. Truth as clock.py writes it.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clock import Clock, chain_worker_init  # noqa: E402


def make_images(folder: str, count: int, width: int, height: int, classes: int = 2) -> None:
    """Photo-like JPEGs (smooth colour fields with grain, quality 90) in ``classes`` folders."""
    from PIL import Image

    rng = random.Random(29)
    for index in range(count):
        path = Path(folder) / f"class{index % classes}" / f"img{index:04d}.jpg"
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        seed = Image.frombytes("RGB", (32, 24), rng.randbytes(32 * 24 * 3))
        image = seed.resize((width, height), Image.BICUBIC)
        grain = Image.effect_noise((width, height), 24).convert("RGB")
        Image.blend(image, grain, 0.15).save(path, quality=90)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report")
    parser.add_argument("--data-dir", default="/tmp/truth-timm")
    parser.add_argument("--make-images", metavar="DIR", help="write the JPEGs and exit")
    parser.add_argument("--count", type=int, default=160)
    parser.add_argument("--size", default="1600x1200")
    parser.add_argument("-j", "--workers", type=int, default=4, metavar="N", help="how many training processes to use")
    parser.add_argument("-b", "--batch-size", type=int, default=8)
    parser.add_argument("--input-size", type=int, default=160)
    parser.add_argument("--model", default="test_vit")
    args = parser.parse_args()
    if args.make_images:
        width, height = map(int, args.size.split("x"))
        make_images(args.make_images, args.count, width, height)
        return

    import timm
    from timm.data import create_dataset, create_loader

    dataset = create_dataset("", root=args.data_dir, split="train", is_training=True, batch_size=args.batch_size)
    loader = create_loader(
        dataset,
        input_size=(3, args.input_size, args.input_size),
        batch_size=args.batch_size,
        is_training=True,
        num_workers=args.workers,
        device=torch.device("cpu"),
        use_prefetcher=False,
    )
    if args.workers:
        import os

        loader.worker_init_fn = chain_worker_init(loader.worker_init_fn, args.report, "train", os.getpid())
    model = timm.create_model(args.model, num_classes=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    clock = Clock(args.report, library=f"timm {timm.__version__}", torch=torch.__version__)
    while True:
        batches = clock.start(loader)
        while (batch := clock.next(batches)) is not None:
            images, labels = batch
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()

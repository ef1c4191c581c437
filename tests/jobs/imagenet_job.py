"""pytorch/examples' imagenet script in miniature, for the truth harness (bench_truth.py): an
ImageFolder-like Dataset that decodes real JPEGs with PIL and crops them as RandomResizedCrop does,
and a trainer step that runs a small CNN forward/backward on CPU with torch's default intra-op
threads (no set_num_threads(1): set OMP_NUM_THREADS to change it). Truth as clock.py writes it.

    python tests/jobs/imagenet_job.py --make-images DIR            # once
    python tests/jobs/imagenet_job.py --images DIR --report OUT -j 2
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from clock import Clock, worker_init  # noqa: E402

CROP = 224


def write_images(folder: Path, count: int, width: int, height: int) -> None:
    """Photo-like JPEGs (smooth colour fields with grain, quality 90), written once."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(10)
    for index in range(count):
        path = folder / f"img{index:04d}.jpg"
        if path.exists():
            continue
        seed = Image.frombytes("RGB", (32, 24), rng.randbytes(32 * 24 * 3))
        image = seed.resize((width, height), Image.BICUBIC)
        grain = Image.effect_noise((width, height), 24).convert("RGB")
        Image.blend(image, grain, 0.15).save(path, quality=90)


class JpegFolder(Dataset):
    """ImageFolder + RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor + Normalize, in PIL
    and torch alone (no torchvision, no numpy here). ``length`` indexes the files round and round,
    so an epoch is as long as ImageNet's rather than a few hundred images."""

    MEAN = (0.485, 0.456, 0.406)
    STD = (0.229, 0.224, 0.225)

    def __init__(self, folder: str, length: int) -> None:
        self.files = sorted(str(p) for p in Path(folder).glob("*.jpg"))
        self.length = length
        self.mean = torch.tensor(self.MEAN).view(3, 1, 1)
        self.std = torch.tensor(self.STD).view(3, 1, 1)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        from PIL import Image

        with Image.open(self.files[index % len(self.files)]) as opened:
            image = opened.convert("RGB")
        image = _random_resized_crop(image, random.Random(index))
        pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8).view(CROP, CROP, 3)
        tensor = pixels.permute(2, 0, 1).float().div(255)
        return (tensor - self.mean) / self.std, index % 1000


def _random_resized_crop(image, rng: random.Random):
    from PIL import Image

    width, height = image.size
    area = width * height * rng.uniform(0.08, 1.0)
    ratio = rng.uniform(3 / 4, 4 / 3)
    w = min(width, int(round((area * ratio) ** 0.5)))
    h = min(height, int(round((area / ratio) ** 0.5)))
    left, top = rng.randint(0, width - w), rng.randint(0, height - h)
    image = image.resize((CROP, CROP), Image.BILINEAR, box=(left, top, left + w, top + h))
    return image.transpose(Image.FLIP_LEFT_RIGHT) if rng.random() < 0.5 else image


def small_cnn(width: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 5, stride=2),
        torch.nn.ReLU(),
        torch.nn.Conv2d(width, 2 * width, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.Conv2d(2 * width, 2 * width, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(2 * width, 1000),
    )


def run(argv: list) -> None:
    parser = argparse.ArgumentParser(prog="imagenet_job.py")
    parser.add_argument("--images", required=True)
    parser.add_argument("-j", "--workers", type=int, default=1)
    parser.add_argument("-b", "--batch-size", type=int, default=16)
    parser.add_argument("--width", type=int, default=8, help="channels of the CNN's first layer (step cost)")
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--report")
    args = parser.parse_args(argv)
    extra = {}
    if args.workers:
        init = functools.partial(worker_init, args.report, "train", os.getpid())
        extra = dict(worker_init_fn=init, persistent_workers=args.persistent)
    loader = DataLoader(
        JpegFolder(args.images, 1_000_000), batch_size=args.batch_size, shuffle=True, num_workers=args.workers, **extra
    )
    model = small_cnn(args.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    clock = Clock(args.report)
    while True:
        batches = clock.start(loader)
        while (batch := clock.next(batches)) is not None:
            images, labels = batch
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--make-images", metavar="DIR", help="write the JPEGs to DIR once, and exit")
    parser.add_argument("--count", type=int, default=240, help="with --make-images: how many")
    parser.add_argument("--size", default="1280x960", help="with --make-images: WIDTHxHEIGHT")
    args, rest = parser.parse_known_args()
    if args.make_images:
        width, height = map(int, args.size.split("x"))
        write_images(Path(args.make_images), args.count, width, height)
    else:
        run(rest)


if __name__ == "__main__":
    main()

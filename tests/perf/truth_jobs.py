"""The jobs the truth harness (bench_truth.py) runs, each writing its own ground truth.

* ``truth_jobs.py train ARGS``: the test job (tests/jobs/train.py, knobs in dltop/demo/job.py)
  unchanged, except that its clock publishes its figures ten times a second from a thread,
  counting the next() or iter() call it is inside *now*. The job's own clock only writes after a
  next() returns, so a 4 s spawn start-up would fall between two records and no interval could be
  cut inside it; this one can be cut anywhere to 0.1 s.
* ``truth_jobs.py imagenet ARGS``: pytorch/examples' imagenet script in miniature (issue 10 §6):
  an ImageFolder-like Dataset that decodes real JPEGs with PIL and crops them as
  RandomResizedCrop does, and a trainer step that runs a small CNN forward/backward on CPU with
  torch's default intra-op threads (no set_num_threads(1): set OMP_NUM_THREADS to change it).
* ``truth_jobs.py images DIR``: write the JPEGs once.

Timing files are ``timing-<pid>.json`` with wait_s / startup_s / total_s / batches / epochs / at,
as dltop.demo.job.WaitClock defines them.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import sys
import threading
import time
from pathlib import Path
from typing import Optional

import torch
from torch.utils.data import DataLoader, Dataset

from dltop.demo import job

PUBLISH_S = 0.1
CROP = 224


class LiveClock(job.WaitClock):
    """The job's WaitClock, published continuously (the file atomically replaced). The call the
    trainer is inside now is published apart (``open_id``, ``open_s``): which counter it belongs
    to is known only when it returns (the base class decides: an epoch's first batches and its
    end are start-up), so the harness reads that from the next record after it closed."""

    def __init__(self, report: Optional[str]) -> None:
        super().__init__(None)  # the base class would write the same file after each next()
        self.path = Path(report) / f"timing-{os.getpid()}.json" if report else None
        self._calls = 0
        self._open: Optional[tuple] = None  # (call id, since, waited, startup) while inside a call
        if self.path is not None:
            threading.Thread(target=self._publish_forever, name="truth-clock", daemon=True).start()

    def start(self, loader):
        return self._timed(super().start, loader)

    def next(self, batches):
        return self._timed(super().next, batches)

    def _timed(self, call, argument):
        self._calls += 1
        self._open = (self._calls, time.perf_counter(), self.waited, self.startup)
        try:
            return call(argument)
        finally:
            self._open = None

    def figures(self) -> dict:
        now = time.perf_counter()
        opened, waited, startup = self._open, self.waited, self.startup
        # still open unless the base class has counted it already (its counters moved)
        still_open = opened is not None and (opened[2], opened[3]) == (waited, startup)
        return dict(
            pid=os.getpid(),
            wait_s=waited,
            startup_s=startup,
            total_s=now - self.started,
            batches=self.batches,
            epochs=self.epochs,
            open_id=opened[0] if still_open else None,
            open_s=now - opened[1] if still_open else 0.0,
            at=time.time(),
        )

    def _publish_forever(self) -> None:
        partial = self.path.with_suffix(".part")
        while True:
            partial.write_text(json.dumps(self.figures()))
            os.replace(partial, self.path)
            time.sleep(PUBLISH_S)


def run_train(argv: list) -> None:
    """tests/jobs/train.py with the live clock."""
    job.WaitClock = LiveClock
    sys.argv = [sys.argv[0], *argv]
    job.main()


# -- imagenet-like ---------------------------------------------------------------------------


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


def run_imagenet(argv: list) -> None:
    parser = argparse.ArgumentParser(prog="truth_jobs.py imagenet")
    parser.add_argument("--images", required=True)
    parser.add_argument("-j", "--workers", type=int, default=1)
    parser.add_argument("-b", "--batch-size", type=int, default=16)
    parser.add_argument("--width", type=int, default=8, help="channels of the CNN's first layer (step cost)")
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--report")
    args = parser.parse_args(argv)
    job._record(args.report, "trainer", rank=0, threads=torch.get_num_threads())
    extra = {}
    if args.workers:
        init = functools.partial(job._worker_init, args.report, "train", os.getpid(), False)
        extra = dict(worker_init_fn=init, persistent_workers=args.persistent)
    loader = DataLoader(
        JpegFolder(args.images, 1_000_000), batch_size=args.batch_size, shuffle=True, num_workers=args.workers, **extra
    )
    model = small_cnn(args.width)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    clock = LiveClock(args.report)
    while True:
        batches = clock.start(loader)
        while (batch := clock.next(batches)) is not None:
            images, labels = batch
            loss = loss_fn(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in ("train", "imagenet", "images"):
        sys.exit("usage: truth_jobs.py train|imagenet|images ARGS")
    kind, rest = sys.argv[1], sys.argv[2:]
    if kind == "train":
        run_train(rest)
    elif kind == "imagenet":
        run_imagenet(rest)
    else:
        parser = argparse.ArgumentParser(prog="truth_jobs.py images")
        parser.add_argument("folder")
        parser.add_argument("--count", type=int, default=240)
        parser.add_argument("--size", default="1280x960")
        args = parser.parse_args(rest)
        width, height = map(int, args.size.split("x"))
        write_images(Path(args.folder), args.count, width, height)


if __name__ == "__main__":
    main()

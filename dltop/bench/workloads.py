"""What the bench loads: synthetic samples of known cost, a twin of an observed job, or the
user's own dataset from ``--dataset pkg.module:factory``.

Synthetic samples cost ``cpu_ms`` of CPU time (a spin, as decoding would), ``io_ms`` of waiting
(as on remote storage) and a read of ``read_kb`` from a file this module writes to a temp dir,
dropped from the page cache first (``posix_fadvise DONTNEED``) so the read reaches storage.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch.utils.data import Dataset, IterableDataset

from dltop.bench.factory import call_factory, import_factory
from dltop.errors import DltopError
from dltop.uncached import read_uncached

PRESETS: dict[str, dict[str, float]] = {
    "synthetic-cpu": {"cpu_ms": 4.0, "sample_kb": 64},
    "synthetic-io": {"read_kb": 256, "sample_kb": 64},
    "mixed": {"cpu_ms": 2.0, "read_kb": 128, "sample_kb": 64},
    "twin": {},
}
PARAMS = ("cpu_ms", "io_ms", "read_kb", "sample_kb", "length", "files")
DEFAULTS: dict[str, float] = {
    "cpu_ms": 0.0, "io_ms": 0.0, "read_kb": 0, "sample_kb": 64, "length": 100_000, "files": 64
}  # fmt: skip


class SyntheticDataset(Dataset):
    """Samples of known cost: (a float tensor of sample_kb, its index as label)."""

    def __init__(self, cpu_ms: float, io_ms: float, read_kb: int, sample_kb: int, length: int, files: list):
        self.cpu_ms, self.io_ms, self.read_kb, self.sample_kb = cpu_ms, io_ms, read_kb, sample_kb
        self.length, self.files = length, files

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if self.files:
            read_uncached(self.files[index % len(self.files)])
        if self.io_ms:
            time.sleep(self.io_ms / 1000)
        # CPU time, not wall time: under contention a sample still costs cpu_ms of CPU, as decoding does
        deadline = time.thread_time() + self.cpu_ms / 1000
        while time.thread_time() < deadline:
            pass
        return torch.full((self.sample_kb * 256,), float(index)), index


@dataclass
class Workload:
    """A named workload: ``base`` holds the DataLoader keyword arguments it brings (dataset, and
    for user factories collate_fn, sampler, batch_size...)."""

    name: str
    params: dict
    base: dict
    single_sample_s: Optional[float] = None  # per-sample cost measured in one process (the ceiling)
    read_bytes_per_sample: int = 0
    _temp: Optional[str] = field(default=None, repr=False)

    def close(self) -> None:
        if self._temp:
            shutil.rmtree(self._temp, ignore_errors=True)
            self._temp = None

    def __enter__(self) -> Workload:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_spec(spec: str) -> tuple:
    """'synthetic-io:read_kb=512' -> ('synthetic-io', {...merged with the preset and defaults})."""
    name, _, rest = spec.partition(":")
    if name not in PRESETS:
        raise DltopError(f"unknown workload {name!r}: choose {', '.join(PRESETS)} (or --dataset pkg.module:factory)")
    params = {**DEFAULTS, **PRESETS[name]}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in PARAMS:
            raise DltopError(f"bad workload parameter {part!r}: expected key=value with keys {', '.join(PARAMS)}")
        try:
            params[key] = float(value) if key.endswith("_ms") else int(value)
        except ValueError:
            raise DltopError(f"bad workload parameter {part!r}: not a number") from None
    return name, params


def synthetic(spec: str) -> Workload:
    name, params = parse_spec(spec)
    temp, files = None, []
    if params["read_kb"]:
        temp = tempfile.mkdtemp(prefix="dltop-bench-")
        block = os.urandom(params["read_kb"] * 1024)
        for i in range(params["files"]):
            path = os.path.join(temp, f"sample-{i:05d}.bin")
            with open(path, "wb") as out:
                out.write(block)
            files.append(path)
    dataset = SyntheticDataset(
        params["cpu_ms"], params["io_ms"], params["read_kb"], params["sample_kb"], params["length"], files
    )
    return Workload(name, params, {"dataset": dataset}, read_bytes_per_sample=params["read_kb"] * 1024, _temp=temp)


def user_factory(target: str) -> Workload:
    """``pkg.module:factory``: a callable returning a Dataset (map-style or iterable) or a dict of
    DataLoader keyword arguments with at least ``dataset``."""
    made = call_factory("--dataset", target, import_factory("--dataset", target, "a Dataset"))
    if isinstance(made, (Dataset, IterableDataset)):
        base = {"dataset": made}
    elif isinstance(made, dict) and isinstance(made.get("dataset"), (Dataset, IterableDataset)):
        base = dict(made)
    else:
        raise DltopError(
            f"--dataset {target}: the factory returned {type(made).__name__}; expected a torch Dataset or a dict "
            "of DataLoader arguments with 'dataset'"
        )
    return Workload(target, {}, base)

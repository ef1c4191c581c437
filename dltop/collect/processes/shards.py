"""How many parts an iterable dataset's source has, read from outside: the shard files its workers
hold open.

An ``IterableDataset`` hands each worker its own part of the source (webdataset's ``.tar``
shards, parquet/arrow files, litdata's and MosaicML streaming's chunk files); workers beyond the
parts get nothing. A worker reading a shard holds it open: its ``/proc/<pid>/fd`` links name the
file, and the shard's directory, read through the job's own root, holds its siblings — files
named alike (``train-000017.tar``: the same name with other digits). Their number bounds the
parts the source has; the distinct files seen read, which grow as the workers move from shard to
shard, are the parts known to be read (a folder may hold more than the loader reads). Read every
``EVERY_S`` per loader (a readlink per descriptor), only for the workers of iterable loaders; what
cannot be read (another user's job) leaves the count unknown.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

EVERY_S = 5.0
# files a streaming dataset's parts are stored in (compressed variants end in these too)
SHARD_SUFFIXES = (".tar", ".tgz", ".parquet", ".arrow", ".jsonl", ".mds", ".bin", ".tfrecord", ".tfrecords",
                  ".zst", ".gz", ".npy", ".h5", ".hdf5", ".csv", ".zip")  # fmt: skip
NOT_DATA = ("/site-packages/", "/dist-packages/", "/lib/python", "/proc/", "/dev/", "/sys/")
_DIGITS = re.compile(r"\d+")


def shard_pattern(path: str) -> Optional[re.Pattern[str]]:
    """The names its siblings share (digits free): ``train-000017.tar`` -> ``train-\\d+\\.tar``;
    None for a file that is no shard (no data suffix, no number in its name, a library file)."""
    name = os.path.basename(path)
    if any(part in path for part in NOT_DATA) or not name.lower().endswith(SHARD_SUFFIXES):
        return None
    if not _DIGITS.search(name):
        return None
    return re.compile(r"\d+".join(re.escape(piece) for piece in _DIGITS.split(name)) + r"\Z")


@dataclass
class _Source:
    read_at: float = float("-inf")
    files: set[str] = field(default_factory=set)  # shard files seen open, over time
    parts: Optional[int] = None
    where: Optional[str] = None
    seen: int = 0  # of the parts, the files seen open


class ShardFiles:
    """Per loader (a trainer and its dataset), the shard files its workers were seen reading and
    how many siblings they have."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sources: dict[tuple[int, str], _Source] = {}

    def parts(self, key: tuple[int, str], worker_pids: list[int]) -> tuple[Optional[int], Optional[str]]:
        """(parts, where they were counted, in words), re-read at most every EVERY_S; ``seen``
        tells how many of them were seen open."""
        source = self._sources.setdefault(key, _Source())
        now = self._clock()
        if worker_pids and now - source.read_at >= EVERY_S:
            source.read_at = now
            for pid in worker_pids:
                source.files.update(_open_shards(pid))
            if source.files:
                source.parts, source.where, source.seen = _count_siblings(worker_pids[0], source.files)
        return source.parts, source.where

    def seen(self, key: tuple[int, str]) -> Optional[int]:
        """Of the parts counted from a directory, how many its workers were seen read (a directory
        may hold more shards than the loader reads: the count is then an upper bound)."""
        source = self._sources.get(key)
        return source.seen if source is not None and source.parts is not None else None

    def forget(self, trainer: int) -> None:
        """A trainer's loaders are history: their sources go with them."""
        for key in [k for k in self._sources if k[0] == trainer]:
            del self._sources[key]


def _open_shards(pid: int) -> set[str]:
    """Paths of the shard files the process holds open."""
    base = f"/proc/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return set()
    found = set()
    for name in names:
        try:
            target = os.readlink(f"{base}/{name}")
        except OSError:
            continue
        if target.startswith("/") and shard_pattern(target) is not None:
            found.add(target)
    return found


def _count_siblings(pid: int, files: set[str]) -> tuple[Optional[int], Optional[str], int]:
    """The largest family of shards the files belong to: (its size, in words, how many were seen open)."""
    best: tuple[Optional[int], Optional[str], int] = (None, None, 0)
    for directory in sorted({os.path.dirname(f) for f in files}):
        mine = [f for f in files if os.path.dirname(f) == directory]
        pattern = shard_pattern(mine[0])
        try:
            siblings = os.listdir(f"/proc/{pid}/root{directory}")
        except OSError:
            siblings = [os.path.basename(f) for f in mine]
        count = sum(1 for s in siblings if pattern is not None and pattern.match(s))
        count = max(count, len(mine))
        if best[0] is None or count > best[0]:
            example = os.path.basename(sorted(mine)[0])
            # the directory may hold more than the loader reads (a subset of a range): how many were
            # seen read goes with it (figures.source_parts counts only those)
            best = (count, f"{count} shard files like {directory}/{example}", len(mine))
    return best


def parts_from_indices(configs: list[Optional[dict]], num_workers: int) -> tuple[Optional[int], Optional[str]]:
    """(parts, how known) from the shard indices each worker was dealt (frames.shard_indices, at
    its first dump): dealt round-robin, the highest index of all the workers is the last part.
    Only once every worker showed its own: a worker not read yet may hold the highest."""
    dealt = [c["shard_indices"] for c in configs if c and "shard_indices" in c]
    if not num_workers or len(dealt) < num_workers:
        return None, None
    indices = {i for shards in dealt for i in shards}
    parts = max(indices) + 1 if indices else 0
    return parts, f"{parts} shards dealt to the {num_workers} workers (the dataset's shard indices)"

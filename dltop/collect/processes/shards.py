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

The dataset's own account of its parts comes first where it shows (``shard_lists``): the shard
indices its workers were dealt, its list of shards or the brace pattern it was given. Those count
exactly; a folder's files bound the count, and of them only those seen read are sure.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from dltop.collect.processes.shard_lists import PartsCount, command_line_parts, listed_parts
from dltop.collect.procfs import read_cmdline

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


# where a count comes from, best first: the dataset's own account, a pattern it was given, a folder
_RANKS = ("dealt", "listed", "command line", "folder")


@dataclass
class _Source:
    read_at: float = float("-inf")
    files: set[str] = field(default_factory=set)  # shard files seen open, over time
    urls: set[str] = field(default_factory=set)  # shard URLs its workers' frames showed read
    argv: Optional[list[str]] = None  # the trainer's command line, read once
    count: Optional[PartsCount] = None
    rank: int = len(_RANKS)  # of the count's source, in _RANKS (a better one stays: workers come and go)


class ShardFiles:
    """Per loader (a trainer and its dataset), how many parts its source has: by the dataset's own
    account where it shows, else the shard files its workers were seen reading and their siblings."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._sources: dict[tuple[int, str], _Source] = {}

    def parts(
        self, key: tuple[int, str], worker_pids: list[int], configs: list[Optional[dict]], num_workers: int
    ) -> tuple[Optional[int], Optional[str]]:
        """(parts, where they were counted, in words); files re-read at most every EVERY_S.
        ``configs``: what the workers' locals showed (frames.worker_loop_config)."""
        source = self._sources.setdefault(key, _Source())
        _keep(source, "dealt", parts_from_indices(configs, num_workers))
        now = self._clock()
        if worker_pids and now - source.read_at >= EVERY_S:
            source.read_at = now
            for pid in worker_pids:
                source.files.update(_open_shards(pid))
            source.urls.update(c["shard_url"] for c in configs if c and "shard_url" in c)
            if source.argv is None:
                source.argv = _command_line(key[0])
            read = source.files | source.urls
            lists = {name: text for c in configs if c for name, text in c.get("shard_lists", {}).items()}
            _keep(source, "listed", listed_parts(lists, read))
            _keep(source, "command line", command_line_parts(source.argv, read))
            if source.files:
                _keep(source, "folder", _count_siblings(worker_pids[0], source.files))
        count = source.count
        return (count.parts, count.where) if count is not None else (None, None)

    def seen(self, key: tuple[int, str]) -> Optional[int]:
        """Of the parts counted from a directory, how many its workers were seen read (a directory
        may hold more shards than the loader reads: the count is then an upper bound); None where
        the count is the dataset's own."""
        source = self._sources.get(key)
        return source.count.seen if source is not None and source.count is not None else None

    def forget(self, trainer: int) -> None:
        """A trainer's loaders are history: their sources go with them."""
        for key in [k for k in self._sources if k[0] == trainer]:
            del self._sources[key]


def _keep(source: _Source, kind: str, count: Optional[PartsCount]) -> None:
    """A count found replaces the kept one unless that came from a better source."""
    rank = _RANKS.index(kind)
    if count is not None and rank <= source.rank:
        source.count, source.rank = count, rank


def _command_line(pid: int) -> list[str]:
    try:
        return read_cmdline(pid)
    except OSError:
        return []


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


def _count_siblings(pid: int, files: set[str]) -> Optional[PartsCount]:
    """The largest family of shards the files belong to: its size and how many of it were seen open."""
    best: Optional[PartsCount] = None
    for directory in sorted({os.path.dirname(f) for f in files}):
        mine = [f for f in files if os.path.dirname(f) == directory]
        pattern = shard_pattern(mine[0])
        try:
            siblings = os.listdir(f"/proc/{pid}/root{directory}")
        except OSError:
            siblings = [os.path.basename(f) for f in mine]
        count = sum(1 for s in siblings if pattern is not None and pattern.match(s))
        count = max(count, len(mine))
        if best is None or count > best.parts:
            example = os.path.basename(sorted(mine)[0])
            # the directory may hold more than the loader reads (a subset of a range): how many were
            # seen read goes with it (figures.source_parts counts only those)
            best = PartsCount(count, f"{count} shard files like {directory}/{example}", len(mine))
    return best


def parts_from_indices(configs: list[Optional[dict]], num_workers: int) -> Optional[PartsCount]:
    """The parts by the shard indices each worker was dealt (frames.shard_indices, at its first
    dump): dealt round-robin, the highest index of all the workers is the last part. Only once
    every worker showed its own: a worker not read yet may hold the highest."""
    dealt = [c["shard_indices"] for c in configs if c and "shard_indices" in c]
    if not num_workers or len(dealt) < num_workers:
        return None
    indices = {i for shards in dealt for i in shards}
    parts = max(indices) + 1 if indices else 0
    return PartsCount(parts, f"{parts} shards dealt to the {num_workers} workers (the dataset's shard indices)")

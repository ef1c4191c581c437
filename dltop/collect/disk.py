"""iostat -x figures from /proc/diskstats deltas, and which block devices a job reads from.

Formulas from the kernel's Documentation/admin-guide/iostats.rst (DESIGN.md §4): lines have
14, 18 (4.18+, discards) or 20 (5.5+, flush) fields; only the first 14 are needed here.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional

from dltop.collect import procfs
from dltop.model import DiskSample

SECTOR_BYTES = 512
SYS_BLOCK = Path("/sys/dev/block")
SYS_CLASS_BLOCK = Path("/sys/class/block")
_SKIP_PREFIXES = ("loop", "ram", "zram")


@dataclass(frozen=True)
class DiskCounters:
    device: str
    reads: int
    read_sectors: int
    read_ms: int
    writes: int
    write_sectors: int
    write_ms: int
    io_ticks_ms: int
    weighted_ms: int


def parse_diskstats(text: str) -> dict:
    """/proc/diskstats -> {device: DiskCounters}, for any of the three line layouts."""
    devices = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 14:
            continue
        name = fields[2]
        n = [int(v) for v in fields[3:14]]
        devices[name] = DiskCounters(name, n[0], n[2], n[3], n[4], n[6], n[7], n[9], n[10])
    return devices


def disk_rates(before: DiskCounters, after: DiskCounters, dt_s: float, used: bool, label: Optional[str]) -> DiskSample:
    """iostat's -x columns over one interval."""
    reads, writes = after.reads - before.reads, after.writes - before.writes
    dt_ms = max(dt_s * 1000, 1e-6)
    return DiskSample(
        device=after.device,
        reads_per_s=reads / dt_s,
        writes_per_s=writes / dt_s,
        read_bytes_per_s=(after.read_sectors - before.read_sectors) * SECTOR_BYTES / dt_s,
        write_bytes_per_s=(after.write_sectors - before.write_sectors) * SECTOR_BYTES / dt_s,
        r_await_ms=(after.read_ms - before.read_ms) / reads if reads else None,
        w_await_ms=(after.write_ms - before.write_ms) / writes if writes else None,
        aqu_sz=(after.weighted_ms - before.weighted_ms) / dt_ms,
        util_percent=min(100.0, (after.io_ticks_ms - before.io_ticks_ms) / dt_ms * 100),
        used_by_job=used,
        name=label,
    )


def mount_sources(mountinfo_text: str) -> dict:
    """/proc/<pid>/mountinfo -> {'major:minor': source} for mounts whose source is a device path.

    btrfs subvolumes and some other filesystems give files an anonymous st_dev (major 0);
    the mount table still names the block device behind them.
    """
    sources = {}
    for line in mountinfo_text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) > 2 and len(tail) > 1 and tail[1].startswith("/dev/"):
            sources[fields[2]] = tail[1]
    return sources


def block_device_names(st_dev: int, sources: Optional[dict] = None) -> list:
    """The diskstats names behind a device number: the partition and its whole disk.

    A device without a block node (tmpfs, overlay, NFS) maps to nothing.
    """
    number = f"{os.major(st_dev)}:{os.minor(st_dev)}"
    if sources and number in sources:
        try:
            rdev = os.stat(sources[number]).st_rdev
            number = f"{os.major(rdev)}:{os.minor(rdev)}"
        except OSError:
            pass
    link = SYS_BLOCK / number
    try:
        target = link.resolve(strict=True)
    except OSError:
        return []
    names = [target.name]
    if (target / "partition").exists():
        names.append(target.parent.name)
    return names


def dm_name(device: str) -> Optional[str]:
    try:
        return (SYS_CLASS_BLOCK / device / "dm" / "name").read_text().strip()
    except OSError:
        return None


def devices_used_by(pids: Iterable[int]) -> set:
    """Block devices behind the files the processes hold open and their working directories."""
    dev_numbers, sources = set(), {}
    for pid in pids:
        base = procfs.PROC / str(pid)
        paths = [base / "cwd"]
        try:
            paths += [Path(entry.path) for entry in os.scandir(base / "fd")]
        except OSError:
            pass
        for path in paths:
            try:
                dev_numbers.add(os.stat(path).st_dev)  # follows the magic link, even to deleted files
            except OSError:
                continue
        if not sources:
            try:
                sources = mount_sources((base / "mountinfo").read_text())
            except OSError:
                pass
    return {name for number in dev_numbers for name in block_device_names(number, sources)}


class DiskSampler:
    """Rates for every real disk; which devices the job uses is refreshed every few ticks."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, usage_every: int = 5) -> None:
        self._clock = clock
        self._usage_every = usage_every
        self._ticks = 0
        self._previous: Optional[tuple] = None
        self.used: set = set()

    def sample(self, job_pids: Iterable[int]) -> list:
        if self._ticks % self._usage_every == 0:
            self.used = devices_used_by(job_pids)
        self._ticks += 1
        now = self._clock()
        try:
            current = parse_diskstats((procfs.PROC / "diskstats").read_text())
        except OSError:
            return []
        previous, self._previous = self._previous, (now, current)
        if previous is None:
            return []
        then, before = previous
        dt = max(now - then, 1e-6)
        return [
            disk_rates(before[name], counters, dt, name in self.used, dm_name(name) if name.startswith("dm-") else None)
            for name, counters in sorted(current.items())
            if name in before and (name in self.used or not name.startswith(_SKIP_PREFIXES))
        ]

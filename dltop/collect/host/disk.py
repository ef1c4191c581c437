"""iostat -x figures from /proc/diskstats deltas, and which block devices a job reads from.

Formulas from the kernel's Documentation/admin-guide/iostats.rst (docs/how-it-works.md#proc-and-sys): lines have
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


def device_numbers_used_by(pid: int) -> set:
    """st_dev of every file a process holds open, and of its working directory."""
    base = f"{procfs.PROC}/{pid}"
    paths = [f"{base}/cwd"]
    try:
        paths += [entry.path for entry in os.scandir(f"{base}/fd")]
    except OSError:
        pass
    numbers = set()
    for path in paths:
        try:
            numbers.add(os.stat(path).st_dev)  # follows the magic link, even to deleted files
        except OSError:
            continue
    return numbers


def names_of_devices(numbers: set, pid: Optional[int]) -> set:
    sources = {}
    if pid is not None:
        try:
            sources = mount_sources((procfs.PROC / str(pid) / "mountinfo").read_text())
        except OSError:
            pass
    return {name for number in numbers for name in block_device_names(number, sources)}


class DiskSampler:
    """Rates for every real disk, and which of them the job uses.

    Stat-ing every open file of every process costs milliseconds, so the first tick looks at
    all processes and later ticks one process each, round-robin (a job's processes mostly
    share their files: forked workers inherit them).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._previous: Optional[tuple] = None
        self._numbers: dict = {}  # pid -> st_dev numbers it uses
        self._turn = 0
        self._names: tuple = (
            frozenset(),
            set(),
        )  # (device numbers, their diskstats names): mountinfo read once per change
        self.used: set = set()

    def _refresh_usage(self, job_pids: list) -> None:
        self._numbers = {pid: numbers for pid, numbers in self._numbers.items() if pid in job_pids}
        due = job_pids if not self._numbers else [job_pids[self._turn % len(job_pids)]] if job_pids else []
        self._turn += 1
        for pid in due:
            self._numbers[pid] = device_numbers_used_by(pid)
        all_numbers = frozenset().union(*self._numbers.values()) if self._numbers else frozenset()
        if all_numbers != self._names[0]:
            self._names = (all_numbers, names_of_devices(set(all_numbers), job_pids[0] if job_pids else None))
        self.used = self._names[1]

    def sample(self, job_pids: Iterable[int]) -> list:
        self._refresh_usage(sorted(job_pids))
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

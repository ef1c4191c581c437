"""Machine-wide figures that bound a job: CPUs it may use, memory, swap, /dev/shm.

"CPUs the job may use" is its affinity capped by the cgroup CPU quota (what a container
or Slurm gives it), never ``os.cpu_count()`` (docs/how-it-works.md#proc-and-sys).
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Callable, Optional

import psutil

from dltop.collect import procfs
from dltop.model import SystemSample

CGROUP_ROOT = Path("/sys/fs/cgroup")


def parse_cpu_max(text: str) -> Optional[float]:
    """cgroup v2 ``cpu.max`` ('max 100000' or '150000 100000') -> CPUs, None when unlimited."""
    fields = text.split()
    if not fields or fields[0] == "max":
        return None
    period = int(fields[1]) if len(fields) > 1 else 100_000
    return int(fields[0]) / period


def parse_cgroup_paths(text: str) -> dict:
    """/proc/<pid>/cgroup -> {controller: path}; the v2 unified entry is under ''."""
    paths = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            paths[controller] = path
    return paths


def _ancestors(base: Path, path: str) -> list:
    parts = [p for p in path.split("/") if p]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _read_limit(dirs: list, name: str, parse) -> Optional[float]:
    """The tightest limit over a cgroup and its ancestors (a parent's limit binds its children)."""
    limits = []
    for directory in dirs:
        try:
            value = parse((directory / name).read_text())
        except (OSError, ValueError):
            continue
        if value is not None:
            limits.append(value)
    return min(limits) if limits else None


def _parse_v1_quota(quota_text: str, period_text: str) -> Optional[float]:
    quota = int(quota_text)
    return None if quota < 0 else quota / int(period_text)


def _parse_bytes_limit(text: str) -> Optional[int]:
    text = text.strip()
    if text == "max":
        return None
    value = int(text)
    return None if value >= 1 << 60 else value  # v1 writes "no limit" as a huge number


def cgroup_limits(pid: int) -> tuple:
    """(CPU quota in CPUs, memory limit in bytes) of the job's cgroup, None where unlimited."""
    try:
        paths = parse_cgroup_paths((procfs.PROC / str(pid) / "cgroup").read_text())
    except OSError:
        return None, None
    if "" in paths and (CGROUP_ROOT / "cgroup.controllers").exists():
        dirs = _ancestors(CGROUP_ROOT, paths[""])
        return _read_limit(dirs, "cpu.max", parse_cpu_max), _read_limit(dirs, "memory.max", _parse_bytes_limit)
    cpu = None
    cpu_path = paths.get("cpu")
    if cpu_path is not None:
        for directory in _ancestors(CGROUP_ROOT / "cpu,cpuacct", cpu_path) + _ancestors(CGROUP_ROOT / "cpu", cpu_path):
            try:
                cpu = _parse_v1_quota(
                    (directory / "cpu.cfs_quota_us").read_text(), (directory / "cpu.cfs_period_us").read_text()
                )
            except (OSError, ValueError):
                continue
            if cpu is not None:
                break
    mem_path = paths.get("memory")
    memory = (
        _read_limit(_ancestors(CGROUP_ROOT / "memory", mem_path), "memory.limit_in_bytes", _parse_bytes_limit)
        if mem_path is not None
        else None
    )
    return cpu, memory


def shm_usage(pid: int) -> tuple:
    """(size, used) of the /dev/shm the job sees: through /proc/<pid>/root for containers."""
    for path in (procfs.PROC / str(pid) / "root" / "dev" / "shm", Path("/dev/shm")):
        try:
            vfs = os.statvfs(path)
        except OSError:
            continue
        return vfs.f_blocks * vfs.f_frsize, (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize
    return None, None


def parse_meminfo(text: str) -> dict:
    """/proc/meminfo -> {field: bytes} (its kB figures)."""
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[name] = int(fields[0]) * (1024 if len(fields) > 1 else 1)
    return values


class SystemSampler:
    """Figures of the machine each tick; the cgroup limits (a dozen files up the cgroup tree,
    changed only by an administrator) every LIMITS_TTL_S."""

    LIMITS_TTL_S = 10.0

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._physical = psutil.cpu_count(logical=False)
        self._logical = os.cpu_count()
        self._limits: dict = {}  # pid -> (clock when read, (cpu quota, memory limit))
        psutil.cpu_percent(interval=None)  # start the host-wide busy counter
        self._monitor = psutil.Process()
        self._monitor_spent: Optional[tuple[float, float]] = None  # (clock, CPU seconds) at the last sample

    def _cgroup_limits(self, pid: int) -> tuple:
        now = self._clock()
        cached = self._limits.get(pid)
        if cached is None or now - cached[0] > self.LIMITS_TTL_S:
            cached = self._limits[pid] = (now, cgroup_limits(pid))
        return cached[1]

    def sample(self, pid: int) -> SystemSample:
        try:
            affinity = sorted(os.sched_getaffinity(pid))
        except OSError:
            affinity = sorted(os.sched_getaffinity(0))
        quota, mem_limit = self._cgroup_limits(pid)
        allowed = float(len(affinity)) if quota is None else min(float(len(affinity)), quota)
        memory = parse_meminfo((procfs.PROC / "meminfo").read_text())  # one read for memory and swap
        shm_total, shm_used = shm_usage(pid)
        return SystemSample(
            cpus_logical=self._logical or len(affinity),
            cpus_physical=self._physical,
            cpus_allowed=allowed,
            cpu_affinity=affinity,
            cpu_quota=quota,
            load_1m=os.getloadavg()[0],
            mem_total_bytes=memory.get("MemTotal", 0),
            mem_available_bytes=memory.get("MemAvailable", memory.get("MemFree", 0)),
            mem_limit_bytes=mem_limit,
            swap_used_bytes=max(0, memory.get("SwapTotal", 0) - memory.get("SwapFree", 0)),
            shm_total_bytes=shm_total,
            shm_used_bytes=shm_used,
            cpu_busy_percent=psutil.cpu_percent(interval=None),
            monitor_cpu_percent=self._monitor_cpu(),
        )

    def _monitor_cpu(self) -> Optional[float]:
        """The CPU dltop itself and its stack samplers (py-spy, Austin: its children) used since the
        last sample, in percent of one core: of the host's busy CPUs, what the job would not
        compete with once dltop detaches (None at the first sample)."""
        now, spent = self._clock(), _cpu_seconds(self._monitor)
        for pid in _children(self._monitor.pid):
            with contextlib.suppress(psutil.Error):
                spent += sum(psutil.Process(pid).cpu_times()[:2])
        before, self._monitor_spent = self._monitor_spent, (now, spent)
        if before is None or now <= before[0]:
            return None
        return max(0.0, 100.0 * (spent - before[1]) / (now - before[0]))


def _children(pid: int) -> list[int]:
    """A process's children, from each of its threads' ``children`` file: its samplers, without the
    scan of every process on the node that psutil's children() makes (each tick, for each job)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in (procfs.PROC / str(pid) / "task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _cpu_seconds(proc: psutil.Process) -> float:
    """A process's CPU time and its reaped children's (a sampler that exited counts here)."""
    times = proc.cpu_times()
    return times.user + times.system + times.children_user + times.children_system

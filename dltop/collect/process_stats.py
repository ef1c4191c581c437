"""Per-process figures of one tick: CPU, memory (USS/PSS from smaps_rollup), fds, I/O rates.

psutil's ``oneshot()`` batches the reads per process (as nvitop does); counters are turned
into rates against the previous tick. A reading the kernel refuses (another user's process)
becomes ``None`` plus a reason in ``unavailable``; the other readings still show.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Callable, Optional

import psutil

from dltop.collect import procfs
from dltop.collect.procs import Member
from dltop.model import Placement, ProcessSample

FD_LIMIT_TTL_S = 10.0
FD_KINDS_FROM = 0.5  # share of the fd limit above which dltop looks at what the fds are
_ZERO_IO = SimpleNamespace(read_bytes=0, write_bytes=0, read_chars=0, write_chars=0)


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat(timespec="seconds")


def _denied_reason(proc: psutil.Process) -> str:
    try:
        owner = proc.username()
    except psutil.Error:
        owner = "another user"
    return f"permission denied (process of {owner}; run dltop as that user or root)"


class ProcessSampler:
    """Keeps the previous counters of each process so each tick reports rates."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._clock, self._wall = clock, wall
        self._procs: dict = {}  # (pid, start_ticks) -> psutil.Process
        self._previous: dict = {}  # (pid, start_ticks) -> (t, cpu_s, io counters or None)
        self.memory_read_at: dict = {}  # (pid, start_ticks) -> clock of the last smaps_rollup read
        self._memory: dict = {}  # (pid, start_ticks) -> (uss, pss)
        self._fd_limits: dict = {}  # (pid, start_ticks) -> (clock when read, soft limit)
        self._fd_kinds_cache: dict = {}  # (pid, start_ticks) -> (clock when read, {kind: count})
        self._users: dict = {}  # (pid, start_ticks) -> user name
        self.schedstats: dict = {}  # (pid, start_ticks) -> (run ns, run-queue wait ns, timeslices) this tick

    def forget_except(self, alive_keys: set) -> None:
        for key in list(self._procs):
            if key not in alive_keys:
                caches = (self._procs, self._previous, self.memory_read_at, self._memory, self._fd_limits)
                for cache in (*caches, self._fd_kinds_cache, self._users, self.schedstats):
                    cache.pop(key, None)

    def sample(
        self,
        member: Member,
        stat: procfs.Stat,
        cmdline: str,
        placement: Optional[Placement],
        read_memory: bool = True,
    ) -> Optional[ProcessSample]:
        """Figures of one process now; None if it vanished while we read it.

        USS/PSS come from smaps_rollup, which makes the kernel walk the page tables: about 5 ms
        for a torch worker. With ``read_memory`` False the last reading is reused.
        """
        key = (member.pid, stat.start_ticks)
        base = dict(
            pid=member.pid,
            ppid=stat.ppid,
            role=member.role,
            trainer_pid=member.trainer_pid,
            name=stat.comm,
            cmdline=cmdline,
            rank=placement.rank if placement else None,
            placement=placement,
        )
        if stat.state == "Z":
            code = procfs.decode_exit_status(stat.exit_status) if stat.exit_status is not None else None
            return ProcessSample(**base, state="zombie", exit_code=code)
        try:
            proc = self._procs.get(key) or psutil.Process(member.pid)
            self._procs[key] = proc
            return self._read(proc, key, base, read_memory)
        except (psutil.NoSuchProcess, psutil.ZombieProcess, FileNotFoundError, ProcessLookupError):
            return None

    def _user(self, proc: psutil.Process, key: tuple) -> Optional[str]:
        """The owner's name, looked up once per process (pwd reads /etc/passwd every time)."""
        if key not in self._users:
            try:
                self._users[key] = proc.username()
            except (psutil.AccessDenied, KeyError):
                self._users[key] = None
        return self._users[key]

    def _fd_limit(self, pid: int, key: tuple, now: float) -> Optional[int]:
        """The open-file soft limit, re-read every FD_LIMIT_TTL_S: it only changes by prlimit."""
        cached = self._fd_limits.get(key)
        if cached is None or now - cached[0] > FD_LIMIT_TTL_S:
            cached = self._fd_limits[key] = (now, procfs.read_nofile_soft_limit(pid))
        return cached[1]

    def _fd_kinds(self, pid: int, key: tuple, now: float) -> Optional[dict]:
        """What the fds are, for a process nearing its limit; re-read every FD_LIMIT_TTL_S."""
        cached = self._fd_kinds_cache.get(key)
        if cached is None or now - cached[0] > FD_LIMIT_TTL_S:
            try:
                cached = self._fd_kinds_cache[key] = (now, procfs.read_fd_kinds(pid))
            except OSError:
                return None
        return cached[1]

    def _read(self, proc: psutil.Process, key: tuple, base: dict, read_memory: bool) -> ProcessSample:
        unavailable: dict = {}
        figures: dict = {}
        now = self._clock()
        with proc.oneshot():
            status = proc.status()
            times = proc.cpu_times()
            cpu_s = times.user + times.system
            figures["num_threads"] = proc.num_threads()
            figures["started_at"] = iso(proc.create_time())
            figures["user"] = self._user(proc, key)
            figures["rss_bytes"] = proc.memory_info().rss
            if read_memory:
                try:
                    mem = proc.memory_full_info()
                    self._memory[key] = (mem.uss, getattr(mem, "pss", None))
                except psutil.AccessDenied:
                    unavailable["uss_bytes"] = unavailable["pss_bytes"] = _denied_reason(proc)
                self.memory_read_at[key] = now
            if key in self._memory:
                figures["uss_bytes"], figures["pss_bytes"] = self._memory[key]
            elif not unavailable:
                unavailable["uss_bytes"] = unavailable["pss_bytes"] = (
                    "not read yet (refreshed within dltop's CPU budget)"
                )
            try:
                figures["num_fds"] = proc.num_fds()
            except psutil.AccessDenied:
                unavailable["num_fds"] = _denied_reason(proc)
            try:
                io = proc.io_counters()
            except psutil.AccessDenied:
                io = None
                for name in ("read_bytes_per_s", "write_bytes_per_s", "read_chars_per_s", "write_chars_per_s"):
                    unavailable[name] = _denied_reason(proc)
        try:
            figures["fd_limit"] = self._fd_limit(proc.pid, key, now)
        except PermissionError:
            unavailable["fd_limit"] = _denied_reason(proc)
        if figures.get("fd_limit") and figures.get("num_fds", 0) >= FD_KINDS_FROM * figures["fd_limit"]:
            figures["fd_kinds"] = self._fd_kinds(proc.pid, key, now)

        # run-queue wait: the direct measure of CPU oversubscription, which CPU% cannot show
        # once every core is busy; the reading is kept for the stack sampler (one read a tick)
        try:
            self.schedstats[key] = procfs.read_schedstat(proc.pid)
        except (OSError, ValueError, IndexError):
            self.schedstats.pop(key, None)
        wait_s = self.schedstats[key][1] / 1e9 if key in self.schedstats else None
        previous = self._previous.get(key)
        self._previous[key] = (now, cpu_s, io, wait_s)
        if previous is None:
            # First sight: rates over the process's life so far, which for a worker that started
            # since the last tick (respawning workers) is exactly the figure wanted.
            age = self._wall() - proc.create_time()
            previous = (now - max(age, 1e-3), 0.0, _ZERO_IO if io is not None else None, 0.0)
        then, prev_cpu, prev_io, prev_wait = previous
        dt = max(now - then, 1e-6)
        figures["cpu_percent"] = max(0.0, (cpu_s - prev_cpu) / dt * 100)
        if wait_s is not None and prev_wait is not None:
            figures["cpu_wait_percent"] = max(0.0, (wait_s - prev_wait) / dt * 100)
        if io is not None and prev_io is not None:
            figures.update(
                read_bytes_per_s=(io.read_bytes - prev_io.read_bytes) / dt,
                write_bytes_per_s=(io.write_bytes - prev_io.write_bytes) / dt,
                read_chars_per_s=(io.read_chars - prev_io.read_chars) / dt,
                write_chars_per_s=(io.write_chars - prev_io.write_chars) / dt,
            )
        return ProcessSample(**base, state=status, unavailable=unavailable, **figures)

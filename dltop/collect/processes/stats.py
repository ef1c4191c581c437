"""Per-process figures of one tick: CPU, memory (USS/PSS from smaps_rollup), fds, I/O rates.

The figures come from /proc directly, as few reads as they need: CPU time, threads, RSS and
state from the /proc/<pid>/stat that discovery read this tick; then /proc/<pid>/io, the fd
count (one stat of /proc/<pid>/fd) and schedstat. What cannot change for a process (its start
time, owner) is worked out once; the fd limit every FD_LIMIT_TTL_S; smaps_rollup (costly) when
the collector's budget allows. Counters become rates against the previous tick. A reading the
kernel refuses (another user's process) becomes ``None`` plus a reason in ``unavailable``; the
other readings still show.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable, Optional

import psutil

from dltop.collect import procfs
from dltop.collect.processes.discovery import Member
from dltop.model import Placement, ProcessSample, ProcessState

FD_LIMIT_TTL_S = 10.0
FD_KINDS_FROM = 0.5  # share of the fd limit above which dltop looks at what the fds are
NOT_READ_YET = "not read yet (refreshed within dltop's CPU budget)"
IO_FIGURES = ("read_bytes_per_s", "write_bytes_per_s", "read_chars_per_s", "write_chars_per_s")
_ZERO_IO = {"read_bytes": 0, "write_bytes": 0, "rchar": 0, "wchar": 0}
STATES: dict[str, ProcessState] = {  # stat's letter -> the names psutil (and the JSON contract) use
    "R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop", "Z": "zombie",
    "X": "dead", "x": "dead", "K": "wake-kill", "W": "waking", "I": "idle", "P": "parked",
}  # fmt: skip


def iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).isoformat(timespec="seconds")


class ProcessSampler:
    """Keeps the previous counters of each process so each tick reports rates."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._clock, self._wall = clock, wall
        self._boot_s = psutil.boot_time()  # start ticks count from here
        self._static: dict = {}  # (pid, start_ticks) -> (start epoch, ISO, user): facts that never change
        # (pid, start_ticks) -> (t, cpu_s, io counters or None, run-queue wait s, reaped children's cpu s, ppid)
        self._previous: dict = {}
        self.memory_read_at: dict = {}  # (pid, start_ticks) -> clock of the last smaps_rollup read
        self._memory: dict = {}  # (pid, start_ticks) -> (uss, pss)
        self._fd_limits: dict = {}  # (pid, start_ticks) -> (clock when read, soft limit)
        self._fd_kinds_cache: dict = {}  # (pid, start_ticks) -> (clock when read, {kind: count})
        self.schedstats: dict = {}  # (pid, start_ticks) -> (run ns, run-queue wait ns, timeslices) this tick
        # parent pid -> CPU seconds its departed children were seen to use, not yet matched by its
        # cutime (a child counts in its parent's cutime once reaped)
        self._seen_children_s: dict = {}

    def forget_except(self, alive_keys: set) -> None:
        """Drops what is kept of processes that went away; call it before the tick's samples, so
        a parent's reaped CPU this tick is matched with the children that left this tick."""
        for key in list(self._static):
            if key not in alive_keys:
                previous = self._previous.get(key)
                if previous is not None:  # its parent's cutime will hold what it used: seen already
                    self._seen_children_s[previous[5]] = self._seen_children_s.get(previous[5], 0.0) + previous[1]
                self._seen_children_s.pop(key[0], None)
                caches = (self._static, self._previous, self.memory_read_at, self._memory, self._fd_limits)
                for cache in (*caches, self._fd_kinds_cache, self.schedstats):
                    cache.pop(key, None)

    def sample(
        self,
        member: Member,
        stat: procfs.Stat,
        cmdline: str,
        placement: Optional[Placement],
        read_memory: bool = True,
    ) -> Optional[ProcessSample]:
        """Figures of one process now, from ``stat`` (read this tick); None if it vanished.

        USS/PSS come from smaps_rollup, which makes the kernel walk the page tables: about 4 ms
        for a torch worker. With ``read_memory`` False the last reading is reused.
        """
        key = (member.pid, stat.start_ticks)
        base: dict[str, Any] = dict(
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
            return self._read(stat, key, base, read_memory)
        except (FileNotFoundError, ProcessLookupError):
            return None

    def _static_facts(self, stat: procfs.Stat, key: tuple) -> tuple:
        """(start epoch, its ISO form, owner): worked out once per process."""
        if key not in self._static:
            started = self._boot_s + stat.start_ticks / procfs.CLOCK_TICKS
            self._static[key] = (started, iso(started), procfs.owner_name(stat.pid))
        return self._static[key]

    def _denied(self, key: tuple) -> str:
        owner = self._static.get(key, (0, "", None))[2] or "another user"
        return f"permission denied (process of {owner}; run dltop as that user or root)"

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

    def _read_memory(self, pid: int, key: tuple, now: float, unavailable: dict) -> None:
        try:
            self._memory[key] = procfs.read_private_memory(pid)
        except PermissionError:
            unavailable["uss_bytes"] = unavailable["pss_bytes"] = self._denied(key)
        self.memory_read_at[key] = now

    def _read(self, stat: procfs.Stat, key: tuple, base: dict[str, Any], read_memory: bool) -> ProcessSample:
        pid = stat.pid
        unavailable: dict[str, str] = {}
        now = self._clock()
        started, started_at, user = self._static_facts(stat, key)
        cpu_s = stat.cpu_ticks / procfs.CLOCK_TICKS
        figures: dict = dict(
            num_threads=stat.num_threads,
            started_at=started_at,
            user=user,
            rss_bytes=stat.rss_pages * procfs.PAGE_SIZE,
        )
        if read_memory:
            self._read_memory(pid, key, now, unavailable)
        if key in self._memory:
            figures["uss_bytes"], figures["pss_bytes"] = self._memory[key]
        elif not unavailable:
            unavailable["uss_bytes"] = unavailable["pss_bytes"] = NOT_READ_YET
        try:
            figures["num_fds"] = procfs.count_fds(pid)
        except PermissionError:
            unavailable["num_fds"] = self._denied(key)
        try:
            io = procfs.read_io(pid)
        except PermissionError:
            io = None
            unavailable.update(dict.fromkeys(IO_FIGURES, self._denied(key)))
        try:
            figures["fd_limit"] = self._fd_limit(pid, key, now)
        except PermissionError:
            unavailable["fd_limit"] = self._denied(key)
        if figures.get("fd_limit") and figures.get("num_fds", 0) >= FD_KINDS_FROM * figures["fd_limit"]:
            figures["fd_kinds"] = self._fd_kinds(pid, key, now)

        # run-queue wait: the direct measure of CPU oversubscription, which CPU% cannot show
        # once every core is busy; the reading is kept for the stack sampler (one read a tick)
        try:
            self.schedstats[key] = procfs.read_schedstat(pid)
        except (OSError, ValueError, IndexError):
            self.schedstats.pop(key, None)
        wait_s = self.schedstats[key][1] / 1e9 if key in self.schedstats else None
        children_s = stat.children_ticks / procfs.CLOCK_TICKS
        previous = self._previous.get(key)
        self._previous[key] = (now, cpu_s, io, wait_s, children_s, stat.ppid)
        if previous is None:
            # First sight: rates over the process's life so far, which for a worker that started
            # since the last tick (respawning workers) is exactly the figure wanted.
            age = self._wall() - started
            previous = (now - max(age, 1e-3), 0.0, _ZERO_IO if io is not None else None, 0.0, None, stat.ppid)
        then, prev_cpu, prev_io, prev_wait, prev_children, _ = previous
        dt = max(now - then, 1e-6)
        figures["cpu_percent"] = max(0.0, (cpu_s - prev_cpu) / dt * 100)
        if prev_children is not None:
            figures["unseen_children_cpu_percent"] = self._unseen_children_s(pid, children_s - prev_children) / dt * 100
        if wait_s is not None and prev_wait is not None:
            figures["cpu_wait_percent"] = max(0.0, (wait_s - prev_wait) / dt * 100)
        if io is not None and prev_io is not None:
            figures.update(
                read_bytes_per_s=(io["read_bytes"] - prev_io["read_bytes"]) / dt,
                write_bytes_per_s=(io["write_bytes"] - prev_io["write_bytes"]) / dt,
                read_chars_per_s=(io["rchar"] - prev_io["rchar"]) / dt,
                write_chars_per_s=(io["wchar"] - prev_io["wchar"]) / dt,
            )
        state = STATES.get(stat.state, "unknown")
        return ProcessSample(**base, state=state, unavailable=unavailable, **figures)

    def _unseen_children_s(self, pid: int, reaped_s: float) -> float:
        """CPU seconds of children reaped since the last tick that no reading of theirs counted:
        workers that lived and exited between two ticks (short epochs) are in no other figure."""
        seen = self._seen_children_s.pop(pid, 0.0)
        if seen > reaped_s:  # a departed child not reaped yet, or its CPU counted in an earlier tick
            self._seen_children_s[pid] = seen - reaped_s
        return max(0.0, reaped_s - seen)

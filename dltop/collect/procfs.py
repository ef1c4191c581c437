"""Small readers for /proc files that psutil does not expose (or exposes too expensively).

Each reader takes a pid and returns parsed values; the parsers are separate functions so
tests can feed them recorded file contents. Readers raise OSError (FileNotFoundError when
the process is gone, PermissionError for another user's process): callers decide what an
unreadable file means.
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

PROC = Path("/proc")
CHILDREN_READ = 8192
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Stat:
    """The fields of /proc/<pid>/stat that discovery and the per-process figures need: the file
    is read once a tick per process, and CPU time, threads and RSS come from that one read."""

    pid: int
    comm: str
    state: str  # one letter: R S D Z T t X I
    ppid: int
    start_ticks: int  # since boot, in clock ticks
    exit_status: Optional[int]  # raw waitpid-style status (field 52), kernels >= 3.5
    cpu_ticks: int = 0  # utime + stime, in clock ticks
    num_threads: int = 0
    rss_pages: int = 0
    children_ticks: int = 0  # cutime + cstime: CPU of the children it has reaped, in clock ticks


def parse_stat(text: str) -> Stat:
    # comm may hold spaces and parentheses: it ends at the *last* ')'.
    head, _, tail = text.rpartition(")")
    pid_text, _, comm = head.partition(" (")
    rest = tail.split()
    exit_status = int(rest[49]) if len(rest) > 49 else None
    cpu_ticks = int(rest[11]) + int(rest[12])
    return Stat(int(pid_text), comm, rest[0], int(rest[1]), int(rest[19]), exit_status, cpu_ticks, int(rest[17]),
                int(rest[21]), int(rest[13]) + int(rest[14]))  # fmt: skip


def read_stat(pid: int) -> Stat:
    # os.open/os.read on a str path: this runs for every process on the machine every tick.
    return parse_stat(_read_small(f"{PROC}/{pid}/stat").decode(errors="replace"))


def read_thread_stat(pid: int, tid: int) -> Stat:
    """One thread's stat (its own CPU time, its comm); FileNotFoundError once the thread ended."""
    return parse_stat(_read_small(f"{PROC}/{pid}/task/{tid}/stat").decode(errors="replace"))


def _read_small(path: str, size: int = 4096) -> bytes:
    """One read() of a small /proc file (no buffered file object: this runs per process per tick)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def parse_io(raw: bytes) -> dict:
    """/proc/<pid>/io -> {rchar, wchar, syscr, syscw, read_bytes, write_bytes, cancelled_write_bytes}."""
    counters = {}
    for line in raw.splitlines():
        name, _, value = line.partition(b":")
        if value:
            counters[name.decode()] = int(value)
    return counters


def read_io(pid: int) -> dict:
    """I/O counters (the process's user or root only: PermissionError otherwise)."""
    return parse_io(_read_small(f"{PROC}/{pid}/io"))


def parse_smaps_rollup(raw: bytes) -> tuple:
    """(USS, PSS) in bytes: USS is every Private_* line (clean, dirty, hugetlb), as psutil counts it."""
    uss = pss = 0
    for line in raw.splitlines():
        if line.startswith(b"Private_"):
            uss += int(line.split()[1]) * 1024
        elif line.startswith(b"Pss:"):
            pss = int(line.split()[1]) * 1024
    return uss, pss


def read_private_memory(pid: int) -> tuple:
    """(USS, PSS) from smaps_rollup: the kernel walks the page tables (milliseconds for a torch
    process), so callers ration it."""
    return parse_smaps_rollup(_read_small(f"{PROC}/{pid}/smaps_rollup", 16384))


def count_fds(pid: int) -> int:
    """Open fds. Linux >= 6.2 gives the count as the size of /proc/<pid>/fd (one stat, not a
    directory listing); older kernels say 0 there, and the directory is listed."""
    size = os.stat(f"{PROC}/{pid}/fd").st_size
    return size if size > 0 else len(os.listdir(f"{PROC}/{pid}/fd"))


def read_uptime_s() -> float:
    """Seconds since boot, the clock that stat's start_ticks count on."""
    return float(_read_small(f"{PROC}/uptime", 256).split()[0])


def read_children(pid: int, tid: int) -> list:
    """Pids of the children this thread forked (CONFIG_PROC_CHILDREN): one read() for the usual few."""
    path = f"{PROC}/{pid}/task/{tid}/children"
    raw = _read_small(path, CHILDREN_READ)
    if len(raw) == CHILDREN_READ:  # thousands of children: read it all
        raw = Path(path).read_bytes()
    return [int(child) for child in raw.split()]


def decode_exit_status(status: int) -> int:
    """waitpid status -> exit code, or minus the signal number that killed the process."""
    signal = status & 0x7F
    return -signal if signal else (status >> 8) & 0xFF


def read_cmdline(pid: int) -> list:
    raw = (PROC / str(pid) / "cmdline").read_bytes()
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def parse_nofile_soft_limit(text: str) -> Optional[int]:
    """The soft 'Max open files' of /proc/<pid>/limits; None when unlimited."""
    for line in text.splitlines():
        if line.startswith("Max open files"):
            soft = line[len("Max open files") :].split()[0]
            return None if soft == "unlimited" else int(soft)
    return None


def read_nofile_soft_limit(pid: int) -> Optional[int]:
    # /proc/<pid>/limits is world-readable, unlike prlimit() on another user's process; ~1.4 KB
    return parse_nofile_soft_limit(_read_small(f"{PROC}/{pid}/limits").decode(errors="replace"))


def parse_nspid(status_text: str) -> list:
    """The NSpid line: the pid in each pid namespace, outermost (ours) first."""
    for line in status_text.splitlines():
        if line.startswith("NSpid:"):
            return [int(p) for p in line.split()[1:]]
    return []


def read_nspid(pid: int) -> list:
    return parse_nspid((PROC / str(pid) / "status").read_text())


def read_environ(pid: int, keys: tuple) -> dict:
    """The named variables of a process's initial environment (needs ptrace-read rights)."""
    raw = (PROC / str(pid) / "environ").read_bytes()
    found = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep and key.decode(errors="replace") in keys:
            found[key.decode()] = value.decode(errors="replace")
    return found


def thread_names(pid: int) -> list:
    names = []
    for task in os.scandir(f"{PROC}/{pid}/task"):
        try:
            names.append(_read_small(f"{task.path}/comm", 64).decode(errors="replace").rstrip("\n"))
        except OSError:
            continue  # the thread ended while we listed them
    return names


_TORCH_LIB = re.compile(r"(/\S*/torch)/lib/libtorch\S*\.so")
_VERSION = re.compile(r"""__version__\s*=\s*['"]([^'"]+)['"]""")


def torch_dir_from_maps(maps_text: str) -> Optional[str]:
    match = _TORCH_LIB.search(maps_text)
    return match.group(1) if match else None


def read_torch_version(pid: int) -> Optional[str]:
    """The version of torch mapped into a process, or None when torch is not loaded.

    Reads /proc/<pid>/maps (same rights as ptrace-read) to find libtorch, then the
    ``version.py`` beside it, through /proc/<pid>/root so containers' paths resolve.
    """
    torch_dir = torch_dir_from_maps((PROC / str(pid) / "maps").read_text())
    if torch_dir is None:
        return None
    for root in (PROC / str(pid) / "root", Path("/")):
        try:
            match = _VERSION.search((root / torch_dir.lstrip("/") / "version.py").read_text())
        except OSError:
            continue
        if match:
            return match.group(1)
    return "unknown"


def read_schedstat(pid: int) -> tuple:
    """(ns on CPU, ns waiting to run, timeslices) of the process's main thread.

    The timeslice count changes whenever the thread runs at all: when it has not changed, the
    thread cannot have moved to another Python line.
    """
    return _parse_schedstat(_read_small(f"{PROC}/{pid}/schedstat", 256))


def read_thread_schedstat(pid: int, tid: int) -> tuple[int, int, int]:
    """``read_schedstat`` of one thread of the process."""
    return _parse_schedstat(_read_small(f"{PROC}/{pid}/task/{tid}/schedstat", 256))


def _parse_schedstat(raw: bytes) -> tuple[int, int, int]:
    run_ns, wait_ns, slices = raw.split()[:3]
    return int(run_ns), int(wait_ns), int(slices)


def fd_kind(target: str) -> str:
    """shm | file | socket | pipe | other, from an fd's link target.

    torch's file_descriptor sharing strategy keeps each batch tensor in ``/dev/shm/torch_*``
    files unlinked at once, so they show as ``/dev/shm/torch_... (deleted)`` (or a memfd).
    """
    if target.startswith(("/dev/shm/", "/memfd:")) or "torch_" in target.rsplit("/", 1)[-1]:
        return "shm"
    if target.startswith("/"):
        return "file"
    for prefix, kind in (("socket:", "socket"), ("pipe:", "pipe")):
        if target.startswith(prefix):
            return kind
    return "other"


def read_fd_kinds(pid: int) -> dict:
    """{kind: count} of the process's open fds (one readlink each: call only when it matters)."""
    kinds: dict = {}
    for name in os.listdir(f"{PROC}/{pid}/fd"):
        try:
            kind = fd_kind(os.readlink(f"{PROC}/{pid}/fd/{name}"))
        except OSError:
            continue  # closed meanwhile
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def owner_uid(pid: int) -> Optional[int]:
    """The uid a process runs as (its /proc directory's owner), None if it is gone."""
    try:
        return (PROC / str(pid)).stat().st_uid
    except OSError:
        return None


def user_name(uid: int) -> str:
    """The user name of ``uid``, or the number where this machine has no name for it (a container's user)."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def owner_name(pid: int) -> Optional[str]:
    """The user a process runs as, by name where this machine has one; None if it is gone."""
    uid = owner_uid(pid)
    return None if uid is None else user_name(uid)

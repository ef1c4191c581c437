"""Catch each watched process's exit status the moment it exits.

A dead DataLoader worker is a zombie for only milliseconds: torch reaps it while raising
"DataLoader worker exited unexpectedly". A 1 s tick would rarely see it, so a thread waits on
pidfds (Linux >= 5.3) and reads the zombie's exit status (stat field 52) as soon as the kernel
says the process ended. It is a race with the trainer's own reaping, won most of the time on an
idle machine and less often on a busy one: ``trainer_log`` is the second source. The kernel shows
that field only to those who may ptrace the process, so for other users' processes the status is
reported as unknown, never as a false 0.
"""

from __future__ import annotations

import os
import select
import threading
from typing import Optional

from dltop.collect import procfs


class ExitWatcher:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._poll = select.poll()
        self._watched: dict = {}  # fd -> (pid, start_ticks, may read exit status)
        self._pids: set = set()
        self._codes: dict = {}  # pid -> exit code or None (not visible)
        self._wake_r, self._wake_w = os.pipe()
        self._poll.register(self._wake_r, select.POLLIN)
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self.supported = hasattr(os, "pidfd_open")

    def watch(self, pid: int, start_ticks: int) -> None:
        if not self.supported or pid in self._pids:
            return
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already, or a kernel without pidfds
            return
        readable = _may_read_exit_status(pid)
        with self._lock:
            self._watched[fd] = (pid, start_ticks, readable)
            self._pids.add(pid)
            self._poll.register(fd, select.POLLIN)
        os.write(self._wake_w, b"x")  # a poll() under way watches only the fds it started with
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dltop-exits", daemon=True)
            self._thread.start()

    def take(self) -> dict:
        """{pid: exit code (< 0: killed by that signal) or None} for exits since the last call."""
        with self._lock:
            codes, self._codes = self._codes, {}
        return codes

    def close(self) -> None:
        self._closed = True
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(timeout=2)
        with self._lock:
            for fd in list(self._watched):
                os.close(fd)
            self._watched.clear()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _run(self) -> None:
        while not self._closed:
            for fd, _ in self._poll.poll():
                if fd == self._wake_r:
                    os.read(self._wake_r, 4096)
                    continue
                with self._lock:
                    pid, start_ticks, readable = self._watched.pop(fd, (None, None, None))
                    if pid is None:
                        continue
                    self._codes[pid] = _exit_code(pid, start_ticks) if readable else None
                    self._pids.discard(pid)
                    self._poll.unregister(fd)
                os.close(fd)


def _exit_code(pid: int, start_ticks: int) -> Optional[int]:
    try:
        stat = procfs.read_stat(pid)
    except (OSError, ValueError, IndexError):
        return None  # already reaped
    if stat.start_ticks != start_ticks or stat.state != "Z" or stat.exit_status is None:
        return None
    return procfs.decode_exit_status(stat.exit_status)


def _may_read_exit_status(pid: int) -> bool:
    """The kernel shows stat's exit code only to a ptrace-capable reader; /proc/<pid>/maps has the same check."""
    try:
        os.close(os.open(f"/proc/{pid}/maps", os.O_RDONLY))
        return True
    except OSError:
        return False

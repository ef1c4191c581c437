"""When each DataLoader worker started and when it was ready, to within a few tens of ms.

A spawn or forkserver worker imports torch for a second or more before ``_worker_loop`` runs,
and the trainer waits for its first batch all that time: start-up cost, not data wait. On
torch >= 2.5 ``_worker_loop`` names the process ``pt_data_worker`` as it begins, so the moment
a worker is ready is the moment its name changes. A 1 s tick would place that moment a second
late, so a small thread reads the names of the workers still starting (a 16-byte file each)
every ``POLL_S`` until they are named, and sleeps while none is starting. The start itself
comes from /proc/<pid>/stat (clock ticks since boot).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Optional

from dltop.collect import procfs

POLL_S = 0.02
KEEP_S = 60.0  # intervals older than this are forgotten (record windows cover 8 s)
FIRST_SEEN_S = 2.5  # a worker first seen older than this was there before dltop looked: not timed
SEEN_KEPT = 4096
GIVE_UP_S = 30.0  # a worker unnamed this long and no stack to say it is ready: not timed


@dataclass
class Startup:
    pid: int
    trainer_pid: int
    began: float  # monotonic seconds
    ready: Optional[float] = None  # named (monotonic), None while starting


def started_monotonic(start_ticks: int) -> float:
    """A process's start, from stat's ticks since boot, on this process's monotonic clock."""
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / procfs.CLOCK_TICKS
    return time.monotonic() - age


class StartupWatcher:
    def __init__(self, names: tuple) -> None:
        self.names = names  # the comm prefixes of a worker that has reached _worker_loop
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._watched: dict = {}  # (pid, start_ticks) -> Startup
        self._seen: dict = {}  # (pid, start_ticks) of unnamed workers already considered (oldest first)
        self._done: deque = deque()  # Startup, oldest first
        self._thread: Optional[threading.Thread] = None

    def watch(self, pid: int, start_ticks: int, trainer_pid: int, comm: str) -> None:
        """A worker seen this tick; a new unnamed one is watched until it is named."""
        key = (pid, start_ticks)
        if comm.startswith(self.names):
            return  # named already: ready (dltop may have seen it first a tick after it started)
        with self._lock:
            if key in self._watched or key in self._seen:
                return
            self._seen[key] = None
            while len(self._seen) > SEEN_KEPT:
                del self._seen[next(iter(self._seen))]
            began = started_monotonic(start_ticks)
            if time.monotonic() - began > FIRST_SEEN_S:
                return  # alive before dltop looked: when it became ready is not known (and long past)
            self._watched[key] = Startup(pid, trainer_pid, began)
        self._wake.set()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dltop-startup", daemon=True)
            self._thread.start()

    def ready(self, pid: int, start_ticks: int, at: float) -> None:
        """A stack showed the worker in ``_worker_loop`` at ``at`` (monotonic): ready by then, whatever
        its name says (a library may have renamed it, and then it is never named)."""
        with self._lock:
            startup = self._watched.pop((pid, start_ticks), None)
            if startup is not None:
                startup.ready = max(startup.began, at)
                self._done.append(startup)

    def intervals(self, trainer_pid: int) -> list:
        """[(began, ready or None)] of this trainer's workers that started in the last KEEP_S."""
        with self._lock:
            everything = list(self._done) + list(self._watched.values())
        return [(s.began, s.ready) for s in everything if s.trainer_pid == trainer_pid]

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def _run(self) -> None:
        while not self._closed:
            if not self._watched:
                self._wake.wait()
                self._wake.clear()
                continue
            self._poll(time.monotonic())
            time.sleep(POLL_S)

    def _poll(self, now: float) -> None:
        with self._lock:
            watched = list(self._watched.items())
        for key, startup in watched:
            try:
                stat = procfs.read_stat(key[0])
                named, gone = stat.comm.startswith(self.names), stat.start_ticks != key[1] or stat.state == "Z"
            except (OSError, ValueError, IndexError):
                named, gone = False, True
            if named or gone or now - startup.began > GIVE_UP_S:  # an unnamed one given up is not timed
                with self._lock:
                    self._watched.pop(key, None)
                    if named:
                        startup.ready = now
                        self._done.append(startup)
        with self._lock:
            while self._done and now - self._done[0].began > KEEP_S:
                self._done.popleft()

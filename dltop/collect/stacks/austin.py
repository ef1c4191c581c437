"""Stream a trainer's stack samples from Austin, read as they come
(docs/how-it-works.md#how-stacks-are-sampled).

A ``py-spy record`` window pays py-spy's start-up (~15 ms: it parses libpython's symbols) and
hands its samples over only when it ends; each of its samples reads every thread's
/proc/<tid>/stat besides its frames (~0.8 ms for a 16-worker trainer's 17 threads). Austin
(``pip install austin-dist``, C) never stops the target either, attaches once per window and
writes each sample as one line per thread while it runs: ~0.4 ms a sample on that trainer, no
start-up but once per window, so a third of the CPU buys more samples, and the data-wait share
is fresh every tick rather than at a window's end.

Austin is an accelerator, never a requirement: without it, or where it cannot attach (a
Python it does not know, no ptrace rights, a broken binary), the trainer is sampled by py-spy
windows as before, and py-spy's messages say what is wrong.

Output goes to a file that is read from where the last read stopped, so Austin can never block
on a full pipe; a window lasts seconds, so an Austin orphaned by a killed dltop ends by itself.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from typing import Iterator, Optional

from dltop.collect.stacks.pyspy import (
    PySpyRun,
    RunResult,
    Sampled,
    Stack,
    ThreadStack,
    ThreadWindow,
    find_program,
    stacks_of,
)
from dltop.frames import make_frame
from dltop.model import Frame

AUSTIN_ENV = "DLTOP_AUSTIN"  # path of the austin binary; empty: sample trainers with py-spy only
INVALID = ":INVALID:"  # Austin's frame for a stack it could not read
FRAME_CACHE_MAX = 20_000  # distinct frame texts kept between reads
# where mode writes for people: colours, and per thread "<emoji> Process PID <emoji> Thread IID:TID"
# then one "    function (file:line)" line per frame, outermost first
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_WHERE_THREAD = re.compile(r"Process (\d+) \S+ Thread \d+:(\d+)")
_WHERE_FRAME = re.compile(r"    (.+?) \((.*):(\d+)\)")


def find_austin() -> Optional[str]:
    return find_program("austin", AUSTIN_ENV)


def stream_command(austin: str, pid: int, rate_hz: float, seconds: int, children: bool = False) -> list:
    """Wall-clock samples of every thread (idle ones too: a trainer waiting for data is idle),
    in pipe mode (plain lines, metadata as ``# key: value``); ``children``: of every process
    under ``pid`` too, found as they start (a forkserver's workers included). Austin's stdout to
    a file is block-buffered: a small trainer's samples would come once a window; ``stdbuf -oL``
    (coreutils) flushes each line as written."""
    interval_us = max(1000, round(1e6 / rate_hz))
    line_buffered = [stdbuf, "-oL"] if (stdbuf := shutil.which("stdbuf")) else []
    tree = ["-C"] if children else []
    return [*line_buffered, austin, *tree, "-P", "-i", f"{interval_us}us", "-x", str(seconds), "-p", str(pid)]


def dump_command(austin: str, pid: int) -> list:
    """Where mode: every thread's stack once, as Austin attaches, and it exits (~4 ms of CPU,
    half a py-spy dump's, whose start-up parses more of libpython; a one-second ``-x 1`` window
    cost ~6 ms and came a second late)."""
    return [austin, "-w", str(pid)]


class StreamRun(PySpyRun):
    """One Austin window: its samples are taken by ``take`` on every tick while it runs."""

    def __init__(self, command: list, timeout_s: float) -> None:
        super().__init__(command, timeout_s)
        self._offset = 0
        self._left: list = []  # lines read when the run ended, not taken yet
        self.lines_taken = 0

    def take(self) -> list:
        """Complete lines written since the last call (a line cut by a buffer flush waits)."""
        lines, self._left = self._left + self._read_new(), []
        self.lines_taken += len(lines)
        return lines

    def _read_new(self) -> list:
        if self._stdout.closed:
            return []
        fd = self._stdout.fileno()
        size = os.fstat(fd).st_size
        if size <= self._offset:
            return []
        text = os.pread(fd, size - self._offset, self._offset)
        end = text.rfind(b"\n") + 1
        self._offset += end
        return text[:end].decode(errors="replace").splitlines()

    def _finish(self, result: RunResult) -> RunResult:
        if not self._stdout.closed:
            self._left += self._read_new()
        return super()._finish(result)


def parse_samples(lines: list, main_tid: int, frame_cache: dict, by_thread: bool = False) -> Sampled:
    """Austin's lines -> the main thread's samples, the other threads' stacks and ids, and where
    ``by_thread`` each other thread's samples (``Sampled``). A line is
    ``P<pid>;T<iid>:<tid>;<file>:<function>:<line>;... <µs>`` (``tid``: the native thread id),
    outermost frame first (so frames come out innermost last, as everywhere). ``frame_cache``
    maps a frame's text to its Frame across calls: a trainer repeats a handful of frames. Without
    ``by_thread`` (a DataLoader's trainer) each distinct stack of the other threads is made once
    and nothing is counted."""
    if len(frame_cache) > FRAME_CACHE_MAX:
        frame_cache.clear()
    main_thread = f":{main_tid}"
    main: list[Stack] = []
    others: dict[str, Stack] = {}
    counts: dict[str, dict[str, int]] = {}  # thread -> {stack text: samples}, the newest last
    seen: set[str] = set()  # the other threads
    for _pid, thread, stack in _readable_samples(lines):
        if thread.endswith(main_thread):
            main.append(_frames(stack, frame_cache))
            continue
        seen.add(thread)
        if by_thread:
            texts = counts.setdefault(thread, {})
            texts[stack] = texts.pop(stack, 0) + 1  # popped and put back: the newest stack comes last
        elif stack not in others:  # idle threads repeat one stack: each judged once
            others[stack] = _frames(stack, frame_cache)
    threads = {tid: _window(texts, frame_cache) for thread, texts in counts.items() if (tid := _tid(thread))}
    tids = {tid for thread in seen if (tid := _tid(thread))}
    return Sampled(main, set(others.values()) | stacks_of(threads), threads, tids)


def _window(texts: dict[str, int], frame_cache: dict) -> ThreadWindow:
    """One thread's samples ({stack text: samples}, the newest last) as frames."""
    counts = Counter({_frames(text, frame_cache): n for text, n in texts.items()})
    return ThreadWindow(counts, _frames(next(reversed(texts)), frame_cache))


def _tid(thread: str) -> int:
    """``T<iid>:<tid>`` -> tid (0: none)."""
    tid = thread.rpartition(":")[2]
    return int(tid) if tid.isdigit() else 0


def newest_main_stacks(lines: list, frame_cache: dict) -> dict:
    """Austin's lines of a process tree -> {pid: frames of its main thread's newest sample}
    (a process's main thread has the process's id)."""
    newest = {int(pid): stack for pid, thread, stack in _readable_samples(lines) if thread.endswith(f":{pid}")}
    return {pid: _frames(stack, frame_cache) for pid, stack in newest.items()}


def _readable_samples(lines: list) -> Iterator[tuple]:
    """(pid text, ``T<iid>:<tid>``, stack text) of each sample line; metadata (``# key: value``),
    blank lines and samples Austin could not read whole (no evidence) are left out."""
    for line in lines:
        if not line.startswith("P"):
            continue
        process, _, rest = line.rpartition(" ")[0].partition(";")
        thread, _, stack = rest.partition(";")
        if thread.startswith("T") and INVALID not in stack:
            yield process[1:], thread, stack


def parse_where(text: str, frame_cache: dict) -> dict:
    """Austin's where mode -> {tid: frames, innermost last}. A thread with a frame Austin could
    not read (``:INVALID:``) is left out: a part of a stack is no evidence."""
    if len(frame_cache) > FRAME_CACHE_MAX:
        frame_cache.clear()
    threads: dict = {}
    invalid, tid = set(), None
    for line in _COLOUR.sub("", text).splitlines():
        if head := _WHERE_THREAD.search(line):
            tid = int(head.group(2))
            threads[tid] = []
        elif tid is None:
            continue  # Austin's banner
        elif INVALID in line:
            invalid.add(tid)
        elif found := _WHERE_FRAME.fullmatch(line):
            frame = frame_cache.get(line)
            if frame is None:
                frame = frame_cache[line] = _make_frame(found.group(2), found.group(1), found.group(3))
            threads[tid].append(frame)
    return {t: tuple(frames) for t, frames in threads.items() if t not in invalid}


def parse_where_main(text: str, pid: int, frame_cache: dict[str, Frame]) -> list[ThreadStack]:
    """Where mode -> the main thread's stack as py-spy's dump would list it (locals are py-spy's
    alone); none where Austin could not read it whole."""
    frames = parse_where(text, frame_cache).get(pid)
    return [ThreadStack(pid, "MainThread", frames)] if frames is not None else []


def _make_frame(path: str, function: str, lineno: str) -> Frame:
    return make_frame(function, path, int(lineno) if lineno.isdigit() else None)


def _frames(stack: str, frame_cache: dict) -> tuple:
    frames = []
    for text in stack.split(";") if stack else ():
        frame = frame_cache.get(text)
        if frame is None:
            frame = frame_cache[text] = _make_frame(*_split_frame(text))
        frames.append(frame)
    return tuple(frames)


def _split_frame(text: str) -> tuple:
    """``file:function:line`` (a path may hold ':' too) -> (file, function, line text)."""
    rest, _, line = text.rpartition(":")
    path, _, function = rest.rpartition(":")
    if not path:
        return text, "?", ""
    return path, function, line

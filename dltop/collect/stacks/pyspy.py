"""Run py-spy without harming the job, and parse what it prints
(docs/how-it-works.md#how-stacks-are-sampled).

Periodic runs are non-blocking (no ptrace stop) and never wait: ``PySpyRun`` starts the
process and is polled on later ticks, so a slow or stuck py-spy never delays a tick. Output
goes to files, not pipes, so a large dump can never block on a full pipe. A record window is
at most half a minute long, so even a py-spy orphaned by a killed dltop ends by itself. A run
that is stopped is waited for briefly; one that outlives SIGKILL (a thread of it still in a read
of a process that is going away) is reaped by a later tick (``reap_killed``), never waited for.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Optional

from dltop.frames import make_frame
from dltop.model import Frame

PY_SPY_ENV = "DLTOP_PY_SPY"  # path of the py-spy binary; empty disables stacks
KILL_WAIT_S = 0.2  # a stopped run is waited for this long at most; if still there, a later tick reaps it
_killed: list = []  # subprocess.Popen of stopped runs that outlived KILL_WAIT_S, not reaped yet
_PROFILE_NAME = re.compile(r'^Thread (\S+) "(.*)"$')


@dataclass(frozen=True)
class ThreadStack:
    tid: int
    name: str
    frames: tuple  # Frame, innermost last
    locals: Optional[dict] = None  # function -> {name: repr}, full dumps only


Stack = tuple[Frame, ...]  # innermost last


@dataclass(frozen=True)
class ThreadWindow:
    """One thread's samples in one sampling window of its process (not its main thread's)."""

    counts: Counter[Stack]  # stack -> samples
    newest: Stack
    name: Optional[str] = None  # Python's name for it, where the sampler gives one (py-spy's)


class Sampled(NamedTuple):
    """A sampling window of a trainer, as Austin's lines and py-spy's record give it."""

    main: list[Stack]  # its main thread's samples, in time order
    others: set[Stack]  # the distinct stacks of its other threads
    threads: dict[int, ThreadWindow]  # tid -> each other thread's samples, where counted by thread
    tids: set[int]  # the OS thread ids of its other threads (they run Python)


def stacks_of(others: dict[int, ThreadWindow]) -> set[Stack]:
    """Every distinct stack of a window's other threads."""
    return {stack for window in others.values() for stack in window.counts}


@dataclass(frozen=True)
class RunResult:
    ok: bool
    text: str  # stdout (dump) or the output file (record)
    error: str  # one line: why it failed ("" when ok)
    denied: bool = False  # failed for lack of ptrace rights
    gone: bool = False  # the process exited
    cpu_s: float = 0.0  # what this py-spy run cost (user + system), to keep sampling within budget


def find_program(name: str, env: str) -> Optional[str]:
    """$``env`` (empty: none), else ``name`` on PATH, else next to this Python (a venv that is
    not activated)."""
    if env in os.environ:
        path = os.environ[env]
        return path if path and os.access(path, os.X_OK) else None
    beside = Path(sys.executable).parent / name
    return shutil.which(name) or (str(beside) if os.access(beside, os.X_OK) else None)


def find_py_spy() -> Optional[str]:
    return find_program("py-spy", PY_SPY_ENV)


# py-spy shows 128 characters of a local per --locals given: four fit a batch's sample indices
# (``index`` in _worker_loop: 16 indices of a million-sample dataset already take 144)
LOADER_LOCALS = ["--locals"] * 4


def dump_command(py_spy: str, pid: int, full: bool = False, with_locals: bool = False) -> list:
    """Non-blocking by default (locals read without pausing may be inconsistent, fine for settings
    that never change); ``full`` pauses the target briefly for consistent locals (user request only)."""
    mode = ["--locals"] if full else ["--nonblocking", *(LOADER_LOCALS if with_locals else [])]
    return [py_spy, "dump", "--json", "--pid", str(pid), *mode]


def record_command(py_spy: str, pid: int, rate: int, seconds: int, output: str) -> list:
    """Speedscope output keeps every sample in order (raw output only counts them): the order
    tells an epoch's first-batch wait, which follows iter(loader), from an ordinary wait."""
    return [
        py_spy, "record", "--pid", str(pid), "--format", "speedscope", "--idle", "--nonblocking",
        "--rate", str(rate), "--duration", str(seconds), "--output", output,
    ]  # fmt: skip


def parse_dump(text: str) -> list:
    """``py-spy dump --json`` -> [ThreadStack]; py-spy lists frames innermost first."""
    threads = []
    for thread in json.loads(text):
        frames = [make_frame(f["name"], f.get("filename") or "?", f.get("line")) for f in thread.get("frames") or []]
        local_vars = {
            f["name"]: {v["name"]: v.get("repr") for v in f["locals"]}
            for f in thread.get("frames") or []
            if f.get("locals")
        }
        tid = thread.get("os_thread_id") or thread.get("thread_id") or 0
        name = thread.get("thread_name") or ""
        threads.append(ThreadStack(int(tid), name, tuple(reversed(frames)), local_vars or None))
    return threads


def parse_speedscope(text: str) -> dict:
    """``py-spy record --format speedscope`` -> {tid: (thread name, [frames of each sample, in time order])}.

    Each thread is a profile named ``Thread TID "NAME"`` whose samples are lists of indices into
    the shared frame table, outermost first (so frames come out innermost last, as everywhere).
    An empty or cut-short file (py-spy interrupted before it wrote) is no samples.
    """
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError:
        return {}
    table = [
        make_frame(f.get("name") or "?", f.get("file") or "?", f.get("line"))
        for f in data.get("shared", {}).get("frames", [])
    ]
    threads: dict = {}
    for profile in data.get("profiles", []):
        match = _PROFILE_NAME.match(profile.get("name", ""))
        tid_text, name = (match.group(1), match.group(2)) if match else ("0", "")
        tid = int(tid_text, 16) if tid_text.startswith("0x") else int(tid_text) if tid_text.isdigit() else 0
        samples = [tuple(table[i] for i in sample if i < len(table)) for sample in profile.get("samples", [])]
        threads[tid] = (name, samples)
    return threads


def parse_record(text: str, pid: int) -> Sampled:
    """A record window's speedscope -> its samples, each other thread's with its name, as Austin's
    ``parse_samples`` gives them. Without OS thread ids the main thread is the one named
    MainThread."""
    threads = parse_speedscope(text)
    named_main = next((tid for tid, (name, _) in threads.items() if name == "MainThread"), pid)
    main = pid if threads.get(pid, ("", []))[1] else named_main
    others = {
        tid: ThreadWindow(Counter(ordered), ordered[-1], name or None)
        for tid, (name, ordered) in threads.items()
        if tid != main and ordered
    }
    return Sampled(threads.get(main, ("", []))[1], stacks_of(others), others, {tid for tid in others if tid})


def failure(stderr: str) -> tuple:
    """(one-line reason, denied, gone) from py-spy's stderr."""
    lowered = stderr.lower()
    denied = "permission denied" in lowered or "operation not permitted" in lowered
    gone = "no such process" in lowered or "check that the process is running" in lowered
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Stack backtrace", "Caused by")) and ":" in line]
    reason = (useful or lines or ["py-spy failed"])[0]
    return reason.removeprefix("Error: "), denied, gone


class PySpyRun:
    """One py-spy process, started now and collected by ``poll`` on a later tick."""

    def __init__(self, command: list, timeout_s: float, output: Optional[str] = None) -> None:
        self._stdout = tempfile.TemporaryFile()
        self._stderr = tempfile.TemporaryFile()
        self.output = output
        self.deadline = time.monotonic() + timeout_s
        self.cpu_s = 0.0
        try:
            self.process: Optional[subprocess.Popen] = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=self._stdout, stderr=self._stderr
            )
            self._spawn_error = ""
        except OSError as error:
            self.process, self._spawn_error = None, f"cannot run py-spy: {error.strerror}"

    def poll(self) -> Optional[RunResult]:
        """The result once py-spy has finished (or was killed for taking too long), else None."""
        if self.process is None:
            return self._finish(RunResult(False, "", self._spawn_error))
        code = self._reap(self.process)
        if code is None:
            if time.monotonic() < self.deadline:
                return None
            self.kill()
            return RunResult(False, "", "py-spy timed out")
        stderr = self._read(self._stderr)
        if code != 0:
            reason, denied, gone = failure(stderr)
            return self._finish(RunResult(False, "", reason, denied, gone, self.cpu_s))
        text = self._read(self._stdout) if self.output is None else _read_file(self.output)
        return self._finish(RunResult(True, text, "", cpu_s=self.cpu_s))

    def _reap(self, process: subprocess.Popen) -> Optional[int]:
        """Popen.poll, but through wait4 so the run's own CPU time is known. ``process`` is
        ``self.process``, passed in once ``poll`` has seen that it started."""
        if process.returncode is not None:
            return process.returncode
        try:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        except ChildProcessError:
            return process.poll()
        if pid == 0:
            return None
        self.cpu_s = usage.ru_utime + usage.ru_stime
        process.returncode = os.waitstatus_to_exitcode(status)
        return process.returncode

    def wait(self) -> RunResult:
        while True:
            result = self.poll()
            if result is not None:
                return result
            time.sleep(0.01)

    def interrupt(self) -> None:
        """Ask a record to stop now: py-spy writes what it has sampled so far and exits."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)

    def kill(self) -> None:
        """Stop py-spy (the target is not touched: py-spy only reads it) and drop its files. It is
        waited for briefly: one that outlives that is reaped by a later tick (``reap_killed``),
        so that a tick never waits on it (every other run would stay unreaped meanwhile)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            try:
                self.process.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                _killed.append(self.process)
        self._finish(RunResult(False, "", "stopped"))

    def _finish(self, result: RunResult) -> RunResult:
        self._stdout.close()  # closing twice is harmless
        self._stderr.close()
        if self.output:
            Path(self.output).unlink(missing_ok=True)
        return result

    @staticmethod
    def _read(handle) -> str:
        handle.seek(0)
        return handle.read().decode(errors="replace")


def reap_killed() -> int:
    """Reap the stopped runs that outlived ``kill``'s wait and have exited since, without waiting;
    how many are still to reap. Called every tick (and pass of the node watcher)."""
    _killed[:] = [process for process in _killed if process.poll() is None]
    return len(_killed)


def _read_file(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ""  # the process exited before the first sample

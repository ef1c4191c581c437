"""Helpers for tests that start real training jobs and run the dltop CLI.

Each job writes its ground truth (trainer and worker pids) to a report directory, so tests
compare what dltop found with what really ran.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
TRAIN = ROOT / "tests" / "jobs" / "train.py"
FIXTURES = ROOT / "tests" / "fixtures"
FAKES = ROOT / "tests" / "fakes"  # a fake pynvml, put first on PYTHONPATH
NOBODY = 65534  # a uid that owns nothing, for the permission tests


def wait_for(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.1):
    """Poll until ``predicate`` is truthy; fail the test with ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


class Job:
    def __init__(self, proc: subprocess.Popen, report: Path):
        self.proc = proc
        self.report = report

    @property
    def pid(self) -> int:
        return self.proc.pid

    def records(self, kind: str) -> list:
        found = []
        for path in self.report.glob(f"{kind}-*.json"):
            try:
                found.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue  # being written
        return found

    def trainers(self) -> list:
        return sorted(r["pid"] for r in self.records("trainer"))

    def live_workers(self, loader: Optional[str] = None) -> dict:
        """{worker pid: trainer pid} of the workers that are alive now."""
        return {
            r["pid"]: r["trainer_pid"]
            for r in self.records("worker")
            if alive(r["pid"]) and (loader is None or r["loader"] == loader)
        }

    def wait_workers(self, count: int, timeout: float = 60) -> dict:
        return wait_for(lambda: len(self.live_workers()) >= count and self.live_workers(), timeout, f"{count} workers")

    def stop(self) -> None:
        """Kill the job's process group and every group its descendants made (torchrun starts
        each rank in a session of its own); nothing of the job may survive the test."""
        groups = {self.proc.pid}
        recorded = [r["pid"] for kind in ("trainer", "worker") for r in self.records(kind)]
        for pid in [p.pid for p in _descendants(self.proc.pid)] + recorded:
            try:
                groups.add(os.getpgid(pid))
            except ProcessLookupError:
                continue
        groups.discard(os.getpgid(0))
        with _subreaper():  # the job's processes the kill orphans become this process's children
            for group in groups:
                try:
                    os.killpg(group, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.wait(timeout=30)
            _reap_orphans(groups, self.proc.pid, timeout=10)
        for group in groups:
            wait_for(lambda g=group: not group_alive(g), 10, f"process group {group} to die")


PR_SET_CHILD_SUBREAPER = 36


class _subreaper:
    """While inside, this process is a child subreaper (prctl): a process of a killed job whose
    parent died first is re-parented here, not to PID 1, and can be reaped at once. Some inits
    reap their adopted zombies only every second or so, and a killed job's group is not gone
    until its zombies are reaped: that wait was most of every job test's teardown."""

    def __enter__(self) -> bool:
        import ctypes

        try:
            self.libc = ctypes.CDLL(None, use_errno=True)
            self.on = self.libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):
            self.on = False
        return self.on

    def __exit__(self, *exc: object) -> None:
        if self.on:
            self.libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _reap_orphans(groups: set, own: int, timeout: float) -> None:
    """Reap this process's children in ``groups`` (the job's orphans, adopted by ``_subreaper``)
    until none of them is left or ``timeout`` s pass; ``own`` (the job's Popen) is left to Popen."""
    me, deadline = os.getpid(), time.monotonic() + timeout
    while time.monotonic() < deadline:
        adopted = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == own:
                continue
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[1]) == me and int(fields[2]) in groups:
                adopted.append(int(entry))
        if not adopted:
            return
        for pid in adopted:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        time.sleep(0.01)


def _descendants(pid: int) -> list:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def dev_tool(name: str) -> str:
    """A program the test extra installs (mypy, lint-imports): this venv's, else one on PATH."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: `pip install -e '.[test]'` brings it")
    return found


def run_dltop(*args: str, user: Optional[int] = None, env: Optional[dict] = None, timeout: float = 60):
    """Run the dltop CLI in a subprocess, optionally as another uid (for permission tests)."""
    prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user is not None else []
    return subprocess.run(
        [*prefix, sys.executable, "-m", "dltop", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_error(result, fragment: str) -> None:
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("dltop: ") and fragment in result.stderr


def watch(collector, until: Callable[[list, list], object], timeout: float, what: str, every: float = 0.5,
          **settings_changes):  # fmt: skip
    """Tick ``collector`` until ``until(ticks, findings)`` holds; returns (ticks, findings)."""
    from dltop.diagnose import diagnose

    settings = dataclasses.replace(collector.settings, **settings_changes)
    ticks: list = []
    deadline = time.monotonic() + timeout
    while True:
        ticks.append(collector.tick())
        findings = diagnose(ticks, settings)
        if until(ticks, findings):
            return ticks, findings
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; findings: {findings}")
        time.sleep(every)


def worker_with_id(job: Job, worker_id: int, loader: str = "train") -> int:
    found = wait_for(
        lambda: [r["pid"] for r in job.records("worker") if r["worker_id"] == worker_id and r["loader"] == loader],
        30,
        f"worker {worker_id}",
    )
    return found[-1]

"""``dltop demo``: start the bundled training job and watch it, so a newcomer sees dltop work.

The job runs in its own session; whatever ends the demo (Ctrl-C, --duration, an error)
kills that whole process group, so no worker is left behind.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections import deque
from typing import Callable, Optional

from dltop.collect.collector import Collector
from dltop.diagnose import diagnose
from dltop.diagnose.stable import StableFindings
from dltop.errors import DltopError

DEMO_ARGS = ("--workers", "4", "--persistent", "--sample-ms", "8", "--step-ms", "10", "--batch-size", "8")
READY_TIMEOUT_S = 60
WINDOW_TICKS = 120  # ticks the live diagnosis looks back over


def start_demo_job(extra_args: tuple = ()) -> subprocess.Popen:
    if importlib.util.find_spec("torch") is None:
        raise DltopError("dltop demo runs a PyTorch job: install torch first (pip install 'dltop[bench]')")
    return subprocess.Popen(
        [sys.executable, "-m", "dltop.demo.job", *DEMO_ARGS, *extra_args],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def attach_when_ready(job: subprocess.Popen) -> Collector:
    """The job is a training job once torch is imported and its workers are up."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if job.poll() is not None:
            raise DltopError(f"the demo job exited early with code {job.returncode}")
        try:
            collector = Collector(job.pid)
            if any(m.role == "worker" for m in collector.tree.members.values()):
                return collector
            collector.close()
        except DltopError:
            pass
        if time.monotonic() > deadline:
            raise DltopError("the demo job did not start its DataLoader workers within a minute")
        time.sleep(0.2)


def stop_demo_job(job: subprocess.Popen) -> None:
    try:
        os.killpg(job.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    job.wait()


def run_demo(interval: float, duration: Optional[float], show: Callable[[object], None]) -> int:
    job = start_demo_job()
    collector = None
    try:
        collector = attach_when_ready(job)
        window: deque = deque(maxlen=WINDOW_TICKS)
        stable = StableFindings()
        start = time.monotonic()
        while duration is None or time.monotonic() - start < duration:
            window.append(collector.tick())
            findings = stable.update(time.monotonic(), diagnose(list(window)))
            show(dataclasses.replace(window[-1], findings=findings))
            time.sleep(interval)
    except KeyboardInterrupt:
        pass
    finally:
        if collector is not None:
            collector.close()
        stop_demo_job(job)
    return 0

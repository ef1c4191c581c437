"""``dltop demo``: start the bundled training job with a scenario and watch it in the TUI, so a
newcomer sees dltop catch a problem in one command.

The job runs in its own session; whatever ends the demo (q, an error) kills that whole process
group, so no worker is left behind.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time

from dltop import install_hint
from dltop.collect.collector import Collector
from dltop.demo.scenarios import SCENARIOS
from dltop.errors import DltopError
from dltop.settings import DEFAULTS, Settings

READY_TIMEOUT_S = 60


def need_torch() -> None:
    """The demo job is a PyTorch job (the monitor is not): say so before anything starts."""
    if importlib.util.find_spec("torch") is None:
        raise DltopError(f"dltop demo runs a PyTorch job: install torch first ({install_hint('bench')})")


def start_demo_job(scenario: str) -> subprocess.Popen:
    need_torch()
    return subprocess.Popen(
        [sys.executable, "-m", "dltop.demo.job", *SCENARIOS[scenario]],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def attach_when_ready(job: subprocess.Popen, settings: Settings = DEFAULTS) -> Collector:
    """The job is a training job once torch is imported and its workers are up."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if job.poll() is not None:
            raise DltopError(f"the demo job exited early with code {job.returncode}")
        try:
            collector = Collector(job.pid, settings=settings)
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

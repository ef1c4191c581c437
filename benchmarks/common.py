"""Shared by the benchmarks in benchmarks/ (run by hand, not by pytest)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import Job  # noqa: E402


def start_job(report: Path, *args: str) -> Job:
    """The test job (tests/jobs/train.py) in its own session; kill it with os.killpg(job.pid, ...)."""
    command = [sys.executable, str(ROOT / "tests/jobs/train.py"), "--report", str(report), *args]
    return Job(subprocess.Popen(command, start_new_session=True, stderr=subprocess.DEVNULL), report)


def children_cpu() -> float:
    """CPU seconds of waited-for children, grandchildren (py-spy) included."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timing(job: Job) -> dict:
    """The job's own counters: wait_s, total_s, batches, at."""
    return json.loads(next(job.report.glob("timing-*.json")).read_text())


def dltop(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dltop", *args], cwd=ROOT, **kwargs)

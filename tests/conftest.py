"""Shared by both kinds of tests: tests/unit (no real job, no Prometheus, no job in a subprocess:
fast) and tests/integration (real jobs, torchrun, Prometheus, samplers against jobs), each marked
``integration`` here so ``-m "not integration"`` also picks the fast ones. The fixtures start real
training jobs (CPU torch) in their own process group and kill the whole group after."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from tests.support import TRAIN, Job

INTEGRATION = Path(__file__).resolve().parent / "integration"


def pytest_collection_modifyitems(items: list) -> None:
    for item in items:
        if INTEGRATION in Path(item.fspath).resolve().parents:
            item.add_marker(pytest.mark.integration)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collecting the tests imports no torch: a Python process with torch loaded is what dltop
    takes for a training job, so the test process would become the root of every job it starts
    (a test module importing dltop.bench's pipeline runner did that: `dltop jobs` then listed the
    test run, not the job). Import torch inside the test that needs it."""
    if "torch" in sys.modules:
        raise pytest.UsageError("a test module imports torch at collection: import it inside the test")


@pytest.fixture
def start_job(tmp_path: Path):
    """start_job(*train.py args, launcher=None, script=train.py) -> Job, with its ground-truth report
    directory (its stderr goes to stderr.txt there: a log file, as under nohup or Slurm)."""
    jobs: list = []

    def start(*args: str, launcher: Optional[list] = None, env: Optional[dict] = None, script: Path = TRAIN) -> Job:
        report = tmp_path / f"report-{len(jobs)}"
        report.mkdir()
        command = [*(launcher or [sys.executable]), str(script), "--report", str(report), *args]
        proc = subprocess.Popen(
            command,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=open(report / "stderr.txt", "w"),
            env={**os.environ, **(env or {})},
        )
        job = Job(proc, report)
        jobs.append(job)
        return job

    yield start
    for job in jobs:
        job.stop()


@pytest.fixture
def attach():
    """attach(pid, **Collector kwargs) -> Collector; its py-spy runs are stopped after the test."""
    from dltop.collect.collector import Collector

    collectors: list = []

    def make(pid: int, **kwargs) -> Collector:
        collectors.append(Collector(pid, **kwargs))
        return collectors[-1]

    yield make
    for collector in collectors:
        collector.close()


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A throwaway PKI made by the openssl CLI (tests/tls.py's make_pki)."""
    from tests.tls import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def exporter(tmp_path: Path):
    """exporter(web config text, or "" for none) -> the port of ``serve()`` on 127.0.0.1; stopped after."""
    from tests.tls import exporters

    with exporters(tmp_path) as start:
        yield start

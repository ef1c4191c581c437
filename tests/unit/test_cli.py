"""The CLI without a training job: error paths, permissions, import hygiene, the version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import NOBODY, assert_one_line_error, run_dltop


@pytest.fixture
def bystander():
    """A process that is not a training job, in its own group."""
    procs = []

    def start(*command: str) -> int:
        procs.append(subprocess.Popen(command, start_new_session=True))
        return procs[-1].pid

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_unknown_pid():
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert_one_line_error(run_dltop("snapshot", "--pid", str(pid_max + 1)), "no process with pid")


def test_not_a_training_job(bystander):
    assert_one_line_error(run_dltop("snapshot", "--pid", str(bystander("sleep", "60"))), "not a PyTorch training job")
    python = bystander(sys.executable, "-c", "import time; time.sleep(60)")
    assert_one_line_error(run_dltop("snapshot", "--pid", str(python)), "not a PyTorch training job")


def test_another_users_process_without_permission(bystander):
    python = bystander(sys.executable, "-c", "import time; time.sleep(60)")
    assert_one_line_error(run_dltop("snapshot", "--pid", str(python), user=NOBODY), "permission denied")


def test_bad_arguments_exit_2():
    assert run_dltop("snapshot", "--pid", "1", "--duration", "0").returncode == 2
    assert run_dltop("--interval", "0").returncode == 2
    for option in ("--duration=nan", "--interval=inf", "--hang-after=-inf"):
        result = run_dltop("snapshot", "--pid", "1", option)  # not a report of nothing, exit 0
        assert result.returncode == 2 and "must be a finite number > 0" in result.stderr, (option, result.stderr)
    # without --pid the live view opens a job picker, which needs a terminal: one line, not a hang
    assert_one_line_error(run_dltop(), "needs a terminal")


def test_core_imports_neither_torch_nor_textual():
    code = (
        "import sys, dltop.model, dltop.collect.collector, dltop.collect.jobs, dltop.live.report, dltop.cli, "
        "dltop.text_report, dltop.diagnose, dltop.bench.search, dltop.bench.report, dltop.bench.main; "
        "print(sorted(m for m in ('torch', 'textual') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_version():
    result = run_dltop("--version")
    assert result.returncode == 0 and result.stdout.startswith("dltop ")

"""A real torchrun run (three ranks, DDP over gloo) stopped by one rank is judged from all its
ranks at once: the rank that stopped it is named with the line it is on, the others' stalls are
its consequences; a rank slow but moving stops nothing (tests/jobs/stopping_run.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from tests.support import ROOT, run_dltop, wait_for

STOPPING_RUN = ROOT / "tests/jobs/stopping_run.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "3"]


def _report(start_job, how: str, recording: Optional[Path] = None) -> tuple[dict, dict]:
    """(the job's truth of where rank 1 stopped, dltop's snapshot of the run once it stopped);
    ``recording``: `dltop record` watches it meanwhile, into that file."""
    job = start_job("--stop", how, "--stop-rank", "1", "--stop-after", "10", launcher=TORCHRUN, script=STOPPING_RUN)
    recorder = None
    if recording is not None:  # once the ranks are up: before, it is no training job yet
        wait_for(lambda: len(job.records("rank")) == 3, 120, "the 3 ranks")
        recorder = subprocess.Popen(
            [sys.executable, "-m", "dltop", "record", "--pid", str(job.pid), "-o", str(recording), "--hang-after", "4",
             "--quiet"], cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        stop = job.report / "stop.json"
        wait_for(stop.exists, 120, f"rank 1 to stop ({how})")
        args = ("snapshot", "--pid", str(job.pid), "--duration", "8", "--hang-after", "4", "--json")
        result = run_dltop(*args, timeout=120)
    finally:
        if recorder is not None:
            recorder.send_signal(signal.SIGINT)  # as ^C: it closes the recording
            recorder.wait(timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(stop.read_text()), json.loads(result.stdout)


@pytest.mark.parametrize(
    "how, title",
    [
        ("lock", "Run stopped: rank 1 is blocked on a lock at stopping_run.py:{line} in flush_metrics"),
        ("desync", "Run desynced: its ranks wait in different collectives (all_reduce in backward(), barrier)"),
        ("worker", "Run stopped: rank 1 waits for its own input at stopping_run.py:"),
    ],
)
def test_the_rank_that_stopped_the_run_is_named_with_its_line(start_job, tmp_path, how, title):
    recording = tmp_path / "run.dltop" if how == "lock" else None
    truth, report = _report(start_job, how, recording)
    (stopped,) = [f for f in report["findings"] if f["id"] == "run-stopped"]
    assert stopped["severity"] == "error" and stopped["pids"] == [truth["pid"]]
    assert stopped["title"].startswith(title.format(line=truth.get("line"))), stopped["title"]
    waiting = {r["rank"]: r for r in stopped["evidence"]["ranks"] if r["rank"] != 1}
    assert sorted(waiting) == [0, 2] and all(r["call"] == "all_reduce in backward()" for r in waiting.values())
    stalled = [f for f in report["findings"] if f["id"] == "trainer-stalled" and f["pids"] != [truth["pid"]]]
    assert stalled and all(f["explained_by"] for f in stalled), stalled  # the waiting ranks: consequences
    if how == "worker":  # worker-hung -> the rank -> the run
        assert stopped["explained_by"] == "worker-hung"
    if recording is not None:  # the recorder's incident bundle holds every rank's stack
        (bundle,) = tmp_path.glob("run.incident-*-run-stopped")
        assert json.loads((bundle / "incident.json").read_text())["finding"]["pids"] == [truth["pid"]]
        stacks = (bundle / "stacks.txt").read_text()
        assert all(f"trainer rank {rank} " in stacks for rank in (0, 1, 2)) and "flush_metrics" in stacks


def test_a_slow_but_moving_rank_stops_nothing(start_job):
    _, report = _report(start_job, "slow")
    assert not [f for f in report["findings"] if f["id"] in ("run-stopped", "trainer-stalled")], report["findings"]

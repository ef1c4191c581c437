"""Jobs that are PID 1 of their PID namespace, as in a container (`docker run … python train.py`,
torchrun as a pod's entrypoint), watched from inside the namespace (a user who `docker exec`s in)
and from the host (the DaemonSet's way). Each job runs under `unshare --pid --fork --mount-proc`:
its first process is PID 1 there, with its own /proc. dltop must tell a namespace's init from a
training job by what it is (torch loaded, workers, a launcher), never by its number."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.namespaces import Namespace
from tests.prometheus import free_port
from tests.support import TRAIN, Job, assert_one_line_error, run_dltop, wait_for

JOB_ARGS = ("--workers", "1", "--persistent", "--sample-ms", "5", "--step-ms", "10")


class NamespaceJob(Namespace):
    """tests/jobs/train.py under ``launcher`` (a shell's ``sh -c`` where ``shell``) as PID 1 of a
    PID namespace of its own, with what it writes of itself (pids as the namespace numbers them)."""

    def __init__(self, report: Path, launcher: tuple[str, ...], shell: bool) -> None:
        report.mkdir()
        self.job = Job(None, report)  # its records only: its pids are the namespace's, never signalled
        command = [*launcher, str(TRAIN), "--report", str(report), *JOB_ARGS]
        if shell:
            command = ["sh", "-c", " ".join(command) + "; true"]  # the shell stays, as init
        super().__init__(command, report / "stderr.txt")

    def records(self, kind: str) -> list[dict]:
        return self.job.records(kind)


@pytest.fixture
def in_namespace(tmp_path: Path):
    """in_namespace(*launcher, shell=False) -> NamespaceJob, killed after the test."""
    jobs: list[NamespaceJob] = []

    def start(*launcher: str, shell: bool = False) -> NamespaceJob:
        jobs.append(NamespaceJob(tmp_path / f"ns-{len(jobs)}", launcher, shell))
        return jobs[-1]

    yield start
    for job in jobs:
        job.stop()


def _json(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _roles(snapshot: dict) -> dict[str, list[int]]:
    roles: dict[str, list[int]] = {}
    for process in snapshot["processes"]:
        roles.setdefault(process["role"], []).append(process["pid"])
    return roles


def test_a_script_that_is_pid_1_is_a_job_with_its_workers_inside_and_outside(in_namespace):
    job = in_namespace(sys.executable)
    wait_for(lambda: job.host_pids("pt_data_worker"), 90, "the job's worker")
    (worker,) = wait_for(lambda: [r["pid"] for r in job.records("worker")], 30, "the worker's record")

    (listed,) = _json(job.inside("jobs", "--json"))["jobs"]
    assert listed["pid"] == 1 and listed["trainer_pids"] == [1] and listed["workers"] == 1, listed

    for pid in (1, worker):  # the trainer, or its worker: the same job
        snapshot = _json(job.inside("snapshot", "--pid", str(pid), "--duration", "2", "--json"))
        assert snapshot["job"]["pid"] == 1 and snapshot["job"]["start_method"] == "fork", snapshot["job"]
        assert _roles(snapshot) == {"trainer": [1], "worker": [worker]}

    host = _json(run_dltop("jobs", "--json"))["jobs"]
    (outside,) = [j for j in host if j["pid"] == job.init_pid]
    assert outside["workers"] == 1 and outside["trainer_pids"] == [job.init_pid]


def test_torchrun_as_pid_1_is_one_job_of_its_ranks_inside_and_outside(in_namespace):
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                "--master-port", str(free_port())]  # fmt: skip
    job = in_namespace(*torchrun)
    wait_for(lambda: len(job.host_pids("pt_data_worker")) == 2, 120, "both ranks' workers")
    ranks = sorted(wait_for(lambda: len(job.records("trainer")) == 2 and job.records("trainer"), 30, "ranks"),
                   key=lambda r: r["pid"])  # fmt: skip

    (listed,) = _json(job.inside("jobs", "--json"))["jobs"]
    assert listed["pid"] == 1 and len(listed["trainer_pids"]) == 2 and listed["workers"] == 2, listed

    for pid in (1, ranks[1]["pid"]):  # torchrun, or one rank: the whole run
        snapshot = _json(job.inside("snapshot", "--pid", str(pid), "--duration", "2", "--json"))
        assert snapshot["job"]["pid"] == 1 and snapshot["job"]["launcher_pid"] == 1, snapshot["job"]
        assert sorted(snapshot["job"]["trainer_pids"]) == [r["pid"] for r in ranks]

    host = _json(run_dltop("jobs", "--json"))["jobs"]
    (outside,) = [j for j in host if j["pid"] == job.init_pid]
    assert len(outside["trainer_pids"]) == 2 and outside["workers"] == 2

    # the exporter in the namespace (a sidecar in the pod's PID namespace) sees the run
    port = free_port()
    job.start_inside("exporter", "--listen", "127.0.0.1", "--port", str(port), "--interval", "1",
                     "--discover-every", "1", log=job.job.report / "exporter.txt")  # fmt: skip
    families = wait_for(lambda: _trainer_series(port), 60, "the exporter's trainer series")
    assert families["dltop_jobs"] == 1
    assert families["trainers"] == {("1", "0"), ("1", "1")}  # (job_pid, rank)


def _trainer_series(port: int) -> Optional[dict]:
    """dltop_jobs and the (job_pid, rank) of each trainer's memory series, once both ranks are in."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    families = {f.name: f for f in text_string_to_metric_families(text)}
    memory = families.get("dltop_process_resident_memory_bytes")
    trainers = {
        (s.labels["job_pid"], s.labels["rank"])
        for s in (memory.samples if memory else ())
        if s.labels["role"] == "trainer"
    }
    jobs = families["dltop_jobs"].samples[0].value if "dltop_jobs" in families else 0
    return {"dltop_jobs": jobs, "trainers": trainers} if len(trainers) == 2 else None


def test_an_init_that_is_no_job_is_refused_and_the_job_under_it_is_found(in_namespace):
    """A shell as the namespace's init (`sh -c "python train.py; …"`): PID 1 is not the job, the
    Python under it is; and the host's own init is refused the same way."""
    job = in_namespace(sys.executable, shell=True)
    wait_for(lambda: job.host_pids("pt_data_worker"), 90, "the job's worker")
    (trainer,) = wait_for(lambda: [r["pid"] for r in job.records("trainer")], 30, "the trainer's record")
    assert trainer != 1

    assert_one_line_error(job.inside("snapshot", "--pid", "1"), "is the init of its PID namespace")
    (listed,) = _json(job.inside("jobs", "--json"))["jobs"]
    assert listed["pid"] == trainer and listed["workers"] == 1, listed
    if not Path("/proc/1/comm").read_text().startswith("python"):  # this machine's init, where it is no job either
        assert_one_line_error(run_dltop("snapshot", "--pid", "1"), "is the init of its PID namespace")

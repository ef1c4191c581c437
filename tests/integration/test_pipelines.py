"""Input pipelines that are not DataLoader worker processes, run as users run them
(tests/jobs/pipeline_job.py): torchdata.nodes with threads and with processes, SPDL, and a
hand-written thread-pool prefetcher. dltop must name the pipeline, measure the trainer's wait
for data against the job's own clock, list the threads (or processes) that decode, and say
what would help: more workers where they wait on a slow store, not more threads where a
Python decode holds the GIL."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import ROOT, Job, run_dltop, wait_for

JOB = ROOT / "tests" / "jobs" / "pipeline_job.py"
WORKERS = 2
WARMUP_S = 3.0  # the pipeline's buffers fill before dltop attaches
SNAPSHOT_S = "8"
WAIT_PP = 15.0  # dltop's data wait against the job's clock: generous, two busy CPUs
KNOB = {"torchdata-thread": "num_workers=", "spdl": "concurrency=", "threads": "max_workers="}


@dataclass
class Seen:
    """dltop's report on one job, the job's own wait over the same stretch, and its records."""

    report: dict
    clock_wait: float
    job: Job

    @property
    def loader(self) -> dict:
        return self.report["loaders"][0]

    def findings(self, fid: str) -> list:
        return [f for f in self.report["findings"] if f["id"] == fid]


def _clock(job: Job) -> dict:
    try:
        return json.loads((job.report / f"timing-{job.pid}.json").read_text())
    except (OSError, ValueError):
        return {}


def _observe(folder: Path, library: str, work: str, job_args: tuple = (), dltop_args: tuple = ()) -> Seen:
    """The job started in its own session, a ``dltop snapshot --json`` once it runs, the clock read
    either side of it; the job is killed before this returns."""
    report = folder / "-".join([library, work, *job_args]).replace("--", "")
    report.mkdir()
    command = [sys.executable, str(JOB), "--library", library, "--work", work, "--workers", str(WORKERS),
               "--report", str(report), *job_args]  # fmt: skip
    with open(report / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr)
    job = Job(proc, report)
    try:
        wait_for(lambda: _clock(job).get("batches", 0) >= 2 or proc.poll() is not None, 60, "the job's first batches")
        assert proc.poll() is None, (report / "stderr.txt").read_text()[-2000:]
        time.sleep(WARMUP_S)
        before = _clock(job)
        result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", SNAPSHOT_S, "--json", *dltop_args,
                           timeout=90)  # fmt: skip
        after = _clock(job)
        assert result.returncode == 0, result.stderr
        share = 100 * (after["wait_s"] - before["wait_s"]) / (after["total_s"] - before["total_s"])
        return Seen(json.loads(result.stdout), share, job)
    finally:
        job.stop()


@pytest.fixture(scope="module")
def observed(tmp_path_factory):
    """observed(library, work) -> Seen, each job run once for the module's tests (a failure too)."""
    folder = tmp_path_factory.mktemp("pipelines")
    seen: dict = {}

    def observe(library: str, work: str) -> Seen:
        if (library, work) not in seen:
            try:
                seen[library, work] = _observe(folder, library, work)
            except AssertionError as failure:
                seen[library, work] = failure
        if isinstance(seen[library, work], AssertionError):
            raise seen[library, work]
        return seen[library, work]

    return observe


def _assert_wait(seen: Seen) -> None:
    wait = seen.loader["data_wait_percent"]
    assert wait is not None and abs(wait - seen.clock_wait) <= WAIT_PP, (wait, seen.clock_wait)


def test_torchdata_threads_are_its_workers(observed):
    pytest.importorskip("torchdata")
    seen = observed("torchdata-thread", "io")
    assert seen.loader["pipeline"] == "torchdata.nodes", seen.loader
    _assert_wait(seen)
    in_torchdata = lambda t: any("torchdata" in str(frame) for frame in t.get("stack") or [])  # noqa: E731
    decoding = [t for t in seen.loader["worker_threads"] if "_apply_udf" in t["name"] or in_torchdata(t)]
    assert len(decoding) >= WORKERS, seen.loader["worker_threads"]
    assert all({"tid", "name", "cpu_percent", "activity"} <= set(t) for t in decoding), decoding


def test_spdl_pipeline_is_named_with_its_wait(observed):
    pytest.importorskip("spdl.pipeline")
    seen = observed("spdl", "io")
    assert seen.loader["pipeline"] == "spdl", seen.loader
    _assert_wait(seen)


def test_thread_pool_prefetcher_is_named_with_its_pool(observed):
    seen = observed("threads", "io")
    assert seen.loader["pipeline"] == "threads", seen.loader
    _assert_wait(seen)
    pool = [t for t in seen.loader["worker_threads"] if "ThreadPoolExecutor" in t["name"]]
    assert len(pool) >= WORKERS, seen.loader["worker_threads"]
    decoders = {r["tid"] for r in seen.job.records("thread")}  # the truth: the threads that ran decode
    assert {t["tid"] for t in pool} >= decoders, (pool, decoders)


def test_torchdata_worker_processes_are_its_workers(observed):
    pytest.importorskip("torchdata")
    seen = observed("torchdata-process", "io")
    assert seen.loader["pipeline"] == "torchdata.nodes", seen.loader
    real = {r["pid"] for r in seen.job.records("worker")}
    assert len(real) == WORKERS
    assert sorted(seen.loader["worker_pids"]) == sorted(real), seen.loader


def test_python_decode_in_threads_is_gil_bound(observed):
    seen = observed("threads", "cpu")
    assert seen.findings("gil-bound"), [f["id"] for f in seen.report["findings"]]
    assert not [f for f in seen.findings("input-bound") if KNOB["threads"] in (f.get("suggestion") or "")], (
        "more threads cannot help a decode that holds the GIL"
    )


@pytest.mark.parametrize("library", ["torchdata-thread", "spdl", "threads"])
def test_slow_store_is_input_bound_naming_the_knob(observed, library):
    if library != "threads":
        pytest.importorskip("torchdata" if library.startswith("torchdata") else "spdl.pipeline")
    seen = observed(library, "io")
    bound = seen.findings("input-bound")
    assert bound, [f["id"] for f in seen.report["findings"]]
    assert KNOB[library] in bound[0]["suggestion"], bound[0]["suggestion"]


def test_a_hung_worker_thread_is_named_and_explains_the_wait(tmp_path):
    """One decode thread blocks for ever 2 s in (the job says which: hung-<pid>.json): the
    pipeline stalls, and dltop names that thread, its frame, and the trainer's wait as its
    consequence."""
    pytest.importorskip("torchdata")
    seen = _observe(tmp_path, "torchdata-thread", "io", ("--hang-worker-after", "2"), ("--hang-after", "5"))
    (hung,) = seen.job.records("hung")
    (finding,) = seen.findings("worker-hung")
    assert finding["evidence"]["tid"] == hung["tid"] and finding["pids"] == [seen.job.pid], finding
    assert "Decode" in finding["title"], finding["title"]
    rows = {t["tid"]: t for t in seen.loader["worker_threads"]}
    assert rows[hung["tid"]]["activity"] == "stuck", rows
    waits = [f for f in seen.report["findings"] if f["id"] == "input-bound"]
    assert all(f["explained_by"] == "worker-hung" for f in waits), waits

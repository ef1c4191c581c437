"""The CLI on real jobs: the JSON contract, the text report and jobs listing, an exit during the
window, another user's job, py-spy missing."""

from __future__ import annotations

import json
import os

from tests.support import NOBODY, run_dltop

CONTRACT = {
    "top": {
        "schema",
        "taken_at",
        "window_s",
        "job",
        "system",
        "processes",
        "loaders",
        "gpus",
        "gpu_status",
        "disks",
        "findings",
    },
    "job": {"pid", "cmdline", "state", "start_method"},
    "system": {
        "cpus_logical",
        "cpus_physical",
        "cpus_allowed",
        "load_1m",
        "mem_available_bytes",
        "swap_used_bytes",
        "shm_total_bytes",
        "shm_used_bytes",
    },
    "process": {
        "pid",
        "ppid",
        "role",
        "trainer_pid",
        "name",
        "state",
        "cpu_percent",
        "rss_bytes",
        "uss_bytes",
        "pss_bytes",
        "num_fds",
        "fd_limit",
        "num_threads",
        "read_bytes_per_s",
        "write_bytes_per_s",
        "started_at",
        "activity",
        "stack",
        "unavailable",
    },
    "loader": {
        "trainer_pid",
        "num_workers",
        "worker_pids",
        "persistent_workers",
        "pin_memory",
        "start_method",
        "data_wait_percent",
        "worker_respawns",
    },
    "disk": {
        "device",
        "reads_per_s",
        "writes_per_s",
        "read_bytes_per_s",
        "write_bytes_per_s",
        "r_await_ms",
        "w_await_ms",
        "aqu_sz",
        "util_percent",
        "used_by_job",
    },
    "finding": {"id", "severity", "title", "detail", "suggestion", "evidence", "pids", "impact", "explained_by"},
}


def test_snapshot_json_follows_the_contract(start_job):
    job = start_job("--workers", "2", "--persistent", "--step-ms", "20")
    truth = job.wait_workers(2)
    result = run_dltop("snapshot", "--pid", str(next(iter(truth))), "--duration", "1.5", "--interval", "0.5", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert CONTRACT["top"] <= report.keys() and report["schema"] == "dltop.snapshot/1"
    assert CONTRACT["job"] <= report["job"].keys() and CONTRACT["system"] <= report["system"].keys()
    assert report["job"]["pid"] == job.pid and report["job"]["state"] == "running"
    assert report["job"]["start_method"] == "fork" and 1.4 < report["window_s"] < 3
    assert all(CONTRACT["process"] <= p.keys() for p in report["processes"])
    (loader,) = report["loaders"]
    assert CONTRACT["loader"] <= loader.keys() and sorted(loader["worker_pids"]) == sorted(truth)
    assert all(CONTRACT["disk"] <= d.keys() for d in report["disks"])
    assert all(CONTRACT["finding"] <= f.keys() for f in report["findings"])
    # A healthy job: its two workers (about 7 ms a batch against a 20 ms step) may be read as more
    # than it needs once a sweep has measured them, and nothing else may be said of it.
    assert {(f["id"], f["severity"]) for f in report["findings"]} <= {("too-many-workers", "info")}
    assert report["gpu_status"] in ("no-nvml", "no-devices", "ok") or report["gpu_status"].startswith("error")


def test_text_report_and_jobs_listing(start_job):
    job = start_job("--workers", "2", "--persistent", "--step-ms", "20")
    truth = job.wait_workers(2)
    text = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "1")
    assert text.returncode == 0 and f"job {job.pid} · running" in text.stdout
    assert all(f"{pid}" in text.stdout for pid in truth)
    jobs = json.loads(run_dltop("jobs", "--json").stdout)["jobs"]
    (mine,) = [j for j in jobs if j["pid"] == job.pid]
    assert mine["workers"] == 2 and mine["trainer_pids"] == [job.pid] and mine["user"] == "root"


def test_exit_during_the_window_is_reported(start_job):
    job = start_job("--workers", "2", "--persistent", "--epochs", "2", "--batches", "10", "--step-ms", "100")
    job.wait_workers(2)
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "30", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["job"]["state"] == "exited" and report["window_s"] < 25  # stops once the job is gone
    assert {p["role"] for p in report["processes"]} >= {"trainer", "worker"}  # what was seen before


def test_another_users_job_shows_what_can_be_read(start_job):
    job = start_job("--workers", "2", "--persistent", "--step-ms", "20")
    truth = job.wait_workers(2)
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "1", "--json", user=NOBODY)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    workers = [p for p in report["processes"] if p["role"] == "worker"]
    assert sorted(p["pid"] for p in workers) == sorted(truth)
    for p in workers:
        assert p["rss_bytes"] > 0 and p["cpu_percent"] is not None and p["uss_bytes"] is None
        assert "permission denied" in p["unavailable"]["uss_bytes"]
        # Linux >= 6.2 gives anyone the fd count as the size of /proc/<pid>/fd; older kernels need the listing
        if os.stat(f"/proc/{os.getpid()}/fd").st_size:
            assert p["num_fds"] > 3 and "num_fds" not in p["unavailable"]
        else:
            assert p["num_fds"] is None and "permission denied" in p["unavailable"]["num_fds"]
    # py-spy may not attach either: one finding says how to fix it, everything else still shows.
    assert report["stacks_status"] == "denied"
    (finding,) = [f for f in report["findings"] if f["id"] == "stacks-unavailable"]
    assert finding["suggestion"] == f"the job runs as root: run dltop as that user, or run `sudo dltop --pid {job.pid}`"


def test_missing_py_spy_is_a_finding_not_a_crash(start_job):
    job = start_job("--workers", "1", "--persistent", "--step-ms", "20")
    job.wait_workers(1)
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "1", "--json", env={"DLTOP_PY_SPY": ""})
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["stacks_status"] == "no-py-spy" and report["loaders"][0]["num_workers"] == 1
    (finding,) = report["findings"]
    assert finding["id"] == "stacks-unavailable" and "pip install py-spy" in finding["suggestion"]

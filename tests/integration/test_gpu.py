"""`dltop snapshot --json` of a real job through a fake pynvml: the GPU the job holds."""

from __future__ import annotations

import json
import os

from tests.support import FAKES, run_dltop


def test_snapshot_json_shows_gpu_of_a_real_job(start_job):
    job = start_job("--workers", "1", "--persistent", "--step-ms", "20")
    job.wait_workers(1)
    env = {"PYTHONPATH": f"{FAKES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "FAKE_NVML_PIDS": str(job.pid)}
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "1", "--json", env=env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["gpu_status"] == "ok"
    (device,) = report["gpus"]
    assert device["util_percent"] == 37 and device["processes"][0]["pid"] == job.pid

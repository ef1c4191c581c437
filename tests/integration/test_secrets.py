"""What leaves the node: a job started with a token on its command line and secrets in its
environment is watched by every front end, and no secret appears in the JSON report, a
recording, the exporter's /metrics or the screen — unless the job's owner asks on their own screen."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from dltop.export.metrics import COMMAND_CHARS
from dltop.record.reader import Recording
from tests.support import ROOT, assert_one_line_error, run_dltop, wait_for

ARGV_TOKEN = "hf_Q8xLm2VbT4nR7pZk3WcY9sDf6HgJ1aEu"
DB_PASSWORD = "pw-Hunter2-Tiger"
ENV_SECRET = "env-Zx8Kq2mP9vR4tY7wB3nL6hJ1"
SECRETS = (ARGV_TOKEN, DB_PASSWORD, ENV_SECRET)


def secret_job(start_job):
    job = start_job("--workers", "1", "--persistent", "--step-ms", "20", f"--hf-token={ARGV_TOKEN}",
                    f"--db-url=postgres://trainer:{DB_PASSWORD}@db.internal/runs",
                    env={"AWS_SECRET_ACCESS_KEY": ENV_SECRET, "HF_TOKEN": ENV_SECRET})  # fmt: skip
    job.wait_workers(1)
    return job


def _command_label(metrics: str, pid: int) -> str:
    """The `command` label of the job's info series: the redacted command line, cut to its length limit
    (a long interpreter path in a clean clone can push the redacted token past the cut)."""
    for family in text_string_to_metric_families(metrics):
        for sample in family.samples:
            if sample.name == "dltop_job_info" and sample.labels.get("job_pid") == str(pid):
                return sample.labels["command"]
    raise AssertionError(f"no dltop_job_info for {pid}")


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret} leaked into {where}"


def test_no_secret_in_the_report_a_recording_or_the_metrics(start_job, tmp_path):
    job = secret_job(start_job)
    report = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "1", "--json")
    assert report.returncode == 0, report.stderr
    assert_no_secret(report.stdout, "the JSON report")
    command = json.loads(report.stdout)["job"]["cmdline"]
    assert "--hf-token=***" in command and "postgres://***@db.internal/runs" in command and "train.py" in command

    recordings = tmp_path / "recordings"
    recordings.mkdir()
    path = recordings / "secret.dltop"
    recorder = subprocess.Popen([sys.executable, "-m", "dltop", "record", "--pid", str(job.pid), "-o", str(path),
                                 "--interval", "0.5"], cwd=ROOT, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    exporter = subprocess.Popen([sys.executable, "-m", "dltop", "exporter", "--listen", "127.0.0.1", "--port", "0",
                                 "--interval", "0.5", "--discover-every", "0.5"], cwd=ROOT, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        port = int(re.search(r":(\d+)/metrics", exporter.stderr.readline()).group(1))

        def scrape() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                return response.read().decode()

        metrics = wait_for(lambda: (lambda text: text if f'pid="{job.pid}"' in text else None)(scrape()), 60,
                           "the job on /metrics")  # fmt: skip
        assert_no_secret(metrics, "/metrics")
        assert _command_label(metrics, job.pid) == command[:COMMAND_CHARS]
        wait_for(lambda: path.exists() and path.stat().st_size > 4096, 30, "frames in the recording")
    finally:
        for proc in (recorder, exporter):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
    raw = b"".join(p.read_bytes() for p in recordings.iterdir())
    assert_no_secret(raw.decode("latin-1"), "the recording's bytes")
    with Recording(path) as recording:
        documents = json.dumps([recording.document(i) for i in range(len(recording))]) + json.dumps(recording.header)
    assert_no_secret(documents, "the recording's frames")
    assert "--hf-token=***" in documents


def test_the_screen_redacts_and_the_owner_may_ask_to_see_it_whole(start_job):
    from dltop.live.loop import open_loop
    from dltop.tui.app import DltopApp
    from dltop.tui.widgets import JobHeader

    job = secret_job(start_job)

    async def header(show_secrets: bool) -> str:
        loop = open_loop(job.pid, show_secrets=show_secrets)
        app = DltopApp(lambda: loop, interval=0.5)
        async with app.run_test(size=(300, 30)) as pilot:
            await pilot.pause(1.5)
            return str(app.query_one(JobHeader).render())

    assert_no_secret(asyncio.run(header(False)), "the screen")
    assert ARGV_TOKEN in asyncio.run(header(True))  # this user runs the job: its own screen may show it whole


def test_show_secrets_is_refused_for_another_users_job(start_job):
    job = start_job("--workers", "1", "--persistent", "--step-ms", "20")
    job.wait_workers(1)
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    result = subprocess.run([*as_nobody, sys.executable, "-m", "dltop", "snapshot", "--pid", str(job.pid),
                             "--show-secrets"], cwd="/", capture_output=True, text=True, timeout=60)  # fmt: skip
    assert_one_line_error(result, "to the user who runs the job only")
    own = run_dltop("snapshot", "--pid", str(job.pid), "--duration", "1", "--json", "--show-secrets")
    assert own.returncode == 0, own.stderr

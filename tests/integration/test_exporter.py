"""`dltop exporter` for real: the deploy/ files checked by promtool, then training jobs, the
exporter and a real Prometheus scraping it every second, queried through its HTTP API.

Prometheus (Debian's `prometheus` package: prometheus and promtool) is a real part of these
tests: where it is missing they fail and say so (.ci/run installs it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Optional

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.prometheus import Prometheus, series, tool
from tests.support import FAKES, NOBODY, ROOT, TRAIN, Job, wait_for, worker_with_id

DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "dltop-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "dltop-dashboard.json"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def test_promtool_accepts_the_scrape_config_and_rules_and_the_alerts_behave():
    promtool = tool("promtool")
    for args in (
        ["check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
        ["check", "rules", str(RULES)],
        [
            "test",
            "rules",
            str(DEPLOY / "prometheus" / "tests" / "dltop-rules.test.yml"),
        ],  # hung, input-bound, straggler
    ):
        result = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr


# -- the real thing: jobs, the exporter, Prometheus ----------------------------------------------


def start_job_for_module(report: Path, *args: str, launcher: Optional[list] = None) -> Job:
    """tests/jobs/train.py in a session of its own (conftest's start_job is per test)."""
    report.mkdir()
    command = [*(launcher or [sys.executable]), str(TRAIN), "--report", str(report), *args]
    with open(report / "stderr.txt", "w") as stderr:
        return Job(subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr), report)


class Exporter:
    """`dltop exporter` on a free port of 127.0.0.1, in a session of its own."""

    def __init__(self, directory: Path, *args: str, user: Optional[int] = None, env: Optional[dict] = None):
        self.log = directory / "exporter-stderr.txt"
        prefix = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] if user is not None else []
        command = [*prefix, sys.executable, "-m", "dltop", "exporter", "--listen", "127.0.0.1", "--port", "0", *args]
        with open(self.log, "w") as stderr:
            self.proc = subprocess.Popen(
                command, cwd=ROOT, start_new_session=True, stderr=stderr, env={**os.environ, **(env or {})}
            )
        found = wait_for(
            lambda: re.search(r"127\.0\.0\.1:(\d+)/metrics", self.log.read_text()), 30, f"the exporter ({self.log})"
        )
        self.port = int(found.group(1))

    def families(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
            return {f.name: f for f in text_string_to_metric_families(response.read().decode())}

    def stop(self) -> Optional[int]:
        """SIGTERM, as systemd and Kubernetes stop it; its exit status (None if it had to be killed)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return None


def deployed_prometheus(directory: Path, target: str) -> Prometheus:
    """A real Prometheus scraping ``target`` with the deploy rules (their ``for:`` shortened to 1 s)."""
    rules = directory / "rules.yml"
    rules.write_text(re.sub(r"(?m)^(\s+for:\s*)\S+$", r"\g<1>1s", RULES.read_text()))
    return Prometheus(directory, [{"job_name": "dltop-test", "static_configs": [{"targets": [target]}]}], (rules,))


@dataclasses.dataclass
class Fleet:
    prometheus: Prometheus
    exporter: Exporter
    hung: Job  # worker 0 deadlocks on a lock inherited across fork
    ranks: Job  # torchrun, two ranks


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    tool("prometheus")
    directory = tmp_path_factory.mktemp("fleet")
    jobs = [
        start_job_for_module(directory / "hung", "--workers", "2", "--hang", "lock", "--hang-at", "8"),
        start_job_for_module(
            directory / "ranks", "--workers", "1", "--persistent", "--step-ms", "20", launcher=TORCHRUN
        ),
    ]
    servers: list = []
    try:
        hung, ranks = jobs
        ranks.wait_workers(2, timeout=120)
        hung.wait_workers(2)
        trainers = [hung.pid, *ranks.trainers()]
        env = {"PYTHONPATH": f"{FAKES}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "FAKE_NVML_PIDS": ",".join(map(str, trainers))}  # fmt: skip
        exporter = Exporter(directory, "--interval", "1", "--discover-every", "1", "--hang-after", "5", env=env)
        servers.append(exporter)
        prometheus = deployed_prometheus(directory, f"127.0.0.1:{exporter.port}")
        servers.append(prometheus)
        yield Fleet(prometheus, exporter, hung, ranks)
    finally:
        for server in servers:
            server.stop()
        for job in jobs:
            job.stop()


def test_prometheus_has_the_trainers_series_with_pid_and_rank_labels(fleet):
    ranks = fleet.ranks.trainers()
    job = f'job_pid="{fleet.ranks.pid}"'

    def trainers() -> dict:
        found = fleet.prometheus.query(f'dltop_process_resident_memory_bytes{{{job}, role="trainer"}}')
        return {r["metric"]["rank"]: r["metric"] for r in found} if len(found) == 2 else {}

    by_rank = wait_for(trainers, 60, "two ranks of the torchrun job in Prometheus")
    assert sorted(by_rank) == ["0", "1"]
    assert sorted(int(m["trainer_pid"]) for m in by_rank.values()) == ranks
    assert {m["world_size"] for m in by_rank.values()} == {"2"} and {m["local_rank"] for m in by_rank.values()} == {
        "0",
        "1",
    }
    assert len({m["run_id"] for m in by_rank.values()}) == 1 and by_rank["0"]["run_id"]
    assert {m["job"] for m in by_rank.values()} == {"dltop-test"}  # Prometheus's own label, not overridden
    # plausible figures: memory of a torch process, fds under their limit, CPU seconds that grow
    for r in fleet.prometheus.query(f"dltop_process_resident_memory_bytes{{{job}}}"):
        assert 20e6 < float(r["value"][1]) < 4e9, r
    for r in fleet.prometheus.query(f"dltop_process_open_fds{{{job}}} / dltop_process_max_fds{{{job}}}"):
        assert 0 < float(r["value"][1]) < 1, r
    wait_for(lambda: fleet.prometheus.query(f'sum(rate(dltop_process_cpu_seconds_total{{{job}}}[10s])) > 0'), 30,
             "the ranks' CPU seconds to grow")  # fmt: skip
    waits = wait_for(lambda: fleet.prometheus.query(f"dltop_trainer_data_wait_ratio{{{job}}}"), 60, "data wait")
    assert all(0 <= float(r["value"][1]) <= 1 for r in waits)
    (workers,) = fleet.prometheus.query(f"sum(dltop_loader_workers{{{job}}})")
    assert float(workers["value"][1]) == 2


def test_a_deadlocked_worker_is_hung_in_prometheus_and_the_alert_fires(fleet):
    trainer = str(fleet.hung.pid)
    stuck = worker_with_id(fleet.hung, 0)
    wait_for(lambda: fleet.prometheus.query(f'dltop_worker_hung{{trainer_pid="{trainer}", worker_id="0"}} == 1'), 90,
             "dltop_worker_hung of worker 0 to be 1")  # fmt: skip
    (other,) = fleet.prometheus.query(f'dltop_worker_hung{{trainer_pid="{trainer}", worker_id="1"}}')
    assert other["value"][1] == "0"  # the idle one is not hung
    (alert,) = wait_for(lambda: fleet.prometheus.firing("DataLoaderWorkerHung", trainer_pid=trainer), 30,
                        "the DataLoaderWorkerHung alert to fire")  # fmt: skip
    assert alert["pid"] == str(stuck) and alert["worker_id"] == "0" and alert["severity"] == "critical"
    wait_for(lambda: fleet.prometheus.firing("TrainingRankInputBound", trainer_pid=trainer), 30, "input-bound alert")
    (finding,) = fleet.prometheus.query(f'dltop_finding{{trainer_pid="{trainer}", id="worker-hung"}}')
    assert finding["metric"]["severity"] == "error" and finding["value"][1] == "1"


def test_every_grafana_panel_returns_data(fleet):
    wait_for(lambda: fleet.prometheus.query(f'dltop_worker_hung{{trainer_pid="{fleet.hung.pid}"}} == 1'), 90, "a hang")
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [(panel["title"], target["expr"]) for panel in dashboard["panels"] for target in panel["targets"]]
    assert len(exprs) >= 10

    def empty() -> list:
        return [
            title
            for title, expr in exprs
            if not fleet.prometheus.query(expr.replace("$instance", ".*").replace("$__rate_interval", "15s"))
        ]

    still_empty = empty()
    if still_empty:  # rates need a few scrapes
        time.sleep(5)
        still_empty = empty()
    assert not still_empty, f"panels without data: {still_empty}"


def test_another_users_job_gives_what_can_be_read_and_the_reason(fleet, tmp_path):
    exporter = Exporter(tmp_path, "--interval", "1", "--discover-every", "1", user=NOBODY)
    try:
        job = str(fleet.hung.pid)

        def seen() -> Optional[dict]:
            """Once py-spy was refused too (its first runs end after a tick or two)."""
            families = exporter.families()
            return families if series(families, "dltop_unavailable_info", job_pid=job, metric="stacks") else None

        families = wait_for(seen, 60, "the job as another user sees it, stacks refused")
    finally:
        assert exporter.stop() == 0
    assert len(series(families, "dltop_process_resident_memory_bytes", job_pid=job, role="worker")) == 2
    assert not series(families, "dltop_process_unique_memory_bytes", job_pid=job)
    reasons = {s.labels["metric"]: s.labels["reason"] for s in series(families, "dltop_unavailable_info", job_pid=job)}
    assert "permission denied" in reasons["dltop_process_unique_memory_bytes"]
    assert "sudo" in reasons["stacks"] or "root" in reasons["stacks"]  # py-spy may not attach: how to fix it


def test_a_job_that_exits_takes_its_series_along(fleet):
    job = str(fleet.hung.pid)
    wait_for(lambda: fleet.prometheus.query(f'{{job_pid="{job}"}}'), 60, "the hung job's series")
    fleet.hung.stop()
    wait_for(lambda: not fleet.prometheus.query(f'{{job_pid="{job}"}}'), 30, "the exited job's series to disappear")
    assert fleet.prometheus.query(f'dltop_trainer_data_wait_ratio{{job_pid="{fleet.ranks.pid}"}}')  # the other stays

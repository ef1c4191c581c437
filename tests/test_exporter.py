"""`dltop exporter`: the exposition parsed (hand-built Snapshots), Kubernetes placement, bad
input, the deploy/ files checked by promtool, and then the real thing: training jobs, the
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
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dltop.collect.host.gpu import GpuSampler
from dltop.collect.processes import placement
from dltop.export.metrics import NodeCollector
from dltop.export.server import registry_for
from dltop.export.state import ExporterState
from dltop.live import node
from dltop.live.node import NodeTick
from dltop.model import ExitedWorker, Finding, GpuProcess, Placement
from tests.prometheus import Prometheus, tool
from tests.support import ROOT, TRAIN, Job, assert_one_line_error, run_dltop, wait_for, worker_with_id
from tests.windows import bound_window

DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "dltop-rules.yml"
DASHBOARD = DEPLOY / "grafana" / "dltop-dashboard.json"
FAKES = ROOT / "tests" / "fakes"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
NOBODY = 65534
PLACE = Placement(rank=3, local_rank=1, world_size=8, run_id="run-7", namespace="ml", pod="train-3", container="c0ffee")


# -- the exposition, from hand-built Snapshots ---------------------------------------------------


def job_snapshot(**changes):
    """One job (trainer 1 at rank 3 of run-7, workers 10 and 11, a GPU it holds), 1 s after the last."""
    (snap,) = bound_window(80.0, gpu_util=40.0, ticks=1)
    processes = [
        dataclasses.replace(p, placement=PLACE, rank=PLACE.rank, rss_bytes=300 << 20, num_fds=20, fd_limit=1024)
        if p.role == "trainer"
        else dataclasses.replace(p, rss_bytes=100 << 20, num_fds=12, fd_limit=1024, read_bytes_per_s=1e6)
        for p in snap.processes
    ]
    gpu = dataclasses.replace(
        snap.gpus[0],
        uuid="GPU-1234",
        minor_number=0,
        pci_bus_id="00000000:18:00.0",
        processes=[GpuProcess(1, 1 << 30, 50.0)],
    )
    return dataclasses.replace(snap, processes=processes, gpus=[gpu], **changes)


def scrape(state: ExporterState) -> dict:
    """{family name: family} as prometheus_client's parser reads the exposition."""
    text = generate_latest(registry_for(NodeCollector(state, "node-7"))).decode()
    return {family.name: family for family in text_string_to_metric_families(text)}


def series(families: dict, name: str, **labels) -> list:
    return [s for s in families[name].samples if all(s.labels.get(k) == v for k, v in labels.items())]


def fed(*ticks: NodeTick) -> ExporterState:
    state = ExporterState()
    for tick in ticks:
        state.update(tick)
    return state


def test_exposition_names_labels_and_counters():
    snap = job_snapshot()
    families = scrape(fed(NodeTick(snapshots=[snap]), NodeTick(snapshots=[snap])))
    types = {name: family.type for name, family in families.items()}
    assert types["dltop_trainer_data_wait_ratio"] == "gauge" and types["dltop_process_cpu_seconds"] == "counter"
    assert types["dltop_loader_worker_deaths"] == "counter" and types["dltop_trainer_data_wait_seconds"] == "counter"
    (wait,) = series(families, "dltop_trainer_data_wait_ratio")
    assert wait.value == pytest.approx(0.8)
    assert wait.labels == {
        "job_pid": "1", "trainer_pid": "1", "rank": "3", "local_rank": "1", "world_size": "8", "run_id": "run-7",
        "namespace": "ml", "pod": "train-3", "container": "c0ffee",
    }  # fmt: skip
    (waited,) = series(families, "dltop_trainer_data_wait_seconds")
    assert waited.name == "dltop_trainer_data_wait_seconds_total"
    assert waited.value == pytest.approx(1.6)  # 80% of 2 ticks of 1 s
    # workers by worker_id (their place by pid until the collector reads torch's worker_id), never by pid
    workers = series(families, "dltop_process_cpu_seconds", role="worker")
    assert sorted(s.labels["worker_id"] for s in workers) == ["0", "1"]
    assert all("pid" not in s.labels and s.value == pytest.approx(1.8) for s in workers)  # 90% of a core, 2 s
    assert {s.labels["pid"] for s in series(families, "dltop_process_info", role="worker")} == {"10", "11"}
    assert {s.value for s in series(families, "dltop_process_read_bytes", role="worker")} == {2e6}
    assert series(families, "dltop_loader_workers", loader="Images")[0].value == 2
    (gpu,) = series(families, "dltop_gpu_utilization_ratio")
    assert gpu.value == pytest.approx(0.4)
    assert gpu.labels == {"gpu": "0", "UUID": "GPU-1234", "pci_bus_id": "00000000:18:00.0", "device": "nvidia0",
                          "modelName": "H200", "Hostname": "node-7"}  # fmt: skip
    (held,) = series(families, "dltop_trainer_gpu_memory_bytes", UUID="GPU-1234", rank="3")
    assert held.value == 1 << 30
    every = [s for family in families.values() for s in family.samples]
    assert not [s for s in every if {"job", "instance"} & set(s.labels)]  # Prometheus adds those
    assert series(families, "dltop_jobs")[0].value == 1


def test_a_respawned_worker_continues_its_series():
    first = job_snapshot()
    replaced = [dataclasses.replace(p, pid=p.pid + 10) if p.role == "worker" else p for p in first.processes]
    loader = dataclasses.replace(first.loaders[0], worker_pids=[20, 21], worker_respawns=2)
    second = dataclasses.replace(first, processes=replaced, loaders=[loader])
    families = scrape(fed(NodeTick(snapshots=[first]), NodeTick(snapshots=[second])))
    assert [s.value for s in series(families, "dltop_process_cpu_seconds", worker_id="0")] == [pytest.approx(1.8)]
    assert {s.labels["pid"] for s in series(families, "dltop_process_info", role="worker")} == {"20", "21"}
    assert series(families, "dltop_loader_worker_respawns")[0].value == 2


def test_worker_ids_are_torchs_and_never_collide_with_a_guess():
    snap = job_snapshot()
    # worker 11 was read as torch's worker 0 (pids out of worker_id order), 10 not read yet
    processes = [dataclasses.replace(p, worker_id=0) if p.pid == 11 else p for p in snap.processes]
    families = scrape(fed(NodeTick(snapshots=[dataclasses.replace(snap, processes=processes)])))
    ids = {s.labels["pid"]: s.labels["worker_id"] for s in series(families, "dltop_process_info", role="worker")}
    assert ids == {"11": "0", "10": "1"}


def test_findings_are_0_1_series_of_their_trainer_and_deaths_count_once():
    hung = Finding("worker-hung", "error", "Worker 10 hung", "", [10], {}, "")
    bound = Finding("input-bound", "warning", "waits", "", [1], {}, "")
    shm = Finding("shm-low", "warning", "shm", "", [], {}, "")
    died = ExitedWorker(12, 1, 5.0, "2026-01-01T00:00:09+00:00", exit_code=-9, cause="died")
    loader = dataclasses.replace(job_snapshot().loaders[0], workers_exited=[died])
    raised = job_snapshot(findings=[hung, bound, shm], loaders=[loader])
    state = fed(NodeTick(snapshots=[raised]), NodeTick(snapshots=[raised]))
    families = scrape(state)
    active = {
        (s.labels["id"], s.labels["severity"], s.labels["trainer_pid"]): s.value
        for s in families["dltop_finding"].samples
    }
    assert active == {
        ("worker-hung", "error", "1"): 1,
        ("input-bound", "warning", "1"): 1,
        ("shm-low", "warning", ""): 1,
    }
    assert [s.value for s in series(families, "dltop_worker_hung", worker_id="0")] == [1]
    assert [s.value for s in series(families, "dltop_worker_hung", worker_id="1")] == [0]
    assert series(families, "dltop_trainer_hung_workers")[0].value == 1
    assert series(families, "dltop_loader_worker_deaths")[0].value == 1  # seen on two ticks, counted once
    state.update(NodeTick(snapshots=[job_snapshot(loaders=[loader])]))
    families = scrape(state)
    assert {s.labels["id"]: s.value for s in families["dltop_finding"].samples} == {
        "worker-hung": 0, "input-bound": 0, "shm-low": 0,
    }  # fmt: skip
    assert series(families, "dltop_trainer_hung_workers")[0].value == 0


def test_no_job_is_zero_jobs_and_an_exited_job_vanishes():
    families = scrape(ExporterState())
    assert series(families, "dltop_jobs")[0].value == 0 and series(families, "dltop_build_info")
    snap = job_snapshot()
    exited = dataclasses.replace(snap, job=dataclasses.replace(snap.job, state="exited"))
    families = scrape(fed(NodeTick(snapshots=[snap]), NodeTick(snapshots=[exited], ended=[snap.job.pid])))
    assert series(families, "dltop_jobs")[0].value == 0
    assert not [s for f in families.values() for s in f.samples if s.labels.get("job_pid")]
    assert not families["dltop_gpu_utilization_ratio"].samples  # GPUs are seen through the jobs' Snapshots


def test_another_users_job_shows_what_can_be_read_and_why_not_the_rest():
    reason = "permission denied (process of alice; run dltop as that user or root)"
    snap = job_snapshot(stacks_status="denied", stacks_fix="run dltop as alice, or as root")
    processes = [
        dataclasses.replace(p, uss_bytes=None, num_fds=None, unavailable={"uss_bytes": reason, "num_fds": reason})
        for p in snap.processes
    ]
    families = scrape(fed(NodeTick(snapshots=[dataclasses.replace(snap, processes=processes)])))
    assert len(series(families, "dltop_process_resident_memory_bytes")) == 3
    assert not families["dltop_process_unique_memory_bytes"].samples
    assert {(s.labels["metric"], s.labels["reason"]) for s in families["dltop_unavailable_info"].samples} == {
        ("dltop_process_unique_memory_bytes", reason),
        ("dltop_process_open_fds", reason),
        ("stacks", "run dltop as alice, or as root"),
    }


class FakeLoop:
    """A LiveLoop stand-in: its job runs for ``ticks`` steps, then exits."""

    def __init__(self, pid: int, ticks: int) -> None:
        self.pid, self.share = pid, 1.0
        self.snap, self.ticks, self.closed, self.latest = job_snapshot(), ticks, False, None

    def members(self) -> set:
        return {self.pid}

    def share_budget(self, share: float) -> None:
        self.share = share

    def step(self):
        self.ticks -= 1
        state = "running" if self.ticks > 0 else "exited"
        self.latest = dataclasses.replace(self.snap, job=dataclasses.replace(self.snap.job, state=state))
        return self.latest

    def close(self) -> None:
        self.closed = True


def test_node_watcher_splits_the_stack_budget_and_drops_exited_jobs(monkeypatch):
    trees = [SimpleNamespace(root_pid=100), SimpleNamespace(root_pid=200)]
    monkeypatch.setattr(
        node, "find_jobs", lambda holders, discovery, skip: [t for t in trees if t.root_pid not in skip]
    )
    loops = {100: FakeLoop(100, ticks=1), 200: FakeLoop(200, ticks=5)}
    watcher = node.NodeWatcher(gpu=GpuSampler(module_name="dltop_tests_no_such_module"), loop_factory=loops.get)
    first = watcher.step()
    assert first.started == [100, 200] and first.ended == [100] and loops[100].closed
    assert loops[200].share == 0.5  # two jobs: half a live view's stack budget each
    second = watcher.step()
    assert [s.job.state for s in second.snapshots] == ["running"] and not second.ended
    assert loops[200].share == 1.0
    state = fed(first, second)
    assert series(scrape(state), "dltop_jobs")[0].value == 1


def test_the_node_watcher_samples_stacks_on_the_node_budget(monkeypatch):
    """The exporter's stack sampling holds one budget as trainers multiply (budget.NODE); a live
    view of one job keeps its own floors (budget.LIVE_VIEW)."""
    from dltop.collect import collector
    from dltop.collect.stacks.budget import LIVE_VIEW, NODE
    from dltop.collect.stacks.sampler import StackSampler

    opened = []

    class FakeCollector:
        def __init__(self, pid: int, **options) -> None:
            self.stacks = StackSampler(pid, py_spy="py-spy", austin="")
            self.settings = options["settings"]
            opened.append(self)

    monkeypatch.setattr(collector, "Collector", FakeCollector)
    watcher = node.NodeWatcher(gpu=GpuSampler(module_name="dltop_tests_no_such_module"))
    watcher._open(100)
    live = FakeCollector(200, settings=None)
    assert (opened[0].stacks.watcher, live.stacks.watcher) == (NODE, LIVE_VIEW)
    for made in opened:
        made.stacks.close()


def test_a_job_whose_stack_sampling_breaks_counts_as_one_failed_collection(monkeypatch):
    monkeypatch.setattr(node, "find_jobs", lambda holders, discovery, skip: [SimpleNamespace(root_pid=300)])
    loop = FakeLoop(300, ticks=10)
    watcher = node.NodeWatcher(gpu=GpuSampler(module_name="dltop_tests_no_such_module"), loop_factory={300: loop}.get)
    statuses = ["ok", "error: py-spy failed", "error: py-spy exited 1", "ok", "denied"]
    counted = []
    for status in statuses:
        loop.snap = dataclasses.replace(loop.snap, stacks_status=status)
        counted.append(dict(watcher.step().failures))
    # once a break, whatever its words say meanwhile
    assert counted == [{}, {300: "stacks: error: py-spy failed"}, {}, {}, {300: "stacks: denied"}]


# -- where a trainer runs: torchrun's variables and a Kubernetes pod ------------------------------

POD_UID = "pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0"
CONTAINER = "4f1c2b9a8e7d6c5b4a39281716151413121110090f8e7d6c5b4a3928171615aa"


@pytest.mark.parametrize(
    "cgroup, in_pod, container",
    [
        (
            f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-{POD_UID}.slice/cri-containerd-{CONTAINER}.scope\n",
            True,
            CONTAINER[:12],
        ),  # noqa: E501
        (
            f"12:memory:/kubepods/besteffort/{POD_UID}/{CONTAINER}\n11:cpu:/kubepods/besteffort/{POD_UID}/{CONTAINER}\n",
            True,
            CONTAINER[:12],
        ),  # noqa: E501
        (f"0::/../../kubepods-pod{POD_UID}.slice/crio-{CONTAINER}.scope\n", True, CONTAINER[:12]),  # another cgroup ns
        (f"0::/system.slice/docker-{CONTAINER}.scope\n", False, CONTAINER[:12]),
        ("0::/user.slice/user-1000.slice/session-4.scope\n", False, None),
    ],
)
def test_cgroup_path_shows_pod_and_container(cgroup, in_pod, container):
    assert placement.parse_cgroup(cgroup) == (in_pod, container)


def test_placement_reads_pod_name_and_namespace_from_outside(tmp_path, monkeypatch):
    proc = tmp_path / "4242"
    (proc / "root" / placement.NAMESPACE_FILE).parent.mkdir(parents=True)
    (proc / "root" / placement.NAMESPACE_FILE).write_text("ml-team\n")
    (proc / "cgroup").write_text(f"0::/kubepods/burstable/{POD_UID}/{CONTAINER}\n")
    (proc / "environ").write_bytes(b"PATH=/usr/bin\0HOSTNAME=trainer-0\0RANK=1\0")
    monkeypatch.setattr(placement.procfs, "PROC", tmp_path)
    env = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "abc"}
    got = placement.PlacementReader().read(4242, 77, env)
    assert got == Placement(1, 1, 2, "abc", namespace="ml-team", pod="trainer-0", container=CONTAINER[:12])
    (proc / "cgroup").write_text("0::/user.slice/session-4.scope\n")  # not a pod: HOSTNAME is the machine's
    assert placement.PlacementReader().read(4242, 77, env) == Placement(1, 1, 2, "abc")


# -- bad input and the deploy files ---------------------------------------------------------------


def test_port_in_use_and_unbindable_address_are_one_line_exit_2():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_dltop("exporter", "--listen", "127.0.0.1", "--port", str(port))
    assert_one_line_error(result, f"cannot listen on 127.0.0.1:{port}")
    assert_one_line_error(run_dltop("exporter", "--listen", "192.0.2.1", "--port", "0"), "cannot listen on 192.0.2.1")
    assert run_dltop("exporter", "--interval", "0").returncode == 2


def test_a_privileged_port_as_an_ordinary_user_says_why():
    """The tests run as root, which may bind port 1: the exporter runs as nobody, as an ordinary user would."""
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []
    result = subprocess.run([*as_nobody, sys.executable, "-m", "dltop", "exporter", "--listen", "127.0.0.1",
                             "--port", "1"], cwd="/", capture_output=True, text=True, timeout=60)  # fmt: skip
    assert_one_line_error(result, "ports below 1024 need root or CAP_NET_BIND_SERVICE")


def test_exporter_imports_neither_torch_nor_textual_and_help_skips_prometheus_client():
    code = (
        "import sys, dltop.cli; dltop.cli.build_parser(); help_loads = 'prometheus_client' in sys.modules; "
        "import dltop.live.node, dltop.export.metrics, dltop.export.state, dltop.export.server; "
        "print(help_loads, sorted(m for m in ('torch', 'textual') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert result.stdout.strip() == "False []"


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

"""`dltop exporter`: the exposition parsed (hand-built Snapshots), the node watcher on fakes,
Kubernetes placement, bad input and import hygiene."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from types import SimpleNamespace

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
from dltop.model import ExitedWorker, Finding, GpuProcess, Placement, snapshot_from_dict
from tests.prometheus import series
from tests.support import ROOT, assert_one_line_error, run_dltop
from tests.windows import bound_window

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


def test_a_thread_pipelines_loader_says_its_pipeline_and_counts_its_threads_by_kind_and_activity():
    snap = snapshot_from_dict(json.loads((ROOT / "tests/fixtures/snapshots/spdl-threads.json").read_text()))
    families = scrape(fed(NodeTick(snapshots=[snap])))
    (info,) = series(families, "dltop_loader_info")
    assert (info.labels["pipeline"], info.labels["start_method"], info.labels["num_workers"]) == ("spdl", "thread", "4")
    counts = {(s.labels["kind"], s.labels["activity"]): s.value for s in series(families, "dltop_loader_threads")}
    assert len(counts) == 10 and sum(counts.values()) == 6  # every kind and activity, 0 included
    assert counts["worker", "fetching"] == 2 and counts["worker", "idle"] == 2 and counts["feeder", "idle"] == 2
    assert counts["worker", "stuck"] == 0
    assert not [s for f in families.values() for s in f.samples if "tid" in s.labels or s.labels.get("pid") == "19279"]
    families = scrape(fed(NodeTick(snapshots=[job_snapshot()])))  # a DataLoader read before its pipeline was named
    assert series(families, "dltop_loader_info")[0].labels["pipeline"] == ""
    assert not families["dltop_loader_threads"].samples


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

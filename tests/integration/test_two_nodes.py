"""A run across two "nodes" stopped by one rank, named by one alert rule over both nodes' exporters.

Each node is a PID namespace of its own (as a pod or a machine is) with one torchrun agent of an
``--nnodes 2 --nproc-per-node 2`` run over 127.0.0.1, and its own `dltop exporter` inside it; a
real Prometheus scrapes both with the deploy rules (their ``for:`` shortened to 1 s and their
minute of waiting to 8 s). Rank 2 (node b) deadlocks on a lock of its own code: ranks 0, 1 (node a)
and 3 (node b) wait for it in DDP's all-reduce. No node sees the whole run; the rule joins them.
"""

from __future__ import annotations

import json
import re
import sys
import time

from tests.namespaces import Namespace
from tests.prometheus import Prometheus, free_port, tool
from tests.support import ROOT, wait_for

STOPPING_RUN = ROOT / "tests/jobs/stopping_run.py"
RULES = ROOT / "deploy/prometheus/dltop-rules.yml"
WAITED_S = 8  # the rules' minute of waiting, for a test


def test_the_rank_that_stopped_a_two_node_run_is_named_by_the_alert(tmp_path):
    tool("prometheus")
    report, master = tmp_path / "run", free_port()
    report.mkdir()
    nodes, ports = {}, {}
    try:
        for node_rank, name in enumerate(("a", "b")):
            torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node_rank),
                        "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(master),
                        str(STOPPING_RUN), "--report", str(report), "--stop", "lock", "--stop-rank", "2",
                        "--stop-after", "300"]  # fmt: skip
            nodes[name] = Namespace(torchrun, tmp_path / f"node-{name}.txt")
            ports[name] = free_port()
            nodes[name].start_inside(
                "exporter", "--listen", "127.0.0.1", "--port", str(ports[name]), "--interval", "1",
                "--discover-every", "1", "--hang-after", "4", log=tmp_path / f"exporter-{name}.txt",
            )  # fmt: skip
        rules = tmp_path / "rules.yml"
        text = re.sub(r"(?m)^(\s+for:\s*)\S+$", r"\g<1>1s", RULES.read_text())
        rules.write_text(text.replace("> 60", f"> {WAITED_S}"))
        targets = [{"targets": [f"127.0.0.1:{ports[n]}"], "labels": {"node": n}} for n in nodes]
        prometheus = Prometheus(tmp_path, [{"job_name": "dltop", "static_configs": targets}], (rules,))
        try:
            # every rank of the run is seen, moving, and nothing fires
            wait_for(lambda: prometheus.value("count(dltop_rank_still_seconds)") == "4", 120, "the 4 ranks' series")
            stop = report / "stop.json"
            assert not stop.exists() and not prometheus.firing("TrainingRunStopped"), "the run had stopped already"
            stopped_at = json.loads(wait_for(lambda: stop.exists() and stop.read_text(), 120, "rank 2 to stop"))["at"]
            (alert,) = wait_for(lambda: prometheus.firing("TrainingRunStopped"), 120, "TrainingRunStopped")
            after_s = time.time() - stopped_at
            assert (alert["rank"], alert["node"], alert["where"]) == ("2", "b", "blocked"), alert
            assert not prometheus.firing("TrainingRunDesynced") and not prometheus.firing("TrainingRunRanksMissing")
            # --hang-after, the rules' wait, scrapes and evaluation every second: with room for a busy CI
            assert after_s < 4 + WAITED_S + 45, after_s
            print(f"TrainingRunStopped named rank 2 on node b {after_s:.1f} s after it stopped")
        finally:
            prometheus.stop()
    finally:
        for node in nodes.values():
            node.stop()

"""dltop bench's real sweeps with real DataLoaders on workloads of known cost (short trials:
seconds each), its one-line errors, Ctrl-C, and a finding's suggestion live-tested."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.support import ROOT, assert_one_line_error, group_alive, run_dltop, wait_for
from tests.windows import input_bound_finding

FAST = ("--warmup-s", "0.3", "--chunk-s", "0.5", "--chunks", "3")


# -- real sweeps ----------------------------------------------------------------------------------


def bench(tmp_path, *args, timeout=240):
    out = tmp_path / "bench.json"
    result = run_dltop("bench", *FAST, "--json", str(out), *args, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return json.loads(out.read_text()), result


def test_known_per_sample_cost_gives_the_throughput_it_implies(tmp_path):
    """10 ms of waiting per sample, 4 per batch, no step: 0 and 1 workers load 100 samples/s, 2 load 200."""
    doc, result = bench(tmp_path, "--workload", "twin:io_ms=10,sample_kb=4", "--batch-size", "4", "--step-ms", "0",
                        "--compare", "num_workers=0", "num_workers=1", "num_workers=2", "--rounds", "1")  # fmt: skip
    rates = {t["label"]: t["samples_per_s"] for t in doc["trials"]}
    assert 70 <= rates["num_workers=0"] <= 105 and 70 <= rates["num_workers=1"] <= 105, rates
    assert 140 <= rates["num_workers=2"] <= 210, rates
    assert doc["schema"] == "dltop.bench/1" and doc["device"]["kind"] == "cpu"
    assert [c["label"] for c in doc["compare"]] == ["num_workers=0", "num_workers=1", "num_workers=2"]
    assert 1.5 <= doc["compare"][2]["ratio"] <= 2.5
    assert "compared with num_workers=0" in result.stdout


def test_cpu_cost_sets_the_single_process_rate(tmp_path):
    """5 ms of CPU per sample in the main process: the ceiling knows the cost, and the rate is what
    that cost allows (about 200 samples/s on a free core; less when other work shares the CPUs,
    never more)."""
    doc, _ = bench(tmp_path, "--workload", "synthetic-cpu:cpu_ms=5,sample_kb=4", "--batch-size", "4",
                   "--step-ms", "0", "--compare", "num_workers=0", "--rounds", "1")  # fmt: skip
    (trial,) = doc["trials"]
    assert 4 <= doc["ceiling"]["sample_cpu_ms"] <= 7 and doc["ceiling"]["bound"] == "cpu"
    allowed = 1000 / doc["ceiling"]["sample_cpu_ms"]
    assert 0.4 * allowed <= trial["samples_per_s"] <= 1.1 * allowed, (trial["samples_per_s"], allowed)


def test_a_sweep_recommends_a_config_and_draws_the_curve(tmp_path):
    """I/O-bound samples (20 ms wait, 4 per batch) and a 10 ms step: more workers help up to ~8."""
    doc, result = bench(tmp_path, "--workload", "twin:io_ms=20,sample_kb=4", "--batch-size", "4", "--step-ms", "10",
                        "--max-workers", "8", "--budget-s", "60")  # fmt: skip
    workers = {t["config"]["num_workers"] for t in doc["trials"]}
    assert {0, 1, 2, 4} <= workers
    assert doc["best"] and doc["recommended"].startswith("num_workers=")
    assert int(doc["recommended"].split(",")[0].split("=")[1]) >= 4
    assert (
        "samples/s by num_workers" in result.stdout
        and "DataLoader(dataset, batch_size=4, num_workers=" in result.stdout
    )
    for trial in doc["trials"]:
        assert trial["first_batch_s"] > 0 and trial["epoch_start_s"] is not None and trial["low"] <= trial["high"]
    assert any(t["workers_peak_rss_bytes"] > 0 for t in doc["trials"])


def test_user_datasets_with_dict_batches_run(tmp_path):
    doc, _ = bench(tmp_path, "--dataset", "tests.fixtures.bench_factories:dict_batches", "--batch-size", "8",
                   "--step-ms", "1", "--compare", "num_workers=1", "--rounds", "1")  # fmt: skip
    assert doc["trials"][0]["samples_per_s"] > 0 and doc["workload"]["name"].endswith("dict_batches")


@pytest.mark.parametrize(
    "target, fragment",
    [("tests.fixtures.no_such_module:make", "cannot import"), ("tests.fixtures.bench_factories:nope", "has no nope"),
     ("tests.fixtures.bench_factories:wrong_type", "returned list"),
     ("tests.fixtures.bench_factories:raises", "RuntimeError: no such bucket"), ("no-colon", "expected pkg.module"),
     ("json:__name__", "json.__name__ is a str, not a function")],
)  # fmt: skip
def test_factory_errors_are_one_line(target, fragment):
    assert_one_line_error(run_dltop("bench", "--dataset", target), fragment)


def test_bad_workload_and_config_are_one_line():
    assert_one_line_error(run_dltop("bench", "--workload", "imagenet"), "unknown workload")
    assert_one_line_error(run_dltop("bench", "--compare", "num_workers=x"), "bad config")


def _default_sigint() -> None:
    """A terminal's Ctrl-C reaches a process that handles SIGINT; a test run from a background
    shell (``nohup ... &``) would hand down SIGINT ignored, and Python keeps it ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _has_workers(pid: int) -> bool:
    try:
        return any(c.name().startswith("pt_data_worker") for c in psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return False


def test_ctrl_c_stops_cleanly(tmp_path):
    """SIGINT to the whole group, as a terminal's Ctrl-C: partial results, no worker left, temp files gone."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dltop", "bench", "--workload", "synthetic-io:read_kb=64,io_ms=5", "--chunk-s", "2",
         "--batch-size", "4", "--max-workers", "4"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=_default_sigint,
    )  # fmt: skip
    try:
        # into the sweep: a trial with workers under way (on a warm page cache a sleep-timed wait
        # could outlast the whole search, which then ended by itself before the signal)
        wait_for(lambda: list(tmp_path.glob("dltop-bench-*")) and _has_workers(proc.pid), 90, "a trial with workers")
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "stopped early: interrupted" in out and "samples/s" in out and "Traceback" not in err
        assert not group_alive(proc.pid)
        assert not list(Path(tmp_path).glob("dltop-bench-*"))
    finally:
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_suggestion_is_live_tested_by_its_bench_args(tmp_path):
    finding = input_bound_finding()
    doc, result = bench(tmp_path, *finding.bench_args, "--rounds", "1")
    (current, suggested) = doc["compare"]
    assert suggested["ratio"] >= 2.0, doc["compare"]  # 2 -> 9 workers on an I/O-bound twin
    assert f"num_workers={finding.evidence['suggested_workers']}" in result.stdout

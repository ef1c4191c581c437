"""dltop bench: config parsing, the search on a known curve, and real sweeps with real DataLoaders
on workloads of known cost (short trials: seconds each)."""

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

from dltop.bench.config import LoaderConfig, parse_config
from dltop.bench.results import TrialResult
from dltop.bench.search import Search, compare
from dltop.errors import DltopError
from tests.support import ROOT, assert_one_line_error, group_alive, run_dltop, wait_for

FAST = ("--warmup-s", "0.3", "--chunk-s", "0.5", "--chunks", "3")


# -- configs ------------------------------------------------------------------------------------


def test_configs_parse_and_print_as_code():
    config = parse_config("num_workers=6, prefetch_factor=4,persistent_workers=True,pin_memory=true")
    assert config == LoaderConfig(6, 4, True, True)
    assert config.label() == "num_workers=6,prefetch_factor=4,pin_memory=True,persistent_workers=True"
    assert config.code("train_set", 64) == (
        "DataLoader(train_set, batch_size=64, num_workers=6, pin_memory=True, persistent_workers=True,"
        " prefetch_factor=4)"
    )
    # without workers torch rejects these settings: they are not passed, nor shown
    assert parse_config("num_workers=0,persistent_workers=True").loader_kwargs() == {
        "num_workers": 0,
        "pin_memory": False,
    }
    assert parse_config("num_workers=0,persistent_workers=True").label() == "num_workers=0"


@pytest.mark.parametrize("text", ["workers=4", "num_workers=four", "pin_memory=maybe", "start_method=thread",
                                  "num_workers", "prefetch_factor=0"])  # fmt: skip
def test_bad_configs_are_one_line_errors(text):
    with pytest.raises(DltopError):
        parse_config(text)


# -- the search, on a known curve ---------------------------------------------------------------------


class Curve:
    """samples/s = min(100 * n, 450) + 50, with a 2% chunk spread; counts the trials."""

    def __init__(self):
        self.measured = []

    def __call__(self, config):
        self.measured.append(config)
        rate = min(100 * config.num_workers, 450) + 50
        return TrialResult(config, rate, rate * 0.99, rate * 1.01, 0.1, 0.1, 10.0, 100, chunk_rates=[rate] * 3)


def test_search_finds_the_knee_with_fewer_trials_than_the_grid():
    curve = Curve()
    result = Search(curve, LoaderConfig(persistent_workers=True), max_workers=16, budget_s=1e9).run()
    assert result.best.samples_per_s == 500
    assert result.recommended.config.num_workers == 5  # the fewest that reach the plateau
    sweep = {c.num_workers for c in curve.measured}
    assert len(sweep) < 17 and {0, 1, 2, 4, 8} <= sweep and 5 in sweep


def test_search_stops_at_its_budget_with_partial_results():
    clock = iter(range(100))
    result = Search(Curve(), LoaderConfig(), max_workers=16, budget_s=3, clock=lambda: next(clock)).run()
    assert result.stopped == "time budget spent" and 1 <= len(result.trials) <= 3


def test_compare_alternates_and_reports_ratios():
    curve = Curve()
    comparison = compare(curve, [LoaderConfig(num_workers=1), LoaderConfig(num_workers=3)], rounds=3)
    assert [c.num_workers for c in curve.measured] == [1, 3, 3, 1, 1, 3]
    assert comparison.ratios[1] == [350 / 150] * 3 and comparison.ratios[0] == [1.0] * 3


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


def test_without_torch_bench_says_what_to_install():
    """The monitor is rightly installed without torch (a wheel, pipx): bench then says so in one line."""
    code = "import sys; sys.modules['torch'] = None; from dltop.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run([sys.executable, "-c", code, "bench", "--workload", "synthetic-cpu"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert_one_line_error(result, "pip install 'dltop[bench]'")


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


# -- live-testing a finding's suggestion -------------------------------------------------------------


def input_bound_finding():
    from dltop.diagnose import diagnose
    from tests.windows import bound_window

    # 2 workers fetching all the time on 5% CPU (waiting on storage), the trainer waits 80%
    (finding,) = [f for f in diagnose(bound_window(80.0, cpu=5.0)) if f.id == "input-bound"]
    return finding


def test_bench_args_are_valid_bench_arguments():
    from dltop.cli import build_parser

    finding = input_bound_finding()
    args = build_parser().parse_args(["bench", *finding.bench_args])
    current, suggested = (parse_config(c) for c in args.compare)
    # the model's 11, as the preferred count its noise allows (10: two reports of one job agree)
    assert finding.evidence["workers_needed"] == 11
    assert current.num_workers == 2 and suggested.num_workers == finding.evidence["suggested_workers"] == 10
    # per batch: the trainer's 20 ms is 20% of a 100 ms period; 2 workers busy all of it = 200 ms of
    # worker time per batch, 5% of it CPU
    assert args.workload == "twin:cpu_ms=10,io_ms=190,sample_kb=4" and args.batch_size == 1


def test_a_suggestion_is_live_tested_by_its_bench_args(tmp_path):
    finding = input_bound_finding()
    doc, result = bench(tmp_path, *finding.bench_args, "--rounds", "1")
    (current, suggested) = doc["compare"]
    assert suggested["ratio"] >= 2.0, doc["compare"]  # 2 -> 10 workers on an I/O-bound twin
    assert "num_workers=10" in result.stdout

"""dltop bench: config parsing, the search on a known curve, the comparison, the one-line error
without torch, a finding's bench arguments; and short real trials of the user's own pipelines
(torchdata.nodes, SPDL, a prefetcher) with their one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from dltop import install_hint
from dltop.bench.config import LoaderConfig, PipelineConfig, parse_config
from dltop.bench.results import TrialResult
from dltop.bench.search import Search, compare
from dltop.cli import main
from dltop.errors import DltopError
from tests.support import ROOT, assert_one_line_error
from tests.windows import bound_window, input_bound_finding

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


def test_without_torch_bench_says_what_to_install():
    """The monitor is rightly installed without torch (a wheel, pipx): bench then says so in one line."""
    code = "import sys; sys.modules['torch'] = None; from dltop.cli import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run([sys.executable, "-c", code, "bench", "--workload", "synthetic-cpu"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert_one_line_error(result, install_hint("bench"))


# -- live-testing a finding's suggestion -------------------------------------------------------------


def test_bench_args_are_valid_bench_arguments():
    from dltop.cli import build_parser

    finding = input_bound_finding()
    args = build_parser().parse_args(["bench", *finding.bench_args])
    current, suggested = (parse_config(c) for c in args.compare)
    # the model's 9: the fewest within the error of its best pace (5x at an 80% wait, ±4 points)
    assert finding.evidence["workers_needed"] == 9
    assert current.num_workers == 2 and suggested.num_workers == finding.evidence["suggested_workers"] == 9
    # per batch: the trainer's 20 ms is 20% of a 100 ms period; 2 workers busy all of it = 200 ms of
    # worker time per batch, 5% of it CPU
    assert args.workload == "twin:cpu_ms=10,io_ms=190,sample_kb=4" and args.batch_size == 1
    # the trainer kept a whole core busy over the window, 5 while it was not waiting: its step computes
    assert (args.step_ms, args.step_kind, args.step_threads, args.step_cpu_ms) == (20, "cpu", 5, 0)


def test_a_twin_of_a_waiting_trainer_spends_its_own_cpu_in_the_step():
    """A GPU job's trainer waits in its step, but receiving a batch and the loop's Python take its
    CPU: the twin's step spends the same share of its 20 ms, which the workers cannot have."""
    from dltop.cli import build_parser
    from dltop.diagnose.figures import WorkerFigures
    from dltop.diagnose.twin import bench_args

    (loader,) = bound_window(50.0)[0].loaders
    figures = WorkerFigures(busy=1.0, cpu=0.5, cpu_wait=0.0, memory=0.0)

    def step_of(trainer_cpu: float) -> tuple:
        args = build_parser().parse_args(["bench", *bench_args(loader, figures, 0.5, trainer_cpu, num_workers=4)])
        return args.step_ms, args.step_kind, args.step_threads, args.step_cpu_ms

    assert step_of(0.1) == (20, "sleep", 1, 4.0)  # 10% of a core over the window: 20% of the step
    assert step_of(0.001) == (20, "sleep", 1, 0.0)  # next to nothing: the twin's own loop costs more
    assert step_of(1.5) == (20, "cpu", 3, 0.0)


def test_without_workers_the_trainers_cpu_goes_to_its_loading_first():
    """num_workers=0: the trainer loads inside next(), so its CPU there is the loading's, not its step's
    (a GPU job's step would otherwise become a CPU step that competes with the suggested workers)."""
    from dltop.cli import build_parser
    from dltop.diagnose.figures import WorkerFigures
    from dltop.diagnose.twin import bench_args

    (loader,) = bound_window(50.0, workers=0)[0].loaders
    idle = WorkerFigures(busy=0.0, cpu=0.0, cpu_wait=0.0, memory=0.0)

    def twin_of(trainer_cpu: float) -> tuple:
        args = build_parser().parse_args(["bench", *bench_args(loader, idle, 0.5, trainer_cpu, num_workers=2)])
        return args.workload, args.step_kind, args.step_cpu_ms

    # half the period loading on CPU (20 ms per batch at the twin's 20 ms step), 10% of a core beside it
    assert twin_of(0.55) == ("twin:cpu_ms=20,io_ms=0,sample_kb=4", "sleep", 2.0)
    # the loading waits on storage: a tenth of it is CPU; the step's own CPU is next to nothing
    assert twin_of(0.05) == ("twin:cpu_ms=2,io_ms=18,sample_kb=4", "sleep", 0.0)


def test_a_step_spends_its_cpu_share_then_waits_the_rest():
    from dltop.bench.step import Step

    step = Step(30.0, "sleep", cpu_ms=10.0)
    began, cpu_began = time.perf_counter(), time.thread_time()
    step(None)
    wall, cpu = time.perf_counter() - began, time.thread_time() - cpu_began
    assert cpu >= 0.010 and wall >= 0.030 and cpu < wall


# -- the user's own pipeline (--pipeline) ------------------------------------------------------------

PIPELINES = "tests.fixtures.bench_factories:"
QUICK = ["--step-ms", "1", "--warmup-s", "0.05", "--chunk-s", "0.1", "--chunks", "2"]


def test_a_pipeline_search_starts_at_one_worker():
    curve = Curve()
    result = Search(curve, PipelineConfig(knob="concurrency"), max_workers=16, budget_s=1e9, least=1).run()
    assert min(c.num_workers for c in curve.measured) == 1 and result.recommended.config.num_workers == 5
    assert result.recommended.config.label() == "concurrency=5"


def test_listed_counts_replace_the_search():
    curve = Curve()
    result = Search(curve, LoaderConfig(), max_workers=16, budget_s=1e9, counts=(2, 6, 8)).run()
    assert {c.num_workers for c in curve.measured} == {2, 6, 8}
    assert result.recommended.config.num_workers == 6  # the fewest within 5% of the best


@pytest.mark.parametrize(
    ("factory", "knob", "line"),
    [
        ("torchdata_threads", "num_workers", "torchdata_threads(workers=4)  # ParallelMapper(..., num_workers=4)"),
        ("spdl_pipeline", "concurrency", "spdl_pipeline(concurrency=4)  # .pipe(..., concurrency=4)"),
        ("prefetcher", "max_workers", "prefetcher(max_workers=4)"),
    ],
)
def test_a_pipeline_is_timed_in_its_own_words_and_stopped_after_each_trial(factory, knob, line, tmp_path, capsys):
    threads = threading.active_count()
    doc_path = tmp_path / "bench.json"
    assert main(["bench", "--pipeline", PIPELINES + factory, "--workers", "1,4", *QUICK, "--json", str(doc_path)]) == 0
    assert threading.active_count() == threads  # SPDL's auto_stop left, torchdata's threads joined, the pool shut
    out = capsys.readouterr().out
    assert f"batches/s by {knob}" in out and f"recommended (fewest workers within 5% of the best):\n  {line}" in out
    doc = json.loads(doc_path.read_text())
    rates = {t["config"]["num_workers"]: t["samples_per_s"] for t in doc["trials"]}
    assert rates[4] > 2 * rates[1]  # 4 ms of waiting per sample: four workers wait side by side
    assert doc["recommended"] == f"{knob}=4" and doc["batch_size"] is None
    assert all(t["left_running"] == 0 and t["config"]["knob"] == knob for t in doc["trials"])


def test_a_pipeline_compares_counts_side_by_side(capsys):
    assert main(["bench", "--pipeline", PIPELINES + "prefetcher", "--compare", "1", "3", "--rounds", "1", *QUICK]) == 0
    assert "compared with max_workers=1 (1 alternating rounds):\n  max_workers=3: " in capsys.readouterr().out


def test_threads_a_stopped_pipeline_leaves_are_counted(monkeypatch):
    from dltop.bench import pipeline  # imports torch: never at collection (tests/conftest.py)

    monkeypatch.setattr(pipeline, "LEFTOVER_WAIT_S", 0.05)
    before = pipeline._running()
    lingering = threading.Thread(target=time.sleep, args=(0.5,))
    lingering.start()
    assert pipeline._left_running(*before) == 1
    lingering.join()
    assert pipeline._left_running(*before) == 0


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--pipeline", PIPELINES + "not_iterable"], "the factory returned int; expected an iterable of batches"),
        (["--pipeline", PIPELINES + "no_count"], "no_count() does not take one worker count"),
        (["--pipeline", PIPELINES + "broken"], "reading broken(1) raised OSError: bucket gone"),
        (["--pipeline", PIPELINES + "needs_a_library"],
         "--pipeline needs torchdata, which is not installed here: pip install torchdata"),
        (["--pipeline", PIPELINES + "prefetcher", "--batch-size", "8"], "--batch-size: DataLoader settings"),
        (["--pipeline", PIPELINES + "prefetcher", "--workers", "0,2"], "needs one worker at least"),
        (["--pipeline", PIPELINES + "prefetcher", "--compare", "2", "num_workers=4"], "expected worker counts"),
        (["--workers", "2,many"], "--workers '2 many': expected worker counts"),
        (["--step-cpu-ms", "5"], "--step-cpu-ms must be between 0 and --step-ms"),
    ],
)  # fmt: skip
def test_bad_pipelines_and_counts_are_one_line(args, fragment, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torchdata", None)  # only needs_a_library imports it afresh
    monkeypatch.setitem(sys.modules, "torchdata.nodes", None)
    assert main(["bench", *args, *QUICK]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("dltop: ") and fragment in err, err

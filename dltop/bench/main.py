"""``dltop bench``: set up the workload and step, run the search or the comparison, report."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional

from dltop.bench import TWIN_TRUST, missing_torch
from dltop.bench.config import Config, PipelineConfig, parse_config
from dltop.bench.search import SearchResult
from dltop.errors import DltopError

EXIT_INTERRUPTED = 130
DEFAULT_BASE = "persistent_workers=True"
DEFAULT_BATCH_SIZE = 16


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--workload", default="synthetic-cpu", metavar="NAME[:k=v,...]",
                      help="synthetic-cpu | synthetic-io | mixed | twin, with cpu_ms, io_ms, read_kb, sample_kb "
                      "(e.g. twin:cpu_ms=12,read_kb=300,sample_kb=150); default synthetic-cpu")  # fmt: skip
    what.add_argument("--dataset", metavar="PKG.MODULE:FACTORY",
                      help="your data: a callable returning a Dataset or a dict of DataLoader arguments")  # fmt: skip
    what.add_argument("--pipeline", metavar="PKG.MODULE:FACTORY",
                      help="your whole pipeline: FACTORY(workers: int) returns an iterable of batches (a"
                      " torchdata Loader, an SPDL Pipeline, your own prefetcher); counts are tried, batches/s"
                      " timed")  # fmt: skip
    parser.add_argument("--batch-size", type=int,
                        help="the DataLoader's batch size (default 16; a --pipeline makes its own)")  # fmt: skip
    parser.add_argument("--step-ms", type=float, default=20.0, help="training step stand-in per batch (default 20)")
    parser.add_argument("--step-kind", choices=["sleep", "cpu"], default="sleep",
                        help="without CUDA: sleep (a GPU computing) or compute on CPU (default sleep)")  # fmt: skip
    parser.add_argument("--step-threads", type=int, default=1, metavar="N",
                        help="with --step-kind cpu: torch intra-op threads of the step (a trainer's own parallelism"
                        " competes with its workers for CPUs); default 1")  # fmt: skip
    parser.add_argument("--step-cpu-ms", type=float, default=0.0, metavar="MS",
                        help="of a step that waits (sleep, CUDA), this much is the trainer's own CPU work (receiving"
                        " the batch, the loop's Python), competing with its workers; default 0")  # fmt: skip
    parser.add_argument("--compare", nargs="+", metavar="CONFIG",
                        help="run these side by side, e.g. num_workers=2 num_workers=6,prefetch_factor=4"
                        " (with --pipeline: worker counts, e.g. 2 6)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of --compare (default 3)")
    parser.add_argument("--base", default=DEFAULT_BASE, help="settings every swept config starts from")
    parser.add_argument("--workers", metavar="N,N,...",
                        help="try these worker counts instead of searching, e.g. 2,4,8")  # fmt: skip
    parser.add_argument("--max-workers", type=int,
                        help="largest worker count to try (default 2 x CPUs allowed; with --pipeline at least"
                        " 32)")  # fmt: skip
    parser.add_argument("--start-methods", default="", help="also try these at the best count, e.g. spawn,forkserver")
    parser.add_argument("--budget-s", type=float, default=120.0, help="time budget of the search (default 120)")
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--chunk-s", type=float, default=1.0, help="each trial measures --chunks of this long")
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="also write the dltop.bench/1 document here")


def run_bench(args: argparse.Namespace) -> int:
    """Set up the workload (or the user's pipeline) and step, search (or compare), report; 130 when
    Ctrl-C cut the run short."""
    plan = _parse_arguments(args)  # before paying for torch's import

    # torch warns at import when numpy is missing; the bench does not use numpy
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    from dltop.bench.search import compare
    from dltop.bench.step import Step

    cpus = len(os.sched_getaffinity(0))
    # torch warns when num_workers exceeds its CPU estimate: sweeping past it is the point here
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    with _subject(args) as subject:
        step = Step(args.step_ms, args.step_kind, args.step_threads, args.step_cpu_ms)
        setup = _setup(args, subject, step, cpus)
        ceiling = subject.ceiling(step, cpus)
        _say(f"dltop bench: {subject.name} ({subject.describe()}) on {setup['device']['name']},"
             f" step {args.step_ms:g} ms ({step.kind}); ceiling {_ceiling_text(ceiling)}")  # fmt: skip
        measure = _measurer(args, subject, step)
        compared = [subject.named(c) for c in plan.compared] if plan.compared else None
        comparison = compare(measure, compared, args.rounds) if compared else None
        found = _compared(comparison) if comparison is not None else _search(args, measure, plan, subject, step, cpus)

    _print_results(found, comparison, ceiling, subject.code)
    if subject.name == "twin":
        print(f"\n{TWIN_TRUST}")
    if args.json:
        from dltop.bench import report

        doc = report.document(setup, found.trials, found.best, found.recommended, ceiling, comparison, found.stopped)
        with open(args.json, "w") as out:
            json.dump(doc, out, indent=2)
    return EXIT_INTERRUPTED if found.stopped == "interrupted" else 0


@dataclass
class _Plan:
    """What the command line asks, checked before torch is imported."""

    compared: Optional[list[Config]]  # configs to run side by side, or None: search
    base: Config  # what every swept config starts from
    methods: list[str]  # start methods to try at the best count
    counts: tuple[int, ...]  # --workers: the counts to try instead of searching


def _parse_arguments(args: argparse.Namespace) -> _Plan:
    """A typing mistake stops the bench before torch is imported, and without torch it stops with
    what to install."""
    why = missing_torch()
    if why is not None:
        raise DltopError(why)
    if args.batch_size is not None and args.batch_size < 1 or args.chunks < 1 or args.rounds < 1 \
            or args.step_threads < 1:  # fmt: skip
        raise DltopError("--batch-size, --chunks, --rounds and --step-threads must be at least 1")
    if not 0 <= args.step_cpu_ms <= args.step_ms:
        raise DltopError("--step-cpu-ms must be between 0 and --step-ms: it is part of the step")
    counts = _counts("--workers", args.workers.split(",")) if args.workers else ()
    if args.pipeline:
        return _pipeline_plan(args, counts)
    args.batch_size = DEFAULT_BATCH_SIZE if args.batch_size is None else args.batch_size
    compared: Optional[list[Config]] = [parse_config(text) for text in args.compare] if args.compare else None
    methods = [parse_config(f"start_method={m}").start_method for m in filter(None, args.start_methods.split(","))]
    return _Plan(compared, parse_config(args.base), [m for m in methods if m], counts)


def _pipeline_plan(args: argparse.Namespace, counts: tuple[int, ...]) -> _Plan:
    """Only the count varies: the factory builds the rest, so DataLoader settings are a mistake."""
    given = [name for name, value in (("--batch-size", args.batch_size), ("--start-methods", args.start_methods),
                                      ("--base", args.base != DEFAULT_BASE)) if value]  # fmt: skip
    if given:
        raise DltopError(f"{', '.join(given)}: DataLoader settings; with --pipeline your factory builds the pipeline")
    if 0 in counts:
        raise DltopError("--workers: a pipeline needs one worker at least")
    compared: Optional[list[Config]] = None
    if args.compare:
        compared = [PipelineConfig(n) for n in _counts("--compare with --pipeline", args.compare, least=1)]
    return _Plan(compared, PipelineConfig(), [], counts)


def _counts(option: str, texts: list[str], least: int = 0) -> tuple[int, ...]:
    """'2', '4', '8' -> (2, 4, 8); anything else is one line."""
    if not all(t.strip().isdigit() and int(t) >= least for t in texts):
        raise DltopError(f"{option} {' '.join(texts)!r}: expected worker counts of {least} or more, e.g. 2,4,8")
    return tuple(int(t) for t in texts)


def _subject(args: argparse.Namespace) -> Any:
    """What is measured: DataLoaders over a workload or the user's data, or the user's pipeline."""
    if args.pipeline:
        from dltop.bench.pipeline import Pipeline

        return Pipeline(args.pipeline)
    from dltop.bench.loaders import Loaders
    from dltop.bench.workloads import synthetic, user_factory

    return Loaders(user_factory(args.dataset) if args.dataset else synthetic(args.workload), args.batch_size)


def _measurer(args: argparse.Namespace, subject: Any, step) -> Callable[[Config], Any]:
    """One trial of a config, its result said on stderr as it comes (a search takes minutes)."""
    from dltop.bench.trial import Timing

    gpu_util = _gpu_util_reader() if step.kind == "cuda" else None
    timing = Timing(args.warmup_s, args.chunk_s, args.chunks)

    def measure(config: Config):
        _say(f"  {config.label():<52} ", end="")
        trial = subject.trial(config, step, timing, gpu_util)
        left = f"; {trial.left_running} threads or processes left running" if trial.left_running else ""
        _say(f"{trial.samples_per_s:9.1f} {config.unit} ({trial.low:.0f}-{trial.high:.0f}),"
             f" wait {trial.data_wait_percent:.0f}%{left}")  # fmt: skip
        return trial

    return measure


def _compared(comparison) -> SearchResult:
    """A comparison's trials as a search's result: the fastest is both best and recommended."""
    trials = comparison.results
    best = max(trials, key=lambda t: t.samples_per_s) if trials else None
    return SearchResult(trials, best, best, comparison.stopped)


def _search(args: argparse.Namespace, measure: Callable, plan: _Plan, subject: Any, step, cpus: int):
    """The worker count search from the plan's base, then the knobs worth a try at the best count."""
    from dltop.bench.search import Search

    base = subject.named(plan.base)
    max_workers = args.max_workers if args.max_workers is not None else subject.max_workers(cpus)
    knobs = subject.knobs(base, step, plan.methods)
    return Search(measure, base, max_workers, args.budget_s, knobs, least=subject.least, counts=plan.counts).run()


def _print_results(found: SearchResult, comparison, ceiling: Optional[dict], code: Callable[[Any], str]) -> None:
    """The table, the comparison (or the chart), the best and the code to use."""
    from dltop.bench import report

    print(report.table(found.trials, ceiling))
    if comparison is not None and comparison.ratios:
        print("\n" + report.comparison_text(comparison))
    elif found.trials:
        print("\n" + report.chart(found.trials))
    best: Any = found.best  # TrialResults (SearchResult types them as object)
    recommended: Any = found.recommended
    if recommended is not None:
        assert best is not None  # both come from the same trials: recommended is None only when best is
        share = f", {100 * best.samples_per_s / ceiling['samples_per_s']:.0f}% of the ceiling" if ceiling else ""
        print(f"\nbest: {best.config.label()} at {best.samples_per_s:.1f} {best.config.unit}{share}")
        print(f"recommended (fewest workers within 5% of the best):\n  {code(recommended.config)}")
    left = [f"{t.config.label()}: {t.left_running}" for t in found.trials if t.left_running]
    if left:
        print(f"\nthreads or processes still running after the pipeline was stopped ({', '.join(left)})"
              " shared the CPUs with later trials: give its iterator a close() that stops them (a generator's"
              " finally does)")  # fmt: skip
    if found.stopped:
        print(f"\nstopped early: {found.stopped}; the results above are partial")


def _setup(args: argparse.Namespace, subject: Any, step, cpus: int) -> dict:
    import torch

    name = torch.cuda.get_device_name(0) if step.kind == "cuda" else f"CPU ({cpus} CPUs allowed)"
    return {
        "device": {"kind": "cuda" if step.kind == "cuda" else "cpu", "name": name, "cpus_allowed": cpus},
        "workload": {"name": subject.name, "params": subject.params},
        "batch_size": args.batch_size,
        "step_ms": args.step_ms,
        "step_kind": step.kind,
        "step_threads": step.threads,
        "step_cpu_ms": step.cpu_s * 1000,
        "torch_version": torch.__version__,
    }


def _ceiling_text(ceiling: Optional[dict]) -> str:
    if ceiling is None:
        return "not measured"
    return f"{ceiling['samples_per_s']:.0f} samples/s ({ceiling['bound']}-bound; a sample costs" \
        f" {ceiling['sample_cpu_ms']:.1f} ms CPU of {ceiling['sample_wall_ms']:.1f} ms)"  # fmt: skip


def _gpu_util_reader():
    """NVML busy share of GPU 0 (the bench's device), or None where NVML is missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception:
        return None

    def read() -> Optional[float]:
        try:
            return float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        except Exception:
            return None

    return read


def _say(text: str, end: str = "\n") -> None:
    print(text, end=end, file=sys.stderr, flush=True)

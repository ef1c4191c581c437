"""``dltop bench``: set up the workload and step, run the search or the comparison, report."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from typing import Any, Callable, Optional

from dltop.bench import missing_torch
from dltop.bench.config import LoaderConfig, parse_config
from dltop.bench.search import SearchResult
from dltop.errors import DltopError

CEILING_PROBE_S = 0.5
EXIT_INTERRUPTED = 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--workload", default="synthetic-cpu", metavar="NAME[:k=v,...]",
                      help="synthetic-cpu | synthetic-io | mixed | twin, with cpu_ms, io_ms, read_kb, sample_kb "
                      "(e.g. twin:cpu_ms=12,read_kb=300,sample_kb=150); default synthetic-cpu")  # fmt: skip
    what.add_argument("--dataset", metavar="PKG.MODULE:FACTORY",
                      help="your data: a callable returning a Dataset or a dict of DataLoader arguments")  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--step-ms", type=float, default=20.0, help="training step stand-in per batch (default 20)")
    parser.add_argument("--step-kind", choices=["sleep", "cpu"], default="sleep",
                        help="without CUDA: sleep (a GPU computing) or compute on CPU (default sleep)")  # fmt: skip
    parser.add_argument("--step-threads", type=int, default=1, metavar="N",
                        help="with --step-kind cpu: torch intra-op threads of the step (a trainer's own parallelism"
                        " competes with its workers for CPUs); default 1")  # fmt: skip
    parser.add_argument("--compare", nargs="+", metavar="CONFIG",
                        help="run these side by side, e.g. num_workers=2 num_workers=6,prefetch_factor=4")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of --compare (default 3)")
    parser.add_argument("--base", default="persistent_workers=True", help="settings every swept config starts from")
    parser.add_argument("--max-workers", type=int, help="largest num_workers to try (default 2 x CPUs allowed)")
    parser.add_argument("--start-methods", default="", help="also try these at the best count, e.g. spawn,forkserver")
    parser.add_argument("--budget-s", type=float, default=120.0, help="time budget of the search (default 120)")
    parser.add_argument("--warmup-s", type=float, default=1.0)
    parser.add_argument("--chunk-s", type=float, default=1.0, help="each trial measures --chunks of this long")
    parser.add_argument("--chunks", type=int, default=3)
    parser.add_argument("--json", metavar="PATH", help="also write the dltop.bench/1 document here")


def run_bench(args: argparse.Namespace) -> int:
    """Set up the workload, search (or compare), report; 130 when Ctrl-C cut the run short."""
    compared, base, methods = _parse_arguments(args)  # before paying for torch's import

    # torch warns at import when numpy is missing; the bench does not use numpy
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    from dltop.bench.search import compare
    from dltop.bench.step import Step
    from dltop.bench.workloads import synthetic, user_factory

    cpus = len(os.sched_getaffinity(0))
    # torch warns when num_workers exceeds its CPU estimate: sweeping past it is the point here
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    with user_factory(args.dataset) if args.dataset else synthetic(args.workload) as workload:
        step = Step(args.step_ms, args.step_kind, args.step_threads)
        setup = _setup(args, workload, step, cpus)
        ceiling = _ceiling(workload, args.batch_size, step, cpus)
        _say(f"dltop bench: {setup['workload']['name']} on {setup['device']['name']}, batch {args.batch_size},"
             f" step {args.step_ms:g} ms ({step.kind}); ceiling {_ceiling_text(ceiling)}")  # fmt: skip
        measure = _measurer(args, workload, step)
        comparison = compare(measure, compared, args.rounds) if compared else None
        found = _compared(comparison) if comparison is not None else _search(args, measure, base, methods, step, cpus)

    _print_results(found, comparison, ceiling, args.batch_size)
    if args.json:
        from dltop.bench import report

        doc = report.document(setup, found.trials, found.best, found.recommended, ceiling, comparison, found.stopped)
        with open(args.json, "w") as out:
            json.dump(doc, out, indent=2)
    return EXIT_INTERRUPTED if found.stopped == "interrupted" else 0


def _parse_arguments(args: argparse.Namespace) -> tuple[Optional[list[LoaderConfig]], LoaderConfig, list]:
    """(configs to compare or None, the search's base, start methods to try): a typing mistake
    stops the bench before torch is imported, and without torch it stops with what to install."""
    why = missing_torch()
    if why is not None:
        raise DltopError(why)
    compared = [parse_config(text) for text in args.compare] if args.compare else None
    base = parse_config(args.base)
    methods = [parse_config(f"start_method={m}").start_method for m in filter(None, args.start_methods.split(","))]
    if args.batch_size < 1 or args.chunks < 1 or args.rounds < 1 or args.step_threads < 1:
        raise DltopError("--batch-size, --chunks, --rounds and --step-threads must be at least 1")
    return compared, base, methods


def _measurer(args: argparse.Namespace, workload, step) -> Callable[[LoaderConfig], Any]:
    """One trial of a config, its result said on stderr as it comes (a search takes minutes)."""
    from dltop.bench.trial import Timing, run_trial

    gpu_util = _gpu_util_reader() if step.kind == "cuda" else None
    timing = Timing(args.warmup_s, args.chunk_s, args.chunks)

    def measure(config: LoaderConfig):
        _say(f"  {config.label():<52} ", end="")
        trial = run_trial(workload, config, args.batch_size, step, timing, gpu_util)
        _say(f"{trial.samples_per_s:9.1f} samples/s ({trial.low:.0f}-{trial.high:.0f}),"
             f" wait {trial.data_wait_percent:.0f}%")  # fmt: skip
        return trial

    return measure


def _compared(comparison) -> SearchResult:
    """A comparison's trials as a search's result: the fastest is both best and recommended."""
    trials = comparison.results
    best = max(trials, key=lambda t: t.samples_per_s) if trials else None
    return SearchResult(trials, best, best, comparison.stopped)


def _search(args: argparse.Namespace, measure: Callable, base: LoaderConfig, methods: list, step, cpus: int):
    """The worker count search from ``base``, then the knobs worth a try at the best count."""
    from dltop.bench.search import Search

    knobs = [{"prefetch_factor": 4}, {"persistent_workers": not base.persistent_workers}]
    knobs += [{"pin_memory": True}] if step.kind == "cuda" and not base.pin_memory else []
    knobs += [{"start_method": m} for m in methods]
    max_workers = args.max_workers if args.max_workers is not None else 2 * cpus
    return Search(measure, base, max_workers, args.budget_s, tuple(knobs)).run()


def _print_results(found: SearchResult, comparison, ceiling: Optional[dict], batch_size: int) -> None:
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
        print(f"\nbest: {best.config.label()} at {best.samples_per_s:.1f} samples/s{share}")
        print(f"recommended (fewest workers within 5% of the best):\n  "
              f"{recommended.config.code(batch_size=batch_size)}")  # fmt: skip
    if found.stopped:
        print(f"\nstopped early: {found.stopped}; the results above are partial")


def _setup(args: argparse.Namespace, workload, step, cpus: int) -> dict:
    import torch

    name = torch.cuda.get_device_name(0) if step.kind == "cuda" else f"CPU ({cpus} CPUs allowed)"
    return {
        "device": {"kind": "cuda" if step.kind == "cuda" else "cpu", "name": name, "cpus_allowed": cpus},
        "workload": {"name": workload.name, "params": workload.params},
        "batch_size": args.batch_size,
        "step_ms": args.step_ms,
        "step_kind": step.kind,
        "step_threads": step.threads,
        "torch_version": torch.__version__,
    }


def _ceiling(workload, batch_size: int, step, cpus: int) -> Optional[dict]:
    """What this machine could do at most: the CPU one sample costs in one process, times the
    CPUs allowed, and the step's own pace; the lower one binds (waiting is free: it overlaps)."""
    dataset = workload.base["dataset"]
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__") or len(dataset) == 0:
        return None
    began, cpu_began, n = time.perf_counter(), time.thread_time(), 0
    while time.perf_counter() - began < CEILING_PROBE_S and n < len(dataset):
        dataset[n]
        n += 1
    wall, cpu = (time.perf_counter() - began) / n, (time.thread_time() - cpu_began) / n
    estimates = {"cpu": cpus / cpu if cpu > 1e-6 else None, "step": batch_size / step.step_s if step.step_s else None}
    bounds = {k: v for k, v in estimates.items() if v is not None}
    if not bounds:
        return None
    bound = min(bounds, key=bounds.__getitem__)
    return {"samples_per_s": bounds[bound], "bound": bound, "sample_cpu_ms": cpu * 1000, "sample_wall_ms": wall * 1000}


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

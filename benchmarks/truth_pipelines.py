"""Input pipelines that are not DataLoader worker processes, in the truth harness: torchdata.nodes
(ParallelMapper with method="thread" and method="process"), SPDL's PipelineBuilder and a
hand-written thread-pool prefetcher (tests/jobs/pipeline_job.py), each with 2 workers on a slow
store (io: each sample sleeps) and on a pure-Python decode holding the GIL (cpu).

The truth is the job's own clock over exactly the window dltop's report covers
(truth_observe.snapshot_views), and its records: the decode threads (thread-<tid>-<pid>.json)
and worker processes (worker-<pid>.json) that really ran. Each cell checks dltop's
``loaders[0]``: the pipeline named, its data wait within 5 points of the clock's, the worker
threads (or, for torchdata's process workers, the worker pids) it lists, the finding it raises
(io: input-bound naming the library's knob; cpu on threads: gil-bound; cpu on processes:
input-bound, naming the knob where the machine has more CPUs than workers, not where each worker
already has one of its own), and the advice applied: the job rerun with nothing attached at the
old and the suggested setting, medians of the job's own batches/s, against the gain the finding
predicts.
Fields dltop does not give yet show as "—" and fail their check.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import truth_observe as observe
from truth_checks import SHARE_PP, Check, finding

PIPELINE_JOB = "tests/jobs/pipeline_job.py"
LIBRARIES = ("torchdata-thread", "torchdata-process", "spdl", "threads")
WORKS = ("io", "cpu")
WORKERS = 2
PIPELINE = {"torchdata-thread": "torchdata.nodes", "torchdata-process": "torchdata.nodes", "spdl": "spdl",
            "threads": "threads"}  # fmt: skip
KNOB = {"torchdata-thread": "num_workers", "torchdata-process": "num_workers", "spdl": "concurrency",
        "threads": "max_workers"}  # fmt: skip
THREAD_FIELDS = {"tid", "name", "cpu_percent", "activity"}
WARMUP_S = 5.0  # the job runs this long before dltop attaches (its buffers fill)
APPLY_RUNS = 3  # old and new setting, alternating: medians of these
APPLY_WARMUP_S = 3.0
APPLY_RATE_S = 9.0  # each run's own batches/s over this long (~12 s a run with its start)
HELPED = 1.05


@dataclass(frozen=True)
class PipeCell:
    library: str
    work: str
    workers: int = WORKERS

    @property
    def name(self) -> str:
        return f"pipe-{self.library}-{self.work}"

    @property
    def threaded(self) -> bool:
        return self.library != "torchdata-process"

    @property
    def expected(self) -> str:
        """The finding the cell's truth calls for: a GIL-bound decode in threads is not helped by more threads."""
        return "gil-bound" if self.work == "cpu" and self.threaded else "input-bound"

    @property
    def more_help(self) -> bool:
        """More workers can help: not where each is CPU-bound in a process of its own and they are
        already as many as the CPUs this machine lets the job use (the kernel's affinity)."""
        return self.work != "cpu" or len(os.sched_getaffinity(0)) > self.workers

    def command(self, python: str, report: Path, library: Optional[str] = None, workers: Optional[int] = None) -> list:
        return [python, str(observe.TREE["root"] / PIPELINE_JOB), "--library", library or self.library,
                "--work", self.work, "--workers", str(workers or self.workers), "--report", str(report)]  # fmt: skip


def pipeline_cells() -> list:
    return [PipeCell(library, work) for library in LIBRARIES for work in WORKS]


def _shown(value) -> str:
    return "—" if value is None else f"{value:.1f}" if isinstance(value, float) else str(value)


def first_loader(report: dict) -> dict:
    loaders = report.get("loaders") or [{}]
    return loaders[0] if isinstance(loaders[0], dict) else {}


def check_pipeline(cell: PipeCell, report: dict, truth: observe.Truth, job) -> list:
    """The checks of one snapshot against the job's clock and records."""
    loader = first_loader(report)
    wait, real = loader.get("data_wait_percent"), truth.wait_percent
    checks = [
        Check("pipeline", _shown(loader.get("pipeline")), PIPELINE[cell.library],
              loader.get("pipeline") == PIPELINE[cell.library]),
        Check("data wait %", _shown(wait), _shown(real),
              wait is not None and real is not None and abs(wait - real) <= SHARE_PP),
        _check_workers(cell, loader, job),
        _check_finding(cell, report),
    ]  # fmt: skip
    return checks


def _check_workers(cell: PipeCell, loader: dict, job) -> Check:
    """Thread pipelines: ``worker_threads`` (each with tid, name, cpu_percent, activity), at least N,
    every decode thread the job recorded among them; processes: ``worker_pids``, N of them."""
    if not cell.threaded:
        pids = loader.get("worker_pids")
        real = {r["pid"] for r in job.records("worker")}
        matched = f" ({len(set(pids) & real)} real)" if isinstance(pids, list) else ""
        shown = f"{len(pids)} pids{matched}" if isinstance(pids, list) else "—"
        return Check("workers", shown, f"{cell.workers} worker processes",
                     isinstance(pids, list) and len(pids) == cell.workers)  # fmt: skip
    threads = loader.get("worker_threads")
    if not isinstance(threads, list):
        return Check("workers", "—", f">= {cell.workers} worker threads", False)
    formed = [t for t in threads if isinstance(t, dict) and THREAD_FIELDS <= set(t)]
    decoders = {r["tid"] for r in job.records("thread")}
    names = sorted({str(t.get("name")) for t in formed})[:3]
    listed = {t["tid"] for t in formed}
    shown = f"{len(formed)} of {len(threads)} complete, {len(listed & decoders)} decoding: {', '.join(names) or '—'}"
    return Check("workers", shown, f">= {cell.workers}, the {len(decoders)} decode threads among them",
                 len(formed) >= cell.workers and decoders <= listed)  # fmt: skip


def _check_finding(cell: PipeCell, report: dict) -> Check:
    found = finding(report, cell.expected)
    ids = ", ".join(f.get("id", "?") for f in report.get("findings") or []) or "none"
    knob = f"{KNOB[cell.library]}="
    named = f" naming {knob}" if cell.more_help else f" not asking for more ({knob}): the CPUs are full"
    want = cell.expected + ("" if cell.expected == "gil-bound" else named)
    if not found:
        return Check("finding", ids, want, False)
    suggestion = found.get("suggestion") or ""
    if cell.expected == "gil-bound":
        return Check("finding", f"gil-bound: {suggestion[:80] or '—'}", want, True)
    return Check("finding", f"input-bound: {suggestion[:80] or '—'}", want, (knob in suggestion) == cell.more_help)


def asked_change(cell: PipeCell, report: dict) -> Optional[dict]:
    """What the expected finding asks for: {finding, library, workers, predicted}; None if nothing.
    The count from evidence.suggested_workers, else ``<knob>=N`` in the suggestion; torchdata's
    threads told to use method="process" move to torchdata-process at the same count."""
    found = finding(report, cell.expected)
    if not found:
        return None
    evidence = found.get("evidence") or {}
    suggestion = found.get("suggestion") or ""
    count = evidence.get("suggested_workers")
    if not isinstance(count, int):
        match = re.search(rf"\b{KNOB[cell.library]}=(\d+)", suggestion)
        count = int(match.group(1)) if match else None
    library = cell.library
    if cell.library == "torchdata-thread" and re.search(r"method=['\"]process['\"]", suggestion):
        library = "torchdata-process"
    if (count in (None, cell.workers)) and library == cell.library:
        return None
    predicted = evidence.get("predicted_speedup")
    bounds = {k: evidence.get(k) for k in ("speedup_by_pace", "speedup_by_cpus") if evidence.get(k) is not None}
    return {"finding": found.get("id"), "library": library, "workers": count or cell.workers,
            "predicted": predicted, "bounds": bounds}  # fmt: skip


def _rate(cell: PipeCell, run, report: Path, library: str, workers: int) -> Optional[float]:
    """One fresh run's own batches/s, nothing attached (None if it did not run)."""
    job = observe.start_command(report, cell.command(run.job_python, report, library, workers))
    try:
        (view,) = observe.wait_trainers(job, 1, timeout=60)
        time.sleep(APPLY_WARMUP_S)
        return observe.rate_over(view, APPLY_RATE_S)
    except (AssertionError, RuntimeError):
        return None
    finally:
        observe.stop(job)


def apply_advice(cell: PipeCell, run, scratch: Path, report: dict) -> dict:
    """The old and the suggested setting, APPLY_RUNS fresh runs each, alternating (the machine
    drifts); the ratio of the medians against what the finding predicted."""
    asked = asked_change(cell, report)
    if asked is None:
        said = (finding(report, cell.expected) or {}).get("suggestion")
        return {
            "asked": None,
            "verdict": f"not applied here: {said.splitlines()[0][:90]}" if said else "nothing suggested",
        }
    settings = {"old": (cell.library, cell.workers), "new": (asked["library"], asked["workers"])}
    rates: dict = {"old": [], "new": []}
    for round_ in range(APPLY_RUNS):
        for label in ("new", "old") if round_ % 2 else ("old", "new"):
            rates[label].append(_rate(cell, run, scratch / f"apply-{label}{round_}", *settings[label]))
    median = {k: statistics.median([r for r in v if r]) if any(v) else None for k, v in rates.items()}
    ratio = median["new"] / median["old"] if median["old"] and median["new"] else None
    change = (f"{KNOB[cell.library]}={asked['workers']}" if asked["library"] == cell.library
              else f"{asked['library']} at {asked['workers']}")  # fmt: skip
    return {
        "asked": {"finding": asked["finding"], "change": change},
        "predicted": asked["predicted"],
        "predicted_bounds": asked["bounds"],
        "old_batches_per_s": [round(r, 2) if r else None for r in rates["old"]],
        "new_batches_per_s": [round(r, 2) if r else None for r in rates["new"]],
        "ratio": round(ratio, 2) if ratio else None,
        "verdict": "helped" if ratio and ratio >= HELPED else "no gain" if ratio else "a run failed",
    }


def _predicted_text(applied: dict) -> str:
    if applied.get("predicted") is not None:
        return f"{applied['predicted']:.2f}x"
    bounds = applied.get("predicted_bounds") or {}
    return " / ".join(f"{v:.2f}x by {k.rsplit('_', 1)[-1]}" for k, v in bounds.items()) or "—"


def advice_check(applied: dict) -> Check:
    asked = applied.get("asked")
    if not asked:
        return Check("advice applied", applied.get("verdict", "nothing suggested"), "—", None)
    return Check("advice applied", f"{asked['change']}: predicted {_predicted_text(applied)}",
                 f"measured {applied['ratio']}x" if applied.get("ratio") else "—",
                 applied["ratio"] >= HELPED if applied.get("ratio") else None)  # fmt: skip


def excerpt(report: dict) -> dict:
    loader = dict(first_loader(report))
    loader.pop("workers_exited", None)
    pick = lambda items, keys: [{k: item.get(k) for k in keys} for item in items or []]  # noqa: E731
    return {
        "loader": loader,
        "findings": pick(report.get("findings"), ("id", "title", "evidence", "suggestion")),
        "processes": pick(report.get("processes"), ("pid", "role", "activity", "cpu_percent")),
    }


def run_pipe_cell(cell: PipeCell, run, scratch: Path, outcome) -> None:
    """Fills ``outcome`` (bench_truth.Outcome): checks, the truth, the parts of dltop's JSON read."""
    report_dir = scratch / cell.name
    job = observe.start_command(report_dir, cell.command(run.job_python, report_dir))
    try:
        (view,) = observe.wait_trainers(job, 1, timeout=90)
        time.sleep(max(run.warmup, WARMUP_S))
        poller = observe.Poller(view)
        poller.start()
        try:
            seen = observe.snapshot_views(job.pid, [view], [poller], run.duration, run.dltop_python)
        finally:
            poller.stop()
        if seen.snapshot is None:
            outcome.error = seen.error
            return
        truth = seen.truths[view.pid]
        outcome.checks = check_pipeline(cell, seen.snapshot, truth, job)
        outcome.excerpt = excerpt(seen.snapshot)
        outcome.truth = {
            "wait_percent": round(truth.wait_percent, 1) if truth.wait_percent is not None else None,
            "batches_per_s": round(truth.batches_per_s, 2) if truth.batches_per_s else None,
            "trainer_cpu": round(truth.trainer_cpu, 2) if truth.trainer_cpu is not None else None,
            "window_s": round(truth.ended - truth.began, 1),
            "decode_threads": sorted(job.records("thread"), key=lambda r: r["tid"]),
            "worker_processes": sorted(r["pid"] for r in job.records("worker")),
        }
    finally:
        observe.stop(job)
    if run.apply:
        outcome.applied = apply_advice(cell, run, scratch, seen.snapshot)
        outcome.checks.append(advice_check(outcome.applied))


def table(outcomes: list) -> str:
    """cell | pipeline | data wait dltop / clock | workers | finding | advice: predicted vs measured."""
    names = ("pipeline", "data wait %", "workers", "finding", "advice applied")
    lines = ["| cell | pipeline | data wait % (dltop / clock) | workers | finding | advice: predicted / measured |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for outcome in outcomes:
        if outcome.error:
            lines.append(f"| {outcome.name} | ERROR: {outcome.error[:160]} | | | | |")
            continue
        by = {c.name: c for c in outcome.checks}
        shown = [f"{by[n].mark} {by[n].dltop} / {by[n].truth}" if n in by else "—" for n in names]
        lines.append(f"| {outcome.name} | " + " | ".join(s.replace("|", "/") for s in shown) + " |")
    return "\n".join(lines) + "\n"

"""Does dltop tell the truth? A matrix of real jobs, each with its own ground truth, under
``dltop snapshot --json``. Run by hand, not in CI:

    python benchmarks/bench_truth.py --out /tmp/truth          # the whole matrix (~20 min)
    python benchmarks/bench_truth.py --list                    # cell names
    python benchmarks/bench_truth.py --cell 'spawn-nonp-short-*' --cell imagenet
    python benchmarks/bench_truth.py --subset compat --job-python /work/venv-torch24/bin/python
    python benchmarks/bench_truth.py --subset libs --out /tmp/truth-libs   # real libraries (~35 min)
    python benchmarks/bench_truth.py --subset stopped --out /tmp/truth-stopped  # stopped runs (~20 min)
    python benchmarks/bench_truth.py --subset pipelines --out /tmp/truth-pipes  # not DataLoader (~15 min)
    python benchmarks/bench_truth.py --subset advice --out /tmp/truth-advice  # advice applied (~2 h)
    python benchmarks/bench_truth.py --subset advice --quick --out /tmp/truth-advice  # 7 cells (~20 min)
    python benchmarks/bench_truth.py --cell 'stop-lock-*' --cell 'stop-none-h5'

Cells: start method (fork | spawn | forkserver) x persistent or not x epoch length (short: 10
batches; long: no epoch end in the window) x num_workers 0 / 1 / 2 / 4 x load (cpu: 5 ms of CPU
per sample; io: 10 ms per sample waiting without CPU; compute: the 40 ms step dominates), plus
workers renamed to "python" (as torch <= 2.2 left them) and an imagenet-like job (tests/jobs/imagenet_job.py).
Each cell prints dltop's figure beside the job's own truth, ✓/✗ per check (truth_checks.py),
and for cells marked "apply" reruns the job with dltop's suggested settings and compares the
job's own batch rate before and after (nothing attached while rates are measured).
``--subset libs`` runs jobs built on the real libraries (tests/jobs): torchrun
DDP (gloo) with one slow rank and with balanced ranks, and one whose rank 0 fails on torchrun's
first start (--max-restarts 1: the job's records say which ranks each start had), webdataset
over tar shards (as many workers as shards, more with empty_check=False, more with the default
check), Hugging Face datasets
map-style (set_transform) and streaming (to_iterable_dataset(num_shards=2) under 4 workers), timm's
create_loader (in its own venv, --timm-python), a loop inside a Jupyter kernel (ipykernel), and
PyTorch Lightning's Trainer.fit (its fetcher one batch ahead of an endless sampler; the clock
around the DataLoader's next() inside it).
``--subset stopped`` (or ``--cell 'stop-*'``): torchrun runs (3 ranks, gloo) that one rank stops
by a lock in its code, a desync, its hung DataLoader worker, a busy loop, a FIFO read, and the
controls (a slow rank that moves, a healthy run), each at --hang-after 20 and 5: the rank and line
named against the job's stop.json, and the time from the stall to the verdict (truth_stopped.py).
``--subset pipelines`` (or ``--cell 'pipe-*'``): input pipelines that are not DataLoader workers
(torchdata.nodes threads and processes, SPDL, a thread-pool prefetcher; tests/jobs/pipeline_job.py)
on a slow store and on a GIL-holding decode: the pipeline named, its data wait, its worker threads,
the finding and its advice applied (truth_pipelines.py).
``--subset advice`` (or ``--cell 'adv-*'``): input-bound's suggested count and predicted speed-up
against the job's own rate at that count, one fewer and the twin (``dltop bench <bench_args>``), on
cpu, io and mixed loads and the imagenet-like job at several counts, batch sizes and steps
(truth_advice.py; ``--quick`` a reduced set, ``--runs`` fresh runs per setting).
Truth per trainer: the job's clock, py-spy at 50 Hz on each trainer, worker pids, which workers
served samples, the job's own rate with nothing attached; advice applied as medians of 3 short runs
before and after (alternating), nothing attached.
Cells hold /tmp/dltop-cpu.lock exclusively, up to 5 min at a stretch (others' tests run in between).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import fnmatch
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import truth_advice
import truth_observe as observe
import truth_pipelines
import truth_stopped
from truth_checks import (
    Check,
    LibShape,
    LibTruth,
    RestartTruth,
    Shape,
    advice,
    check_cell,
    check_lib,
    check_restart,
    check_run_speedup,
    finding,
    train_loader,
)

LOCK = "/tmp/dltop-cpu.lock"
LOADS = {
    "cpu": ("--sample-ms", "5", "--step-ms", "5"),
    "io": ("--sample-ms", "0", "--slow-every", "1", "--slow-ms", "10", "--step-ms", "5"),
    "compute": ("--sample-ms", "1", "--step-ms", "40"),
}
EPOCHS = {"short": "10", "long": "100000"}
RATE_S = 10.0
COMPAT = (
    "fork-pers-long-w2-cpu",
    "fork-nonp-short-w2-cpu",
    "spawn-nonp-short-w2-cpu",
    "forkserver-pers-long-w2-cpu",
    "fork-pers-long-w1-io",
    "w0-long-cpu",
)


@dataclass(frozen=True)
class Cell:
    shape: Shape
    unnamed: bool = False
    apply: bool = False

    @property
    def name(self) -> str:
        s = self.shape
        epoch = "short" if s.short_epochs else "long"
        if not s.workers:
            return f"w0-{epoch}-{s.load}"
        persistence = "pers" if s.persistent else "nonp"
        return f"{s.start_method}-{persistence}-{epoch}-w{s.workers}-{s.load}" + ("-unnamed" if self.unnamed else "")

    def argv(self, workers: Optional[int] = None, persistent: Optional[bool] = None) -> list:
        s = self.shape
        workers = s.workers if workers is None else workers
        persistent = s.persistent if persistent is None else persistent
        args = ["train", "--workers", str(workers), "--start-method", s.start_method]
        args += ["--batches", EPOCHS["short" if s.short_epochs else "long"], *LOADS[s.load]]
        args += ["--persistent"] * persistent + ["--unnamed-workers"] * self.unnamed
        return args


def cell(start: str, persistent: bool, epoch: str, workers: int, load: str, **kw) -> Cell:
    return Cell(Shape(workers, start, persistent, epoch == "short", load), **kw)


def matrix() -> list:
    """28 cells: start method x persistence x epoch on one load; num_workers x load on one start
    method; the crossings most likely to mislead (spawn short epochs, renamed workers, I/O at many workers)."""
    cells = [
        cell(start, persistent, epoch, 2, "cpu", apply=(start, persistent, epoch) == ("spawn", False, "short"))
        for start in ("fork", "spawn", "forkserver")
        for persistent in (True, False)
        for epoch in ("short", "long")
    ]
    for load in ("cpu", "io", "compute"):
        cells.append(cell("fork", False, "long", 0, load, apply=load == "cpu"))
        cells.append(cell("fork", True, "long", 1, load, apply=load in ("cpu", "io")))
        cells.append(cell("fork", True, "long", 4, load, apply=load in ("cpu", "compute")))
    cells += [
        cell("fork", False, "short", 0, "cpu"),
        cell("fork", False, "short", 1, "io", apply=True),
        cell("spawn", False, "short", 4, "io"),
        cell("forkserver", True, "long", 1, "io"),
        cell("spawn", True, "long", 4, "compute"),
        cell("fork", True, "long", 2, "cpu", unnamed=True),
        cell("spawn", False, "short", 2, "cpu", unnamed=True),
    ]
    return cells


@dataclass
class Outcome:
    name: str
    checks: list = field(default_factory=list)
    error: Optional[str] = None
    excerpt: dict = field(default_factory=dict)  # the parts of dltop's JSON the checks read
    truth: dict = field(default_factory=dict)
    applied: Optional[dict] = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {**self.__dict__, "checks": [c.to_dict() for c in self.checks]}


class CpuLock:
    """/tmp/dltop-cpu.lock held exclusively while cells measure (HELPERS.md), kept across cells for
    up to ``hold_s`` once won: on a machine where tests queue for it all day, taking it per cell
    would wait behind the whole queue every cell; held for the whole matrix, nobody's tests
    would run for 20 minutes."""

    def __init__(self, path: Optional[str], hold_s: float) -> None:
        self.path, self.hold_s = path, hold_s
        self._handle = None
        self._since = 0.0

    @contextlib.contextmanager
    def measuring(self):
        if self.path and self._handle is None:
            self._handle = open(self.path, "a")  # noqa: SIM115 (held across cells)
            fcntl.flock(self._handle, fcntl.LOCK_EX)
            self._since = time.monotonic()
        try:
            yield
        finally:
            if self._handle is not None and time.monotonic() - self._since >= self.hold_s:
                self.release()

    def release(self) -> None:
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None


def excerpt(report: dict, trainer: int) -> dict:
    loader = dict(train_loader(report, trainer) or {})
    exited = loader.pop("workers_exited", [])
    loader["workers_exited"] = f"{len(exited)} entries"
    return {
        "job": {k: report["job"].get(k) for k in ("start_method", "trainer_pids", "torch_version")},
        "processes": [
            {k: p.get(k) for k in ("pid", "ppid", "role", "name", "activity", "cpu_percent", "state")}
            for p in report.get("processes", [])
        ],
        "loaders": loader,
        "findings": [
            {k: f.get(k) for k in ("id", "severity", "title", "detail", "evidence", "suggestion")}
            for f in report.get("findings", [])
        ],
    }


def truth_dict(truth: observe.Truth) -> dict:
    keys = ("wait_percent", "startup_percent", "batches_per_s", "epochs", "trainer_cpu", "workers_cpu")
    out = {k: round(getattr(truth, k), 2) if getattr(truth, k) is not None else None for k in keys}
    out["job_cpu_wanted"] = round(truth.job_cpu_wanted, 2) if truth.job_cpu_wanted is not None else None
    out.update(
        live_workers=sorted(truth.live_workers), cpus_allowed=truth.cpus_allowed, window_s=truth.ended - truth.began
    )
    return out


@dataclass(frozen=True)
class Run:
    """How to run jobs and dltop."""

    duration: float
    warmup: float
    job_python: str
    dltop_python: str
    lock: CpuLock
    apply: bool
    pyspy_rates: tuple = ()
    timm_python: str = "/work/venv-timm/bin/python"  # the timm job's own venv (torch 2.14, timm)
    wds_dir: str = "/tmp/truth-wds"  # webdataset shards, made once
    timm_dir: str = "/tmp/truth-timm"  # an ImageFolder of JPEGs for timm, made once
    images: str = "/tmp/truth-images"  # JPEGs of the imagenet-like job, made once
    runs: int = 3  # fresh runs per setting where advice is applied (truth_advice.py)


def run_cell(c: Cell, run: Run, scratch: Path) -> Outcome:
    began = time.monotonic()
    outcome = Outcome(c.name)
    with run.lock.measuring():
        job = observe.start(Path(tempfile.mkdtemp(prefix=f"{c.name}-", dir=scratch)), c.argv(), run.job_python)
        try:
            observe.wait_running(job, c.shape.workers)
            time.sleep(run.warmup)
            poller = observe.Poller(job)
            poller.start()
            try:
                seen = observe.snapshot(job, poller, run.duration, run.dltop_python)
                sampled = [sampling_check(job, poller, run.duration, rate) for rate in run.pyspy_rates]
            finally:
                poller.stop()
            if seen.snapshot is None:
                outcome.error = seen.error
            else:
                outcome.checks = check_cell(seen.snapshot, seen.truth, c.shape, job.pid) + sampled
                outcome.excerpt = excerpt(seen.snapshot, job.pid)
                outcome.truth = truth_dict(seen.truth)
                if c.apply and run.apply:
                    outcome.applied = apply_advice(c, run, scratch, job, seen.snapshot)
        except (AssertionError, RuntimeError) as failure:
            outcome.error = str(failure)[-800:]
        finally:
            observe.stop(job)
    outcome.seconds = round(time.monotonic() - began, 1)
    return outcome


def sampling_check(job, poller, seconds: float, rate: int) -> Check:
    """Plain py-spy at ``rate`` Hz against the job's clock (time inside next() and iter()): is a
    miss dltop's doing, or does sampling itself disagree here?"""
    found = observe.pyspy_in_next(job, poller, seconds, rate)
    if found is None:
        return Check(f"py-spy {rate} Hz", "failed", "-", None)
    share, samples, spent = found
    error = 100 * math.sqrt(share / 100 * (1 - share / 100) / samples)
    return Check(f"py-spy {rate} Hz", f"{share:.1f}±{error:.1f} (n={samples})", f"{spent:.1f}", abs(share - spent) <= 5)


def apply_advice(c: Cell, run: Run, scratch: Path, job, report: dict) -> dict:
    """Rerun the job with the first finding's change (what a user would paste) and compare the
    job's own batch rate, nothing attached; then ask dltop again: does it undo its own advice?"""
    asked = advice(report, c.shape.workers)
    if not asked:
        return {"asked": None, "verdict": "nothing suggested"}
    fid, changes = asked[0]
    before = observe.rate_over(job, RATE_S)
    observe.stop(job)
    workers = changes.get("num_workers", c.shape.workers)
    persistent = changes.get("persistent_workers", c.shape.persistent)
    env = {"OMP_NUM_THREADS": str(changes["OMP_NUM_THREADS"])} if "OMP_NUM_THREADS" in changes else None
    rerun = observe.start(scratch / f"{c.name}-applied", c.argv(workers, persistent), run.job_python, env)
    try:
        observe.wait_running(rerun, workers)
        time.sleep(run.warmup)
        after = observe.rate_over(rerun, RATE_S)
        poller = observe.Poller(rerun)
        poller.start()
        seen = observe.snapshot(rerun, poller, run.duration, run.dltop_python)
        poller.stop()
    finally:
        observe.stop(rerun)
    ratio = after / before if before and after else None
    later = advice(seen.snapshot, workers) if seen.snapshot else []
    undoes = [(f, ch) for f, ch in later if ch.get("num_workers") == c.shape.workers and workers != c.shape.workers]
    undoes += [(f, ch) for f, ch in later if ch.get("persistent_workers") == c.shape.persistent != persistent]
    return {
        "asked": {"finding": fid, **changes},
        "before_batches_per_s": round(before, 2) if before else None,
        "after_batches_per_s": round(after, 2) if after else None,
        "ratio": round(ratio, 2) if ratio else None,
        "verdict": "helped" if ratio and ratio >= 1.05 else "hurt" if ratio and ratio < 0.95 else "no change",
        "wait_after_truth": round(seen.truth.wait_percent, 1) if seen.truth and seen.truth.wait_percent else None,
        "findings_after": [f["id"] for f in (seen.snapshot or {}).get("findings", [])],
        "advice_after": [{"finding": f, **ch} for f, ch in later],
        "undoes_itself": bool(undoes),
    }


# -- imagenet-like ----------------------------------------------------------------


def run_imagenet(run: Run, scratch: Path, images: Path, snapshots: int = 3) -> list:
    """-j1 and -j2 with default intra-op threads: several snapshots each (do the rules agree with
    each other and across snapshots?); then the job's own batch rate, nothing attached, for each
    starting point, each change dltop suggested and OMP_NUM_THREADS=1, in two rounds (the second
    in reverse order: the machine drifts) — does the advice help, and is the best change one it
    named?"""
    if not any(images.glob("*.jpg")):
        import subprocess

        job = observe.TREE["root"] / observe.JOBS["imagenet"]
        subprocess.run([run.job_python, str(job), "--make-images", str(images)], check=True)
    outcomes, asked = [], {}
    with run.lock.measuring():
        for workers in (1, 2):
            outcome, asked[workers] = _imagenet_views(run, scratch, images, workers, snapshots)
            outcomes.append(outcome)
        twins = {w: _twin(run, scratch, _replay_args(o)) for w, o in zip((1, 2), outcomes)}
        twin_targets = {(t["workers"], None) for t in twins.values() if t}
        configs = sorted({(1, None), (2, None), (1, 1), (2, 1), *asked[1], *asked[2], *twin_targets}, key=str)
        rates: dict = {}
        for order in (configs, configs[::-1]):
            for workers, threads in order:
                rates.setdefault(_key(workers, threads), []).append(
                    _imagenet_rate(run, scratch, images, workers, threads)
                )
    median = {k: statistics.median([r for r in v if r] or [0.0]) for k, v in rates.items()}
    table = {
        k: {"batches_per_s": [round(r or 0, 2) for r in v], "median": round(median[k], 2)} for k, v in rates.items()
    }
    checks = []
    for workers in (1, 2):
        here = _key(workers, None)
        for target in sorted(asked[workers], key=str):
            ratio = median[_key(*target)] / median[here] if median[here] else None
            checks.append(Check(f"-j{workers}: apply {_key(*target)}", f"{ratio:.2f}x" if ratio else "-",
                                "≥1.05x", ratio >= 1.05 if ratio else None))  # fmt: skip
        if not asked[workers]:
            better = [k for k in median if median[k] >= 1.05 * median[here]]
            checks.append(Check(f"-j{workers}: no advice", "none", ", ".join(better) or "nothing better", not better))
        twin = twins[workers]
        if twin:
            real = median[_key(twin["workers"], None)] / median[here] if median[here] else None
            close = abs(twin["ratio"] / real - 1) <= TWIN_MARGIN if real and twin["ratio"] else None
            checks.append(Check(f"-j{workers}: twin j{twin['workers']}/j{workers}", f"{twin['ratio']:.2f}x",
                                f"{real:.2f}x" if real else "-", close))  # fmt: skip
    best = max(median, key=median.get)
    named = {_key(*t) for t in asked[1] | asked[2]} | {"j1", "j2"}
    checks.append(Check("best change named", ", ".join(sorted(named - {"j1", "j2"})) or "none",
                        f"{best} ({median[best] / median['j1']:.2f}x of j1)", best in named))  # fmt: skip
    for outcome in outcomes:
        outcome.truth["rates"] = table
    outcomes.append(Outcome("imagenet-apply", checks, truth={"rates": table, "twins": twins}))
    return outcomes


TWIN_MARGIN = 0.15  # twin within ±15% of the job's own ratio


def _replay_args(outcome: Outcome) -> Optional[list]:
    """The first view's ``dltop bench`` arguments (the finding's twin), if a finding gave any."""
    views = outcome.truth.get("views") or []
    return views[0].get("bench_args") if views else None


def _twin(run: Run, scratch: Path, args: Optional[list]) -> Optional[dict]:
    """Runs ``dltop bench <args>`` (nothing else running): the twin's ratio of proposed to current."""
    if not args:
        return None
    import subprocess

    out = scratch / f"twin-{time.monotonic_ns()}.json"
    subprocess.run([run.dltop_python, "-m", "dltop", "bench", *args, "--json", str(out)],
                   env={**os.environ, **observe._tree_env()}, capture_output=True, timeout=600)  # fmt: skip
    try:
        compare = json.loads(out.read_text())["compare"]
    except (OSError, ValueError, KeyError):
        return None
    proposed = dict(kv.split("=") for kv in compare[1]["label"].split(",") if "=" in kv)
    return {"args": args, "ratio": compare[1]["ratio"], "workers": int(proposed.get("num_workers", 0))}


def _key(workers: int, threads: Optional[int]) -> str:
    return f"j{workers}" + (f"+OMP={threads}" if threads else "")


def _imagenet_argv(images: Path, workers: int) -> list:
    return ["imagenet", "--images", str(images), "--workers", str(workers)]


def _imagenet_views(run: Run, scratch: Path, images: Path, workers: int, count: int) -> tuple:
    name = f"imagenet-j{workers}"
    outcome = Outcome(name)
    began = time.monotonic()
    job = observe.start(scratch / name, _imagenet_argv(images, workers), run.job_python)
    asked_all: set = set()
    views = []
    try:
        observe.wait_running(job, workers)
        time.sleep(run.warmup)
        poller = observe.Poller(job)
        poller.start()
        for _ in range(count):
            seen = observe.snapshot(job, poller, run.duration, run.dltop_python)
            if seen.snapshot is None:
                outcome.error = seen.error
                break
            views.append((seen.snapshot, seen.truth))
        poller.stop()
    finally:
        observe.stop(job)
    shape = Shape(workers, "fork", False, False, "imagenet")
    per_view = []
    for index, (report, truth) in enumerate(views):
        loader = train_loader(report, job.pid) or {}
        asked = advice(report, workers)
        target = {(ch.get("num_workers", workers), ch.get("OMP_NUM_THREADS")) for _, ch in asked}
        asked_all |= target
        bound = finding(report, "input-bound")
        per_view.append(
            {
                "dltop_wait": loader.get("data_wait_percent"),
                "truth_wait": round(truth.wait_percent, 1) if truth.wait_percent is not None else None,
                "advice": [{"finding": f, **ch} for f, ch in asked],
                "input_bound_suggestion": bound["suggestion"] if bound else None,
                "hottest_user_frame": bound["evidence"].get("hottest_user_frame") if bound else None,
                "predicted_speedup": _predicted(bound),
                "bench_args": next((f["bench_args"] for f in report.get("findings", []) if f.get("bench_args")), None),
                "trainer_cpu": round(truth.trainer_cpu, 2) if truth.trainer_cpu is not None else None,
            }
        )
        if index == 0:
            outcome.checks = check_cell(report, truth, shape, job.pid)
            outcome.excerpt = excerpt(report, job.pid)
    outcome.checks += _imagenet_checks(per_view)
    outcome.truth = {"views": per_view}
    outcome.seconds = round(time.monotonic() - began, 1)
    return outcome, asked_all


def _predicted(bound: Optional[dict]) -> Optional[float]:
    """The speed-up input-bound's model expects from its change (the smaller of pace and CPUs)."""
    if not bound:
        return None
    known = [bound["evidence"].get(k) for k in ("speedup_by_pace", "speedup_by_cpus")]
    known = [k for k in known if k is not None]
    return min(known) if known else None


def _imagenet_checks(views: list) -> list:
    waits = [
        v["dltop_wait"] is not None and v["truth_wait"] is not None and abs(v["dltop_wait"] - v["truth_wait"]) <= 5
        for v in views
    ]
    pairs = ", ".join(f"{_num(v['dltop_wait'])}/{_num(v['truth_wait'])}" for v in views)
    said = [json.dumps(v["advice"], sort_keys=True) for v in views]
    frames = [v["hottest_user_frame"] for v in views if v["hottest_user_frame"]]
    in_worker = [("__getitem__" in f or "PIL" in f or "_random_resized_crop" in f) for f in frames]
    return [
        Check("wait every view", pairs, "±5 pp", all(waits) if waits else None),
        Check("same advice every view", " | ".join(said) or "-", "identical", len(set(said)) <= 1 if said else None),
        Check("'start with' frame", "; ".join(sorted(set(frames))) or "-", "a worker frame (decode)",
              all(in_worker) if in_worker else None),
    ]  # fmt: skip


def _num(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def _imagenet_rate(run: Run, scratch: Path, images: Path, workers: int, threads: Optional[int]) -> Optional[float]:
    env = {"OMP_NUM_THREADS": str(threads)} if threads else None
    job = observe.start(scratch / f"imagenet-rate-j{workers}-{threads}", _imagenet_argv(images, workers),
                        run.job_python, env)  # fmt: skip
    try:
        observe.wait_running(job, workers)
        time.sleep(run.warmup)
        return observe.rate_over(job, RATE_S)
    finally:
        observe.stop(job)


# -- jobs on the real libraries ----------------------------------------------------

JOBS_DIR = observe.ROOT / "tests" / "jobs"
LIB_RATE_S = 8.0  # the job's own rate, nothing attached, over this long
APPLY_RUNS = 3  # before and after, alternating: medians of these
PYSPY_HZ = 50


@dataclass(frozen=True)
class LibCell:
    name: str
    job: str  # ddp | wds | hf | timm | notebook | lightning
    shape: LibShape
    knobs: tuple = ()
    apply: bool = False
    expect_failure: Optional[str] = None  # the job must fail, its error saying this
    expect_log: Optional[str] = None  # the library must write this to stderr
    launcher: tuple = ()  # torchrun's own options (ddp)
    # webdataset: the folder the shards are in, under --wds-dir: "k2" holds just the 2 the job
    # reads; "" the 4 written (a job reading some shards of a folder: train and val side by side)
    shard_folder: str = "k2"

    def command(self, run: Run, report: Path, workers: Optional[int] = None) -> list:
        workers = self.shape.workers if workers is None else workers
        common = ["--report", str(report), "--workers", str(workers), *self.knobs]
        if self.job == "ddp":
            return [run.job_python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                    str(self.shape.ranks), *self.launcher, str(JOBS_DIR / "ddp_job.py"), *common]  # fmt: skip
        if self.job == "wds":
            folder = str(Path(run.wds_dir) / self.shard_folder)
            return [run.job_python, str(JOBS_DIR / "wds_job.py"), "--shards-dir", folder, *common]
        if self.job == "timm":
            return [run.timm_python, str(JOBS_DIR / "timm_job.py"), "--data-dir", run.timm_dir, *common]
        return [run.job_python, str(JOBS_DIR / f"{self.job}_job.py"), *common]


def lib_matrix() -> list:
    ddp = ("--sample-ms", "2", "--batch-size", "8")
    iterable = dict(dataset_kind="iterable", parts=2)
    return [
        LibCell("ddp-balanced-w1", "ddp", LibShape(1, ranks=2), ddp, apply=True),
        LibCell(
            "ddp-slow-r1-w1",
            "ddp",
            LibShape(1, ranks=2, slow_rank=1),
            (*ddp, "--slow-rank", "1", "--slow-factor", "4"),
            apply=True,
        ),
        LibCell(
            "ddp-restart-w2",
            "ddp",
            LibShape(2, ranks=2),
            (*ddp, "--fail-rank", "0", "--fail-after-s", "6"),
            launcher=("--max-restarts", "1"),
        ),
        LibCell("wds-k2-w2", "wds", LibShape(2, **iterable), ("--shards", "2"), apply=True),
        LibCell("wds-k2-w4-noempty", "wds", LibShape(4, **iterable), ("--shards", "2", "--no-empty-check"), apply=True),
        LibCell(
            "wds-k2-w4-emptycheck",
            "wds",
            LibShape(4, **iterable),
            ("--shards", "2"),
            expect_failure="No samples found in dataset; perhaps you have fewer shards than workers",
        ),
        LibCell("wds-k2of4-w2", "wds", LibShape(2, **iterable), ("--shards", "2"), shard_folder=""),
        LibCell("hf-map-w1", "hf", LibShape(1), (), apply=True),
        LibCell(
            "hf-stream-m2-w4",
            "hf",
            LibShape(4, **iterable),
            ("--streaming", "--num-shards", "2"),
            apply=True,
            expect_log="Too many dataloader workers: 4 (max is dataset.num_shards=2). Stopping 2 dataloader workers.",
        ),
        LibCell("timm-j1", "timm", LibShape(1, persistent=True), (), apply=True),
        LibCell("notebook-w2", "notebook", LibShape(2), (), apply=True),
        LibCell("lightning-w2", "lightning", LibShape(2), ()),
    ]


def lib_setup(c: LibCell, run: Run) -> None:
    """The data a job reads, written once (outside the CPU lock: nothing is measured)."""
    import subprocess

    if c.job == "wds" and not all((Path(run.wds_dir) / f"train-{i:04d}.tar").exists() for i in range(4)):
        subprocess.run([run.job_python, str(JOBS_DIR / "wds_job.py"), "--make-shards", run.wds_dir, "--shards", "4"],
                       check=True)  # fmt: skip
    if c.job == "wds" and c.shard_folder:
        shards = int(c.knobs[c.knobs.index("--shards") + 1])
        folder = Path(run.wds_dir) / c.shard_folder
        folder.mkdir(exist_ok=True)
        for i in range(shards):
            if not (folder / f"train-{i:04d}.tar").exists():
                os.link(Path(run.wds_dir) / f"train-{i:04d}.tar", folder / f"train-{i:04d}.tar")
    if c.job == "timm" and not any(Path(run.timm_dir).glob("class*/*.jpg")):
        subprocess.run([run.timm_python, str(JOBS_DIR / "timm_job.py"), "--make-images", run.timm_dir], check=True)


def run_lib_cell(c: LibCell, run: Run, scratch: Path) -> Outcome:
    began = time.monotonic()
    outcome = Outcome(c.name)
    try:
        lib_setup(c, run)
    except Exception as failure:  # noqa: BLE001 (a missing library or venv: the cell's error)
        outcome.error = f"setup: {failure}"[-800:]
        return outcome
    with run.lock.measuring():
        began = time.monotonic()  # the cell's own time, not the wait for the lock
        report = Path(tempfile.mkdtemp(prefix=f"{c.name}-", dir=scratch))  # a repeat's own: records are truth
        job = observe.start_command(report, c.command(run, report))
        try:
            if c.expect_failure:
                outcome.checks = [_expected_failure(c, job)]
            elif c.launcher:
                _observe_restart(c, run, job, outcome)
            else:
                _observe_lib(c, run, scratch, job, outcome)
        except (AssertionError, RuntimeError) as failure:
            outcome.error = str(failure)[-800:]
        except Exception:  # noqa: BLE001 (a report shaped otherwise than the checks expect: this cell's error)
            import traceback

            outcome.error = traceback.format_exc()[-800:]
        finally:
            observe.stop(job)
    outcome.seconds = round(time.monotonic() - began, 1)
    return outcome


def _expected_failure(c: LibCell, job) -> Check:
    code = observe.exit_of(job, 120)
    errors = job.records("error")
    message = errors[0]["message"] if errors else observe._tail(job.report / "stderr.txt")
    line = next((ln for ln in message.splitlines() if c.expect_failure.split(";")[0] in ln), message.strip()[-160:])
    return Check(
        "job fails", "-", f"exit {code}: {line.strip()[:160]}", code not in (None, 0) and c.expect_failure in message
    )


def _observe_lib(c: LibCell, run: Run, scratch: Path, job, outcome: Outcome) -> None:
    views = observe.wait_trainers(job, c.shape.ranks)
    time.sleep(run.warmup)
    pollers = [observe.Poller(view) for view in views]
    for poller in pollers:
        poller.start()
    try:
        target = views[0].pid if c.job == "notebook" else job.pid  # the kernel; the launcher or trainer
        seen = observe.snapshot_views(target, views, pollers, run.duration, run.dltop_python)
        spied = observe.pyspy_in_next_many(list(zip(views, pollers)), run.duration, PYSPY_HZ) if seen.snapshot else []
    finally:
        for poller in pollers:
            poller.stop()
    if seen.snapshot is None:
        outcome.error = seen.error
        return
    unattached = observe.rate_over(views[0], LIB_RATE_S)
    stderr = observe._tail(job.report / "stderr.txt", 200_000)
    truth = LibTruth(
        seen.truths,
        {view.pid: view.rank for view in views},
        starving=_starving(job) if c.shape.dataset_kind == "iterable" else set(),
        exited=_exited(views, pollers, seen.truths),
        stderr=stderr,
        pyspy={view.pid: found for view, found in zip(views, spied)},
        spans={view.pid: _span_shares(poller, seen.truths[view.pid]) for view, poller in zip(views, pollers)},
    )
    outcome.checks = check_lib(seen.snapshot, truth, c.shape)
    if c.expect_log:
        logged = c.expect_log in stderr
        outcome.checks.append(Check("library says", "-", "logged" if logged else "not logged", logged))
    outcome.excerpt = lib_excerpt(seen.snapshot)
    outcome.truth = {
        "trainers": {
            f"rank {view.rank} ({view.pid})": {
                **truth_dict(seen.truths[view.pid]),
                "spans_percent": truth.spans[view.pid],
                "pyspy_50hz": truth.pyspy[view.pid],
            }
            for view in views
        },
        "starving_workers": sorted(truth.starving),
        "exited_workers": sorted(truth.exited),
        "batches_per_s_unattached": round(unattached, 2) if unattached else None,
        "library_log": [ln for ln in stderr.splitlines() if "Too many dataloader workers" in ln][:2],
    }  # fmt: skip
    if c.apply and run.apply:
        outcome.applied = apply_lib(c, run, scratch, job, seen.snapshot)


RESTART_WATCH_S = 40.0  # covers the failure (6 s after the first batch) and the ranks' new start


def _observe_restart(c: LibCell, run: Run, job, outcome: Outcome) -> None:
    """dltop snapshot across a rank's failure and torchrun's restart of every rank; the truth is
    the job's records (each rank's restart count, the rank that failed) and the launcher's life."""
    observe.wait_trainers(job, c.shape.ranks)
    seen = observe.snapshot_views(job.pid, [], [], max(run.duration, RESTART_WATCH_S), run.dltop_python)
    if seen.snapshot is None:
        outcome.error = seen.error
        return
    trainers = job.records("trainer")
    restart = max((r.get("restart", 0) for r in trainers), default=0)
    (failed,) = job.records("failed")
    truth = RestartTruth(
        first=sorted(r["pid"] for r in trainers if r.get("restart", 0) == 0),
        again=sorted(
            r["pid"] for r in trainers if r.get("restart", 0) == restart and restart and observe.alive(r["pid"])
        ),
        failed=failed,
        restart=restart,
        max_restarts=int(c.launcher[c.launcher.index("--max-restarts") + 1]),
        launcher_alive=job.proc.poll() is None,
    )
    outcome.checks = check_restart(seen.snapshot, truth)
    outcome.excerpt = {"job": seen.snapshot.get("job"), "ranks-restarted": finding(seen.snapshot, "ranks-restarted")}
    outcome.truth = truth.__dict__


def _starving(job) -> set:
    """Workers that never served a sample (no served-<pid>.json), alive or not: the loader's workers
    of this run (long epochs: the first epoch's set)."""
    served = {r["pid"] for r in job.records("served")}
    return {r["pid"] for r in job.records("worker")} - served


def _exited(views: list, pollers: list, truths: dict) -> set:
    """Workers no longer running at the window's end (a zombie until torch joins it, or reaped)."""
    gone = set()
    for view, poller in zip(views, pollers):
        _, tree = observe.tree_near(poller.poll.trees, truths[view.pid].ended)
        gone |= {r["pid"] for r in view.records("worker")} - set(tree)
    return gone


def _span_shares(poller, truth) -> dict:
    """{span: percent of the window} from the clock's named spans (DDP: backward, the all-reduce)."""
    records = [r for r in poller.poll.timings if truth.began <= r["at"] <= truth.ended]
    if len(records) < 2 or records[-1]["total_s"] <= records[0]["total_s"]:
        return {}
    first, last = records[0].get("spans") or {}, records[-1].get("spans") or {}
    total = records[-1]["total_s"] - records[0]["total_s"]
    return {k: round(100 * (last[k] - first.get(k, 0.0)) / total, 1) for k in last}


def lib_excerpt(report: dict) -> dict:
    loaders = []
    for loader in report.get("loaders", []):
        loader = dict(loader)
        loader["workers_exited"] = f"{len(loader.get('workers_exited') or [])} entries"
        loaders.append(loader)
    return {
        "job": {
            k: report["job"].get(k) for k in ("pid", "start_method", "trainer_pids", "launcher_pid", "torch_version")
        },
        "processes": [
            {k: p.get(k) for k in ("pid", "ppid", "role", "name", "activity", "cpu_percent", "state")}
            for p in report.get("processes", [])
        ],
        "loaders": loaders,
        "findings": [
            {
                k: f.get(k)
                for k in ("id", "severity", "title", "detail", "pids", "evidence", "suggestion", "explained_by")
            }
            for f in report.get("findings", [])
        ],
    }


def apply_lib(c: LibCell, run: Run, scratch: Path, job, report: dict) -> dict:
    """The first num_workers dltop asks for (what a user would paste), applied to the whole job
    (one flag: every rank), against the job as it was: APPLY_RUNS fresh runs of each, alternating,
    the job's own batches/s over LIB_RATE_S, nothing attached; a run that fails says why."""
    asked = next(((fid, ch) for fid, ch in advice(report, c.shape.workers) if "num_workers" in ch), None)
    if asked is None:
        return {"asked": None, "verdict": "nothing suggested"}
    observe.stop(job)
    fid, changes = asked
    target = changes["num_workers"]
    rates: dict = {"before": [], "after": []}
    failed = None
    for round_ in range(APPLY_RUNS):
        order = [("before", c.shape.workers), ("after", target)]
        for label, workers in order[::-1] if round_ % 2 else order:
            rate, error = _lib_rate(c, run, scratch / f"{c.name}-{label}{round_}", workers)
            rates[label].append(round(rate, 2) if rate else None)
            if error and label == "after":
                failed = error
        if failed:
            break  # the advice breaks the job: once is enough
    median = {k: statistics.median([r for r in v if r]) if any(v) else None for k, v in rates.items()}
    ratio = median["after"] / median["before"] if median["before"] and median["after"] else None
    verdict = ("the job fails with it" if failed else "helped" if ratio and ratio >= 1.05
               else "hurt" if ratio and ratio < 0.95 else "no change")  # fmt: skip
    return {
        "asked": {"finding": fid, **changes},
        "before_batches_per_s": rates["before"],
        "after_batches_per_s": rates["after"],
        "before_median": round(median["before"], 2) if median["before"] else None,
        "after_median": round(median["after"], 2) if median["after"] else None,
        "ratio": round(ratio, 2) if ratio else None,
        "verdict": verdict,
        "failure": failed,
    }


def _lib_rate(c: LibCell, run: Run, report: Path, workers: int) -> tuple:
    """(batches/s of rank 0 over LIB_RATE_S, nothing attached, or None; the error if it failed)."""
    job = observe.start_command(report, c.command(run, report, workers))
    try:
        views = observe.wait_trainers(job, c.shape.ranks)
        time.sleep(run.warmup)
        rate = observe.rate_over(views[0], LIB_RATE_S)
        if job.proc.poll() is not None:
            raise RuntimeError(f"job exited {job.proc.returncode}")
        return rate, None
    except (AssertionError, RuntimeError) as failure:
        errors = job.records("error")
        lines = (errors[0]["message"] if errors else str(failure)).strip().splitlines() or ["failed"]
        return None, next((ln for ln in lines if "Error: " in ln), lines[-1])[:200]
    finally:
        observe.stop(job)


def lib_run_speedup(outcomes: list) -> Optional[Check]:
    """Once both DDP cells have run: the slow cell's run_speedup against the two jobs' own rates
    (the medians of the apply's fresh runs as they were, else the rate after the snapshot)."""
    slow = next((o for o in outcomes if o.name.startswith("ddp-slow") and o.excerpt), None)
    balanced = next((o for o in outcomes if o.name.startswith("ddp-balanced") and o.truth), None)
    if not slow or not balanced or any(c.name == "run_speedup" for c in slow.checks):
        return None
    rate = lambda o: (o.applied or {}).get("before_median") or o.truth.get("batches_per_s_unattached")  # noqa: E731
    found = check_run_speedup(slow.excerpt, rate(slow), rate(balanced))
    slow.checks.append(found)
    return found


# -- stopped runs, pipelines, advice (truth_stopped.py, truth_pipelines.py, truth_advice.py) ----------

FILLS = {
    truth_stopped.StopCell: truth_stopped.run_stop_cell,
    truth_pipelines.PipeCell: truth_pipelines.run_pipe_cell,
    truth_advice.AdviceCell: truth_advice.run_advice_cell,
}


def run_module_cell(c, run: Run, scratch: Path) -> Outcome:
    outcome = Outcome(c.name)
    fill = FILLS[type(c)]
    with run.lock.measuring():
        began = time.monotonic()
        try:
            fill(c, run, Path(tempfile.mkdtemp(prefix=f"{c.name}-", dir=scratch)), outcome)
        except (AssertionError, RuntimeError) as failure:
            outcome.error = str(failure)[-800:]
        except Exception:  # noqa: BLE001 (a report shaped otherwise than the checks expect: this cell's error)
            import traceback

            outcome.error = traceback.format_exc()[-800:]
    outcome.seconds = round(time.monotonic() - began, 1)
    return outcome


# -- the table ----------------------------------------------------------------------------------


def markdown(outcomes: list, header: str) -> str:
    names = []
    for outcome in outcomes:
        names += [c.name for c in outcome.checks if c.name not in names]
    lines = [header, "", "| cell | " + " | ".join(names) + " | applied |", "|---" * (len(names) + 2) + "|"]
    for outcome in outcomes:
        by = {c.name: c for c in outcome.checks}
        row = [f"{by[n].mark} {by[n].dltop} / {by[n].truth}" if n in by else "" for n in names]
        if outcome.error:
            row = [f"ERROR: {outcome.error[:200]}"] + [""] * (len(names) - 1)
        applied = outcome.applied or {}
        shown = (f"{applied.get('asked')} → {applied.get('ratio')}x ({applied.get('verdict')})"
                 + (" UNDOES ITSELF" if applied.get("undoes_itself") else "")) if applied else ""  # fmt: skip
        if applied and not applied.get("asked"):
            shown = applied.get("verdict", "")
        name = f"{outcome.name} ({outcome.seconds:.0f} s)"
        lines.append(f"| {name} | " + " | ".join(cell.replace("|", "/") for cell in row) + f" | {shown} |")
    lines += ["", summary(outcomes)]
    return "\n".join(lines) + "\n"


def summary(outcomes: list) -> str:
    checks = [c for o in outcomes for c in o.checks if c.ok is not None]
    failed: dict = {}
    for outcome in outcomes:
        for c in outcome.checks:
            if c.ok is False:
                failed.setdefault(c.name, []).append(outcome.name)
    cells_ok = sum(1 for o in outcomes if not o.error and all(c.ok is not False for c in o.checks))
    text = [f"**{sum(c.ok for c in checks)}/{len(checks)} checks right; {cells_ok}/{len(outcomes)} cells all right.**"]
    text += [f"- {name} ✗ in {len(cells)}: {', '.join(cells)}" for name, cells in sorted(failed.items())]
    errors = [o.name for o in outcomes if o.error]
    if errors:
        text.append(f"- errors: {', '.join(errors)}")
    applied = [o for o in outcomes if o.applied and o.applied.get("ratio")]
    if applied:
        text.append("- advice applied: " + ", ".join(f"{o.name} {o.applied['ratio']}x" for o in applied))
    return "\n".join(text)


def write(out: Optional[str], outcomes: list, header: str) -> None:
    if not out:
        return
    base = Path(out).with_suffix("") if Path(out).suffix in (".md", ".json") else Path(out)
    base.with_suffix(".json").write_text(json.dumps([o.to_dict() for o in outcomes], indent=1))
    stopped = [o for o in outcomes if o.name.startswith("stop-")]
    text = markdown(outcomes, header)
    if stopped:
        text += "\n## Stopped runs\n\n" + truth_stopped.table(stopped)
    pipes = [o for o in outcomes if o.name.startswith("pipe-")]
    if pipes:
        text += "\n## Input pipelines\n\n" + truth_pipelines.table(pipes)
    advised = [o for o in outcomes if o.name.startswith("adv-")]
    if advised:
        text += "\n## Advice: predicted vs measured\n\n" + truth_advice.table(advised)
    base.with_suffix(".md").write_text(text)


def print_outcome(outcome: Outcome) -> None:
    print(f"\n== {outcome.name} ({outcome.seconds:.0f} s)" + (f"  ERROR {outcome.error}" if outcome.error else ""))
    for c in outcome.checks:
        print(f"   {c.mark} {c.name:<22} dltop {c.dltop:<40} truth {c.truth}")
    if outcome.applied:
        print(f"   applied: {json.dumps(outcome.applied)}")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--cell", action="append", help="run only cells matching this glob (repeatable; 'imagenet'; 'stop-*')"
    )
    parser.add_argument(
        "--subset",
        choices=["all", "compat", "libs", "stopped", "pipelines", "advice"],
        default="all",
        help="libs: the jobs on real libraries (tests/jobs) instead of the matrix; stopped: the stopped runs; "
        "pipelines: input pipelines that are not DataLoader workers; advice: the suggested count and its "
        "predicted speed-up applied (with 'all' these three run only when --cell names them)",
    )
    parser.add_argument("--quick", action="store_true", help="advice: 2 configurations a workload, 2 runs each")
    parser.add_argument("--runs", type=int, help="advice: fresh runs per setting (3; 2 with --quick)")
    parser.add_argument("--timm-python", default="/work/venv-timm/bin/python", help="python with timm (libs)")
    parser.add_argument("--wds-dir", default="/tmp/truth-wds", help="webdataset shards (libs; made once)")
    parser.add_argument("--timm-dir", default="/tmp/truth-timm", help="JPEG class folders for timm (libs; made once)")
    parser.add_argument("--repeat", type=int, default=1, help="run each chosen cell this many times (noise)")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--duration", type=float, default=15.0, help="dltop snapshot --duration (s)")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds after the first batches before watching")
    parser.add_argument("--job-python", default=sys.executable, help="python that runs the jobs (tests/compat)")
    parser.add_argument("--dltop-python", default=sys.executable, help="python that runs dltop")
    parser.add_argument("--images", default="/tmp/truth-images", help="JPEGs for the imagenet cell (made once)")
    parser.add_argument(
        "--pyspy-rate",
        type=int,
        action="append",
        default=[],
        help="also sample the trainer with plain py-spy at this rate (Hz) after dltop, vs the clock",
    )
    parser.add_argument("--no-apply", action="store_true", help="skip rerunning jobs with dltop's advice")
    parser.add_argument("--lock-hold", type=float, default=300.0, help="keep the CPU lock across cells this long")
    parser.add_argument("--no-lock", action="store_true", help=f"do not hold {LOCK} exclusively per cell")
    parser.add_argument("--tree", help="run dltop and the jobs from this copy of the source tree")
    parser.add_argument("--out", help="write the table to OUT.md and OUT.json (updated after every cell)")
    args = parser.parse_args()
    stopped, pipes = truth_stopped.stopped_cells(), truth_pipelines.pipeline_cells()
    advised = truth_advice.advice_cells(args.quick)
    subsets = {"libs": lib_matrix(), "stopped": stopped, "pipelines": pipes, "advice": advised}
    cells = subsets.get(args.subset) or matrix()
    stopped = stopped + pipes + advised  # with 'all', these run only when --cell names them
    if args.subset == "compat":
        cells = [c for c in cells if c.name in COMPAT]
    names = [c.name for c in cells] + (["imagenet"] if args.subset == "all" else [])
    named_only = [c.name for c in stopped] if args.subset == "all" else []  # run when --cell names them
    if args.list:
        print("\n".join(names + named_only))
        return
    if args.tree:
        observe.use_tree(Path(args.tree))
    chosen = [n for n in names if not args.cell or any(fnmatch.fnmatch(n, p) for p in args.cell)]
    chosen += [n for n in named_only if args.cell and any(fnmatch.fnmatch(n, p) for p in args.cell)]
    cells = cells + (stopped if named_only else [])
    lock = CpuLock(None if args.no_lock else LOCK, args.lock_hold)
    run = Run(args.duration, args.warmup, args.job_python, args.dltop_python, lock, not args.no_apply,
              tuple(args.pyspy_rate), args.timm_python, args.wds_dir, args.timm_dir, args.images,
              args.runs or (2 if args.quick else 3))  # fmt: skip
    header = (f"dltop truth table ({time.strftime('%Y-%m-%d %H:%M')}; dltop from {observe.TREE['root']}; "
              f"job python {args.job_python}; "
              f"snapshot {args.duration:g} s): dltop / truth per check")  # fmt: skip
    outcomes: list = []
    with tempfile.TemporaryDirectory(prefix="dltop-truth-") as scratch:
        for c in [c for c in cells if c.name in chosen for _ in range(args.repeat)]:
            if type(c) in FILLS:
                outcomes.append(run_module_cell(c, run, Path(scratch)))
            elif isinstance(c, LibCell):
                outcomes.append(run_lib_cell(c, run, Path(scratch)))
                lib_run_speedup(outcomes)  # a check of the slow DDP cell, once both DDP cells ran
            else:
                outcomes.append(run_cell(c, run, Path(scratch)))
            if args.repeat > 1:
                outcomes[-1].name += f" #{sum(o.name.startswith(c.name + ' #') for o in outcomes[:-1]) + 1}"
            print_outcome(outcomes[-1])
            write(args.out, outcomes, header)
        if "imagenet" in chosen:
            for outcome in run_imagenet(run, Path(scratch), Path(args.images)):
                outcomes.append(outcome)
                print_outcome(outcome)
            write(args.out, outcomes, header)
    lock.release()
    print("\n" + summary(outcomes))
    if any(o.name.startswith("stop-") for o in outcomes):
        print("\n" + truth_stopped.table([o for o in outcomes if o.name.startswith("stop-")]))
    if any(o.name.startswith("pipe-") for o in outcomes):
        print("\n" + truth_pipelines.table([o for o in outcomes if o.name.startswith("pipe-")]))
    if any(o.name.startswith("adv-") for o in outcomes):
        print("\n" + truth_advice.table([o for o in outcomes if o.name.startswith("adv-")]))


if __name__ == "__main__":
    main()

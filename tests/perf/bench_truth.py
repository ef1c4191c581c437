"""Does dltop tell the truth? A matrix of real jobs, each with its own ground truth, under
``dltop snapshot --json`` (issue 10 §5). Run by hand, not in CI:

    python tests/perf/bench_truth.py --out /tmp/truth          # the whole matrix (~20 min)
    python tests/perf/bench_truth.py --list                    # cell names
    python tests/perf/bench_truth.py --cell 'spawn-nonp-short-*' --cell imagenet
    python tests/perf/bench_truth.py --subset compat --job-python /work/venv-torch24/bin/python

Cells: start method (fork | spawn | forkserver) x persistent or not x epoch length (short: 10
batches; long: no epoch end in the window) x num_workers 0 / 1 / 2 / 4 x load (cpu: 5 ms of CPU
per sample; io: 10 ms per sample waiting without CPU; compute: the 40 ms step dominates), plus
workers renamed to "python" (issue 10 §3) and the imagenet-like job (truth_jobs.py, §6).
Each cell prints dltop's figure beside the job's own truth, ✓/✗ per check (truth_checks.py),
and for cells marked "apply" reruns the job with dltop's suggested settings and compares the
job's own batch rate before and after (nothing attached while rates are measured).
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

import truth_observe as observe
from truth_checks import Check, Shape, advice, check_cell, finding, train_loader

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
    method; the crossings issue 10 names (spawn short epochs, renamed workers, I/O at many workers)."""
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


def run_cell(c: Cell, run: Run, scratch: Path) -> Outcome:
    began = time.monotonic()
    outcome = Outcome(c.name)
    with run.lock.measuring():
        job = observe.start(scratch / c.name, c.argv(), run.job_python)
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


# -- imagenet-like (issue 10 §6) ----------------------------------------------------------------


def run_imagenet(run: Run, scratch: Path, images: Path, snapshots: int = 3) -> list:
    """-j1 and -j2 with default intra-op threads: several snapshots each (do the rules agree with
    each other and across snapshots?); then the job's own batch rate, nothing attached, for each
    starting point, each change dltop suggested and OMP_NUM_THREADS=1, in two rounds (the second
    in reverse order: the machine drifts) — does the advice help, and is the best change one it
    named?"""
    if not any(images.glob("*.jpg")):
        import subprocess

        subprocess.run([run.job_python, str(observe.JOBS), "images", str(images)], check=True)
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
        lines.append(f"| {outcome.name} | " + " | ".join(cell.replace("|", "/") for cell in row) + f" | {shown} |")
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
    base.with_suffix(".md").write_text(markdown(outcomes, header))


def print_outcome(outcome: Outcome) -> None:
    print(f"\n== {outcome.name} ({outcome.seconds:.0f} s)" + (f"  ERROR {outcome.error}" if outcome.error else ""))
    for c in outcome.checks:
        print(f"   {c.mark} {c.name:<22} dltop {c.dltop:<40} truth {c.truth}")
    if outcome.applied:
        print(f"   applied: {json.dumps(outcome.applied)}")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cell", action="append", help="run only cells matching this glob (repeatable; 'imagenet')")
    parser.add_argument("--subset", choices=["all", "compat"], default="all")
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
    parser.add_argument("--tree", help="run dltop (and the job's dltop.demo.job) from this copy of the source tree")
    parser.add_argument("--out", help="write the table to OUT.md and OUT.json (updated after every cell)")
    args = parser.parse_args()
    cells = matrix()
    if args.subset == "compat":
        cells = [c for c in cells if c.name in COMPAT]
    names = [c.name for c in cells] + (["imagenet"] if args.subset == "all" else [])
    if args.list:
        print("\n".join(names))
        return
    if args.tree:
        observe.use_tree(Path(args.tree))
    chosen = [n for n in names if not args.cell or any(fnmatch.fnmatch(n, p) for p in args.cell)]
    lock = CpuLock(None if args.no_lock else LOCK, args.lock_hold)
    run = Run(args.duration, args.warmup, args.job_python, args.dltop_python, lock, not args.no_apply,
              tuple(args.pyspy_rate))  # fmt: skip
    header = (f"dltop truth table ({time.strftime('%Y-%m-%d %H:%M')}; dltop from {observe.TREE['root']}; "
              f"job python {args.job_python}; "
              f"snapshot {args.duration:g} s): dltop / truth per check")  # fmt: skip
    outcomes: list = []
    with tempfile.TemporaryDirectory(prefix="dltop-truth-") as scratch:
        for c in [c for c in cells if c.name in chosen for _ in range(args.repeat)]:
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


if __name__ == "__main__":
    main()

"""Is input-bound's advice right in number? For each configuration of a job, the worker count
dltop suggests and the speed-up it predicts, against the job's own batches/s when that count is
applied, with nothing attached. Run as ``bench_truth.py --subset advice`` (``--quick``: the
first 2 configurations of each workload and the first imagenet one, 2 runs each).

Workloads (tests/jobs/train.py, persistent fork workers, no epoch end in the window): cpu (each
sample costs CPU: a decode), io (each sample waits without CPU: a slow read), mixed (both); and
the imagenet-like job (tests/jobs/imagenet_job.py: JPEG decode and crop in the workers, a small
CNN on the trainer's intra-op threads). Each runs at several current worker counts, batch sizes
and step times (imagenet: CNN widths), named ``adv-<workload>-<n>``.

Per cell: the job starts in its own session, warms up, and ``dltop snapshot --duration 15 --json``
runs twice, back to back (the same answer twice?). The first report's input-bound finding gives
the suggested count and the predicted speed-up (evidence ``predicted_speedup`` with its
``_low``/``_high``, else min(speedup_by_pace, speedup_by_cpus): the table says which). Then fresh
runs of the job with nothing attached, at the current count, the suggested one, one fewer and
plenty (half as many again as the suggested, at least 2 more: where the best is measured), in
alternating order (``--runs`` rounds, ~16 s a run with its start), each the job's own batches/s
over RATE_S (timing-<pid>.json); and ``dltop bench <bench_args>``, what the TUI's ``b`` key runs:
the finding's twin, its ratio of suggested to current. A cell holds /tmp/dltop-cpu.lock (the
harness's CpuLock) throughout.

Goals the summary checks: the prediction's median error within 10% of the measured ratio and
none over 25%; the suggested count the fewest within the measured best's noise (the best of the
counts run, plenty's as a rule: the suggested count within the runs' spread of it, at least the 5%
dltop bench's "fewest within 5% of the best" allows, one fewer not); the twin's median error
within 10%. Where dltop asks for no other count (the CPUs are full, no input-bound finding), one
worker more is timed beside the current count: the advice holds where it is no faster beyond the
runs' noise.

Duration: a cell takes ~70 s (start, warm-up, two snapshots, the twin) and ~16 s a fresh run, 4
runs a round (3 where one fewer is the current count): ~3.3 min at 2 runs, ~4.3 min at 3; the quick
set (7 cells) ~25 minutes; the full matrix (34 cells) about 95 minutes at 2 runs.
The configurations are sized for a machine of 2-4 CPUs: on more, the cpu cells' suggestions stop at
the trainer's pace instead. The imagenet cells need Pillow where the jobs run (``pip install --target DIR pillow`` and
DIR on PYTHONPATH will do).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import truth_observe as observe
from truth_checks import Check, finding

RATE_S = 10.0  # each fresh run's own batches/s over this long
WARMUP_S = 5.0  # the watched job runs this long before dltop attaches (its prefetch fills)
NOISE_FLOOR = 0.05  # dltop bench's "fewest workers within 5% of the best": never a tighter noise
PREDICTION_GOAL, PREDICTION_MAX, TWIN_GOAL = 10.0, 25.0, 10.0  # percent
QUICK = 2  # configurations per workload in --quick (imagenet: 1)


@dataclass(frozen=True)
class AdviceCell:
    """One configuration: the workload, its current count, batch size and step (ms; imagenet:
    the CNN's width), and what a sample costs (CPU ms, waiting ms)."""

    workload: str  # cpu | io | mixed | imagenet
    index: int
    workers: int
    batch: int
    step: float
    cpu_ms: float = 0.0
    io_ms: float = 0.0

    @property
    def name(self) -> str:
        return f"adv-{self.workload}-{self.index}"

    @property
    def label(self) -> str:
        if self.workload == "imagenet":
            return f"j{self.workers} b{self.batch} width {self.step:g}"
        cost = " + ".join(f"{ms:g} ms {what}" for ms, what in ((self.cpu_ms, "cpu"), (self.io_ms, "io")) if ms)
        return f"w{self.workers} b{self.batch} step {self.step:g} ms, {cost}/sample"

    def argv(self, workers: int, images: str) -> list:
        """The job's command (truth_observe.start's ['train' | 'imagenet', args...]) at ``workers``."""
        if self.workload == "imagenet":
            return ["imagenet", "--images", images, "-j", str(workers), "-b", str(self.batch), "--width",
                    f"{self.step:g}"]  # fmt: skip
        slow = ["--slow-every", "1", "--slow-ms", f"{self.io_ms:g}"] if self.io_ms else []
        return ["train", "--workers", str(workers), "--persistent", "--batches", "100000", "--batch-size",
                str(self.batch), "--sample-ms", f"{self.cpu_ms:g}", *slow, "--step-ms", f"{self.step:g}"]  # fmt: skip


# (workers, batch, step, cpu ms, io ms) per workload; the first QUICK of each are the quick set
CONFIGS = {
    "cpu": [(1, 4, 10, 5, 0), (0, 4, 10, 3, 0), (1, 8, 20, 2, 0), (2, 4, 10, 10, 0), (1, 16, 5, 1, 0),
            (1, 4, 20, 8, 0), (0, 8, 20, 2, 0), (2, 2, 5, 10, 0), (1, 32, 10, 0.5, 0), (3, 4, 5, 6, 0)],
    "io": [(1, 4, 10, 0, 10), (2, 8, 5, 0, 5), (0, 4, 10, 0, 5), (1, 8, 20, 0, 4), (4, 4, 5, 0, 20),
           (2, 16, 10, 0, 2), (1, 2, 20, 0, 30), (3, 4, 5, 0, 10), (0, 8, 5, 0, 2), (2, 4, 40, 0, 15)],
    "mixed": [(1, 4, 10, 2, 8), (2, 8, 5, 1, 4), (0, 4, 10, 2, 5), (1, 8, 20, 1, 6), (2, 4, 5, 3, 10),
              (1, 16, 10, 0.5, 2), (3, 4, 5, 2, 12), (0, 8, 10, 1, 3), (2, 2, 10, 4, 20), (1, 4, 40, 4, 16)],
    "imagenet": [(0, 16, 4, 0, 0), (2, 16, 2, 0, 0), (0, 32, 8, 0, 0), (1, 16, 1, 0, 0)],
}  # fmt: skip


def advice_cells(quick: bool = False) -> list:
    return [
        AdviceCell(workload, index, *config)
        for workload, configs in CONFIGS.items()
        for index, config in enumerate(configs, 1)
        if not quick or index <= (1 if workload == "imagenet" else QUICK)
    ]


# -- what dltop said ------------------------------------------------------------------------------


def advised(report: Optional[dict], current: int) -> dict:
    """The input-bound finding's answer: {suggested, change, predicted, low, high, source, binding,
    bench_args}; suggested None where it asks for no other count."""
    found = finding(report or {}, "input-bound")
    evidence = (found or {}).get("evidence") or {}
    change = dict(evidence.get("change") or {})
    predicted, source = evidence.get("predicted_speedup"), "predicted_speedup"
    if predicted is None:
        bounds = [evidence.get(k) for k in ("speedup_by_pace", "speedup_by_cpus") if evidence.get(k) is not None]
        predicted, source = (min(bounds) if bounds else None), "min(speedup_by_pace, speedup_by_cpus)"
    suggested = evidence.get("suggested_workers")
    asks = isinstance(suggested, int) and (suggested != current or bool(change))
    return {
        "finding": bool(found),
        "wait": evidence.get("data_wait_percent"),
        "suggested": suggested if asks else None,
        "range": evidence.get("suggested_range"),
        "change": change,
        "predicted": predicted,
        "low": evidence.get("predicted_speedup_low"),
        "high": evidence.get("predicted_speedup_high"),
        "source": source,
        "binding": evidence.get("binding"),
        "bench_args": (found or {}).get("bench_args"),
        "suggestion": (found or {}).get("suggestion"),
    }


@contextlib.contextmanager
def _running(cell: AdviceCell, run, report: Path, workers: int, warmup: float, env: Optional[dict] = None):
    """The job at ``workers`` in its own session, iterating for ``warmup`` s; killed after."""
    job = observe.start(report, cell.argv(workers, run.images), run.job_python, env)
    try:
        observe.wait_running(job, workers)
        time.sleep(warmup)
        yield job
    finally:
        observe.stop(job)


def _watch(cell: AdviceCell, run, scratch: Path) -> list:
    """Two snapshots of the job back to back: [Observation (dltop's JSON or its error, the clock's truth)]."""
    with _running(cell, run, scratch / "watched", cell.workers, max(run.warmup, WARMUP_S)) as job:
        poller = observe.Poller(job)
        poller.start()
        try:
            return [observe.snapshot(job, poller, run.duration, run.dltop_python) for _ in range(2)]
        finally:
            poller.stop()


# -- what the job does ----------------------------------------------------------------------------


def _fresh_rate(cell: AdviceCell, run, report: Path, workers: int, env: Optional[dict]) -> Optional[float]:
    """One fresh run's own batches/s over RATE_S after the warm-up, nothing attached (None: it failed)."""
    try:
        with _running(cell, run, report, workers, run.warmup, env) as job:
            return observe.rate_over(job, RATE_S)
    except (AssertionError, RuntimeError):
        return None


def measure(cell: AdviceCell, run, scratch: Path, settings: dict) -> dict:
    """{label: [batches/s per run]} for {label: (workers, env)}, ``run.runs`` rounds in alternating
    order (the machine drifts: each setting sees its start and its end)."""
    labels = list(settings)
    rates: dict = {label: [] for label in labels}
    for round_ in range(run.runs):
        for label in labels[::-1] if round_ % 2 else labels:
            workers, env = settings[label]
            rates[label].append(_fresh_rate(cell, run, scratch / f"{label}{round_}", workers, env))
    return rates


def _median(rates: list) -> Optional[float]:
    known = [r for r in rates if r]
    return statistics.median(known) if known else None


def _spread(rates: list) -> float:
    """(max - min) / median of one setting's runs: how far its own runs disagree."""
    known = [r for r in rates if r]
    return (max(known) - min(known)) / statistics.median(known) if len(known) > 1 else 0.0


def plenty(target: int) -> int:
    """More workers than the suggestion, where the measured best lies: a pace that still creeps up
    past the knee (each worker's wait for a CPU grows with the others) would make one fewer look as
    good as the suggestion and not as good as the best."""
    return target + max(2, math.ceil(target / 2))


def verdict(rates: dict, more: bool) -> dict:
    """Ratios to the current count, and whether the suggested count is the fewest within the noise
    of the best measured (plenty's, where it was run): it within it, one fewer not (one fewer is
    the current count where no "fewer" was run; not judged where the suggestion is no more workers
    than now)."""
    medians = {label: _median(r) for label, r in rates.items()}
    below = "fewer" if "fewer" in rates else "old"
    old, new, fewer = medians["old"], medians["new"], medians[below]
    noise = max(NOISE_FLOOR, *(_spread(rates[label]) for label in ("new", below, "plenty") if label in rates))
    found = {"medians": medians, "noise": noise, "measured": new / old if old and new else None,
             "fewer": fewer / old if old and fewer else None, "within_noise": None, "why": ""}  # fmt: skip
    if not old or not new or not fewer or not more:
        return found
    best = max(m for m in medians.values() if m)
    at_best, fewer_worse = new >= best * (1 - noise), fewer < best * (1 - noise)
    why = "" if at_best and fewer_worse else "one fewer as good" if at_best else "below the best measured"
    plentiful = medians.get("plenty")
    ratio = plentiful / old if plentiful else None
    return {**found, "within_noise": at_best and fewer_worse, "why": why, "plenty": ratio}


def twin(args: Optional[list], run, scratch: Path) -> Optional[dict]:
    """``dltop bench <bench_args>`` (the TUI's ``b``): the twin's ratio of suggested to current,
    and each config's samples/s per round."""
    if not args:
        return None
    out = scratch / "twin.json"
    command = [run.dltop_python, "-m", "dltop", "bench", *args, "--json", str(out)]
    env = {**os.environ, **observe._tree_env()}
    done = subprocess.run(command, cwd=observe.TREE["root"], env=env, capture_output=True, text=True, timeout=600)
    try:
        doc = json.loads(out.read_text())
        suggested = doc["compare"][-1]
    except (OSError, ValueError, KeyError, IndexError):
        return {"error": f"dltop bench exit {done.returncode}: {done.stderr.strip()[-300:]}"}
    rates: dict = {}
    for trial in doc.get("trials", []):
        rates.setdefault(trial["label"], []).append(round(trial["samples_per_s"], 1))
    return {"ratio": suggested["ratio"], "low": suggested.get("ratio_low"), "high": suggested.get("ratio_high"),
            "samples_per_s": rates}  # fmt: skip


# -- one cell -------------------------------------------------------------------------------------


def _ensure_images(run) -> None:
    folder = Path(run.images)
    if not any(folder.glob("*.jpg")):
        job = observe.TREE["root"] / observe.JOBS["imagenet"]
        subprocess.run([run.job_python, str(job), "--make-images", str(folder)], check=True)


def _error(estimate: Optional[float], measured: Optional[float]) -> Optional[float]:
    return 100 * (estimate / measured - 1) if estimate and measured else None


def run_advice_cell(cell: AdviceCell, run, scratch: Path, outcome) -> None:
    """Fills ``outcome`` (bench_truth.Outcome): the row (truth), both reports' findings (excerpt), checks."""
    if cell.workload == "imagenet":
        _ensure_images(run)
    seen = _watch(cell, run, scratch)
    if seen[0].snapshot is None:
        outcome.error = seen[0].error
        return
    first, second = (advised(s.snapshot, cell.workers) for s in seen)
    row: dict = {"config": cell.label, "current": cell.workers, "advice": first, "again": second,
                 "clock_wait": [round(s.truth.wait_percent, 1) if s.truth and s.truth.wait_percent is not None
                                else None for s in seen]}  # fmt: skip
    outcome.excerpt = {f"report {i + 1}": finding(s.snapshot or {}, "input-bound") for i, s in enumerate(seen)}
    outcome.truth = row
    target = first["suggested"]
    if target is None:
        said = " ".join((first["suggestion"] or "no other count suggested").split())[:100]
        row["skipped"] = said if first["finding"] else "no input-bound finding"
        _one_more(cell, run, scratch, row, outcome)
        return
    env = {"OMP_NUM_THREADS": str(first["change"]["OMP_NUM_THREADS"])} if "OMP_NUM_THREADS" in first["change"] else None
    settings = {"old": (cell.workers, None), "new": (target, env)}
    if target - 1 not in (cell.workers, -1) and target > cell.workers:
        settings["fewer"] = (target - 1, env)
    if target > cell.workers:
        settings["plenty"] = (plenty(target), env)
    rates = measure(cell, run, scratch, settings)
    row["rates"] = {k: [round(r, 2) if r else None for r in v] for k, v in rates.items()}
    row.update(verdict(rates, target > cell.workers))
    row["error"] = _error(first["predicted"], row["measured"])
    row["twin"] = twin(first["bench_args"], run, scratch)
    row["twin_error"] = _error((row["twin"] or {}).get("ratio"), row["measured"])
    outcome.checks = _checks(row)


def _one_more(cell: AdviceCell, run, scratch: Path, row: dict, outcome) -> None:
    """Where dltop asks for no other count, is it right? One worker more, timed beside the current
    count (alternating, nothing attached): the advice holds where it is not faster beyond the noise."""
    rates = measure(cell, run, scratch, {"old": (cell.workers, None), "more": (cell.workers + 1, None)})
    row["rates"] = {k: [round(r, 2) if r else None for r in v] for k, v in rates.items()}
    old, more = _median(rates["old"]), _median(rates["more"])
    row["noise"] = max(NOISE_FLOOR, _spread(rates["old"]), _spread(rates["more"]))
    row["one_more"] = more / old if old and more else None
    holds = row["one_more"] <= 1 + row["noise"] if row["one_more"] is not None else None
    outcome.checks = [Check("no other count helps", row["skipped"][:60], f"one more {_ratio(row['one_more'])}"
                            f" (noise {row['noise'] * 100:.0f}%)", holds)]  # fmt: skip


def _checks(row: dict) -> list:
    first, again = row["advice"], row["again"]
    error, twin_error = row["error"], row["twin_error"]
    measured = f"{row['measured']:.2f}x" if row["measured"] else "—"
    fewer = f"one fewer {row['fewer']:.2f}x" if row.get("fewer") and "fewer" in row["rates"] else "one fewer = current"
    return [
        Check("prediction", f"{_predicted(first)} ({_pct(error)})", measured,
              abs(error) <= PREDICTION_MAX if error is not None else None),
        Check("fewest within noise", f"{first['suggested']} workers", f"{fewer}, {_plenty(row, first)} (noise"
              f" {row['noise'] * 100:.0f}%)", row["within_noise"]),
        Check("twin", f"{row['twin']['ratio']:.2f}x ({_pct(twin_error)})" if twin_error is not None else "—",
              measured, abs(twin_error) <= PREDICTION_MAX if twin_error is not None else None),
        Check("same answer twice", f"{first['suggested']} / {again['suggested']}", "equal", _agree(row)),
    ]  # fmt: skip


def _plenty(row: dict, advice: dict) -> str:
    """Where the best was measured: the plenty count's ratio."""
    if row.get("plenty") is None:
        return "plenty not run"
    return f"{plenty(advice['suggested'])} workers {row['plenty']:.2f}x"


def _predicted(advice: dict) -> str:
    if advice["predicted"] is None:
        return "—"
    interval = f" [{advice['low']:.2f}–{advice['high']:.2f}]" if advice["low"] and advice["high"] else ""
    return f"{advice['predicted']:.2f}x{interval}"


def _pct(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:+.0f}%"


def _ratio(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:.2f}x"


# -- the table and its summary --------------------------------------------------------------------


def table(outcomes: list) -> str:
    """Per cell: the advice and its prediction beside the measured ratio, one fewer, the twin, two reports."""
    lines = ["| cell | config | wait % dltop / clock | advice | predicted (source) | measured (b/s old → new) "
             "| error | one fewer; plenty | within noise | twin | twin error | two reports |",
             "|---" * 12 + "|"]  # fmt: skip
    for outcome in outcomes:
        row = outcome.truth or {}
        if outcome.error or not row:
            error = " ".join((outcome.error or "").split())[-160:].replace("|", "/")
            lines.append(f"| {outcome.name} | ERROR: {error} |" + " |" * 10)
            continue
        first, again = row["advice"], row["again"]
        wait = f"{_num(first['wait'])} / {_num(row['clock_wait'][0])}"
        advice = f"{row['current']} → {_count(first['suggested'])}" + (f" {first['range']}" if first["range"] else "")
        two = f"{_count(first['suggested'])} / {_count(again['suggested'])} {'✓' if _agree(row) else '✗'}"
        if "skipped" in row:  # no other count asked for: one worker more, measured, in the "one fewer" column
            more = f"one more: {_ratio(row.get('one_more'))}"
            lines.append(f"| {outcome.name} | {row['config']} | {wait} | {row['skipped']} |" + " |" * 3
                         + f" {more} | (±{row.get('noise', 0) * 100:.0f}%) |" + " |" * 2 + f" {two} |")  # fmt: skip
            continue
        source = "model" if first["source"] == "predicted_speedup" else "min(pace, cpus)"
        medians = row["medians"]
        measured = f"{_ratio(row['measured'])} ({_num(medians['old'], 1)} → {_num(medians['new'], 1)})"
        fewer = _ratio(row["fewer"]) if "fewer" in row["rates"] else "= current"
        fewer += f"; {_plenty(row, first)}" if row.get("plenty") is not None else ""
        noise = {True: "✓", False: f"✗ {row.get('why', '')}", None: "—"}[row["within_noise"]]
        twin_ratio = _ratio((row["twin"] or {}).get("ratio")) if row["twin"] else "no bench_args"
        cells = [outcome.name, row["config"], wait, advice, f"{_predicted(first)} ({source})", measured,
                 _pct(row["error"]), fewer, f"{noise} (±{row['noise'] * 100:.0f}%)", twin_ratio,
                 _pct(row["twin_error"]), two]  # fmt: skip
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n\n" + summary(outcomes) + "\n"


def _count(value: Optional[int]) -> str:
    return "—" if value is None else str(value)


def _num(value: Optional[float], digits: int = 0) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def summary(outcomes: list) -> str:
    """The figures the goals are about, each against its goal."""
    rows = [(o.name, o.truth) for o in outcomes if not o.error and o.truth]
    measured = [(name, row) for name, row in rows if row.get("error") is not None]
    errors = sorted((abs(row["error"]), name) for name, row in measured)
    twins = sorted((abs(row["twin_error"]), name) for name, row in measured if row.get("twin_error") is not None)
    judged = [(name, row) for name, row in measured if row.get("within_noise") is not None]
    fits = [name for name, row in judged if row["within_noise"]]
    intervals = [(name, row) for name, row in measured if row["advice"]["low"] and row["advice"]["high"]]
    inside = [n for n, r in intervals if r["advice"]["low"] <= r["measured"] <= r["advice"]["high"]]
    agree = [name for name, row in rows if _agree(row)]
    sources = sorted({row["advice"]["source"] for _, row in measured})
    mark = lambda ok: "✓" if ok else "✗"  # noqa: E731
    text = [f"**Advice: {len(measured)} of {len(outcomes)} cells measured** (prediction: {', '.join(sources) or '—'})"]
    if errors:
        median, (worst, at) = statistics.median(e for e, _ in errors), errors[-1]
        text += [f"- prediction: median |error| {median:.1f}% {mark(median <= PREDICTION_GOAL)} (goal ≤ "
                 f"{PREDICTION_GOAL:g}%); max {worst:.1f}% at {at} {mark(worst <= PREDICTION_MAX)} (goal ≤ "
                 f"{PREDICTION_MAX:g}%)"]  # fmt: skip
    if intervals:
        text.append(f"- measured inside the predicted interval: {len(inside)}/{len(intervals)}")
    misses = ", ".join(f"{n} ({r['why']})" for n, r in judged if not r["within_noise"])
    text.append(f"- suggested count the fewest within the measured best's noise: {len(fits)}/{len(judged)}"
                f" {mark(len(fits) == len(judged))}" + (f"; not: {misses}" if misses else ""))  # fmt: skip
    if twins:
        median, (worst, at) = statistics.median(e for e, _ in twins), twins[-1]
        text.append(f"- twin: median |error| {median:.1f}% {mark(median <= TWIN_GOAL)} (goal ≤ {TWIN_GOAL:g}%); "
                    f"max {worst:.1f}% at {at}")  # fmt: skip
    overlap = [name for name, row in rows if _agree(row) or _in_each_others_range(row)]
    text.append(f"- same answer twice: {len(agree)}/{len(rows)}; each count inside the other report's range:"
                f" {len(overlap)}/{len(rows)}")  # fmt: skip
    skipped = [f"{name} ({row['skipped']})" for name, row in rows if "skipped" in row]
    kept = [(name, row) for name, row in rows if row.get("one_more") is not None]
    if kept:
        helped = [f"{n} ({r['one_more']:.2f}x)" for n, r in kept if r["one_more"] > 1 + r["noise"]]
        text.append(f"- no other count asked for, one worker more measured no faster beyond its noise: "
                    f"{len(kept) - len(helped)}/{len(kept)} {mark(not helped)}"
                    + (f"; faster: {', '.join(helped)}" if helped else ""))  # fmt: skip
    errored = [o.name for o in outcomes if o.error]
    if skipped:
        text.append(f"- not measured: {', '.join(skipped)}")
    if errored:
        text.append(f"- errors: {', '.join(errored)}")
    return "\n".join(text)


def _agree(row: dict) -> bool:
    """The two reports, back to back, suggest the same count."""
    return row["advice"]["suggested"] == row["again"]["suggested"]


def _in_each_others_range(row: dict) -> bool:
    """Each report's count lies in the other's ``suggested_range`` (the counts its figures' errors
    allow): two counts either report would accept."""
    first, again = row["advice"], row["again"]
    if first["suggested"] is None or again["suggested"] is None or not first["range"] or not again["range"]:
        return False
    return (again["range"][0] <= first["suggested"] <= again["range"][1]
            and first["range"][0] <= again["suggested"] <= first["range"][1])  # fmt: skip

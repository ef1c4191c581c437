"""What the truth harness checks in one dltop report against the job's own truth.

Each check returns a ``Check``: dltop's figure, the truth beside it, and ok True/False (None: not
applicable to this cell). Margins: shares within 5 pp (issue 10 §5); a share near a threshold
(within 5 pp) may go either way.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Optional

from truth_observe import Truth

SHARE_PP = 5.0
INPUT_BOUND = 30.0
OVERSUBSCRIBED = 1.25
NEAR = 5.0  # pp (or 0.15 x CPUs) either side of a threshold: either answer is right
IO_WORDS = re.compile(r"I/O|\bio\b|storage|wait(s|ing)? (on|for) (reads?|the disk|storage)|without (using )?CPU", re.I)


@dataclass(frozen=True)
class Check:
    name: str
    dltop: str
    truth: str
    ok: Optional[bool]

    @property
    def mark(self) -> str:
        return {True: "✓", False: "✗", None: "·"}[self.ok]

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Shape:
    """What the job was told to be (the cell's settings)."""

    workers: int
    start_method: str
    persistent: bool
    short_epochs: bool
    load: str  # cpu | io | compute | imagenet


def train_loader(report: dict, trainer: int) -> Optional[dict]:
    mine = [ld for ld in report.get("loaders", []) if ld["trainer_pid"] == trainer]
    return max(mine, key=lambda ld: len(ld["worker_pids"])) if mine else None


def finding(report: dict, fid: str) -> Optional[dict]:
    return next((f for f in report.get("findings", []) if f["id"] == fid), None)


def suggested_changes(text: Optional[str]) -> dict:
    """{num_workers, persistent_workers, OMP_NUM_THREADS} a suggestion's text asks for."""
    changes: dict = {}
    for key, pattern in (
        ("num_workers", r"num_workers=(\d+)"),
        ("persistent_workers", r"persistent_workers=(True|False)"),
        ("OMP_NUM_THREADS", r"OMP_NUM_THREADS=(\d+)"),
    ):
        match = re.search(pattern, text or "")
        if match:
            value = match.group(1)
            changes[key] = value == "True" if key == "persistent_workers" else int(value)
    return changes


def advice(report: dict, current: int) -> list:
    """[(finding id, changes)] of every finding that asks for a setting to change, in dltop's order."""
    found = []
    for item in report.get("findings", []):
        # the finding's own change where it states one (evidence.change), else its suggestion's text
        changes = dict((item.get("evidence") or {}).get("change") or {}) or suggested_changes(item.get("suggestion"))
        if changes.get("num_workers") == current:
            del changes["num_workers"]  # the current value, repeated in the paste-ready line
        if changes:
            found.append((item["id"], changes))
    return found


CAP_SLACK = 1.5


def cpu_cap(truth: Truth, workers: int) -> int:
    """The most workers a CPU-bound loader can keep busy here: the CPUs the job may use minus the
    trainer's own share (with num_workers=0 its fetch moves to the workers: only the rest stays),
    with 50% slack for workers that are not busy all the time (measured: 3 workers on 2 CPUs beat
    2 by 13% on the CPU-bound cells). A plausibility bound; applying the advice is the real test."""
    trainer = truth.trainer_cpu or 0.0
    if not workers:
        trainer *= 1 - (truth.wait_percent or 0.0) / 100
    return max(1, math.ceil(round((truth.cpus_allowed - trainer) * CAP_SLACK, 6)))


def _pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.1f}"


def _sampling_error(loader: dict) -> str:
    """± one binomial standard error of a share from n stack samples: how far chance alone moves it."""
    spent, share = loader.get("trainer_time") or {}, loader.get("data_wait_percent")
    if not spent.get("samples") or share is None:
        return ""
    return f"±{100 * math.sqrt(share / 100 * (1 - share / 100) / spent['samples']):.1f}"


def _band(truth: Truth, shape: Shape) -> tuple:
    """(data wait low/high, start-up low/high) the truth allows, in percent.

    The job's clock counts every epoch's first next() as start-up. Where no worker starts at an
    epoch (persistent workers, num_workers=0) that first batch is an ordinary wait to dltop's
    eyes; either reading is the truth there, so the band spans both."""
    wait, startup = truth.wait_percent or 0.0, truth.startup_percent or 0.0
    if shape.workers == 0 or shape.persistent:
        return (wait, wait + startup), (0.0, startup)
    return (wait, wait), (startup, startup)


def _within(value: Optional[float], low: float, high: float, margin: float = SHARE_PP) -> Optional[bool]:
    return None if value is None else low - margin <= value <= high + margin


def check_cell(report: dict, truth: Truth, shape: Shape, trainer: int) -> list:
    loader = train_loader(report, trainer) or {}
    spent = loader.get("trainer_time") or {}
    checks = [_check_trainer(report, trainer), _check_workers(report, truth)]
    if shape.workers:
        checks += [
            Check("num_workers", str(loader.get("num_workers")), str(shape.workers),
                  loader.get("num_workers") == shape.workers),
            Check("start_method", str(loader.get("start_method")), shape.start_method,
                  loader.get("start_method") == shape.start_method),
            Check("persistent", str(loader.get("persistent_workers")), str(shape.persistent),
                  loader.get("persistent_workers") == shape.persistent),
        ]  # fmt: skip
    else:
        checks.append(Check("num_workers", str(loader.get("num_workers")), "0", loader.get("num_workers") == 0))
    (wait_lo, wait_hi), (up_lo, up_hi) = _band(truth, shape)
    shown = lambda lo, hi: _pct(lo) if lo == hi else f"{lo:.1f}–{hi:.1f}"  # noqa: E731
    checks += [
        Check("data_wait_%", _pct(loader.get("data_wait_percent")) + _sampling_error(loader), shown(wait_lo, wait_hi),
              _within(loader.get("data_wait_percent"), wait_lo, wait_hi)),
        Check("startup_%", _pct(spent.get("starting_workers_percent")), shown(up_lo, up_hi),
              _within(spent.get("starting_workers_percent"), up_lo, up_hi)),
    ]  # fmt: skip
    checks += [
        _check_respawning(report, loader, truth, shape),
        _check_input_bound(report, wait_lo, wait_hi),
        _check_cap(report, truth, shape),
        _check_agree(report, shape.workers),
        _check_oversubscribed(report, truth),
    ]
    return checks


def _check_trainer(report: dict, trainer: int) -> Check:
    roles = {p["pid"]: p["role"] for p in report.get("processes", [])}
    said = report.get("job", {}).get("trainer_pids")
    return Check("trainer", str(said), f"[{trainer}]", said == [trainer] and roles.get(trainer) == "trainer")


def _check_workers(report: dict, truth: Truth) -> Check:
    """Nobody that is a worker called something else; nobody called a worker that is not one;
    every worker alive through the report's end listed."""
    listed = {p["pid"]: p for p in report.get("processes", []) if p.get("state") not in ("gone", "exited")}
    dltop_workers = {pid for pid, p in listed.items() if p["role"] == "worker"}
    miscalled = {pid: listed[pid]["role"] for pid in listed if pid in truth.workers_ever and pid not in dltop_workers}
    false = dltop_workers - truth.workers_ever
    missed = truth.live_workers - dltop_workers
    exited = {w["pid"] for ld in report.get("loaders", []) for w in ld.get("workers_exited", [])}
    problems = []
    if miscalled:
        counts: dict = {}
        for role in miscalled.values():
            counts[role] = counts.get(role, 0) + 1
        problems.append("workers called " + ", ".join(f"{n} {r}" for r, n in sorted(counts.items())))
    if false:
        problems.append(f"{len(false)} non-workers called worker")
    if missed:
        problems.append(f"{len(missed)} live missed")
    if exited - truth.workers_ever:
        problems.append(f"{len(exited - truth.workers_ever)} exited non-workers")
    said = f"{len(dltop_workers)} listed" + (f" ({'; '.join(problems)})" if problems else "")
    return Check("workers", said, f"{len(truth.live_workers)} live", not problems)


def _check_respawning(report: dict, loader: dict, truth: Truth, shape: Shape) -> Check:
    expected = shape.workers > 0 and not shape.persistent and shape.short_epochs
    found = finding(report, "workers-respawning")
    real = round((truth.epochs or 0) * shape.workers) if expected else 0
    said = f"{'yes' if found else 'no'} ({loader.get('worker_respawns', 0)})"
    ok = bool(found) == expected
    if ok and expected:
        counted = loader.get("worker_respawns") or 0
        # "at least N" is true of any N up to the real count: workers shorter than a tick go unseen
        at_least = "at least" in found.get("detail", "").lower()
        ok = abs(counted - real) <= max(shape.workers, 0.34 * real) or (at_least and counted <= real + shape.workers)
        ok = ok and found["evidence"].get("starting_workers_percent") is not None
    return Check("respawning", said, f"{'yes' if expected else 'no'} ({real})", ok)


def _check_input_bound(report: dict, wait_lo: float, wait_hi: float) -> Check:
    found = finding(report, "input-bound")
    if wait_lo >= INPUT_BOUND + NEAR:
        expected, ok = "yes", found is not None
    elif wait_hi < INPUT_BOUND - NEAR:
        expected, ok = "no", found is None
    else:
        expected, ok = "either", True
    return Check("input-bound", "yes" if found else "no", expected, ok)


def _check_cap(report: dict, truth: Truth, shape: Shape) -> Check:
    """No more workers suggested than the machine can keep busy, unless they wait on I/O and the
    finding says so."""
    cap = cpu_cap(truth, shape.workers)
    asked = [(fid, c["num_workers"]) for fid, c in advice(report, shape.workers) if c.get("num_workers")]
    raised = [(fid, n) for fid, n in asked if n > max(shape.workers, cap)]
    said = ", ".join(f"{fid}: {n}" for fid, n in asked) or "none"
    if not raised:
        return Check("advice≤cap", said, f"≤{cap}", True if asked else None)
    if shape.load == "io":
        texts = [f for f in report["findings"] if f["id"] in {fid for fid, _ in raised}]
        says_io = all(IO_WORDS.search(f.get("detail", "") + " " + f.get("suggestion", "")) for f in texts)
        return Check("advice≤cap", said + ("" if says_io else " (no I/O reason given)"), f"≤{cap} or I/O", says_io)
    return Check("advice≤cap", said, f"≤{cap}", False)


def _check_agree(report: dict, current: int) -> Check:
    """Rules must not pull num_workers in opposite directions."""
    asked = [(fid, c["num_workers"]) for fid, c in advice(report, current) if "num_workers" in c]
    ups = [a for a in asked if a[1] > current]
    downs = [a for a in asked if a[1] < current]
    said = ", ".join(f"{fid}→{n}" for fid, n in asked) or "-"
    return Check("rules agree", said, "one direction", not (ups and downs) if asked else None)


def _check_oversubscribed(report: dict, truth: Truth) -> Check:
    found = finding(report, "cpu-oversubscribed")
    if truth.job_cpu_wanted is None:
        return Check("oversubscribed", "yes" if found else "no", "-", None)
    ratio = truth.job_cpu_wanted / truth.cpus_allowed
    said = f"{'yes' if found else 'no'}"
    if found:
        said += f" ({found['evidence']['cpu_used'] + found['evidence']['cpu_waiting']:.2f})"
    near = abs(ratio - OVERSUBSCRIBED) <= 0.15
    return Check("oversubscribed", said, f"{'yes' if ratio >= OVERSUBSCRIBED else 'no'} ({truth.job_cpu_wanted:.2f})",
                 True if near else (found is not None) == (ratio >= OVERSUBSCRIBED))  # fmt: skip

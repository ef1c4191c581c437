"""What the truth harness checks in one dltop report against the job's own truth.

Each check returns a ``Check``: dltop's figure, the truth beside it, and ok True/False (None: not
applicable to this cell). Margins: shares within 5 pp; a share near a threshold
(within 5 pp) may go either way.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Optional

from truth_observe import Truth

from dltop.model import ENDED

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


def _below_line(findings: list[dict]) -> bool:
    """No input-bound finding, or only ones that hold below its line (more workers surely help: the
    advice subset times that gain; here the wait must not be read above the line)."""
    return all((f.get("evidence") or {}).get("above_line") is False for f in findings)


def _check_input_bound(report: dict, wait_lo: float, wait_hi: float) -> Check:
    found = finding(report, "input-bound")
    if wait_lo >= INPUT_BOUND + NEAR:
        expected, ok = "yes", found is not None
    elif wait_hi < INPUT_BOUND - NEAR:
        expected, ok = "no (or below its line)", _below_line([found] if found else [])
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


# -- jobs on the real libraries (tests/jobs) ----------------------------------
#
# The JSON these read beyond the checks above (absent in an older dltop: shown "n/a", not failed):
# a finding ``rank-straggler`` (evidence straggler_rank, trainer_pid, data_wait_percent, ranks
# [{rank, trainer_pid, data_wait_percent}], run_speedup); the other ranks' input-bound /
# too-many-workers findings ``explained_by: "rank-straggler"``; each loader's ``dataset_kind``
# (map | iterable | null) and ``parts`` (an iterable source's shards, or null); input-bound's
# evidence ``suggested_workers`` and, for iterable loaders, ``parts``; a finding ``worker-starving``
# for an iterable loader's workers that get no data.

NA = "n/a"
RUN_SPEEDUP_MARGIN = 0.35  # run_speedup within ±35% of the balanced run's own rate over the slow one's


@dataclass(frozen=True)
class LibShape:
    """What a library job was told to be, and what its library does with it."""

    workers: int
    ranks: int = 1
    slow_rank: Optional[int] = None  # a DDP rank whose samples cost more
    dataset_kind: str = "map"
    parts: Optional[int] = None  # an iterable source's shards
    persistent: bool = False


@dataclass
class LibTruth:
    """The job's truth beside the Truth of each trainer: ranks by pid, workers that never served
    a sample (iterable sources), the library's own words on stderr."""

    truths: dict  # {trainer pid: Truth}
    ranks: dict  # {trainer pid: rank}
    starving: set = field(default_factory=set)  # workers with no served-<pid>.json (alive or exited)
    exited: set = field(default_factory=set)  # workers gone (zombie or reaped) by the window's end
    stderr: str = ""
    pyspy: dict = field(default_factory=dict)  # {trainer pid: (share, samples, clock share) | None}
    spans: dict = field(default_factory=dict)  # {trainer pid: {span: percent of the window}}


def lib_trainer_findings(report: dict, trainer: int, fid: str) -> list:
    """The findings ``fid`` about this trainer (its evidence's trainer_pid, else its pids)."""
    found = []
    for item in report.get("findings", []):
        if item["id"] != fid:
            continue
        said = (item.get("evidence") or {}).get("trainer_pid")
        if said == trainer or (said is None and trainer in item.get("pids", [])):
            found.append(item)
    return found


def advice_by_trainer(report: dict, trainers: list, current: int) -> dict:
    """{trainer pid: [(finding id, changes)]}: each finding's change given to the trainer it is about."""
    out: dict = {t: [] for t in trainers}
    for item in report.get("findings", []):
        changes = dict((item.get("evidence") or {}).get("change") or {}) or suggested_changes(item.get("suggestion"))
        if changes.get("num_workers") == current:
            del changes["num_workers"]
        if not changes:
            continue
        said = (item.get("evidence") or {}).get("trainer_pid")
        for trainer in trainers:
            if said == trainer or (said is None and trainer in item.get("pids", [])):
                out[trainer].append((item["id"], changes))
    return out


def check_lib(report: dict, truth: LibTruth, shape: LibShape) -> list:
    trainers = sorted(truth.truths, key=lambda pid: truth.ranks.get(pid, 0))
    loaders = {t: train_loader(report, t) or {} for t in trainers}
    label = (lambda t: f"r{truth.ranks.get(t, 0)} ") if len(trainers) > 1 else (lambda t: "")
    checks = [_lib_trainers(report, trainers), _lib_workers(report, truth, loaders)]
    counts = [loaders[t].get("num_workers") for t in trainers]
    shown = " ".join(f"{label(t)}{n}" for t, n in zip(trainers, counts))
    checks.append(Check("num_workers", shown, str(shape.workers), all(n == shape.workers for n in counts)))
    checks += [
        _lib_wait(truth, loaders, shape, label),
        _lib_pyspy(truth, label),
        _lib_input_bound(report, truth, shape, label),
    ]
    if shape.ranks > 1:
        checks += [_lib_straggler(report, truth, shape), _lib_explained(report, truth, shape)]
    checks += [_lib_kind(loaders, shape), _lib_parts(report, loaders, shape)]
    if shape.dataset_kind == "iterable":
        checks += [_lib_advice_parts(report, trainers, shape), _lib_starving(report, truth, shape)]
    checks.append(_lib_advice_cpus(report, truth, shape))
    checks.append(_check_agree(report, shape.workers))
    return checks


def _lib_trainers(report: dict, trainers: list) -> Check:
    roles = {p["pid"]: p["role"] for p in report.get("processes", [])}
    said = report.get("job", {}).get("trainer_pids")
    ok = sorted(said or []) == sorted(trainers) and all(roles.get(t) == "trainer" for t in trainers)
    return Check("trainers", str(said), str(trainers), ok)


def _lib_workers(report: dict, truth: LibTruth, loaders: dict) -> Check:
    """The job's workers as _check_workers sees them, and each listed under its own trainer."""
    ever = set().union(*(t.workers_ever for t in truth.truths.values()))
    live = set().union(*(t.live_workers for t in truth.truths.values()))
    merged = _Merged(ever, live)
    whole = _check_workers(report, merged)  # a Truth as far as it reads one
    wrong = []
    for trainer, t in truth.truths.items():
        listed = set(loaders[trainer].get("worker_pids") or [])
        if not t.live_workers <= listed or not listed <= t.workers_ever:
            wrong.append(trainer)
    said = whole.dltop + (f"; wrong trainer for {wrong}" if wrong else "")
    return Check("workers", said, whole.truth, bool(whole.ok) and not wrong)


@dataclass(frozen=True)
class _Merged:
    workers_ever: set
    live_workers: set


def _wait_band(t: Truth, persistent: bool) -> tuple:
    wait, startup = t.wait_percent or 0.0, t.startup_percent or 0.0
    return (wait, wait + startup) if persistent else (wait, wait)


def _lib_wait(truth: LibTruth, loaders: dict, shape: LibShape, label) -> Check:
    """Each trainer's data wait within the error dltop states (evidence data_wait_error_percent, else
    the binomial error of its samples) doubled, and never tighter than ±5 pp."""
    said, real, oks = [], [], []
    for trainer, t in sorted(truth.truths.items(), key=lambda kv: truth.ranks.get(kv[0], 0)):
        loader = loaders[trainer]
        value = loader.get("data_wait_percent")
        spent = loader.get("trainer_time") or {}
        error = None
        if value is not None and spent.get("samples"):
            error = 100 * math.sqrt(value / 100 * (1 - value / 100) / spent["samples"])
        low, high = _wait_band(t, shape.persistent)
        said.append(f"{label(trainer)}{_pct(value)}" + (f"±{error:.1f}" if error is not None else ""))
        real.append(f"{label(trainer)}" + (_pct(low) if low == high else f"{low:.1f}–{high:.1f}"))
        oks.append(_within(value, low, high, max(SHARE_PP, 2 * (error or 0.0))))
    known = [ok for ok in oks if ok is not None]
    return Check("data_wait_%", " ".join(said), " ".join(real), all(known) if known else None)


def _lib_pyspy(truth: LibTruth, label) -> Check:
    """Plain py-spy at 50 Hz on each trainer after dltop, against the job's clock (the truth's
    own cross-check: sampling itself, apart from dltop)."""
    said, real, oks = [], [], []
    for trainer in sorted(truth.pyspy, key=lambda pid: truth.ranks.get(pid, 0)):
        found = truth.pyspy[trainer]
        if found is None:
            said.append(f"{label(trainer)}failed")
            real.append(f"{label(trainer)}-")
            continue
        share, samples, spent = found
        error = 100 * math.sqrt(share / 100 * (1 - share / 100) / samples)
        said.append(f"{label(trainer)}{share:.1f}±{error:.1f} (n={samples})")
        real.append(f"{label(trainer)}{spent:.1f}")
        oks.append(abs(share - spent) <= max(SHARE_PP, 2 * error))
    return Check("py-spy 50 Hz", " ".join(said) or "-", " ".join(real) or "-", all(oks) if oks else None)


def _lib_input_bound(report: dict, truth: LibTruth, shape: LibShape, label) -> Check:
    """input-bound for each trainer that waits (a DDP rank that waits for another rank waits in
    backward, not in next(): its data wait decides, as for any trainer)."""
    said, real, oks = [], [], []
    for trainer, t in sorted(truth.truths.items(), key=lambda kv: truth.ranks.get(kv[0], 0)):
        found = lib_trainer_findings(report, trainer, "input-bound")
        low, high = _wait_band(t, shape.persistent)
        if low >= INPUT_BOUND + NEAR:
            expected, ok = "yes", bool(found)
        elif high < INPUT_BOUND - NEAR:
            expected, ok = "no", _below_line(found)
        else:
            expected, ok = "either", True
        said.append(f"{label(trainer)}{'yes' if found else 'no'}")
        real.append(f"{label(trainer)}{expected}")
        oks.append(ok)
    return Check("input-bound", " ".join(said), " ".join(real), all(oks))


def _lib_straggler(report: dict, truth: LibTruth, shape: LibShape) -> Check:
    """The slow rank named (the one the job slowed, and the one whose clock waits most); none
    named where the ranks are balanced."""
    found = finding(report, "rank-straggler")
    waits = {truth.ranks.get(pid, 0): t.wait_percent or 0.0 for pid, t in truth.truths.items()}
    slowest = max(waits, key=waits.get)
    if shape.slow_rank is None:
        spread = max(waits.values()) - min(waits.values())
        expected = f"none (waits {', '.join(f'r{r} {w:.0f}' for r, w in sorted(waits.items()))})"
        ok = found is None or spread >= INPUT_BOUND  # a clock that says one rank waits far more: either
        return Check("straggler", f"rank {found['evidence'].get('straggler_rank')}" if found else "none", expected, ok)
    expected = f"rank {shape.slow_rank}" + ("" if slowest == shape.slow_rank else f" (clock: r{slowest} waits most)")
    if found is None:
        return Check("straggler", "none", expected, False)
    evidence = found.get("evidence") or {}
    rank = evidence.get("straggler_rank")
    pid_ok = evidence.get("trainer_pid") in (None, *[p for p, r in truth.ranks.items() if r == shape.slow_rank])
    said = f"rank {rank}" + (f" (speed-up {evidence.get('run_speedup')}x)" if evidence.get("run_speedup") else "")
    return Check("straggler", said, expected, rank == shape.slow_rank and pid_ok)


def _lib_explained(report: dict, truth: LibTruth, shape: LibShape) -> Check:
    """The other ranks' input-bound / too-many-workers findings are put under rank-straggler (their
    DataLoaders are not the problem); the straggler's own cause is not."""
    if shape.slow_rank is None:
        return Check("explained_by", "-", "-", None)
    others = [pid for pid, rank in truth.ranks.items() if rank != shape.slow_rank]
    slow = [pid for pid, rank in truth.ranks.items() if rank == shape.slow_rank]
    theirs = [
        f
        for pid in others
        for fid in ("input-bound", "too-many-workers")
        for f in lib_trainer_findings(report, pid, fid)
    ]
    own = [f for pid in slow for f in lib_trainer_findings(report, pid, "input-bound")]
    said = [f"{f['id']}→{f.get('explained_by')}" for f in theirs] + [
        f"own {f['id']}→{f.get('explained_by')}" for f in own
    ]
    if not theirs and not own:
        return Check("explained_by", "none raised", "others → rank-straggler", None)
    ok = all(f.get("explained_by") == "rank-straggler" for f in theirs)
    ok = ok and all(f.get("explained_by") != "rank-straggler" for f in own)
    return Check("explained_by", ", ".join(said), "others → rank-straggler", ok)


def _lib_kind(loaders: dict, shape: LibShape) -> Check:
    if any("dataset_kind" not in ld for ld in loaders.values()):
        return Check("dataset_kind", NA, shape.dataset_kind, None)
    said = sorted({str(ld.get("dataset_kind")) for ld in loaders.values()})
    return Check("dataset_kind", ",".join(said), shape.dataset_kind, said == [shape.dataset_kind])


def _lib_parts(report: dict, loaders: dict, shape: LibShape) -> Check:
    """The loader's parts (and input-bound's evidence.parts where it has the key), null for a map.
    Of shard files counted in a folder, the parts are those seen read (the count bounds them)."""
    if any("parts" not in ld for ld in loaders.values()):
        return Check("parts", NA, str(shape.parts), None)
    said = sorted({str(_parts_read(ld)) for ld in loaders.values()})
    bound = [f["evidence"]["parts"] for f in report.get("findings", [])
             if f["id"] == "input-bound" and "parts" in (f.get("evidence") or {})]  # fmt: skip
    shown = ",".join(said) + (f" (input-bound: {','.join(map(str, bound))})" if bound else "")
    ok = said == [str(shape.parts)] and all(b == shape.parts for b in bound)
    return Check("parts", shown, str(shape.parts), ok)


def _parts_read(loader: dict) -> object:
    """The parts dltop advises on: the shard files seen read where fewer than the folder holds."""
    parts, seen = loader.get("parts"), loader.get("parts_seen")
    return seen if parts is not None and seen is not None and seen < parts else parts


def _lib_advice_parts(report: dict, trainers: list, shape: LibShape) -> Check:
    """An iterable loader cannot use more workers than its source has parts: no advice above them."""
    asked = [(fid, c["num_workers"]) for pid in trainers
             for fid, c in advice_by_trainer(report, trainers, shape.workers)[pid] if "num_workers" in c]  # fmt: skip
    said = ", ".join(f"{fid}: {n}" for fid, n in asked) or "none"
    above = [n for _, n in asked if n > max(shape.parts or 0, 1) and n > shape.workers]
    return Check("advice≤parts", said, f"≤{shape.parts}", not above if asked else None)


def _lib_starving(report: dict, truth: LibTruth, shape: LibShape) -> Check:
    """worker-starving for the workers that got no part (never served a sample): named
    (evidence.starving_pids), all of them, or the live idle ones with the ones torch shut down
    early counted (evidence.ended_early: a non-persistent worker whose part is done exits); no fed
    worker named; none raised where every worker has one."""
    found = finding(report, "worker-starving")
    idle = truth.starving - truth.exited
    gone = truth.starving & truth.exited
    expected = f"{len(idle)} idle + {len(gone)} ended early" if truth.starving else "none"
    if found is None:
        return Check("worker-starving", "none", expected, not truth.starving)
    evidence = found.get("evidence") or {}
    named = set(evidence.get("starving_pids") or [])
    early = evidence.get("ended_early")
    said = f"{len(named)} named ({len(named & truth.starving)} starving), {early} ended early"
    fed = named - truth.starving
    if fed:
        said += f" ({len(fed)} fed ones named)"
    if not truth.starving:
        return Check("worker-starving", said, expected, False)
    ok = not fed and (named == truth.starving or (named == idle and early == len(gone)))
    return Check("worker-starving", said, expected, ok)


def _lib_advice_cpus(report: dict, truth: LibTruth, shape: LibShape) -> Check:
    """Summed over ranks, no more workers suggested than the CPUs can keep busy (cpu_cap's rule on
    the whole job: the CPUs less every trainer's share, 50% slack), unless no more than now."""
    trainers = list(truth.truths)
    by = advice_by_trainer(report, trainers, shape.workers)
    asked = {t: next((c["num_workers"] for _, c in by[t] if "num_workers" in c), None) for t in trainers}
    if not any(v is not None for v in asked.values()):
        return Check("advice≤CPUs", "none", "-", None)
    total = sum(shape.workers if n is None else n for n in asked.values())
    any_truth = next(iter(truth.truths.values()))
    trainers_cpu = sum((t.trainer_cpu or 0.0) for t in truth.truths.values())
    cap = max(1, math.ceil(round((any_truth.cpus_allowed - trainers_cpu) * CAP_SLACK, 6)))
    limit = max(cap, shape.workers * len(trainers))
    said = f"{total} in all (" + ", ".join(f"{'-' if n is None else n}" for n in asked.values()) + ")"
    return Check("advice≤CPUs", said, f"≤{limit} ({any_truth.cpus_allowed} CPUs)", total <= limit)


def check_run_speedup(report: dict, slow_rate: Optional[float], balanced_rate: Optional[float]) -> Check:
    """rank-straggler's run_speedup against the job's own rates: the same job with the slow rank's
    input as fast as the others' (the balanced cell) over the slow one, nothing attached."""
    found = finding(report, "rank-straggler")
    said = (found.get("evidence") or {}).get("run_speedup") if found else None
    real = balanced_rate / slow_rate if slow_rate and balanced_rate else None
    shown = "-" if real is None else f"{real:.2f}x ({balanced_rate:.1f}/{slow_rate:.1f} batches/s)"
    if found is None:
        return Check("run_speedup", "none", shown, False if real else None)
    if said is None or real is None:
        return Check("run_speedup", NA if said is None else f"{said}x", shown, None)
    return Check("run_speedup", f"{said}x", shown, abs(said / real - 1) <= RUN_SPEEDUP_MARGIN)


@dataclass
class RestartTruth:
    """A torchrun job that lost a rank and was started again, from its own records: the ranks of
    each start (each rank writes torchrun's TORCHELASTIC_RESTART_COUNT), the rank that failed, and
    whether the launcher still runs."""

    first: list  # trainer pids of the first start
    again: list  # trainer pids of the restart, alive at the window's end
    failed: dict  # {pid, rank, exit_code} of the rank that exited on purpose
    restart: int  # torchrun's count at the end
    max_restarts: int
    launcher_alive: bool


def check_restart(report: dict, truth: RestartTruth) -> list:
    """dltop's ``ranks-restarted`` and the ranks it follows, against the job's own records."""
    job = report.get("job", {})
    running = sorted(
        p["pid"] for p in report.get("processes", []) if p["role"] == "trainer" and p["state"] not in ENDED
    )
    told = finding(report, "ranks-restarted") or {}
    evidence = told.get("evidence", {})
    ended = sorted(told.get("pids", []))
    codes = {e["pid"]: e["exit_code"] for e in evidence.get("ended", [])}
    seen_code = codes.get(truth.failed["pid"])
    deaths = [f for f in report.get("findings", []) if f["id"] == "worker-died"]
    return [
        Check("job state", job.get("state", "?"), "running" if truth.launcher_alive else "exited",
              job.get("state") == ("running" if truth.launcher_alive else "exited")),
        Check("ranks followed", str(running), str(truth.again), running == truth.again),
        Check("ranks ended", str(ended), str(sorted(truth.first)), ended == sorted(truth.first)),
        Check("restart", f"{evidence.get('restart')} of {evidence.get('max_restarts')}",
              f"{truth.restart} of {truth.max_restarts}",
              (evidence.get("restart"), evidence.get("max_restarts")) == (truth.restart, truth.max_restarts)),
        Check("failed rank's status", "not seen" if seen_code is None else str(seen_code),
              f"rank {truth.failed['rank']} exit {truth.failed['exit_code']}",
              None if seen_code is None else seen_code == truth.failed["exit_code"]),
        Check("worker deaths", str(len(deaths)), "0 (taken down with their ranks)", not deaths),
    ]  # fmt: skip

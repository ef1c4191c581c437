"""Stopped runs in the truth harness: a real torchrun run (3 ranks, DDP over gloo) that one rank
stops, in each way runs stop (tests/jobs/stopping_run.py), and two controls that stop nothing.

The truth is the job's own stop.json: the rank that stopped the run, its pid, when (``at``) and
the line it stopped at (file, line, function). dltop watches as a user would: its live loop
(``open_loop`` on torchrun's launcher, what the TUI, the recorder and the exporter run; in this
process, one tick a second) attached before the stall with ``--hang-after`` as set for the cell,
and, once the loop has its verdict, ``dltop snapshot --pid <launcher> --json --hang-after H`` over
H + 6 s (a snapshot's stuck time counts from its own start: a shorter one cannot see a stall
of H). Each cell records when run-stopped first showed in the loop (time from stop.json's ``at``),
whether it names the right rank and line, whether the waiting ranks' trainer-stalled are
explained by it, and on the controls that nothing of the kind was raised at any tick.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import truth_observe as observe
from truth_checks import Check

from tests.support import Job, wait_for

STOPPING_RUN = "tests/jobs/stopping_run.py"
RANKS = 3
STOP_AFTER = 300  # steps (>= 20 ms each) before the rank stops: the live loop is attached by then
# the rank that stops, per way: not always the same one (rank 0 included)
STOP_RANK = {"lock": 2, "desync": 1, "worker": 1, "busy": 2, "fifo": 0, "slow": 1, "none": 1}
HOWS = ("lock", "desync", "worker", "busy", "fifo", "slow", "none")
CONTROLS = ("slow", "none")
HANG_AFTER = (20.0, 5.0)  # dltop's default, and a shorter one a user in a hurry would set
AFTER_VERDICT_S = 8.0  # ticks watched after the verdict: the waiting ranks' warnings hold 5 s first
GIVE_UP_S = 30.0  # past stop + hang-after: no verdict
CONTROL_WATCH_S = 25.0  # controls: watched for hang-after + this past the "stop" (none: the loop's start)
VERDICT_WITHIN_S = 5.0  # the bar: the verdict within --hang-after + a few seconds
RAISED = ("run-stopped", "trainer-stalled", "worker-hung")  # none of these on a control


@dataclass(frozen=True)
class StopCell:
    how: str
    hang_after: float

    @property
    def name(self) -> str:
        return f"stop-{self.how}-h{self.hang_after:g}"

    @property
    def control(self) -> bool:
        return self.how in CONTROLS

    @property
    def rank(self) -> int:
        return STOP_RANK[self.how]

    def command(self, python: str, report: Path) -> list:
        return [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(RANKS),
                str(observe.TREE["root"] / STOPPING_RUN), "--report", str(report), "--stop", self.how,
                "--stop-rank", str(self.rank), "--stop-after", str(STOP_AFTER)]  # fmt: skip


def stopped_cells() -> list:
    return [StopCell(how, hang) for how in HOWS for hang in HANG_AFTER]


def source_line(needle: str) -> int:
    """The line of stopping_run.py holding ``needle`` (the truth of a line stop.json cannot give)."""
    lines = (observe.TREE["root"] / STOPPING_RUN).read_text().splitlines()
    return next(number for number, text in enumerate(lines, 1) if needle in text)


def expected_lines(how: str, stop: dict) -> set:
    """The lines of stopping_run.py that are right for the stopping rank. A busy loop is two lines
    (``while True:`` and its body): a sample lands on either."""
    if how == "worker":  # the rank waits for its input at its loop over the DataLoader
        return {source_line("in enumerate(loader)")}
    if how == "busy":
        return {stop["line"] - 1, stop["line"]}
    return {stop["line"]} if stop.get("line") else set()


_WHERE = re.compile(r"\((?P<file>[^()]*):(?P<line>\d+)\)$")


def parse_where(where: Optional[str]) -> tuple:
    """('stopping_run.py', 69) from "flush_metrics (/…/stopping_run.py:69)"; (None, None) if none."""
    found = _WHERE.search(where or "")
    return (found["file"].rsplit("/", 1)[-1], int(found["line"])) if found else (None, None)


def finding_dict(finding) -> dict:
    return {"id": finding.id, "severity": finding.severity, "title": finding.title, "pids": list(finding.pids),
            "evidence": finding.evidence, "explained_by": finding.explained_by}  # fmt: skip


def _read(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def watch(job: Job, cell: StopCell) -> dict:
    """dltop's live loop on the launcher, one tick a second, from before the stall: every tick's
    findings (ids), the first tick showing run-stopped, and the findings shown at the end."""
    from dltop.live.loop import open_loop
    from dltop.settings import DEFAULTS

    loop = open_loop(job.pid, dataclasses.replace(DEFAULTS, hang_after_s=cell.hang_after))
    ticks: list = []
    first = None
    shown: list = []
    opened = time.time()
    try:
        for snap in loop.run(1.0):
            now = time.time()
            shown = [finding_dict(f) for f in snap.findings]
            ticks.append({"at": round(now, 2), "ids": [f["id"] for f in shown]})
            if first is None and any(f["id"] == "run-stopped" for f in shown):
                first = {"at": now, "finding": next(f for f in shown if f["id"] == "run-stopped")}
            if first is not None and "chained_at" not in first and first["finding"]["explained_by"] is None:
                if any(f["id"] == "run-stopped" and f["explained_by"] for f in shown):
                    first["chained_at"] = now  # run-stopped explained by its cause (a hung worker) from here
            stop = _read(job.report / "stop.json")
            since = stop["at"] if stop else opened
            if first is not None and not cell.control and now >= first["at"] + AFTER_VERDICT_S:
                break
            if cell.control and (stop or cell.how == "none") and now >= since + cell.hang_after + CONTROL_WATCH_S:
                break
            if not cell.control and stop and now >= since + cell.hang_after + GIVE_UP_S:
                break
            if now >= opened + 180:  # the job never stopped (or never reached the step)
                break
    finally:
        loop.close()
    return {"opened": opened, "ticks": ticks, "first": first, "final": shown}


def cli_snapshot(job: Job, cell: StopCell, python: str) -> tuple:
    """(``dltop snapshot --pid <launcher> --json --hang-after H --duration H+6``, error)."""
    command = [python, "-m", "dltop", "snapshot", "--pid", str(job.pid), "--json",
               "--hang-after", f"{cell.hang_after:g}", "--duration", f"{cell.hang_after + 6:g}"]  # fmt: skip
    try:
        done = subprocess.run(command, cwd=observe.TREE["root"], capture_output=True, text=True, timeout=180,
                              env={**os.environ, **observe._tree_env()})  # fmt: skip
    except subprocess.TimeoutExpired as timeout:
        return None, f"dltop timed out: {timeout}"
    if done.returncode != 0:
        return None, f"dltop exit {done.returncode}: {done.stderr.strip()[-500:]}"
    try:
        return json.loads(done.stdout), None
    except ValueError:
        return None, f"dltop printed no JSON: {done.stdout[:200]!r}"


@dataclass
class Verdict:
    """What a run-stopped finding says: the ranks it blames, the blamed rank's line, a desync."""

    found: bool
    ranks: list
    file: Optional[str] = None
    line: Optional[int] = None
    desync: bool = False
    where: Optional[str] = None  # blocked | running | data | collective
    explained_by: Optional[str] = None
    title: str = ""

    @property
    def text(self) -> str:
        if not self.found:
            return "none"
        blamed = ", ".join(map(str, self.ranks)) or "-"
        line = f"{self.file}:{self.line}" if self.line else "no line"
        return f"{'desync, ' if self.desync else ''}rank {blamed} ({self.where}), {line}"


def verdict(finding: Optional[dict]) -> Verdict:
    if not finding:
        return Verdict(False, [])
    evidence = finding["evidence"]
    blamed = evidence.get("cause_ranks") or []
    rank = next((r for r in evidence.get("ranks", []) if blamed and r["rank"] == blamed[0]), {})
    file, line = parse_where(rank.get("site") or rank.get("frame"))
    return Verdict(True, blamed, file, line, bool(evidence.get("desync")), rank.get("where"),
                   finding.get("explained_by"), finding["title"])  # fmt: skip


def _stalls_explained(findings: list, cause_pids: set) -> tuple:
    """(text, ok) of the waiting ranks' trainer-stalled: each explained by run-stopped, or by the
    root of its chain where run-stopped is itself explained (a hung worker: explained_by names the
    root cause, relations.py's _root)."""
    stalled = [f for f in findings if f["id"] == "trainer-stalled" and not set(f["pids"]) & cause_pids]
    if not stalled:
        return "none shown", None
    stopped = next((f for f in findings if f["id"] == "run-stopped"), None)
    root = (stopped or {}).get("explained_by") or "run-stopped"
    explained = [f for f in stalled if stopped and f["explained_by"] == root]
    via = " (the root, via run-stopped)" if root != "run-stopped" else ""
    return f"{len(explained)}/{len(stalled)} by {root}{via}", len(explained) == len(stalled)


def check_stopped(cell: StopCell, stop: Optional[dict], seen: dict, report: Optional[dict]) -> tuple:
    """(checks, row): the table's row and the checks behind it."""
    if cell.control:
        return _check_control(cell, stop, seen, report)
    lines = expected_lines(cell.how, stop)
    truth_text = f"rank {stop['rank']}, stopping_run.py:{'/'.join(map(str, sorted(lines)))}"
    live = verdict((seen["first"] or {}).get("finding"))
    right_rank = live.ranks == [stop["rank"]] and (live.desync == (cell.how == "desync"))
    right_line = live.file == "stopping_run.py" and live.line in lines
    checks = [
        Check("rank", f"{'desync ' if live.desync else ''}{live.ranks}", f"[{stop['rank']}]", right_rank),
        Check("line", f"{live.file}:{live.line}", truth_text.split(", ")[1], right_line if live.found else False),
    ]
    if cell.how == "worker":  # judged at the end of the watch: the worker's own hang may show a tick or two later
        hung = [f for f in seen["final"] if f["id"] == "worker-hung"]
        file, line = parse_where(hung[0]["evidence"].get("stuck_frame")) if hung else (None, None)
        chained = verdict(next((f for f in seen["final"] if f["id"] == "run-stopped"), None)).explained_by
        sleep = source_line("sleep(1e9)")
        first = seen["first"] or {}
        at_once = (first.get("finding") or {}).get("explained_by")
        chain_at = first.get("chained_at") or (first["at"] if at_once else None)
        since = f" from {chain_at - stop['at']:.1f} s" if chain_at else ""
        checks.append(Check("cause chain", f"run-stopped <- {chained}{since}; worker at {file}:{line}",
                            f"worker-hung at stopping_run.py:{sleep}",
                            chained == "worker-hung" and line == sleep))  # fmt: skip
    cause_pids = {stop["pid"]}
    text, ok = _stalls_explained(seen["final"], cause_pids)
    checks.append(Check("stalls explained", text, "all by run-stopped", ok))
    seconds = seen["first"]["at"] - stop["at"] if seen["first"] else None
    before = seen["ticks"] and seen["ticks"][0]["at"] < stop["at"]
    checks.append(Check("time to verdict", f"{seconds:.1f} s" if seconds is not None else "never",
                        f"<= {cell.hang_after + VERDICT_WITHIN_S:g} s (attached {'before' if before else 'AFTER'})",
                        seconds is not None and seconds <= cell.hang_after + VERDICT_WITHIN_S))  # fmt: skip
    snap = verdict(_finding(report, "run-stopped")) if report else Verdict(False, [])
    agrees = snap.found and snap.ranks == live.ranks and snap.line == live.line and snap.desync == live.desync
    checks.append(Check("snapshot agrees", snap.text, live.text, agrees))
    if report:
        text, ok = _stalls_explained(report.get("findings", []), cause_pids)
        checks.append(Check("snapshot stalls explained", text, "all by run-stopped", ok))
    named = ("rank", "line", "cause chain", "stalls explained")  # right: these, not the time or the snapshot
    row = {
        "case": cell.name,
        "truth": truth_text,
        "verdict": live.text + ("" if agrees else f" (snapshot: {snap.text})"),
        "right": all(c.ok is not False for c in checks if c.name in named),
        "seconds": round(seconds, 1) if seconds is not None else None,
        "clean": "n/a",
    }
    return checks, row


def _check_control(cell: StopCell, stop: Optional[dict], seen: dict, report: Optional[dict]) -> tuple:
    raised_live = sorted({i for tick in seen["ticks"] for i in tick["ids"] if i in RAISED})
    raised_snap = sorted({f["id"] for f in (report or {}).get("findings", []) if f["id"] in RAISED})
    watched = seen["ticks"][-1]["at"] - (stop["at"] if stop else seen["ticks"][0]["at"]) if seen["ticks"] else 0
    checks = [
        Check("live: nothing raised", ", ".join(raised_live) or "nothing", f"nothing ({watched:.0f} s watched)",
              not raised_live),
        Check("snapshot: nothing raised", ", ".join(raised_snap) or "nothing", "nothing",
              not raised_snap if report else None),
    ]  # fmt: skip
    truth = f"rank {stop['rank']} slow (+150 ms a step), moving" if stop else "no rank stops"
    row = {
        "case": cell.name,
        "truth": truth,
        "verdict": ", ".join(sorted(set(raised_live) | set(raised_snap))) or "nothing raised",
        "right": all(c.ok is not False for c in checks),
        "seconds": None,
        "clean": "yes" if all(c.ok is not False for c in checks) else "NO",
    }
    return checks, row


def _finding(report: Optional[dict], fid: str) -> Optional[dict]:
    return next((f for f in (report or {}).get("findings", []) if f["id"] == fid), None)


def stacks(report: Optional[dict]) -> list:
    """Each rank's main-thread stack in the snapshot (innermost last, a few frames)."""
    out = []
    for proc in (report or {}).get("processes", []):
        if proc.get("role") != "trainer":
            continue
        frames = [f"{f.get('function')} ({str(f.get('file')).rsplit('/', 1)[-1]}:{f.get('line')})"
                  for f in (proc.get("stack") or [])[-6:]]  # fmt: skip
        out.append({"pid": proc.get("pid"), "rank": proc.get("rank"), "activity": proc.get("activity"),
                    "stuck_s": proc.get("stuck_s"), "stack": frames})  # fmt: skip
    return out


def kill_ranks(job: Job) -> None:
    """Every rank and worker of the run, by pid (torchrun starts each rank in a session of its own),
    then the job's groups."""
    pids = [r["pid"] for r in job.records("rank")]
    try:
        import psutil

        for rank in pids:
            pids += [c.pid for c in psutil.Process(rank).children(recursive=True)]
    except Exception:  # noqa: BLE001 (gone already)
        pass
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    observe.stop(job)


def run_stop_cell(cell: StopCell, run, scratch: Path, outcome) -> None:
    """Fills ``outcome`` (bench_truth.Outcome): checks, the row of the table, the evidence."""
    report_dir = scratch / cell.name
    report_dir.mkdir(parents=True, exist_ok=True)
    job = observe.start_command(report_dir, cell.command(run.job_python, report_dir))
    try:
        wait_for(lambda: len(job.records("rank")) >= RANKS or job.proc.poll() is not None, 150, "3 ranks")
        if job.proc.poll() is not None:
            raise RuntimeError(f"job exited {job.proc.returncode}: {observe._tail(report_dir / 'stderr.txt')}")
        seen = watch(job, cell)
        report, error = cli_snapshot(job, cell, run.dltop_python)
        stop = _read(report_dir / "stop.json")
        if stop is None and not cell.control or stop is None and cell.how == "slow":
            raise RuntimeError(f"no stop.json: {observe._tail(report_dir / 'stderr.txt')}")
        outcome.checks, row = check_stopped(cell, stop, seen, report)
        if error:
            outcome.checks.append(Check("snapshot", error[:200], "a report", False))
        outcome.truth = {**(stop or {}), "expected_lines": sorted(expected_lines(cell.how, stop)) if stop else [],
                         "ranks": sorted(job.records("rank"), key=lambda r: r["rank"])}  # fmt: skip
        outcome.excerpt = {
            "row": row,
            "live": {
                "first_verdict": seen["first"],
                "attached_at": seen["opened"],
                "ticks": seen["ticks"],
                "final": [
                    f if f["id"] in RAISED else {k: f[k] for k in ("id", "title", "pids", "explained_by")}
                    for f in seen["final"]
                ],
            },
            "snapshot": {
                "findings": [f for f in (report or {}).get("findings", []) if f["id"] in RAISED],
                "ranks": stacks(report),
            },
        }
    finally:
        kill_ranks(job)


def table(outcomes: list) -> str:
    """case | truth (rank, line) | dltop's verdict | right? | time to verdict (s) | controls clean."""
    lines = ["| case | truth (rank, line) | dltop's verdict (rank, line / desync) | right? | time to verdict (s) "
             "| controls clean |", "|---|---|---|---|---|---|"]  # fmt: skip
    for outcome in outcomes:
        row = outcome.excerpt.get("row") if outcome.excerpt else None
        if outcome.error or not row:
            lines.append(f"| {outcome.name} | | ERROR: {(outcome.error or '')[:160]} | ✗ | | |")
            continue
        seconds = f"{row['seconds']:.1f}" if row["seconds"] is not None else "—"
        right = "✓" if row["right"] else "✗"
        lines.append(f"| {row['case']} | {row['truth']} | {row['verdict']} | {right} | {seconds} | {row['clean']} |")
    return "\n".join(lines) + "\n"

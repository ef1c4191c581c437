"""One observation for the truth harness: a real job, dltop snapshot on it, and the job's own truth
over exactly the interval dltop sampled.

While dltop watches, a poller reads the job's timing file (published every 0.1 s by the
job's clock, tests/jobs/clock.py) and walks the job's process tree from /proc twice a second (pids, CPU
time, run-queue wait). dltop's report ends at its final tick, just before the command exits,
and covers ``trainer_time.window_s`` (else ``window_s``) before that: the truth is cut from the
records at those two moments.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from common import ROOT

from tests.support import Job, alive, wait_for

# the jobs, in the source tree that runs (below)
JOBS = {"train": "tests/jobs/train.py", "imagenet": "tests/jobs/imagenet_job.py"}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
REPORT_EXIT_S = 0.15  # dltop's final tick to the command's exit (report, JSON, interpreter exit)
HELPER_MARKERS = ("resource_tracker", "multiprocessing.forkserver", "semaphore_tracker")
# The source tree whose dltop package runs (dltop itself, and the demo job's knobs the test job builds on):
# the working tree, or a frozen copy of a commit (`git archive C | tar -x -C DIR`) while it changes.
TREE = {"root": ROOT}


def use_tree(root: Path) -> None:
    TREE["root"] = Path(root).resolve()


def _tree_env() -> dict:
    root = TREE["root"]
    # the tree first, what the caller put on the path after it (Pillow for the imagenet job)
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return {} if root == ROOT else {"PYTHONPATH": path}


@dataclass(frozen=True)
class ProcRow:
    start_ticks: int
    cpu_s: float
    reaped_cpu_s: float  # of its children that exited and it waited for (cutime + cstime)
    run_delay_s: float
    cmdline: str


@dataclass
class Poll:
    timings: list = field(default_factory=list)  # [timing record], oldest first
    trees: list = field(default_factory=list)  # [(time.time(), {pid: ProcRow})]


class Poller(threading.Thread):
    """Reads the job's truth in the background until stopped."""

    def __init__(self, job: Job, every_s: float = 0.1, tree_every: int = 5) -> None:
        super().__init__(daemon=True, name="truth-poller")
        self.job, self.every_s, self.tree_every = job, every_s, tree_every
        self.poll = Poll()
        self.stopped = threading.Event()

    def run(self) -> None:
        count = 0
        while not self.stopped.is_set():
            record = latest_timing(self.job)
            if record and (not self.poll.timings or record["at"] > self.poll.timings[-1]["at"]):
                self.poll.timings.append(record)
            if count % self.tree_every == 0:
                self.poll.trees.append((time.time(), job_tree(self.job.pid)))
            count += 1
            self.stopped.wait(self.every_s)

    def stop(self) -> Poll:
        self.stopped.set()
        self.join()
        return self.poll


def latest_timing(job: Job) -> Optional[dict]:
    try:
        return json.loads((job.report / f"timing-{job.pid}.json").read_text())
    except (OSError, ValueError):
        return None


def job_tree(root: int) -> dict:
    """{pid: ProcRow} of ``root`` and its descendants (through /proc/<pid>/task/<tid>/children)."""
    rows, todo = {}, [root]
    while todo:
        pid = todo.pop()
        try:
            stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            delay = int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            tids = os.listdir(f"/proc/{pid}/task")
        except (OSError, ValueError, IndexError):
            continue
        if stat[0] == "Z":
            continue
        cpu, reaped = (int(stat[11]) + int(stat[12])) / CLOCK_TICKS, (int(stat[13]) + int(stat[14])) / CLOCK_TICKS
        rows[pid] = ProcRow(int(stat[19]), cpu, reaped, delay, cmdline.strip())
        for tid in tids:
            try:
                todo.extend(int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
            except (OSError, ValueError):
                continue
    return rows


def resolve_open_calls(records: list) -> list:
    """Each record's counters with the call open at that moment added where it ended up: the
    first later record without that call shows which counter grew (the rest of that growth is
    the calls after it, a few ms). Records of a call not closed yet are left out."""
    resolved = []
    for index, record in enumerate(records):
        if not record.get("open_s"):
            resolved.append(record)
            continue
        later = next((r for r in records[index + 1 :] if r.get("open_id") != record["open_id"]), None)
        if later is None:
            break
        key = (
            "wait_s" if later["wait_s"] - record["wait_s"] >= later["startup_s"] - record["startup_s"] else "startup_s"
        )
        resolved.append({**record, key: record[key] + record["open_s"]})
    return resolved


def at_time(records: list, moment: float) -> Optional[dict]:
    """The job's counters at ``moment`` (wall clock), interpolated between the (resolved) records
    either side of it: 0.1 s apart."""
    before = [r for r in records if r["at"] <= moment]
    after = [r for r in records if r["at"] >= moment]
    if not before or not after:
        return None
    a, b = before[-1], after[0]
    if b["at"] == a["at"]:
        return a
    share = (moment - a["at"]) / (b["at"] - a["at"])
    keys = ("wait_s", "startup_s", "total_s", "batches", "epochs")
    return {k: a[k] + share * (b[k] - a[k]) for k in keys} | {"at": moment}


def tree_near(trees: list, moment: float) -> tuple:
    return min(trees, key=lambda item: abs(item[0] - moment)) if trees else (moment, {})


@dataclass
class Truth:
    """The job's own figures over [began, ended] (wall clock)."""

    began: float
    ended: float
    wait_percent: Optional[float]
    startup_percent: Optional[float]
    batches_per_s: Optional[float]
    epochs: Optional[float]
    trainer_cpu: Optional[float]  # cores
    workers_cpu: Optional[float]  # cores, all workers
    job_cpu_wanted: Optional[float]  # used + main threads' runnable wait (exited ones' wait is lost), cores
    workers_ever: set  # pids that wrote a worker record
    live_workers: set  # workers alive from 2 s before the end to just after it
    live_helpers: set  # other descendants at the end (resource tracker, forkserver)
    cpus_allowed: int


def truth_between(job: Job, poll: Poll, began: float, ended: float) -> Truth:
    records = resolve_open_calls(poll.timings)
    a, b = at_time(records, began), at_time(records, ended)
    total = (b["total_s"] - a["total_s"]) if a and b else None
    share = (lambda key: 100 * (b[key] - a[key]) / total) if total else (lambda key: None)
    (t0, _), (t1, last) = tree_near(poll.trees, began), tree_near(poll.trees, ended)
    trees = [tree for moment, tree in poll.trees if t0 <= moment <= t1]
    workers_ever = {r["pid"] for r in job.records("worker")}
    cpu = _spent(trees, t1 - t0)
    trainer = cpu({job.pid})
    everyone = {pid for tree in trees for pid in tree}
    # all the job's CPU, exited workers' included (reaped by the trainer or the forkserver): a fork
    # worker of a short epoch lives a tenth of a second, between two tree readings
    used = (_job_cpu(last) - _job_cpu(trees[0])) / (t1 - t0) if trees and t1 > t0 else None
    workers = used - (trainer or 0.0) - (cpu(everyone - workers_ever - {job.pid}) or 0.0) if used is not None else None
    wanted = _spent(trees, t1 - t0, "run_delay_s")(everyone)
    _, early = tree_near(poll.trees, ended - 2.0)
    _, late = tree_near(poll.trees, ended + 0.3)
    return Truth(
        began,
        ended,
        share("wait_s"),
        share("startup_s"),
        (b["batches"] - a["batches"]) / total if total else None,
        (b["epochs"] - a["epochs"]) if a and b else None,
        trainer,
        workers,
        (used or 0.0) + (wanted or 0.0) if wanted is not None else None,
        workers_ever,
        set(early) & set(late) & workers_ever,
        {p for p, row in last.items() if any(m in row.cmdline for m in HELPER_MARKERS)},
        len(os.sched_getaffinity(job.pid)) if alive(job.pid) else len(os.sched_getaffinity(0)),
    )


def _job_cpu(tree: dict) -> float:
    return sum(row.cpu_s + row.reaped_cpu_s for row in tree.values())


def _spent(trees: list, seconds: float, what: str = "cpu_s"):
    """f(pids) -> cores of ``what`` over the tree readings ``trees`` (oldest first). A process
    that started after the first reading counts from 0; one that exited counts up to its last
    reading (at most 0.5 s of it is lost): short-lived workers still count."""

    def share(pids: set) -> Optional[float]:
        if seconds <= 0 or not trees:
            return None
        first, total = trees[0], 0.0
        for pid in pids:
            rows = [tree[pid] for tree in trees if pid in tree]
            if not rows:
                continue
            for life in {row.start_ticks for row in rows}:  # a reused pid is another process
                mine = [row for row in rows if row.start_ticks == life]
                start = first[pid] if pid in first and first[pid].start_ticks == life else None
                total += getattr(mine[-1], what) - (getattr(start, what) if start else 0.0)
        return total / seconds

    return share


@dataclass
class Observation:
    snapshot: Optional[dict]  # dltop's JSON, None when it failed
    error: Optional[str]
    truth: Optional[Truth]
    seconds: float  # dltop's wall time


def start(report: Path, argv: list, python: str, env: Optional[dict] = None) -> Job:
    """A truth job (``argv`` = ['train' | 'imagenet', its arguments...]) in its own session."""
    report.mkdir(parents=True, exist_ok=True)
    command = [python, str(TREE["root"] / JOBS[argv[0]]), "--report", str(report), *argv[1:]]
    with open(report / "stderr.txt", "w") as stderr:
        proc = subprocess.Popen(
            command,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env={**os.environ, **_tree_env(), **(env or {})},
        )
    return Job(proc, report)


def wait_running(job: Job, workers: int, timeout: float = 90) -> None:
    """The trainer is iterating (its clock runs) and, with workers, one has served a batch."""
    wait_for(lambda: latest_timing(job) or job.proc.poll() is not None, timeout, "the job's clock")
    if job.proc.poll() is not None:
        raise RuntimeError(f"job exited: {(job.report / 'stderr.txt').read_text()[-2000:]}")
    wait_for(lambda: (latest_timing(job) or {}).get("batches", 0) >= 2, timeout, "the job's first batches")


def snapshot(job: Job, poller: Poller, seconds: float, dltop_python: str) -> Observation:
    """``dltop snapshot --json`` on the job; the truth over the interval its report covers."""
    command = [dltop_python, "-m", "dltop", "snapshot", "--pid", str(job.pid), "--duration", f"{seconds:g}", "--json"]
    launched = time.time()
    try:
        done = subprocess.run(command, cwd=TREE["root"], capture_output=True, text=True, timeout=seconds + 90)
    except subprocess.TimeoutExpired as timeout:
        return Observation(None, f"dltop timed out: {timeout}", None, time.time() - launched)
    exited = time.time()
    if done.returncode != 0:
        return Observation(None, f"dltop exit {done.returncode}: {done.stderr.strip()[-500:]}", None, exited - launched)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return Observation(None, f"dltop printed no JSON: {done.stdout[:200]!r}", None, exited - launched)
    ended = exited - REPORT_EXIT_S
    spent = (report.get("loaders") or [{}])[0].get("trainer_time") or {}
    window = spent.get("window_s") or report.get("window_s") or seconds
    _settle_records(job, poller, ended)
    return Observation(report, None, truth_between(job, poller.poll, ended - window, ended), exited - launched)


def _settle_records(job: Job, poller: Poller, ended: float, timeout: float = 15.0) -> None:
    """Let workers that were still starting when dltop ended write their records (spawn imports
    torch first), so every pid alive then can be told worker or not; and let the call the
    trainer was inside then return, so its time can be put where it belongs."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        _, tree = tree_near(poller.poll.trees, ended)
        known = {r["pid"] for r in job.records("worker")} | {job.pid}
        pending = [p for p, row in tree.items() if p not in known and not any(m in row.cmdline for m in HELPER_MARKERS)]
        resolved = resolve_open_calls(poller.poll.timings)
        if not [p for p in pending if alive(p)] and resolved and resolved[-1]["at"] > ended:
            return
        time.sleep(0.25)


def rate_over(job: Job, seconds: float) -> Optional[float]:
    """The job's own batches/s over the next ``seconds`` (nothing attached)."""
    first = latest_timing(job)
    time.sleep(seconds)
    last = latest_timing(job)
    if not first or not last or last["total_s"] <= first["total_s"]:
        return None
    return (last["batches"] - first["batches"]) / (last["total_s"] - first["total_s"])


def stop(job: Job) -> None:
    try:
        job.stop()
    except (AssertionError, ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(job.pid, signal.SIGKILL)


def python_default() -> str:
    return sys.executable


def pyspy_in_next(job: Job, poller: Poller, seconds: float, rate: int) -> Optional[tuple]:
    """(share of the trainer's main-thread samples inside the job clock's next()/start(), samples,
    the truth's share of time inside them) from a plain ``py-spy record`` at ``rate`` Hz over
    ``seconds``: whether stack sampling itself agrees with the job's clock on this machine, apart
    from anything dltop does with the samples. Parsed here, not with dltop's code."""
    return pyspy_in_next_many([(job, poller)], seconds, rate)[0]


def pyspy_in_next_many(watched: list, seconds: float, rate: int) -> list:
    """pyspy_in_next for several trainers at once ([(job or View, Poller)]: a torchrun job's
    ranks), one py-spy each over the same ``seconds``; [tuple or None] in the same order."""
    with tempfile.TemporaryDirectory(prefix="truth-pyspy-") as folder:
        running = []
        for index, (job, _) in enumerate(watched):
            output = Path(folder) / f"{index}.json"
            command = [PY_SPY, "record", "--pid", str(job.pid), "--format", "speedscope", "--idle", "--nonblocking"]
            command += ["--rate", str(rate), "--duration", f"{seconds:g}", "--output", str(output)]
            running.append((subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), output))
        shares = []
        for proc, output in running:
            try:
                code = proc.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = -1
            shares.append(_clock_share(output) if code == 0 else None)
        ended = time.time()
    found = []
    for (job, poller), share in zip(watched, shares):
        if share is None:
            found.append(None)
            continue
        _settle_records(job, poller, ended)
        truth = truth_between(job, poller.poll, ended - seconds, ended)
        spent = (truth.wait_percent or 0.0) + (truth.startup_percent or 0.0)
        found.append((share[0], share[1], spent))
    return found


def _clock_share(output: Path) -> Optional[tuple]:
    """(percent of the main thread's samples inside the clock's next()/start(), samples)."""
    try:
        data = json.loads(output.read_text() or "{}")
    except (OSError, ValueError):
        return None
    frames = data.get("shared", {}).get("frames", [])
    main = next((p for p in data.get("profiles", []) if "MainThread" in p.get("name", "")), None)
    if main is None or not main.get("samples"):
        return None
    clock = {i for i, f in enumerate(frames) if (f.get("file") or "").endswith(CLOCK_FILES)
             and f.get("name", "").rsplit(".", 1)[-1] in ("next", "start", "_timed")}  # fmt: skip
    inside = sum(1 for sample in main["samples"] if clock.intersection(sample))
    return 100 * inside / len(main["samples"]), len(main["samples"])


CLOCK_FILES = ("tests/jobs/clock.py",)
PY_SPY = str(Path(sys.executable).parent / "py-spy") if (Path(sys.executable).parent / "py-spy").exists() else "py-spy"


# -- jobs on the real libraries (tests/jobs) -------------------------------------


class View:
    """One trainer of a job as the functions above see a job: a torchrun rank, a Jupyter kernel
    (neither is the process the harness started), or the job itself. Its pid's timing file, and
    the worker records that name it as their trainer."""

    def __init__(self, job: Job, pid: int, rank: int = 0) -> None:
        self.job, self.pid, self.rank = job, pid, rank
        self.report = job.report
        self.proc = job.proc

    def records(self, kind: str) -> list:
        found = self.job.records(kind)
        return [r for r in found if r.get("trainer_pid") == self.pid] if kind == "worker" else found


def start_command(report: Path, command: list, env: Optional[dict] = None) -> Job:
    """A library job (its whole command line) in its own session; stdout and stderr to files."""
    report.mkdir(parents=True, exist_ok=True)
    with open(report / "stderr.txt", "w") as stderr, open(report / "stdout.txt", "w") as stdout:
        proc = subprocess.Popen(command, start_new_session=True, stdout=stdout, stderr=stderr, cwd=ROOT,
                                env={**os.environ, **(env or {})})  # fmt: skip
    return Job(proc, report)


def wait_trainers(job: Job, ranks: int, timeout: float = 150) -> list:
    """[View] of the job's trainers, by rank, once each has run a few batches."""

    def ready():
        if job.proc.poll() is not None:
            return True
        trainers = job.records("trainer")
        views = [View(job, r["pid"], r.get("rank", 0)) for r in trainers]
        return len(views) >= ranks and all((latest_timing(v) or {}).get("batches", 0) >= 2 for v in views) and views

    found = wait_for(ready, timeout, f"{ranks} trainer(s) running batches")
    if found is True:
        raise RuntimeError(f"job exited {job.proc.returncode}: {_tail(job.report / 'stderr.txt')}")
    return sorted(found, key=lambda v: v.rank)


def _tail(path: Path, size: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-size:]
    except OSError:
        return ""


@dataclass
class ManyObservation:
    snapshot: Optional[dict]
    error: Optional[str]
    truths: dict  # {trainer pid: Truth}
    seconds: float


def snapshot_views(target: int, views: list, pollers: list, seconds: float, dltop_python: str) -> ManyObservation:
    """``dltop snapshot --pid target --json`` (the launcher, the kernel, the trainer); the truth of
    each trainer over the interval its loader's report covers."""
    command = [dltop_python, "-m", "dltop", "snapshot", "--pid", str(target), "--duration", f"{seconds:g}", "--json"]
    launched = time.time()
    try:
        done = subprocess.run(command, cwd=TREE["root"], capture_output=True, text=True, timeout=seconds + 90)
    except subprocess.TimeoutExpired as timeout:
        return ManyObservation(None, f"dltop timed out: {timeout}", {}, time.time() - launched)
    exited = time.time()
    if done.returncode != 0:
        return ManyObservation(
            None, f"dltop exit {done.returncode}: {done.stderr.strip()[-500:]}", {}, exited - launched
        )
    try:
        report = json.loads(done.stdout)
    except ValueError:
        return ManyObservation(None, f"dltop printed no JSON: {done.stdout[:200]!r}", {}, exited - launched)
    ended = exited - REPORT_EXIT_S
    truths = {}
    for view, poller in zip(views, pollers):
        loader = next((ld for ld in report.get("loaders", []) if ld.get("trainer_pid") == view.pid), {})
        window = (loader.get("trainer_time") or {}).get("window_s") or report.get("window_s") or seconds
        _settle_records(view, poller, ended)
        truths[view.pid] = truth_between(view, poller.poll, ended - window, ended)
    return ManyObservation(report, None, truths, exited - launched)


def exit_of(job: Job, timeout: float = 120) -> Optional[int]:
    """The job's exit code once it ends by itself (None: still running after ``timeout``)."""
    try:
        return job.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return None

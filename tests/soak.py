"""A soak of `dltop exporter` under load and churn: it must hold for hours on a shared node, as root.
tests/integration/test_exporter_soak.py runs its short form; benchmarks/soak_exporter.py the long
one, by hand.

Two real exporters (``python -m dltop exporter --interval 1 --discover-every 1``, each in a session
of its own) follow the same churn of real training jobs (tests/jobs/train.py, one DataLoader worker,
persistent): a job starts every ``--churn-s`` seconds (give or take 30 %), cycling through

* finish      runs a few hundred batches (``--epochs 1``) and exits by itself;
* kill        runs until its process group gets SIGKILL, 2-10 s after torch loaded: its /proc
              vanishes at a random moment, often in the middle of a pass that reads it;
* blip        one batch and out: it exits within a tick or two of being discovered;
* kill-early  SIGKILL at a random moment within two passes of torch loading: before, during or
              just after the exporter attaches to it (discovery, the first py-spy dump).

Exporter A samples stacks with the real py-spy and Austin; exporter B has ``DLTOP_PY_SPY`` and
``DLTOP_AUSTIN`` pointing at /bin/false, so every sampler run it starts fails. Meanwhile
``--scrapers`` threads scrape both as fast as a busy Prometheus would (urllib), an observer per
exporter scrapes and parses every half second, one slow scraper reads the answer a few bytes at a
time through a small receive window (bounded: cut after a few seconds), and one client connects
and says nothing for ``--silent-s`` (is it ever closed by the exporter? reported, not checked).

Measured from outside, before (after a warm-up job came and went, no soak job alive) and after
(every soak job gone, scrapers stopped, a few passes later): the exporter's RSS, threads and open
fds (psutil, medians of five readings); series on /metrics (lines not starting with #);
``dltop_collection_failures_total``; every scrape's latency against
``dltop_collection_duration_seconds`` (one pass); how long an exited job's series outlive it; and,
at the end, any py-spy/austin left behind (a child of an exporter, or one aimed at a soak job).

The exporters follow every job on the node: jobs of others (shown as "foreign") are left out of
the soak's series checks, and the thread/fd bounds widen by what a followed job legitimately holds
when their number changed between before and after. pid_max may be small (32768): a soak job's pid
that a later process took is recognised (its process started after the job ended) and not blamed.

``render`` makes a table of the figures and the checks. Every loop is bounded; every process it
started is killed in ``finally``.
"""

from __future__ import annotations

import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import psutil

from tests.support import ROOT, TRAIN, Job, group_alive

KINDS = ("finish", "kill", "blip", "kill-early")
JOB_ARGS = ("--workers", "1", "--persistent", "--step-ms", "20")
FAILING = {"DLTOP_PY_SPY": "/bin/false", "DLTOP_AUSTIN": "/bin/false"}
SAMPLERS = ("py-spy", "austin")
JOB_LIMIT_S = 90.0  # a soak job still alive after this is killed (bounded, whatever it does)
OBSERVE_EVERY_S = 0.5
SCRAPE_TIMEOUT_S = 30.0
THREADS_PER_JOB = 2  # a followed job holds its exit watcher's and its start-up watcher's thread
FDS_PER_JOB = 8  # and pidfds, a wake pipe, trainer log fds
RSS_PER_JOB_MB = 5.0  # and its window of Snapshots
TRACER = ROOT / "benchmarks" / "trace_exporter.py"
PID_LABEL = re.compile(r'[{,](job_pid|trainer_pid|pid)="(\d+)"')
JOB_PID = re.compile(r'[{,]job_pid="(\d+)"')
STACKS = re.compile(r'stacks_status="([^"]*)"')


class SoakError(RuntimeError):
    """The soak itself could not go on (an exporter that never started, a job that never loaded torch)."""


@dataclass
class Options:
    minutes: float = 10.0
    churn_s: float = 3.0
    interval_s: float = 1.0
    scrapers: int = 3  # concurrent fast scrapers
    max_alive: int = 4  # soak jobs alive at once, at most (a start is skipped beyond)
    seed: int = 0
    rss_margin_mb: float = 30.0
    thread_margin: int = 2
    fd_margin: int = 4
    scrape_floor_s: float = 2.0  # scrape p99 <= max(this, scrape_passes x the slowest pass)
    scrape_passes: float = 3.0
    gone_passes: float = 3.0  # an exited job's series are gone within this many (slowest) passes
    silent_s: float = 40.0
    slow_bound_s: float = 6.0  # the slow scraper gives up on one answer after this
    directory: Optional[Path] = None  # logs and job reports (a temporary one, removed, if None)
    trace: Optional[Path] = None  # run the exporters under benchmarks/trace_exporter.py, writing here
    trace_every_s: float = 120.0
    trace_frames: int = 12  # 0: no tracemalloc, a line of RSS and heap figures every trace_every_s
    rss_every_s: float = 0.0  # > 0: a row of each exporter's RSS at every such mark of the churn


# -- the exporters ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    rss: int
    threads: int
    fds: int
    cpu_s: float  # its own and its reaped children's (py-spy runs)
    children: tuple  # (pid, name, status)


class Exporter:
    """`python -m dltop exporter` on a free port of 127.0.0.1, in a session of its own."""

    def __init__(
        self, name: str, label: str, directory: Path, interval_s: float, env: dict, trace: Optional[tuple] = None
    ) -> None:
        self.name, self.label = name, label
        self.log = directory / f"exporter-{name}.txt"
        start = [sys.executable, "-m", "dltop"]
        if trace is not None:  # (directory, seconds, frames): benchmarks/trace_exporter.py writes there
            start = [sys.executable, str(TRACER), "--out", str(trace[0] / name), "--every", f"{trace[1]:g}",
                     "--frames", str(trace[2]), "--"]  # fmt: skip
        command = [
            *start, "exporter", "--listen", "127.0.0.1", "--port", "0",
            "--interval", f"{interval_s:g}", "--discover-every", f"{interval_s:g}",
        ]  # fmt: skip
        with open(self.log, "w") as stderr:
            self.proc = subprocess.Popen(
                command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                start_new_session=True, env=env,
            )  # fmt: skip
        self.process = psutil.Process(self.proc.pid)
        self.port = 0
        self.url = ""
        self.stop_rc: Optional[int] = None
        self.stop_s: Optional[float] = None
        self.died_at: Optional[float] = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            first = self.log.read_text().partition("\n")[0]  # its stderr's first line names the port
            found = re.search(r"127\.0\.0\.1:(\d+)/metrics", first)
            if found:
                self.port = int(found.group(1))
                self.url = f"http://127.0.0.1:{self.port}/metrics"
                return
            if self.proc.poll() is not None:
                raise SoakError(f"exporter {self.name} exited with {self.proc.returncode}: {self.tail()}")
            if time.monotonic() > deadline:
                raise SoakError(f"exporter {self.name} named no port within {timeout_s:.0f} s: {self.tail()}")
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def resources(self) -> Optional[Resources]:
        try:
            with self.process.oneshot():
                rss = self.process.memory_info().rss
                threads = self.process.num_threads()
                fds = self.process.num_fds()
                cpu = self.process.cpu_times()
            children = []
            for child in self.process.children():
                try:
                    children.append((child.pid, child.name(), child.status()))
                except psutil.Error:
                    continue
        except psutil.Error:
            return None
        cpu_s = cpu.user + cpu.system + cpu.children_user + cpu.children_system
        return Resources(rss, threads, fds, cpu_s, tuple(children))

    def stop(self, timeout_s: float = 20.0) -> Optional[int]:
        """SIGTERM, as systemd and Kubernetes stop it: its exit status (None if it had to be killed)."""
        if not self.alive():
            self.stop_rc = self.proc.returncode
            return self.stop_rc
        began = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.stop_rc = self.proc.wait(timeout=timeout_s)
            self.stop_s = time.monotonic() - began
        except subprocess.TimeoutExpired:
            self.kill()
        return self.stop_rc

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its py-spy runs are in its process group
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


# -- what /metrics says ----------------------------------------------------------------------------


@dataclass
class Exposition:
    series: int = 0  # lines not starting with #
    node_series: int = 0  # of them, those without a job_pid label (the exporter's own, GPUs)
    job_series: dict = field(default_factory=dict)  # job pid -> its series
    pids: set = field(default_factory=set)  # every pid a job_pid, trainer_pid or pid label names
    stacks: dict = field(default_factory=dict)  # job pid -> stacks_status of dltop_job_info
    failures: Optional[float] = None  # dltop_collection_failures_total
    pass_s: Optional[float] = None  # dltop_collection_duration_seconds
    collected_at: Optional[float] = None  # dltop_last_collection_timestamp_seconds


def parse(text: str) -> Exposition:
    found = Exposition()
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        found.series += 1
        name = line.split("{", 1)[0].split(" ", 1)[0]
        job = JOB_PID.search(line)
        if job is None:
            found.node_series += 1
        else:
            pid = int(job.group(1))
            found.job_series[pid] = found.job_series.get(pid, 0) + 1
            if name == "dltop_job_info" and (status := STACKS.search(line)):
                found.stacks[pid] = status.group(1)
        found.pids.update(int(m.group(2)) for m in PID_LABEL.finditer(line))
        value = line.rsplit(" ", 1)[-1]
        if name == "dltop_collection_failures_total":
            found.failures = float(value)
        elif name == "dltop_collection_duration_seconds":
            found.pass_s = float(value)
        elif name == "dltop_last_collection_timestamp_seconds":
            found.collected_at = float(value)
    return found


@dataclass
class Observation:
    exporter: str
    at: float  # monotonic, when the request was sent (the view it read is at least as new)
    phase: str
    expo: Exposition
    reused: set  # soak-job pids in it that a newer process has taken since (not the job's series)


@dataclass
class Scrape:
    exporter: str
    phase: str
    seconds: float
    error: str = ""


@dataclass
class SlowScrape:
    exporter: str
    seconds: float
    received: int
    complete: bool
    error: str = ""


def scrape(url: str) -> tuple:
    """(body, seconds) of one GET, as Prometheus makes it."""
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as response:
        body = response.read().decode()
    return body, time.perf_counter() - began


def slow_scrape(name: str, port: int, chunk: int, pause_s: float, bound_s: float) -> SlowScrape:
    """One scrape read ``chunk`` bytes at a time: a raw socket with a small receive window (urllib
    would take the answer 8 KB at a time, and the kernel's default window all of it at once), so
    the exporter's thread waits on this reader until it has read everything or gives up."""
    began = time.monotonic()
    received, complete, error = 0, False, ""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", port))
        sock.sendall(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        while time.monotonic() - began < bound_s:
            data = sock.recv(chunk)
            if not data:
                complete = True
                break
            received += len(data)
            time.sleep(pause_s)
    except OSError as problem:
        error = str(problem)
    finally:
        sock.close()
    return SlowScrape(name, time.monotonic() - began, received, complete, error)


# -- the jobs ----------------------------------------------------------------------------------------


@dataclass
class SoakJob:
    kind: str
    job: Job
    started_at: float
    torch_at: Optional[float] = None  # when libtorch showed in its maps
    kill_at: Optional[float] = None
    killed_at: Optional[float] = None
    ended_at: Optional[float] = None  # its process group is gone (monotonic)
    ended_wall: Optional[float] = None
    exit_code: Optional[int] = None

    @property
    def pid(self) -> int:
        return self.job.pid

    def pids(self) -> set:
        """Its trainer and every worker it recorded."""
        return {self.pid} | {r["pid"] for kind in ("trainer", "worker") for r in self.job.records(kind)}


def torch_loaded(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps", "rb") as maps:
            return b"libtorch" in maps.read()
    except OSError:
        return False


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def started_after(pid: int, wall: float) -> bool:
    """A process now holds ``pid`` that started after ``wall`` (the pid was reused)."""
    try:
        return psutil.Process(pid).create_time() > wall - 0.02
    except psutil.Error:
        return False


# -- the figures -------------------------------------------------------------------------------------


def pct(values: list, q: float) -> float:
    """Nearest-rank percentile (nan for none)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))]


def median(values: list) -> float:
    return statistics.median(values) if values else math.nan


@dataclass
class Baseline:
    rss: float
    threads: float
    fds: float
    cpu_s: float
    node_series: int
    series: int
    our_series: int
    foreign: frozenset  # pids of the jobs of others it follows
    failures: float


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Result:
    options: Options
    rows: list  # (figure, A, B)
    checks: list  # Check
    notes: list  # lines

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


class Soak:
    def __init__(self, options: Options, directory: Path, say: Callable[[str], None]) -> None:
        self.o = options
        self.dir = directory
        self.say = say
        self.rng = random.Random(options.seed)
        self.exporters: list = []
        self.jobs: list = []
        self.skipped = 0
        self.phase = "start"
        self.lock = threading.Lock()
        self.latest: dict = {}  # exporter name -> newest Observation
        self.observations: list = []
        self.scrapes: list = []
        self.slow: list = []
        self.resources: list = []  # (at, exporter name, phase, Resources)
        self.gone_wall: dict = {}  # pid of a soak job that ended -> when (time.time())
        self.silent: dict = {}  # what the silent client saw
        self.threads: list = []
        self.watching = threading.Event()  # set: observers and the monitor stop
        self.scraping = threading.Event()  # set: scrapers stop
        self.churn_began = self.churn_ended = 0.0

    # -- threads -------------------------------------------------------------------------------

    def _thread(self, target: Callable, *args: object) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"soak-{target.__name__}")
        thread.start()
        self.threads.append(thread)
        return thread

    def _observe(self, exporter: Exporter) -> None:
        while not self.watching.wait(OBSERVE_EVERY_S):
            at, phase = time.monotonic(), self.phase
            try:
                body, seconds = scrape(exporter.url)
            except OSError as problem:
                self.scrapes.append(Scrape(exporter.name, phase, math.nan, f"observer: {problem}"))
                continue
            self.scrapes.append(Scrape(exporter.name, phase, seconds))
            expo = parse(body)
            with self.lock:
                gone = dict(self.gone_wall)
            reused = {pid for pid in expo.pids if pid in gone and started_after(pid, gone[pid])}
            observation = Observation(exporter.name, at, phase, expo, reused)
            with self.lock:
                self.observations.append(observation)
                self.latest[exporter.name] = observation

    def _monitor(self) -> None:
        said = 0  # RSS marks of the churn said so far (rss_every_s)
        while not self.watching.wait(1.0):
            for exporter in self.exporters:
                found = exporter.resources()
                if found is not None:
                    self.resources.append((time.monotonic(), exporter.name, self.phase, found))
                if exporter.died_at is None and not exporter.alive():
                    exporter.died_at = time.monotonic()
            every = self.o.rss_every_s
            if every > 0 and self.phase == "churn" and time.monotonic() >= self.churn_began + said * every + 20:
                marks = self._rss_marks()
                told = ", ".join(f"{name} {_mb(at[said])}" for name, at in marks.items() if len(at) > said)
                self.say(f"RSS MB at {said * every / 60:g} min of the churn: {told or '?'}")
                said += 1

    def _rss_marks(self) -> dict:
        """exporter -> its RSS at each ``rss_every_s`` mark of the churn (the median of the readings
        in the 20 s that follow the mark, as far as the readings go)."""
        every, out = self.o.rss_every_s, {}
        readings = [(at, e, r.rss) for at, e, p, r in list(self.resources) if p == "churn"]
        ended = self.churn_ended or time.monotonic()
        for exporter in self.exporters:
            mine = [(at, rss) for at, e, rss in readings if e == exporter.name]
            marks, k = [], 0
            while mine and self.churn_began + k * every <= ended:
                mark = self.churn_began + k * every
                window = [rss for at, rss in mine if mark <= at < mark + 20] or [
                    rss
                    for at, rss in mine
                    if mark - 20 <= at < mark  # the churn's last mark: before it
                ]
                if not window:
                    break
                marks.append(median(window))
                k += 1
            out[exporter.name] = marks
        return out

    def _scrape_fast(self, index: int) -> None:
        rng = random.Random(self.o.seed * 1000 + index)
        turn = index
        while not self.scraping.wait(rng.uniform(0.05, 0.3)):
            exporter = self.exporters[turn % len(self.exporters)]
            turn += 1
            try:
                _, seconds = scrape(exporter.url)
            except OSError as problem:
                self.scrapes.append(Scrape(exporter.name, self.phase, math.nan, str(problem)))
                continue
            self.scrapes.append(Scrape(exporter.name, self.phase, seconds))

    def _scrape_slow(self) -> None:
        rng = random.Random(self.o.seed + 7)
        turn = 0
        while not self.scraping.wait(0.5):
            exporter = self.exporters[turn % len(self.exporters)]
            turn += 1
            chunk, pause = rng.choice((16, 64, 256)), rng.uniform(0.005, 0.03)
            self.slow.append(slow_scrape(exporter.name, exporter.port, chunk, pause, self.o.slow_bound_s))

    def _hold_silent(self, exporter: Exporter) -> None:
        """Connect and say nothing: does the exporter ever hang up (a thread per such client)?"""
        began = time.monotonic()
        self.silent.update(exporter=exporter.name, closed_after=None, held_s=0.0)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.connect(("127.0.0.1", exporter.port))
            sock.settimeout(0.5)
            while time.monotonic() - began < self.o.silent_s and not self.scraping.is_set():
                try:
                    data = sock.recv(1024)
                except socket.timeout:
                    continue
                self.silent["closed_after"] = time.monotonic() - began  # b"" (closed) or an answer
                self.silent["answer"] = data[:40].decode(errors="replace")
                break
        except OSError as problem:
            self.silent["closed_after"] = time.monotonic() - began
            self.silent["answer"] = str(problem)
        finally:
            sock.close()
            self.silent["held_s"] = time.monotonic() - began

    # -- jobs ----------------------------------------------------------------------------------

    def _start_job(self, kind: str) -> SoakJob:
        """One of KINDS, or "warm-up" (runs until killed by hand)."""
        report = self.dir / f"job-{len(self.jobs):04d}-{kind}"
        report.mkdir()
        epochs = ("--epochs", "1") if kind in ("finish", "blip") else ("--epochs", "0")
        batches = ("--batches", "1") if kind == "blip" else ("--batches", str(self.rng.randint(150, 400)))
        command = [sys.executable, str(TRAIN), "--report", str(report), *JOB_ARGS, *epochs, *batches]
        with open(report / "stderr.txt", "w") as stderr:
            proc = subprocess.Popen(
                command, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                start_new_session=True,
            )  # fmt: skip
        job = SoakJob(kind, Job(proc, report), time.monotonic())
        self.jobs.append(job)
        return job

    def _tend(self, job: SoakJob, now: float) -> None:
        """Kill it when its time comes; note when its whole process group is gone."""
        if job.ended_at is not None:
            return
        if job.kind.startswith("kill") and job.torch_at is None and torch_loaded(job.pid):
            job.torch_at = now
            passes = self.o.interval_s
            delay = self.rng.uniform(2.0, 10.0) if job.kind == "kill" else self.rng.uniform(0.0, 2 * passes)
            job.kill_at = now + delay
        overdue = job.kind in KINDS and now - job.started_at > JOB_LIMIT_S
        if job.killed_at is None and ((job.kill_at is not None and now >= job.kill_at) or overdue):
            kill_group(job.pid)
            job.killed_at = now
        if job.job.proc.poll() is not None and not group_alive(job.pid):
            job.ended_at, job.ended_wall, job.exit_code = now, time.time(), job.job.proc.returncode
            pids = job.pids()
            with self.lock:
                for pid in pids:
                    self.gone_wall[pid] = job.ended_wall

    def _tend_all(self) -> None:
        now = time.monotonic()
        for job in self.jobs:
            self._tend(job, now)

    def _alive_jobs(self) -> list:
        return [j for j in self.jobs if j.ended_at is None]

    def _check_exporters(self) -> None:
        for exporter in self.exporters:
            if not exporter.alive():
                raise SoakError(f"exporter {exporter.name} died (rc {exporter.proc.returncode}): {exporter.tail()}")

    def _wait(self, predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            self._check_exporters()
            self._tend_all()
            if time.monotonic() > deadline:
                raise SoakError(f"timed out after {timeout_s:.0f} s waiting for {what}")
            time.sleep(0.1)

    def _fresh(self, since: float) -> dict:
        """The newest Observation of every exporter, if each is newer than ``since``."""
        with self.lock:
            latest = dict(self.latest)
        if len(latest) < len(self.exporters) or any(o.at < since for o in latest.values()):
            return {}
        return latest

    def _seen_by_all(self, pid: int) -> bool:
        latest = self._fresh(0.0)
        return bool(latest) and all(pid in o.expo.job_series for o in latest.values())

    def _none_of_ours(self, since: float) -> bool:
        latest = self._fresh(since)
        ours = {j.pid for j in self.jobs}
        return bool(latest) and all(not (set(o.expo.job_series) - o.reused) & ours for o in latest.values())

    # -- phases --------------------------------------------------------------------------------

    def run(self) -> Result:
        try:
            return self._run()
        finally:
            self.scraping.set()
            self.watching.set()
            for job in self.jobs:
                kill_group(job.pid)
            for job in self.jobs:
                try:
                    job.job.stop()
                except Exception as problem:  # noqa: BLE001 - go on killing the rest
                    self.say(f"could not stop job {job.pid}: {problem}")
            for exporter in self.exporters:
                exporter.kill()
            for thread in self.threads:
                thread.join(timeout=SCRAPE_TIMEOUT_S + 5)

    def _run(self) -> Result:
        o = self.o
        plain = {k: v for k, v in os.environ.items() if k not in FAILING}
        trace = (o.trace, o.trace_every_s, o.trace_frames) if o.trace is not None else None
        self.exporters = [
            Exporter("A", "A: py-spy, Austin", self.dir, o.interval_s, plain, trace),
            Exporter("B", "B: samplers fail", self.dir, o.interval_s, {**plain, **FAILING}, trace),
        ]
        for exporter in self.exporters:
            exporter.wait_ready()
        cold = {e.name: e.resources() for e in self.exporters}
        for exporter in self.exporters:
            self._thread(self._observe, exporter)
        self._thread(self._monitor)

        # warm-up: one job followed and gone, so that what the first job loads is in the baseline
        self.phase = "warm-up"
        self.say("warm-up: one job, followed by both exporters, then killed")
        warm = self._start_job("warm-up")
        self._wait(lambda: self._seen_by_all(warm.pid), 180, "both exporters to follow the warm-up job")
        time.sleep(5 * o.interval_s)
        kill_group(warm.pid)
        self._wait(lambda: warm.ended_at is not None, 30, "the warm-up job to end")
        since = time.monotonic()
        self._wait(lambda: self._none_of_ours(since), 30, "the warm-up job's series to go")
        time.sleep(3 * o.interval_s)
        before = self._baseline("before")

        # churn, scraped all along
        self.phase = "churn"
        self.say(f"churn: a job every ~{o.churn_s:g} s for {o.minutes:g} min, scraped by {o.scrapers}+2 clients")
        for index in range(o.scrapers):
            self._thread(self._scrape_fast, index)
        self._thread(self._scrape_slow)
        self._thread(self._hold_silent, self.exporters[0])
        self.churn_began = time.monotonic()
        cpu_began = {e.name: e.resources() for e in self.exporters}
        end = self.churn_began + o.minutes * 60
        next_start, turn = self.churn_began, 0
        while (now := time.monotonic()) < end:
            self._check_exporters()
            if now >= next_start:
                next_start = now + o.churn_s * self.rng.uniform(0.7, 1.3)
                if len(self._alive_jobs()) < o.max_alive:
                    self._start_job(KINDS[turn % len(KINDS)])
                    turn += 1
                else:
                    self.skipped += 1
            self._tend_all()
            time.sleep(0.1)
        self.churn_ended = time.monotonic()
        cpu_ended = {e.name: e.resources() for e in self.exporters}

        # wind down: the jobs still running are killed (their /proc vanishes too), scrapers stop
        self.phase = "wind-down"
        for job in self._alive_jobs():
            kill_group(job.pid)
            job.killed_at = job.killed_at or time.monotonic()
        self._wait(lambda: not self._alive_jobs(), 60, "every soak job to end")
        self.scraping.set()
        for thread in self.threads:
            if thread.name.startswith(("soak-_scrape", "soak-_hold")):
                thread.join(timeout=SCRAPE_TIMEOUT_S + 5)
        since = time.monotonic()
        gone_limit = 10 * max(o.interval_s, self._slowest_pass())
        try:
            self._wait(lambda: self._none_of_ours(since), gone_limit + 5, "the soak jobs' series to go")
        except SoakError as problem:
            self.say(str(problem))  # the checks below say which series stayed
        time.sleep(3 * o.interval_s)
        after = self._baseline("after")
        self.phase = "end"
        leftovers = self._leftover_samplers()
        now_held = {e.name: e.resources() for e in self.exporters}
        children = {name: len(found.children) if found else -1 for name, found in now_held.items()}
        final = self._fresh(time.monotonic())
        deadline = time.monotonic() + 10
        while not final and time.monotonic() < deadline:
            time.sleep(0.1)
            final = self._fresh(deadline - 10)
        self.watching.set()
        for thread in self.threads:
            thread.join(timeout=SCRAPE_TIMEOUT_S + 5)
        for exporter in self.exporters:
            exporter.stop()
        orphans = self._orphans()
        return self._result(cold, before, after, cpu_began, cpu_ended, leftovers, final, children, orphans)

    def _baseline(self, phase: str) -> dict:
        """Per exporter: medians of five readings half a second apart, with the newest exposition."""
        self.phase = phase
        readings: dict = {e.name: [] for e in self.exporters}
        for _ in range(5):
            for exporter in self.exporters:
                found = exporter.resources()
                if found is not None:
                    readings[exporter.name].append(found)
            time.sleep(0.5)
        self._check_exporters()
        since = time.monotonic()
        self._wait(lambda: bool(self._fresh(since)), 30, "a scrape of each exporter")
        latest = self._fresh(since)
        ours = {j.pid for j in self.jobs}
        result = {}
        for exporter in self.exporters:
            taken, expo = readings[exporter.name], latest[exporter.name].expo
            mine = set(expo.job_series) - latest[exporter.name].reused
            result[exporter.name] = Baseline(
                rss=median([r.rss for r in taken]),
                threads=median([r.threads for r in taken]),
                fds=median([r.fds for r in taken]),
                cpu_s=taken[-1].cpu_s if taken else math.nan,
                node_series=expo.node_series,
                series=expo.series,
                our_series=sum(n for pid, n in expo.job_series.items() if pid in ours and pid in mine),
                foreign=frozenset(set(expo.job_series) - ours),
                failures=expo.failures if expo.failures is not None else math.nan,
            )
        return result

    def _sampler_scan(self) -> dict:
        """(pid, start) -> (what, stale, group) of every process in an exporter's process group (its
        py-spy and Austin runs, even once orphaned) and of any py-spy/Austin aimed at a soak job.
        Stale: a zombie, or aimed at a soak job or at a process that is gone. The exporters follow
        jobs of others too: a run aimed at one of those, alive, is not stale."""
        groups = {e.pid for e in self.exporters}
        ours: set = set()
        for job in self.jobs:
            ours |= job.pids()
        with self.lock:
            gone = dict(self.gone_wall)
        found = {}
        for process in psutil.process_iter(["pid", "ppid", "name", "cmdline", "status", "create_time"]):
            info = process.info
            if info["pid"] in groups:
                continue
            try:
                group = os.getpgid(info["pid"])
            except OSError:
                continue
            command = info["cmdline"] or []
            programs = {Path(part).name for part in command[:3]} | {info["name"]}
            targets = {
                int(command[i + 1])
                for i, part in enumerate(command[:-1])
                if part in ("--pid", "-p", "-w") and command[i + 1].isdigit()
            }
            aimed_at_ours = {t for t in targets & ours if not (t in gone and started_after(t, gone[t]))}
            if group not in groups and not (programs & set(SAMPLERS) and aimed_at_ours):
                continue
            target_gone = bool(targets) and not any(psutil.pid_exists(t) for t in targets)
            stale = info["status"] == psutil.STATUS_ZOMBIE or bool(aimed_at_ours) or target_gone
            what = " ".join(command)[:100] or info["name"]
            found[(info["pid"], info["create_time"])] = (
                f"{info['pid']} {what} ({info['status']}, parent {info['ppid']}, group {group})",
                stale,
                group,
            )
        return found

    def _leftover_samplers(self) -> list:
        """Sampler processes stale in two scans a few passes apart (a zombie between two ticks, or a
        run the next tick stops, is not left behind). Stale in both: a long run (an exporter's
        py-spy window lasts up to 30 s) that was sampling at the first scan and had just ended at
        the second, not yet reaped by the exporter's next tick, is not one."""
        first = self._sampler_scan()
        time.sleep(3 * max(self.o.interval_s, self._slowest_pass()))
        second = self._sampler_scan()
        return [what for key, (what, stale, _) in second.items() if stale and first.get(key, ("", False, 0))[1]]

    def _orphans(self) -> list:
        """Anything left of the exporters' process groups once they exited on SIGTERM."""
        time.sleep(1.0)
        groups = {e.pid for e in self.exporters}
        return [what for what, _, group in self._sampler_scan().values() if group in groups]

    def _slowest_pass(self, phase: Optional[str] = None) -> float:
        passes = self._passes(phase)
        return max((s for per in passes.values() for s in per), default=0.0)

    def _passes(self, phase: Optional[str] = None) -> dict:
        """exporter -> [duration of each distinct pass seen]."""
        seen: dict = {}
        with self.lock:
            observations = list(self.observations)
        for obs in observations:
            expo = obs.expo
            if (phase is None or obs.phase == phase) and expo.collected_at is not None and expo.pass_s is not None:
                seen[(obs.exporter, expo.collected_at)] = expo.pass_s
        out: dict = {e.name: [] for e in self.exporters}
        for (name, _), seconds in seen.items():
            out[name].append(seconds)
        return out

    # -- figures and checks --------------------------------------------------------------------

    def _result(self, cold, before, after, cpu_began, cpu_ended, leftovers, final, children, orphans) -> Result:
        end = Readings(cold, before, after, cpu_began, cpu_ended, leftovers, final, children, orphans)
        seen = self._figures()
        rows = [
            *self._churn_rows(seen, end),
            *self._resource_rows(seen, end),
            *self._series_rows(seen, end),
            *self._latency_rows(seen),
            *self._ending_rows(seen),
        ]
        checks = [check for n in seen.names for check in self._exporter_checks(seen, end, n)]
        checks += self._soak_checks(seen, end)
        return Result(self.o, rows, checks, self._notes(end))

    def _figures(self) -> Figures:
        """What the observers, the scrapers and the jobs' ends add up to, per exporter."""
        names = [e.name for e in self.exporters]
        observations = list(self.observations)
        ours = {j.pid for j in self.jobs}
        churned = [j for j in self.jobs if j.started_at >= self.churn_began]
        followed, stacks, foreign = _seen_jobs(names, observations, ours)
        return Figures(
            names=names,
            observations=observations,
            ours=ours,
            churned=churned,
            kinds={k: sum(1 for j in churned if j.kind == k) for k in KINDS},
            followed=followed,
            stacks=stacks,
            foreign=foreign,
            failed_stacks={n: {pid for pid, s in stacks[n].items() if s - {"ok"}} for n in names},
            churn_s=max(1e-9, self.churn_ended - self.churn_began),
            passes=self._passes("churn"),
            latencies={n: [s.seconds for s in self._scrapes(n) if s.phase == "churn" and not s.error] for n in names},
            errors={n: [s.error for s in self._scrapes(n) if s.error] for n in names},
            lags={n: self._lags(n, observations, followed[n]) for n in names},
        )

    def _scrapes(self, name: str) -> list:
        return [s for s in self.scrapes if s.exporter == name]

    def _lags(self, name: str, observations: list, followed: set) -> list:
        """How long each ended job that exporter ``name`` followed outlived its end in its series."""
        lags = []
        for job in self.jobs:
            if job.ended_at is None or job.pid not in followed:
                continue
            late = [ob.at - job.ended_at for ob in observations
                    if ob.exporter == name and ob.at >= job.ended_at
                    and job.pid in ob.expo.job_series and job.pid not in ob.reused]  # fmt: skip
            lags.append(max(late, default=0.0))
        return lags

    def _churn(self, name: str, figure: Callable[[Resources], float]) -> float:
        """The most of ``figure`` exporter ``name`` reached during the churn."""
        return max((figure(r) for _, e, p, r in self.resources if e == name and p == "churn"), default=0)

    def _churn_rows(self, seen: Figures, end: Readings) -> list:
        every = len(seen.names)
        return [
            ("jobs started in the churn", *[", ".join(f"{k} {v}" for k, v in seen.kinds.items())] * every),
            ("starts skipped (max alive reached)", *[str(self.skipped)] * every),
            _row(seen, "soak jobs followed (of all started)", lambda n: f"{len(seen.followed[n])} of {len(self.jobs)}"),
            _row(seen, "foreign jobs seen (at before / at after)",
                 lambda n: f"{len(seen.foreign[n])} ({len(end.before[n].foreign)} / {len(end.after[n].foreign)})"),
        ]  # fmt: skip

    def _resource_rows(self, seen: Figures, end: Readings) -> list:
        before, after, cold = end.before, end.after, end.cold
        trend = {n: [r.rss for _, e, p, r in self.resources if e == n and p == "churn"] for n in seen.names}

        def quartiles(n: str) -> str:
            if not trend[n]:
                return "?"
            return " / ".join(_mb(trend[n][min(len(trend[n]) - 1, q * len(trend[n]) // 4)]) for q in range(5))

        def cpu(n: str) -> str:
            began, ended = end.cpu_began[n], end.cpu_ended[n]
            return f"{(ended.cpu_s - began.cpu_s) / seen.churn_s:.0%}" if began and ended else "?"

        marks = self._rss_marks() if self.o.rss_every_s > 0 else {}
        every = f"RSS MB every {self.o.rss_every_s / 60:g} min of the churn"
        at_marks = [_row(seen, every, lambda n: " / ".join(map(_mb, marks[n])))] if marks else []
        return [
            *at_marks,
            _row(seen, "RSS MB over the churn: 0 / 25 / 50 / 75 / 100 %", quartiles),
            _row(seen, "RSS MB: cold / before / max churn / after",
                 lambda n: f"{_mb(cold[n].rss if cold[n] else math.nan)} / {_mb(before[n].rss)} / "
                           f"{_mb(self._churn(n, lambda r: r.rss))} / {_mb(after[n].rss)}"),
            _row(seen, "threads: before / max churn / after",
                 lambda n: f"{before[n].threads:g} / {self._churn(n, lambda r: r.threads)} / {after[n].threads:g}"),
            _row(seen, "open fds: before / max churn / after",
                 lambda n: f"{before[n].fds:g} / {self._churn(n, lambda r: r.fds)} / {after[n].fds:g}"),
            _row(seen, "exporter's children (samplers): max at once / at the end",
                 lambda n: f"{max((len(r.children) for _, e, _, r in self.resources if e == n), default=0)} / "
                           f"{end.children[n]}"),
            _row(seen, "CPU, share of a core in the churn (samplers incl.)", cpu),
        ]  # fmt: skip

    def _series_rows(self, seen: Figures, end: Readings) -> list:
        before, after = end.before, end.after
        churn = {n: [ob for ob in seen.observations if ob.exporter == n and ob.phase == "churn"] for n in seen.names}
        return [
            _row(seen, "series: before / median churn / max churn / after",
                 lambda n: f"{before[n].series} / {median([ob.expo.series for ob in churn[n]]):g} / "
                           f"{max((ob.expo.series for ob in churn[n]), default=0)} / {after[n].series}"),
            _row(seen, "  of them soak jobs': median churn / after",
                 lambda n: f"{median([_ours(ob, seen.ours) for ob in churn[n]]):g} / {after[n].our_series}"),
            _row(seen, "  without a job_pid (node): before / after",
                 lambda n: f"{before[n].node_series} / {after[n].node_series}"),
            _row(seen, "dltop_collection_failures_total: before / after",
                 lambda n: f"{before[n].failures:g} / {after[n].failures:g}"),
            _row(seen, "soak jobs whose stacks_status was not ok", lambda n: len(seen.failed_stacks[n])),
            _row(seen, "soak jobs with stacks_status ok",
                 lambda n: sum(1 for s in seen.stacks[n].values() if "ok" in s)),
        ]  # fmt: skip

    def _latency_rows(self, seen: Figures) -> list:
        passes, latencies = seen.passes, seen.latencies
        slow = {n: [s for s in self.slow if s.exporter == n] for n in seen.names}
        return [
            _row(seen, "pass (collection_duration) p50 / p99 / max s", lambda n: _spread(passes[n])),
            _row(seen, "scrape latency p50 / p99 / max s", lambda n: _spread(latencies[n])),
            _row(seen, "scrapes slower than the slowest pass",
                 lambda n: sum(1 for seconds in latencies[n] if seconds > pct(passes[n], 100))),
            _row(seen, "scrape errors", lambda n: len(seen.errors[n])),
            _row(seen, "slow scrapes: complete / cut / errors",
                 lambda n: f"{sum(s.complete for s in slow[n])} / "
                           f"{sum(not s.complete and not s.error for s in slow[n])} / "
                           f"{sum(bool(s.error) for s in slow[n])}"),
        ]  # fmt: skip

    def _ending_rows(self, seen: Figures) -> list:
        def sigterm(n: str) -> str:
            exporter = _exporter(self, n)
            return f"{exporter.stop_rc}, {'?' if exporter.stop_s is None else format(exporter.stop_s, '.1f')}"

        lags = seen.lags
        return [
            _row(seen, "exited job's series outlive it: median / max s",
                 lambda n: f"{median(lags[n]):.2f} / {pct(lags[n], 100):.2f} (n={len(lags[n])})"),
            _row(seen, "SIGTERM: exit status, seconds", sigterm),
        ]  # fmt: skip

    def _exporter_checks(self, seen: Figures, end: Readings, n: str) -> list:
        o, b, a = self.o, end.before[n], end.after[n]
        exporter = _exporter(self, n)
        # jobs of others that came or went between before and after hold or free what a job holds
        more, fewer = len(a.foreign - b.foreign), len(b.foreign - a.foreign)
        rss_limit = b.rss + (o.rss_margin_mb + RSS_PER_JOB_MB * more) * (1 << 20)
        low = b.threads - o.thread_margin - THREADS_PER_JOB * fewer
        high = b.threads + o.thread_margin + THREADS_PER_JOB * more
        fd_limit = b.fds + o.fd_margin + FDS_PER_JOB * more
        gone_limit = o.gone_passes * max(o.interval_s, self._slowest_pass()) + OBSERVE_EVERY_S
        late = pct(seen.lags[n], 100)
        return [
            Check(f"{n}: ran throughout, SIGTERM exits 0", exporter.died_at is None and exporter.stop_rc == 0,
                  f"died at {exporter.died_at}, exit status {exporter.stop_rc}; stderr: {exporter.tail(5)!r}"),
            Check(f"{n}: RSS after <= before + {o.rss_margin_mb:g} MB", a.rss <= rss_limit,
                  f"{_mb(b.rss)} -> {_mb(a.rss)} MB (limit {_mb(rss_limit)})"),
            Check(f"{n}: threads back to baseline +-{o.thread_margin}", low <= a.threads <= high,
                  f"{b.threads:g} -> {a.threads:g} (allowed {low:g}..{high:g})"),
            Check(f"{n}: open fds back to baseline +{o.fd_margin}", a.fds <= fd_limit,
                  f"{b.fds:g} -> {a.fds:g} (limit {fd_limit:g})"),
            Check(f"{n}: series back to baseline, none of a soak job",
                  a.node_series == b.node_series and a.our_series == 0,
                  f"node series {b.node_series} -> {a.node_series}, soak jobs' {a.our_series}"),
            Check(f"{n}: an exited job's series go within {o.gone_passes:g} passes",
                  bool(seen.lags[n]) and late <= gone_limit,
                  f"max {late:.2f} s over {len(seen.lags[n])} jobs (limit {gone_limit:.2f} s)"),
            self._stale_check(n, end.final.get(n)),
            self._scrape_check(seen, n),
        ]  # fmt: skip

    def _stale_check(self, n: str, expo: Optional[Observation]) -> Check:
        named: set = set()
        for job in self.jobs:
            named |= job.pids()
        stale = sorted(((expo.expo.pids - expo.reused) & named) if expo else [])
        return Check(f"{n}: no series names an exited job's pid", expo is not None and not stale,
                     f"pids still named: {stale[:10]}" if expo else "no final scrape")  # fmt: skip

    def _scrape_check(self, seen: Figures, n: str) -> Check:
        o, latencies, errors = self.o, seen.latencies[n], seen.errors[n]
        slowest = pct(seen.passes[n], 100)
        limit = max(o.scrape_floor_s, o.scrape_passes * (slowest if not math.isnan(slowest) else 0))
        p99 = pct(latencies, 99)
        return Check(f"{n}: scrape p99 <= max({o.scrape_floor_s:g} s, {o.scrape_passes:g} x slowest pass)",
                     len(latencies) >= 20 and p99 <= limit and not errors,
                     f"p99 {p99:.3f} s, max {pct(latencies, 100):.3f} s, limit {limit:.3f} s, "
                     f"{len(latencies)} scrapes, errors {errors[:3]}")  # fmt: skip

    def _soak_checks(self, seen: Figures, end: Readings) -> list:
        o, before, after, failed = self.o, end.before, end.after, seen.failed_stacks
        delta = {n: after[n].failures - before[n].failures for n in seen.names}
        wanted = max(2, int(o.minutes * 60 / o.churn_s / 3))
        churned, kinds, followed = seen.churned, seen.kinds, seen.followed
        return [
            Check("no sampler left behind (a zombie, or aimed at a soak job or a gone process, passes later)",
                  not end.leftovers, "; ".join(end.leftovers[:10])),
            Check("nothing of the exporters' process groups outlives them (SIGTERM)",
                  not end.orphans, "; ".join(end.orphans[:10])),
            Check("B: every sampler run fails (premise: soak jobs with stacks_status not ok)",
                  len(failed["B"]) >= 1, f"{len(failed['B'])} jobs"),
            # the total since the exporter started: a job that broke before the baseline reading counts too
            Check("B: dltop_collection_failures_total counts the jobs whose sampling failed",
                  after["B"].failures >= max(1, len(failed["B"])),
                  f"{after['B'].failures:g} in all, +{delta['B']:g} in the churn (A: +{delta['A']:g}),"
                  f" for {len(failed['B'])} jobs whose stacks failed"),
            Check("A: samples stacks (premise: soak jobs with stacks_status ok)",
                  sum(1 for s in seen.stacks["A"].values() if "ok" in s) >= 1, ""),
            Check(f"churn happened (>= {wanted} jobs, every kind, followed, slow scrapes)",
                  len(churned) >= wanted and all(kinds.values())
                  and all(len(followed[n]) >= wanted // 2 for n in seen.names) and len(self.slow) >= 1,
                  f"{len(churned)} jobs {kinds}, followed {[len(followed[n]) for n in seen.names]}, "
                  f"{len(self.slow)} slow scrapes"),
        ]  # fmt: skip

    def _notes(self, end: Readings) -> list:
        notes = []
        silent = self.silent
        if silent:
            said = "never" if silent.get("closed_after") is None else f"after {silent['closed_after']:.1f} s"
            notes.append(f"a silent client (connects, sends nothing) held {silent.get('held_s', 0):.0f} s on "
                         f"exporter {silent.get('exporter')}: closed by the exporter {said}")  # fmt: skip
        if end.leftovers or end.orphans:
            notes.append("left behind: " + "; ".join(end.leftovers + end.orphans))
        return notes


@dataclass
class Readings:
    """The readings the end of a soak is judged on, per exporter name: resources cold (before any
    job), before and after the churn, CPU at its start and end, the last scrape (``final``),
    children at the end; and the samplers and processes left behind."""

    cold: dict
    before: dict  # Baseline
    after: dict  # Baseline
    cpu_began: dict
    cpu_ended: dict
    leftovers: list
    final: dict
    children: dict
    orphans: list


@dataclass
class Figures:
    """What the soak saw, worked out once for the table and the checks (dicts by exporter name)."""

    names: list
    observations: list
    ours: set  # the soak jobs' pids
    churned: list  # the jobs started in the churn
    kinds: dict  # jobs started in the churn, by kind
    followed: dict  # soak jobs' pids with series
    stacks: dict  # {pid: stacks_status values seen}
    foreign: dict  # pids of others' jobs seen
    failed_stacks: dict  # soak jobs' pids whose stacks_status was not ok
    churn_s: float
    passes: dict  # collection durations in the churn
    latencies: dict  # scrape latencies in the churn
    errors: dict  # scrape errors
    lags: dict  # how long ended jobs' series outlived them


def _seen_jobs(names: list, observations: list, ours: set) -> tuple:
    """Per exporter: the soak jobs it followed (had series of), the stacks_status values each of
    them showed, and the jobs of others it followed."""
    followed: dict = {n: set() for n in names}
    stacks: dict = {n: {} for n in names}
    foreign: dict = {n: set() for n in names}
    for obs in observations:
        foreign[obs.exporter] |= set(obs.expo.job_series) - ours
        for pid in (set(obs.expo.job_series) & ours) - obs.reused:
            followed[obs.exporter].add(pid)
            if pid in obs.expo.stacks:
                stacks[obs.exporter].setdefault(pid, set()).add(obs.expo.stacks[pid])
    return followed, stacks, foreign


def _row(seen: Figures, figure: str, values: Callable[[str], object]) -> tuple:
    return (figure, *[str(values(n)) for n in seen.names])


def _spread(values: list) -> str:
    return f"{pct(values, 50):.3f} / {pct(values, 99):.3f} / {pct(values, 100):.3f} (n={len(values)})"


def _mb(value: float) -> str:
    return f"{value / (1 << 20):.1f}"


def _ours(obs: Observation, ours: set) -> int:
    return sum(n for pid, n in obs.expo.job_series.items() if pid in ours and pid not in obs.reused)


def _exporter(soak: Soak, name: str) -> Exporter:
    return next(e for e in soak.exporters if e.name == name)


def render(result: Result) -> str:
    o = result.options
    header = ("figure", "A: py-spy, Austin", "B: samplers fail (/bin/false)")
    rows = [header, *result.rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [f"dltop exporter soak: {o.minutes:g} min, a job every ~{o.churn_s:g} s, interval {o.interval_s:g} s, "
             f"{o.scrapers} fast scrapers + 1 slow + 1 silent, seed {o.seed}"]  # fmt: skip
    for i, r in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[j]) for j, cell in enumerate(r)).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines += ["", *result.notes, "", "checks:"]
    for check in result.checks:
        lines.append(f"  {'PASS' if check.ok else 'FAIL'}  {check.name}: {check.detail}")
    return "\n".join(lines)


def run_soak(options: Options, say: Callable[[str], None] = lambda line: None) -> Result:
    directory = options.directory
    made = directory is None
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="dltop-soak-"))
    try:
        return Soak(options, directory, say).run()
    finally:
        if made:
            shutil.rmtree(directory, ignore_errors=True)

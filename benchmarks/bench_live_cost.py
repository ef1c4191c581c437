"""What watching one 16-worker job costs, dltop beside htop (run by hand; needs tmux and htop):
(``--ranks R --workers W``: an R x W job under a real torchrun instead, the live view on its
launcher, benchmarks/scale_job.py; for a sweep of shapes with every watcher side by side, see
benchmarks/scale_node.py)

* `htop` in tmux (its default delay, 1.5 s);
* the live view `dltop --pid P` in tmux (default interval, 1 s; stacks on), and the same with
  py-spy alone (`DLTOP_AUSTIN=`, as before Austin took the routine samples: tool live-py-spy);
* `dltop snapshot --no-stacks` and `dltop snapshot` (default interval, 1 s).

Each tool runs --seconds after a warm-up, --rounds times in alternating order; its cost is the
CPU time of the tool and every child it started (py-spy runs: reaped ones through cutime/cstime,
the ones still running read live) over the wall time, as a share of one core. Medians printed
side by side, with the ratio to htop, split into the tool's own process and its children.
``--profile`` also samples the live view with py-spy (on dltop itself, not counted in its cost)
and prints where its own CPU goes, by part.

Run it alone: flock -x /tmp/dltop-cpu.lock python benchmarks/bench_live_cost.py
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Optional

import psutil
from common import ROOT, start_job
from scale_job import ScaleJob

TICK = os.sysconf("SC_CLK_TCK")
WARMUP_S = 5.0
# where a sampled frame of the live view belongs, first match wins (file path fragments)
PARTS = (
    ("diagnose (per tick)", ("/dltop/diagnose/", "/dltop/live/report.py")),
    ("stack sampler runs (start, poll, parse)", ("/dltop/collect/stacks/", "subprocess.py")),
    ("collector (/proc, psutil)", ("/dltop/collect/", "/psutil/")),
    ("UI (Textual, Rich)", ("/textual/", "/rich/", "/dltop/tui/")),
)


def tree_cpu_s(pid: int) -> tuple:
    """CPU seconds of ``pid`` itself, and of its children (reaped, and live descendants)."""
    try:
        proc = psutil.Process(pid)
        fields = [int(v) for v in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11:15]]
        children = proc.children(recursive=True)
    except (psutil.Error, OSError):
        return 0.0, 0.0
    own, reaped = (fields[0] + fields[1]) / TICK, (fields[2] + fields[3]) / TICK  # utime stime | cutime cstime
    for child in children:
        try:
            times = child.cpu_times()
            reaped += times.user + times.system
        except psutil.Error:
            continue
    return own, reaped


def measure(pid: int, seconds: float, split: bool = False):
    """Share of one core that ``pid`` and its children used over ``seconds`` after the warm-up
    (``split``: (own, children) shares)."""
    time.sleep(WARMUP_S)
    before, t0 = tree_cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    after, elapsed = tree_cpu_s(pid), time.monotonic() - t0
    own, children = (100 * (a - b) / elapsed for a, b in zip(after, before))
    return (own, children) if split else own + children


class Tmux:
    """A command in a 120x40 tmux pane that stays after the command ends (to say why it did)."""

    def __init__(self, command: str) -> None:
        self.session = f"dltop-cost-{time.monotonic_ns()}"
        for attempt in range(3):  # the server of the session just closed may still be exiting
            try:
                self._tmux("new-session", "-d", "-s", self.session, "-x", "120", "-y", "40")
                break
            except subprocess.CalledProcessError:
                if attempt == 2:
                    raise
                time.sleep(1.0)
        self._tmux("set-option", "-t", self.session, "remain-on-exit", "on")
        self._tmux("respawn-pane", "-k", "-t", self.session, command)
        self.pid = int(self._tmux("list-panes", "-t", self.session, "-F", "#{pane_pid}").split()[0])

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout

    def check_alive(self) -> None:
        if self._tmux("list-panes", "-t", self.session, "-F", "#{pane_dead}").split()[0] == "1":
            raise RuntimeError("the command ended early:\n" + self._tmux("capture-pane", "-p", "-t", self.session))

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.session], capture_output=True)


def in_tmux(command: str, seconds: float, profile: bool = False, keep: Optional[str] = None) -> tuple:
    pane = Tmux(f"cd {ROOT} && exec {command}")
    try:
        result = measure_profiled(pane.pid, seconds, keep) if profile else (measure(pane.pid, seconds, True), None)
        pane.check_alive()
        return result
    finally:
        pane.close()


def snapshot(job_pid: int, seconds: float, *extra: str) -> tuple:
    duration = str(seconds + 2 * WARMUP_S)
    command = [sys.executable, "-m", "dltop", "snapshot", "--pid", str(job_pid), "--duration", duration, *extra]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        return measure(proc.pid, seconds, split=True), None
    finally:
        proc.kill()
        proc.wait()


def measure_profiled(pid: int, seconds: float, keep: Optional[str] = None) -> tuple:
    """The cost as ``measure`` reads it, and a py-spy profile of the process meanwhile (its
    samples while on CPU, every thread), folded by part."""
    with tempfile.NamedTemporaryFile(suffix=".txt") as out:
        py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        duration = str(int(seconds + WARMUP_S))
        command = [py_spy, "record", "--pid", str(pid), "--format", "raw", "--nonblocking", "--full-filenames",
                   "--rate", "97", "--duration", duration, "--output", out.name]  # fmt: skip
        spy = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        own, children = measure(pid, seconds, split=True)
        spy.wait(timeout=30)
        raw = Path(out.name).read_text()
        if keep:
            Path(keep).write_text(raw)
        return (own, children), fold(raw)


def fold(raw: str) -> Counter:
    """Samples per part: a sample belongs to the first part in PARTS that any of its frames is in
    (the collector runs on a Textual worker thread: its samples are the collector's, not the UI's)."""
    parts: Counter = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        part = next((name for name, marks in PARTS if any(m in stack for m in marks)),
                    "other (interpreter, imports, threads)")  # fmt: skip
        parts[part] += int(count)
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="tools to run (htop, live, snapshot-no-stacks, snapshot, live-NS)")
    parser.add_argument("--live-intervals", nargs="*", type=float, default=[],
                        help="the live view at these --interval values too (tools live-NS), e.g. 1.5")  # fmt: skip
    parser.add_argument("--profile", action="store_true", help="also profile the live view once (py-spy on dltop)")
    parser.add_argument("--profile-out", help="keep the profile's folded stacks in this file")
    parser.add_argument("--ranks", type=int, default=0, help="an R x W job under torchrun (0: one plain job)")
    parser.add_argument("--workers", type=int, default=16, help="workers per rank")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # killed: still stop the job (finally)
    labels = {"htop": "htop (delay 1.5 s)", "live": "dltop --pid (live view)",
              "live-py-spy": "dltop --pid, py-spy alone",
              "snapshot-no-stacks": "dltop snapshot --no-stacks", "snapshot": "dltop snapshot"}  # fmt: skip
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} before the job; {time.ctime()}")
    with tempfile.TemporaryDirectory() as report:
        if args.ranks:
            job = ScaleJob(Path(report), args.ranks, args.workers).start()
            shape = f"{args.ranks} x {args.workers}-worker job under torchrun ({job.processes} processes)"
        else:
            job = start_job(Path(report), "--workers", str(args.workers), "--persistent", "--sample-ms", "2",
                            "--step-ms", "20")  # fmt: skip
            shape = f"{args.workers}-worker job"
        try:
            job.wait_workers(max(1, args.ranks) * args.workers, timeout=180)
            time.sleep(3)
            tools = {
                "htop": lambda: in_tmux("htop", args.seconds),
                "live": lambda: in_tmux(f"{sys.executable} -m dltop --pid {job.pid}", args.seconds),
                "live-py-spy": lambda: in_tmux(
                    f"env DLTOP_AUSTIN= {sys.executable} -m dltop --pid {job.pid}", args.seconds
                ),
                "snapshot-no-stacks": lambda: snapshot(job.pid, args.seconds, "--no-stacks"),
                "snapshot": lambda: snapshot(job.pid, args.seconds),
            }
            for seconds in args.live_intervals:
                command = f"{sys.executable} -m dltop --pid {job.pid} --interval {seconds:g}"
                tools[f"live-{seconds:g}s"] = lambda command=command: in_tmux(command, args.seconds)
                labels[f"live-{seconds:g}s"] = f"dltop --pid, --interval {seconds:g} s"
            names = args.only or list(tools)
            shares: dict = {name: [] for name in names}
            for round_no in range(args.rounds):
                order = names if round_no % 2 == 0 else names[::-1]
                for name in order:
                    (own, children), _ = tools[name]()
                    shares[name].append((own + children, own, children))
                    print(f"  round {round_no + 1} {name}: {own + children:.2f}% (own {own:.2f}, children "
                          f"{children:.2f})", flush=True)  # fmt: skip
            print(f"\n{shape}, {args.seconds:.0f} s x {args.rounds}, children counted; load now "
                  f"{os.getloadavg()[0]:.2f}")  # fmt: skip
            htop = statistics.median(s[0] for s in shares["htop"]) if shares.get("htop") else None
            print(f"{'tool':<32} {'median % of a core':>18} {'own':>5} {'children':>8} {'runs':<24} {'× htop':>7}")
            for name in names if args.rounds else ():
                median, own, children = (statistics.median(s[i] for s in shares[name]) for i in range(3))
                ratio = f"{median / htop:.2f}" if htop else "-"
                runs = ", ".join(f"{s[0]:.2f}" for s in shares[name])
                print(f"{labels[name]:<32} {median:>18.2f} {own:>5.2f} {children:>8.2f} {runs:<24} {ratio:>7}")
            if args.profile:
                (own, children), parts = in_tmux(f"{sys.executable} -m dltop --pid {job.pid}", args.seconds,
                                                 profile=True, keep=args.profile_out)  # fmt: skip
                total = sum(parts.values()) or 1
                print(f"\nlive view profiled: dltop itself {own:.2f}% of a core, its py-spy runs {children:.2f}%;"
                      f" where dltop's own CPU goes ({total} py-spy samples of it on CPU, 97 Hz):")  # fmt: skip
                for part, count in parts.most_common():
                    print(f"  {part:<42} {100 * count / total:5.1f}% of dltop's own samples")
        finally:
            job.stop()  # every process group of the job (torchrun's ranks have their own)


if __name__ == "__main__":
    main()

"""What watching a node costs as it grows, dltop beside htop, side by side (run by hand,
needs tmux and htop):

For each job shape R x W (R torchrun ranks, W persistent workers each: benchmarks/scale_job.py)
and each round, three watchers start together and run side by side over the same windows:

* ``htop`` in tmux (its default delay, 1.5 s): the anchor;
* the live view ``dltop --pid <torchrun launcher>`` in tmux (default interval 1 s, stacks on);
  ``--refresh S`` runs both at one refresh (``htop -d``, ``dltop --interval``): the cost of a
  refresh side by side, where the defaults compare 2 refreshes of htop with 3 of dltop;
* ``dltop exporter`` (default interval 5 s), scraped every 15 s as Prometheus would.

Each watcher's cost is the CPU time of it and of every child it started (Austin, py-spy) over
the wall time of a window, as a share of one core (bench_live_cost.tree_cpu_s). Windows follow
one another after a warm-up: the first one holds each new worker's first stack (urgent dumps,
~0.5-0.8 a second: 64 workers take about a minute and a half), the last one is the steady cost
(what an exporter running all day pays). Medians over the rounds; the growth per process is a
least-squares line through the medians of the shapes (processes = launcher + trainers + workers).

``--profile`` then samples the live view and the exporter at the largest shape with py-spy (on
dltop itself: its children's share is reported apart) and prints the parts and the functions
where their own CPU goes.

The exporter follows every job on the machine: on a shared box, someone else's job makes it pay
for that job too (each round says how many jobs it followed). ``--isolate`` runs the whole
benchmark in a PID namespace of its own (root: ``unshare --pid --fork --mount-proc``, tmux on a
private socket), where the exporter and htop see only this job and the watchers; when it ends,
the kernel ends everything left in it.

Run it alone: flock -x /tmp/dltop-cpu.lock python benchmarks/scale_node.py --isolate --sweep 1x8 2x8 4x8 8x8
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_exporter import Exporter, Scraper, series_per_job
from bench_live_cost import Tmux, fold, tree_cpu_s
from common import ROOT
from scale_job import DEFAULT_JOB_ARGS, ScaleJob, job_cpu, parse_shape

WARMUP_S = 5.0
TOOLS = ("htop", "live", "exporter")
LIVE_FROM: dict = {}  # "live@LABEL" -> the checkout whose live view runs beside this one's (--live-from)
REFRESH_S: list = [None]  # --refresh: htop's delay and the live view's interval alike (None: each its default)


def watchers(job: ScaleJob, directory: Path, only: tuple) -> dict:
    """The watchers started together: name -> (pid, closer, checker)."""
    started: dict = {}
    try:
        if "htop" in only:
            delay = f" -d {round(REFRESH_S[0] * 10)}" if REFRESH_S[0] else ""  # tenths of a second
            pane = Tmux(f"cd {ROOT} && exec htop{delay}")
            started["htop"] = (pane.pid, pane.close, pane.check_alive)
        interval = f" --interval {REFRESH_S[0]:g}" if REFRESH_S[0] else ""
        if "live" in only:
            pane = Tmux(f"cd {ROOT} && exec {sys.executable} -m dltop --pid {job.pid}{interval}")
            started["live"] = (pane.pid, pane.close, pane.check_alive)
        for name in only:
            if name.startswith("live@"):  # the live view of another checkout, side by side
                checkout = shlex.quote(LIVE_FROM[name])
                pane = Tmux(f"cd {checkout} && exec {sys.executable} -m dltop --pid {job.pid}{interval}")
                started[name] = (pane.pid, pane.close, pane.check_alive)
        if "exporter" in only:
            exporter = Exporter(directory / f"exporter-{time.monotonic_ns()}.txt")
            scraper = Scraper(exporter)
            scraper.start()

            def close(exporter=exporter, scraper=scraper) -> None:
                scraper.stop()
                exporter.close()

            def check(exporter=exporter) -> None:
                if exporter.proc.poll() is not None:
                    raise RuntimeError(f"the exporter ended: {exporter.proc.returncode}")

            started["exporter"] = (exporter.proc.pid, close, check)
            started["_exporter"] = (exporter, scraper)
    except BaseException:
        close_all(started)
        raise
    return started


def close_all(started: dict) -> None:
    for name, value in started.items():
        if not name.startswith("_"):
            value[1]()


def run_round(job: ScaleJob, directory: Path, seconds: float, windows: int, only: tuple) -> dict:
    """{tool: [share per window]} and what the exporter saw, all watchers side by side."""
    started = watchers(job, directory, only)
    try:
        pids = {name: value[0] for name, value in started.items() if not name.startswith("_")}
        time.sleep(WARMUP_S)
        shares: dict = {name: [] for name in pids}
        shares["job"] = []
        before = {name: sum(tree_cpu_s(pid)) for name, pid in pids.items()}
        job_before, t0 = job.cpu_s(), time.monotonic()
        for _ in range(windows):
            time.sleep(seconds)
            after = {name: sum(tree_cpu_s(pid)) for name, pid in pids.items()}
            job_after, t1 = job.cpu_s(), time.monotonic()
            for name in pids:
                shares[name].append(100 * (after[name] - before[name]) / (t1 - t0))
            shares["job"].append(100 * (job_after - job_before) / (t1 - t0))
            before, job_before, t0 = after, job_after, t1
        for name, value in started.items():
            if not name.startswith("_"):
                value[2]()
        if "_exporter" in started:
            exporter, scraper = started["_exporter"]
            text = exporter.scrape()
            shares["_seen"] = dict(jobs=exporter.jobs(), series=series_per_job(text, job.pid),
                                   scrape_ms=statistics.median(scraper.times_ms or [0.0]))  # fmt: skip
        return shares
    finally:
        close_all(started)


def profile(job: ScaleJob, directory: Path, seconds: float, keep: str | None, warmup: float = 100.0) -> None:
    """py-spy on the live view and on the exporter, side by side, after a warm-up (100 s: the
    workers' first stacks behind them, the steady cost)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    started = watchers(job, directory, ("live", "exporter"))
    try:
        time.sleep(warmup)
        spies, outs = {}, {}
        before = {name: tree_cpu_s(started[name][0]) for name in ("live", "exporter")}
        t0 = time.monotonic()
        for name in ("live", "exporter"):
            outs[name] = directory / f"profile-{name}.txt"
            command = [py_spy, "record", "--pid", str(started[name][0]), "--format", "raw", "--nonblocking",
                       "--full-filenames", "--rate", "97", "--duration", str(int(seconds)), "--output",
                       str(outs[name])]  # fmt: skip
            spies[name] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for spy in spies.values():
            spy.wait(timeout=seconds + 60)
        elapsed = time.monotonic() - t0
        after = {name: tree_cpu_s(started[name][0]) for name in ("live", "exporter")}
    finally:
        close_all(started)
    for name in ("live", "exporter"):
        own, children = (100 * (a - b) / elapsed for a, b in zip(after[name], before[name]))
        raw = outs[name].read_text()
        if keep:
            Path(f"{keep}-{name}.txt").write_text(raw)
        report_profile(name, raw, own, children)


def report_profile(name: str, raw: str, own: float, children: float) -> None:
    parts = fold(raw)
    total = sum(parts.values()) or 1
    print(f"\n{name} profiled ({job_label(name)}): itself {own:.2f}% of a core, its children (Austin, py-spy) "
          f"{children:.2f}%; {total} py-spy samples of it on CPU at 97 Hz ({100 * total / 97 / PROFILE_S[0]:.2f}% "
          f"of a core):")  # fmt: skip
    for part, count in parts.most_common():
        print(f"  {part:<42} {100 * count / total:5.1f}%")
    inclusive, leaf = Counter(), Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        frames = [frame for frame in stack.split(";") if " (" in frame]
        for frame in dict.fromkeys(short(frame) for frame in frames):
            inclusive[frame] += int(count)
        if frames:
            leaf[short(frames[-1])] += int(count)
    print("  top functions, inclusive (dltop's own, first 25):")
    for frame, count in [(f, c) for f, c in inclusive.most_common() if f.startswith("dltop/")][:25]:
        print(f"    {100 * count / total:5.1f}%  {frame}")
    print("  top leaves (self time, first 15):")
    for frame, count in leaf.most_common(15):
        print(f"    {100 * count / total:5.1f}%  {frame}")


PROFILE_S = [60.0]


def job_label(name: str) -> str:
    return {"live": "dltop --pid <launcher>", "exporter": "dltop exporter, scraped every 15 s"}[name]


def short(frame: str) -> str:
    """'func (/path/to/site-packages/pkg/mod.py:12)' -> 'pkg/mod.py:func' (lines dropped)."""
    function, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    for mark in ("/site-packages/", "/work/main/", "/lib/python3"):
        if mark in path:
            path = path.split(mark, 1)[1]
            break
    return f"{path}:{function}"


def fit(points: list) -> tuple:
    """Least squares y = a + b x: (a, b)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    if len(points) < 2:
        return ys[0] if ys else 0.0, 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    b = sum((x - mx) * (y - my) for x, y in points) / (sum((x - mx) ** 2 for x in xs) or 1)
    return my - b * mx, b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", nargs="+", default=["8x8"], help="job shapes RANKSxWORKERS (default 8x8)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of one window")
    parser.add_argument("--windows", type=int, default=4, help="windows per round, one after another")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--job-args", default=" ".join(DEFAULT_JOB_ARGS), help="the job's own options")
    parser.add_argument("--profile", action="store_true", help="then profile the live view and the exporter")
    parser.add_argument("--profile-seconds", type=float, default=60.0)
    parser.add_argument("--profile-warmup", type=float, default=100.0)
    parser.add_argument("--profile-out", help="keep the folded stacks as PREFIX-live.txt, PREFIX-exporter.txt")
    parser.add_argument("--isolate", action="store_true", help="run in a PID namespace of its own (root)")
    parser.add_argument("--live-from", nargs="*", default=[], metavar="LABEL=DIR",
                        help="the live view of another checkout too (before/after a change), side by side")  # fmt: skip
    parser.add_argument("--refresh", type=float, help="htop's delay and the live view's interval alike (s): the cost"
                        " of a refresh side by side (default: each its own, htop 1.5 s, dltop 1 s)")  # fmt: skip
    args = parser.parse_args()
    if args.isolate:
        rest = [arg for arg in sys.argv[1:] if arg != "--isolate"]
        with tempfile.TemporaryDirectory() as sockets:
            # bash as the namespace's init: it reaps the ranks that the job's kill orphans
            inner = " ".join(shlex.quote(arg) for arg in [sys.executable, *sys.argv[:1], *rest])
            command = ["unshare", "--pid", "--fork", "--mount-proc", "env", f"TMUX_TMPDIR={sockets}",
                       "bash", "-c", f"{inner} & wait $!"]  # fmt: skip
            sys.exit(subprocess.run(command).returncode)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # killed: still stop the job (finally)
    PROFILE_S[0] = args.profile_seconds
    REFRESH_S[0] = args.refresh
    for spec in args.live_from:
        label, _, directory = spec.partition("=")
        LIVE_FROM[f"live@{label}"] = directory
    only = (*args.only, *LIVE_FROM)
    isolated = " (in a PID namespace of its own)" if os.getppid() == 1 and os.getpid() < 10 else ""
    print(f"machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f} before the jobs; {time.ctime()}{isolated}")
    print(f"job: torchrun --standalone --nproc_per_node R tests/jobs/train.py --workers W {args.job_args}")
    refresh = f"htop and the live view refresh every {args.refresh:g} s" if args.refresh else "default refreshes"
    print(f"watchers side by side ({refresh}): {', '.join(only)}; {args.rounds} rounds x {args.windows} windows of "
          f"{args.seconds:.0f} s after a {WARMUP_S:.0f} s warm-up", flush=True)  # fmt: skip
    results: dict = {}
    for shape in args.sweep:
        ranks, workers = parse_shape(shape)
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            report = directory / "report"
            report.mkdir()
            log = Path(tempfile.gettempdir()) / f"scale-job-{shape}-{time.strftime('%H%M%S')}.log"
            job = ScaleJob(report, ranks, workers, tuple(args.job_args.split()), log)
            job.start()
            try:
                time.sleep(3)
                processes = job.processes
                alone = job_cpu(job, 5.0)
                print(f"\n{shape}: {processes} processes (launcher, {ranks} trainers, {ranks * workers} workers); "
                      f"the job alone {alone:.1f}% of a core; load {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
                rounds, tries = [], 0
                while len(rounds) < args.rounds:
                    tries += 1
                    if tries > args.rounds + 2:
                        raise RuntimeError(f"{shape}: the job keeps ending early")
                    round_no = len(rounds)
                    try:
                        shares = run_round(job, directory, args.seconds, args.windows, only)
                    except RuntimeError as error:  # a watcher ended: its job did?
                        print(f"  round {round_no + 1} failed: {error}", flush=True)
                        shares = None
                    if shares is None or not job.alive():
                        # someone else's clean-up, or a rank failed: the round does not count
                        print(f"  round {round_no + 1} dropped, the job ended early: {job.why_ended()}", flush=True)
                        job.stop()
                        shutil.rmtree(report)
                        report.mkdir()
                        job = ScaleJob(report, ranks, workers, tuple(args.job_args.split()),
                                       log.with_suffix(f".{tries}.log")).start()  # fmt: skip
                        time.sleep(3)
                        continue
                    rounds.append(shares)
                    line = "; ".join(f"{name} " + " ".join(f"{s:.2f}" for s in shares[name])
                                     for name in (*only, "job"))  # fmt: skip
                    seen = shares.get("_seen")
                    seen_text = (f"; exporter saw {seen['jobs']} job(s), {seen['series']} series, scrape "
                                 f"{seen['scrape_ms']:.0f} ms") if seen else ""  # fmt: skip
                    print(f"  round {round_no + 1}: {line}{seen_text}; load {os.getloadavg()[0]:.2f}", flush=True)
                results[shape] = (processes, alone, rounds)
                if args.profile and shape == args.sweep[-1]:
                    profile(job, directory, args.profile_seconds, args.profile_out, args.profile_warmup)
                    if not job.alive():
                        print(f"  the job ended during the profile: {job.why_ended()}")
            finally:
                job.stop()
    if args.rounds:  # --rounds 0 --profile: the profile alone
        summarize(results, only, args)


def summarize(results: dict, only: tuple, args: argparse.Namespace) -> None:
    n = args.rounds
    print(f"\nmedians of {n} rounds, % of one core; first = the {args.seconds:.0f} s window after the warm-up, "
          f"steady = window {args.windows} ({WARMUP_S + (args.windows - 1) * args.seconds:.0f}-"
          f"{WARMUP_S + args.windows * args.seconds:.0f} s)")  # fmt: skip
    header = f"{'shape':<6} {'procs':>5} {'job':>6}"
    for name in only:
        header += f" {name + ' first':>15} {name + ' steady':>16}"
    lives = [name for name in only if name.startswith("live") and "htop" in only]
    for name in lives:
        header += f" {name + '/htop steady':>17}"
    print(header)
    lines: dict = {name: [] for name in only}
    for shape, (processes, _alone, rounds) in results.items():
        row = f"{shape:<6} {processes:>5} {statistics.median(r['job'][-1] for r in rounds):>6.1f}"
        medians = {}
        for name in only:
            first = statistics.median(r[name][0] for r in rounds)
            steady = statistics.median(r[name][-1] for r in rounds)
            medians[name] = steady
            lines[name].append((processes, steady))
            row += f" {first:>15.2f} {steady:>16.2f}"
        for name in lives:
            row += f" {medians[name] / medians['htop']:>17.2f}"
        print(row)
        for name in only:
            runs = " | ".join(" ".join(f"{s:.2f}" for s in r[name]) for r in rounds)
            print(f"    {name} runs (windows per round): {runs}")
    if len(results) > 1:
        print("\ngrowth, steady medians (least squares over the shapes): cost = a + b x processes")
        for name in only:
            a, b = fit(lines[name])
            print(f"  {name:<9} a = {a:5.2f}% of a core, b = {b:.4f}% of a core per process "
                  f"({100 * b:.2f}% per 100 processes)")  # fmt: skip
    print(f"load now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

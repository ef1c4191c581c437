"""Command line: ``dltop [--pid P]`` (the TUI), ``snapshot``, ``dump``, ``jobs``, ``demo``, ``bench``.

Bad input ends with one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional

from dltop import __version__
from dltop.demo.scenarios import DEFAULT_SCENARIO, SCENARIOS
from dltop.errors import DltopError
from dltop.settings import DEFAULTS, Settings

EXIT_USAGE = 2
EXITED_SETTLE_S = 0.3


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dltop", description="htop for PyTorch DataLoaders.")
    parser.add_argument("--version", action="version", version=f"dltop {__version__}")
    parser.add_argument("--pid", type=int, help="watch this job live (the trainer, a worker or its launcher)")
    parser.add_argument("--interval", type=_positive, default=1.0, help="seconds between refreshes (default 1)")
    _stack_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    snap = commands.add_parser("snapshot", help="watch a job for a while and print one report")
    snap.add_argument("--pid", type=int, required=True, help="the trainer, one of its workers, or its launcher")
    snap.add_argument("--duration", type=_positive, default=3.0, help="seconds to watch (default 3)")
    snap.add_argument("--interval", type=_positive, default=1.0, help="seconds between samples (default 1)")
    snap.add_argument("--json", action="store_true", help="print the dltop.snapshot/1 JSON document")
    _stack_options(snap)

    dump = commands.add_parser(
        "dump", help="full stack dump of every job process, with the loader config (pauses each briefly)"
    )
    dump.add_argument("--pid", type=int, required=True, help="the trainer, one of its workers, or its launcher")
    dump.add_argument("--json", action="store_true", help="print the dltop.dump/1 JSON document")

    jobs = commands.add_parser("jobs", help="list the training jobs on this machine")
    jobs.add_argument("--json", action="store_true")

    bench = commands.add_parser("bench", help="measure DataLoader configurations on a workload (needs torch)")
    from dltop.bench.main import add_arguments

    add_arguments(bench)

    from dltop.export.cli import add_arguments as add_exporter_arguments
    from dltop.record.cli import add_record_arguments, add_replay_arguments

    add_record_arguments(
        commands.add_parser("record", help="record a job all night, with incident bundles (flight recorder)")
    )
    add_replay_arguments(
        commands.add_parser("replay", help="replay a recording in the TUI, or print a moment or its timeline")
    )
    add_exporter_arguments(
        commands.add_parser("exporter", help="serve every training job on this node as Prometheus metrics")
    )

    demo = commands.add_parser("demo", help="start a bundled demo training job and watch it live")
    demo.add_argument("--scenario", choices=sorted(SCENARIOS), default=DEFAULT_SCENARIO,
                      help="the problem the demo job has (default input-bound)")  # fmt: skip
    demo.add_argument("--interval", type=_positive, default=1.0, help="seconds between refreshes (default 1)")
    _stack_options(demo)
    return parser


def _stack_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--hang-after",
        type=_positive,
        default=DEFAULTS.hang_after_s,
        metavar="S",
        help=f"a worker with the same stack and no CPU this long is hung (default {DEFAULTS.hang_after_s:g})",
    )
    parser.add_argument("--no-stacks", action="store_true", help="do not run py-spy (no activity, data wait, hangs)")


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(hang_after_s=args.hang_after)


def run_snapshot(args: argparse.Namespace) -> int:
    from dltop.live.loop import open_loop
    from dltop.live.schedule import ticks
    from dltop.text_report import render

    loop = open_loop(args.pid, _settings(args), not args.no_stacks, window_ticks=None, judge_every_tick=False)
    try:
        for final in ticks(args.interval, duration_s=args.duration):
            # the final tick waits for py-spy runs under way and re-reads every USS/PSS
            snap = loop.step(final=final)
            if snap.job.state != "running":
                break
        if snap.job.state == "exited" and len(loop.window) > 1:
            time.sleep(EXITED_SETTLE_S)  # the trainer's last words (a worker's death) reach its log as it exits
            loop.step()
    except KeyboardInterrupt:
        pass  # report what was seen so far
    finally:
        loop.close()
    report = loop.report()
    print(json.dumps(report.to_dict(), indent=2) if args.json else render(report))
    return 0


def run_dump(args: argparse.Namespace) -> int:
    from dltop.collect.stacks.full_dump import dump_job, render_dump

    dump = dump_job(args.pid)
    print(json.dumps(dump, indent=2) if args.json else render_dump(dump))
    return 0


def run_jobs(args: argparse.Namespace) -> int:
    from dltop.collect.host.gpu import GpuSampler
    from dltop.collect.processes.jobs import list_jobs

    jobs = list_jobs(GpuSampler())
    if args.json:
        print(json.dumps({"schema": "dltop.jobs/1", "jobs": [j.to_dict() for j in jobs]}, indent=2))
        return 0
    if not jobs:
        print("no PyTorch training jobs found (processes with DataLoader workers, torch loaded or a GPU)")
        return 0
    print(f"{'PID':>7} {'USER':<10} {'RANKS':>5} {'WORKERS':>7} {'GPU MEM':>8}  COMMAND")
    for job in jobs:
        gpu = f"{job.gpu_mem_bytes / 2**20:.0f}M" if job.gpu_mem_bytes else "-"
        print(f"{job.pid:>7} {job.user or '?':<10} {len(job.trainer_pids):>5} {job.workers:>7} {gpu:>8}  {job.cmdline}")
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from dltop.demo.run import attach_when_ready, start_demo_job, stop_demo_job
    from dltop.live.loop import LiveLoop
    from dltop.tui.app import DltopApp

    _need_terminal()
    print(f"dltop demo: starting the bundled training job ({args.scenario})…", file=sys.stderr, flush=True)
    job = start_demo_job(args.scenario)
    try:
        source = LiveLoop(attach_when_ready(job, _settings(args)))
        DltopApp(lambda: source, interval=args.interval).run()
    finally:
        stop_demo_job(job)
    return 0


def _need_terminal() -> None:
    if not (os.isatty(0) and os.isatty(2)):  # Textual reads stdin and draws on stderr
        raise DltopError("the live view needs a terminal; without one use `dltop snapshot --pid P` or `dltop jobs`")


def run_tui(args: argparse.Namespace) -> int:
    from dltop.live.loop import open_loop
    from dltop.tui.app import DltopApp

    if args.pid is None:
        _need_terminal()
        app = DltopApp(lambda pid: open_loop(pid, _settings(args), not args.no_stacks), args.interval, pick=True)
    else:
        source = open_loop(args.pid, _settings(args), not args.no_stacks)  # a bad pid fails here, in one line
        try:
            _need_terminal()
        except DltopError:
            source.close()
            raise
        app = DltopApp(lambda: source, interval=args.interval)
    app.run()
    if app.error:
        raise DltopError(app.error)
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from dltop.bench.main import run_bench as bench

    return bench(args)


def run_record(args: argparse.Namespace) -> int:
    from dltop.record.cli import run_record as record

    return record(args)


def run_replay(args: argparse.Namespace) -> int:
    from dltop.record.cli import run_replay as replay

    return replay(args)


def run_exporter(args: argparse.Namespace) -> int:
    from dltop.export.cli import run_exporter as exporter

    return exporter(args)


def main(argv: Optional[list] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handlers = {
        "snapshot": run_snapshot,
        "dump": run_dump,
        "jobs": run_jobs,
        "demo": run_demo,
        "bench": run_bench,
        "record": run_record,
        "replay": run_replay,
        "exporter": run_exporter,
    }
    try:
        return handlers[args.command](args) if args.command else run_tui(args)
    except DltopError as error:
        print(f"dltop: {error}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `dltop snapshot ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())

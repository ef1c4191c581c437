"""``dltop record``: the flight recorder, a job's snapshots to a file until it exits, with incident bundles."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Optional

from dltop.cli.options import _positive, add_interval_option, add_stack_options, settings_from
from dltop.errors import DltopError
from dltop.live.schedule import FRAME_S, ticks_in_window
from dltop.model.findings import REGISTRY
from dltop.record.access import access_for
from dltop.record.incidents import BUNDLE_FRAMES_S, HOOK_TIMEOUT_S

NAME = "record"
HELP = "record a job all night, with incident bundles (flight recorder)"
MIN_MAX_SIZE = 32 << 10
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?$", re.IGNORECASE)


def _size(text: str) -> int:
    """500M, 2G, 1.5GiB, 65536 (bytes; K/M/G/T are powers of 1024)."""
    found = _SIZE.match(text.strip())
    if not found:
        raise argparse.ArgumentTypeError(f"not a size: {text} (e.g. 500M, 2G)")
    value, unit = float(found[1]), found[2].lower()
    size = int(value * 1024 ** ("kmgt".index(unit) + 1)) if unit else int(value)
    if size < MIN_MAX_SIZE:
        raise argparse.ArgumentTypeError(f"at least {MIN_MAX_SIZE >> 10}K, got {text}")
    return size


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Record a job's snapshots, one frame per tick, until it exits (SIGTERM or Ctrl-C also close the file"
        f" cleanly). When a fault first appears ({', '.join(t.id for t in REGISTRY if t.kind == 'fault')} or any"
        " error finding)"
        f" an incident bundle is written next to the recording: the finding, the last {BUNDLE_FRAMES_S:.0f} s of"
        " frames, every process's newest stack with source lines, the trainer's log tail and the text report."
        " Costs what the live view costs, and like it never pauses or signals the job."
    )
    parser.add_argument("--pid", type=int, required=True, help="the trainer, one of its workers, or its launcher")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="FILE",
        help="where to write (default: dltop-<host>-<pid>-<time>.dltop here); never overwritten",
    )
    add_interval_option(parser, FRAME_S, "frames")
    add_stack_options(parser)
    parser.add_argument("--max-size", type=_size, metavar="SIZE",
                        help="keep at most SIZE on disk (e.g. 500M, 2G): the file rotates at a quarter of SIZE"
                             " (FILE -> FILE.1 -> FILE.2 -> FILE.3) and the oldest quarter is dropped; replay"
                             " FILE plays them all. Incident bundles are kept (default: no limit)")  # fmt: skip
    parser.add_argument("--on-incident", metavar="CMD",
                        help="run CMD (a shell command) per incident, with DLTOP_INCIDENT_DIR, DLTOP_FINDING_ID,"
                             " DLTOP_FINDING_TITLE, DLTOP_FINDING_SEVERITY, DLTOP_FINDING_PIDS, DLTOP_JOB_PID and"
                             " DLTOP_RECORDING in its environment; its failure or timeout is reported and the"
                             " recording goes on")  # fmt: skip
    parser.add_argument("--on-incident-timeout", type=_positive, default=HOOK_TIMEOUT_S, metavar="S",
                        help=f"kill --on-incident after S seconds (default {HOOK_TIMEOUT_S:g})")  # fmt: skip
    parser.add_argument("--incident-dump", action="store_true",
                        help="add a full dump with locals (as `dltop dump`) to each bundle: this PAUSES each"
                             " job process for a few milliseconds while py-spy reads it, so it is off by"
                             " default")  # fmt: skip
    parser.add_argument("--group", metavar="GROUP",
                        help="let this group read the recording and its bundles too (files 0640, directories 0750);"
                             " by default only the recording user may (0600, 0700): they hold the job's stacks"
                             " and, in bundles, log tails and (--incident-dump) local variables")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress lines, only problems (for systemd, nohup)")


def run(args: argparse.Namespace) -> int:
    from dltop.collect import procfs
    from dltop.collect.stacks.full_dump import dump_job
    from dltop.live.loop import open_loop
    from dltop.record.recorder import Recorder, RecordOptions, default_path

    if args.output is not None and args.output.exists():
        raise DltopError(f"{args.output} exists: dltop never writes over a recording (choose another name)")
    folder = (args.output or Path("x")).absolute().parent  # checked before a word is said about recording
    if not folder.is_dir():
        raise DltopError(f"cannot write {args.output}: there is no directory {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DltopError(f"cannot write in {folder}: permission denied")
    access = access_for(args.group)
    settings = settings_from(args)
    # a bad pid fails here, in one line
    loop = open_loop(args.pid, settings, not args.no_stacks, window_ticks=ticks_in_window(args.interval))
    path = args.output or default_path(loop.pid)
    options = RecordOptions(args.interval, settings, not args.no_stacks, args.max_size, args.on_incident,
                            args.on_incident_timeout, args.incident_dump, access)  # fmt: skip
    say = (lambda _: None) if args.quiet else _say
    recorder = Recorder(path, options, log_tail=loop.log_tail, say=say, warn=_say,
                        dump_job=dump_job if args.incident_dump else None)  # fmt: skip
    stop, caught = threading.Event(), []

    def on_signal(number: int, _frame: Optional[FrameType]) -> None:
        caught.append(number)
        stop.set()  # the tick under way finishes; then the file is closed

    previous = {number: signal.signal(number, on_signal) for number in (signal.SIGTERM, signal.SIGINT)}
    say(f"recording job {loop.pid} to {path} every {args.interval:g}s until it exits (Ctrl-C or SIGTERM stop it)")
    owner = procfs.owner_uid(loop.pid)
    if owner is not None and owner != os.geteuid() and access.gid is None:
        say(f"the job is {procfs.user_name(owner)}'s: its recording is readable by {procfs.user_name(os.geteuid())}"
            " alone (0600); --group shares it with a group")  # fmt: skip
    reason = "stopped"
    try:
        for snap in loop.run(args.interval, stop):
            recorder.record(snap)
            if snap.job.state == "exited":
                reason = "the job exited"
        if caught:
            reason = f"stopped by {signal.Signals(caught[0]).name}"
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        loop.close()
        recorder.close(reason)
    return 130 if caught and caught[0] == signal.SIGINT else 0


def _say(line: str) -> None:
    print(f"dltop record: {line}", file=sys.stderr, flush=True)

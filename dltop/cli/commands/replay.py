"""``dltop replay``: a recording in the TUI, the snapshot at one moment, or the run's timeline."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dltop.cli.options import need_terminal
from dltop.errors import DltopError
from dltop.record.times import FORMS

if TYPE_CHECKING:
    from dltop.record.reader import Recording

NAME = "replay"
HELP = "replay a recording in the TUI, or print a moment or its timeline"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Replay a recording in the TUI (every panel at the moment under the cursor), print the snapshot at a"
        " moment, or print the run's timeline. A cut-off or damaged file replays up to its last good frame."
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="a recording made by dltop record")
    parser.add_argument("--at", metavar="TIME", help=f"print the snapshot at TIME: {FORMS}")
    parser.add_argument("--summary", action="store_true",
                        help="print the timeline: start, end, findings raised and cleared, incidents")  # fmt: skip
    parser.add_argument("--json", action="store_true",
                        help="with --at: the dltop.snapshot/1 document; with --summary: dltop.timeline/1")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from dltop.record.reader import Recording

    if args.json and not (args.at or args.summary):
        raise DltopError("--json goes with --at TIME or --summary")
    recording = Recording(args.file)
    try:
        if args.summary:
            _print_summary(recording, args.json)
        elif args.at:
            _print_moment(recording, args.at, args.json)
        else:
            return _replay_tui(recording)
    finally:
        recording.close()
    return 0


def _print_summary(recording: Recording, as_json: bool) -> None:
    from dltop.record.summary import render_summary, timeline

    doc = timeline(recording)
    print(json.dumps(doc, indent=2) if as_json else render_summary(doc))


def _print_moment(recording: Recording, when: str, as_json: bool) -> None:
    from dltop.model import snapshot_from_dict
    from dltop.record.times import parse_when
    from dltop.text_report import render

    if recording.stopped:
        print(f"dltop: note: {recording.stopped}", file=sys.stderr)
    at = parse_when(when, recording.times[0], recording.times[-1])
    doc = recording.document(recording.index_at(at))
    print(json.dumps(doc, indent=2) if as_json else render(snapshot_from_dict(doc)))


def _replay_tui(recording: Recording) -> int:
    from dltop.tui.replay import ReplayApp

    need_terminal()
    ReplayApp(recording).run()
    return 0

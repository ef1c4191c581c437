"""What one live-view tick costs at a node's scale, offline (run by hand): a recording
of a real R x W job (benchmarks/scale_job.py under torchrun, `dltop record`) replayed through the
live loop's diagnosis (LiveLoop.step on the recorded ticks, findings cleared) and through the TUI
(DltopApp.show headless, each tick's findings as the loop decided them), CPU milliseconds per tick
for each, medians of --passes. No job runs while it measures, so it is steady and quick to repeat
beside a change; benchmarks/scale_node.py measures the whole live view beside htop.

  flock -x /tmp/dltop-cpu.lock python benchmarks/scale_replay.py --record /tmp/scale-8x8.dltop --shape 8x8
  python benchmarks/scale_replay.py /tmp/scale-8x8.dltop [--profile diagnose|ui]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import dataclasses
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

from common import ROOT
from scale_job import ScaleJob, parse_shape

from dltop.live.loop import LiveLoop
from dltop.live.schedule import FRAME_S, ticks_in_window
from dltop.model import Snapshot
from dltop.record.reader import Recording
from dltop.settings import DEFAULTS


def record(path: Path, shape: str, seconds: float) -> None:
    """``seconds`` of a live view's frames of an R x W job (the first 120 s hold the workers' first stacks)."""
    ranks, workers = parse_shape(shape)
    with tempfile.TemporaryDirectory() as report:
        job = ScaleJob(Path(report), ranks, workers).start()
        try:
            time.sleep(3)
            command = [sys.executable, "-m", "dltop", "record", "--pid", str(job.pid), "-o", str(path), "--quiet"]
            recorder = subprocess.Popen(command, cwd=ROOT)
            time.sleep(seconds)
            recorder.terminate()
            recorder.wait(timeout=30)
        finally:
            job.stop()


class Replayed:
    """A collector that gives the recorded ticks back, without the findings they were shown with."""

    def __init__(self, ticks: list[Snapshot]) -> None:
        self.ticks, self.next = ticks, 0
        self.settings = DEFAULTS

    def tick(self, full_memory: bool = False) -> Snapshot:
        snap = self.ticks[self.next]
        self.next += 1
        return dataclasses.replace(snap, findings=[], pending=[])


def load(path: Path) -> list[Snapshot]:
    with Recording(path) as recording:
        return [recording.snapshot(i) for i in range(len(recording))]


def diagnosed(ticks: list[Snapshot]) -> tuple[list[Snapshot], list[float]]:
    """Each tick as the live loop judges it, and the CPU ms of each step."""
    loop = LiveLoop(Replayed(ticks), DEFAULTS, clock=lambda: float(loop.collector.next))
    shown, costs = [], []
    for _ in ticks:
        began = time.process_time()
        shown.append(loop.step())
        costs.append((time.process_time() - began) * 1000)
    return shown, costs


def ui_costs(shown: list[Snapshot], size: tuple[int, int]) -> list[float]:
    """CPU ms of each refresh of the main screen (update, layout, paint), headless, as a live view
    draws it: ticks a second apart on the findings panel's clock."""
    from dltop.tui import widgets
    from dltop.tui.app import DltopApp

    now = [0.0]
    widgets.time = types.SimpleNamespace(monotonic=lambda: now[0])  # the findings panel's clock

    async def run() -> list[float]:
        app = DltopApp(first=shown[0])
        costs = []
        async with app.run_test(size=size) as pilot:
            app.query_one(widgets.FindingsPanel).figures_every_s = widgets.FIGURES_EVERY_S  # as a live view
            await pilot.pause(0.2)
            for snap in shown[1:]:
                now[0] += 1.0
                began = time.process_time()
                app.show(snap)
                await pilot.pause()
                costs.append((time.process_time() - began) * 1000)
        return costs

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recording", type=Path)
    parser.add_argument("--record", action="store_true", help="record it first (a job runs: hold the CPU lock)")
    parser.add_argument("--shape", default="8x8", help="with --record: RANKSxWORKERS")
    parser.add_argument("--seconds", type=float, default=240.0, help="with --record: how long")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--size", default="160x50", help="the terminal, COLSxROWS")
    parser.add_argument("--profile", choices=("diagnose", "ui"), help="cProfile one pass of it instead")
    args = parser.parse_args()
    if args.record:
        record(args.recording, args.shape, args.seconds)
    ticks = load(args.recording)
    size = tuple(int(v) for v in args.size.split("x"))
    steady = slice(ticks_in_window(FRAME_S), None)  # once the window is full: what a view pays all day
    print(f"{args.recording}: {len(ticks)} ticks, {len(ticks[-1].processes)} processes at the end; "
          f"steady = ticks {ticks_in_window(FRAME_S)}+")  # fmt: skip
    if args.profile:
        profiler = cProfile.Profile()
        if args.profile == "diagnose":
            profiler.runcall(diagnosed, ticks)
        else:
            shown, _ = diagnosed(ticks)
            profiler.runcall(ui_costs, shown, size)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
        return
    diagnose_ms, ui_ms = [], []
    for _ in range(args.passes):
        shown, costs = diagnosed(ticks)
        diagnose_ms.append(statistics.mean(costs[steady]))
        ui_ms.append(statistics.mean(ui_costs(shown, size)[ticks_in_window(FRAME_S) - 1 :]))
    print(f"diagnose per tick (LiveLoop.step less the collector): {statistics.median(diagnose_ms):.2f} ms "
          f"({', '.join(f'{v:.2f}' for v in diagnose_ms)})")  # fmt: skip
    print(f"UI per refresh ({args.size}): {statistics.median(ui_ms):.2f} ms ({', '.join(f'{v:.2f}' for v in ui_ms)})")


if __name__ == "__main__":
    main()

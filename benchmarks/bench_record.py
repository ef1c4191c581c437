"""The flight recorder's figures (run by hand, under `flock -x /tmp/dltop-cpu.lock`; needs tmux):
* bytes per frame of `dltop record` on a real 16-worker job at 1 Hz over --seconds;
* the recorder's own CPU (with its py-spy runs) vs the live view's on the same job, side by side,
  alternating, --runs each, medians;
* a synthetic 24 h recording (86,400 frames of a 16-worker job, findings and incidents in it):
  `dltop replay` to the first screen in a real terminal, opening it (with and without its index),
  a jump to a random time on the replay screen, `--at` and `--summary` from the command line.

  python benchmarks/bench_record.py [--seconds 120] [--runs 3] [--cpu-seconds 60] [--skip-live]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from bench_tui import TICK, own_cpu, tmux
from common import ROOT, start_job

DAY = 86_400
WORKERS = 16
START = 1_780_000_000.0


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / TICK  # utime stime cutime cstime (reaped py-spy runs)


def record(job_pid: int, path: Path, seconds: float, measure_after: float = 0.0) -> float:
    """Runs `dltop record` for ``seconds``; its share of one core after ``measure_after`` s."""
    proc = subprocess.Popen([sys.executable, "-m", "dltop", "record", "--pid", str(job_pid), "-o", str(path),
                             "--quiet"], cwd=ROOT, start_new_session=True)  # fmt: skip
    try:
        time.sleep(measure_after)
        before, began = _cpu_s(proc.pid), time.monotonic()
        time.sleep(seconds - measure_after)
        share = (_cpu_s(proc.pid) - before) / (time.monotonic() - began)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return share


def bytes_per_frame(path: Path) -> tuple:
    from dltop.record.reader import Recording

    with Recording(path) as recording:
        frames = len(recording)
    data = path.stat().st_size
    index = Path(f"{path}.idx").stat().st_size
    return frames, data / frames, (data + index) / frames


def real_job(args) -> None:
    with tempfile.TemporaryDirectory() as where:
        job = start_job(Path(where), "--workers", str(WORKERS), "--persistent", "--sample-ms", "2", "--step-ms", "20")
        try:
            job.wait_workers(WORKERS)
            time.sleep(2)
            path = Path(where) / "job.dltop"
            record(job.pid, path, args.seconds)
            frames, data, with_index = bytes_per_frame(path)
            day_mb = with_index * DAY / 1e6
            print(f"bytes per frame, {WORKERS} workers at 1 Hz, {frames} frames: {data:,.0f} B"
                  f" ({with_index:,.0f} B with the index; {day_mb:.0f} MB a day; target <= 2048)")  # fmt: skip
            if args.skip_live:
                return
            recorder, live = [], []
            for run in range(args.runs):  # alternating, so drift in the job's load hits both alike
                recorder.append(100 * record(job.pid, Path(where) / f"cpu-{run}.dltop", args.cpu_seconds + 5, 5))
                live.append(100 * own_cpu(job.pid, args.cpu_seconds))
            print(f"CPU at 1 Hz on the same {WORKERS}-worker job, {args.cpu_seconds:.0f} s x {args.runs}, % of a core:"
                  f" dltop record median {statistics.median(recorder):.2f} ({_list(recorder)}),"
                  f" live view median {statistics.median(live):.2f} ({_list(live)});"
                  f" ratio {statistics.median(recorder) / statistics.median(live):.2f} (target <= 1)")  # fmt: skip
        finally:
            os.killpg(job.pid, signal.SIGKILL)


def _list(values: list) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


# -- the synthetic 24 h recording ----------------------------------------------------------------


def synthetic_day(path: Path) -> dict:
    """86,400 frames, one a second: a 16-worker job whose figures move every tick, an input-bound
    stretch, a hung worker (an incident) and a dead one (another)."""
    from dltop.record import format as fmt
    from dltop.record.writer import RecordingWriter

    base = json.loads((ROOT / "tests/fixtures/snapshots/healthy.json").read_text())
    hung = json.loads((ROOT / "tests/fixtures/snapshots/hung-worker.json").read_text())
    trainer = next(p for p in base["processes"] if p["role"] == "trainer")
    template = next(p for p in base["processes"] if p["role"] == "worker")
    pids = [100_000 + w for w in range(WORKERS)]
    stories = {  # second -> findings shown from then on
        2 * 3600: [f for f in hung["findings"] if f["id"] == "input-bound"],
        3 * 3600: [],
        20 * 3600: [{**hung["findings"][0], "pids": [pids[0]]}],
        20 * 3600 + 600: [],
        22 * 3600: [
            {
                **hung["findings"][0],
                "id": "worker-died",
                "title": f"Worker {pids[3]} killed by SIGKILL",
                "pids": [pids[3]],
            }
        ],  # fmt: skip
        22 * 3600 + 120: [],
    }
    header = {"schema": fmt.SCHEMA, "recording_id": "synthetic-day", "host": "bench", "job": base["job"],
              "settings": {"interval_s": 1.0}}  # fmt: skip
    writer = RecordingWriter(path, header)
    rng, findings, began = random.Random(1), [], time.perf_counter()
    for second in range(DAY):
        findings = stories.get(second, findings)
        at = START + second
        taken = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(at))
        workers = [
            {
                **template,
                "pid": pid,
                "cpu_percent": round(rng.uniform(0, 100), 2),
                "uss_bytes": template["uss_bytes"] + (second // 60) * 4096 + w * 8192,
                "read_chars_per_s": round(rng.uniform(1000, 9000), 2),
                "stack_at": taken,
            }  # fmt: skip
            for w, pid in enumerate(pids)
        ]
        doc = {**base, "taken_at": taken, "processes": [{**trainer, "stack_at": taken}, *workers],
               "findings": findings}  # fmt: skip
        meta = fmt.frame_meta("running", [SimpleNamespace(**f) for f in findings])
        writer.frame(at, fmt.pack(doc), meta)
        if second in (20 * 3600, 22 * 3600):
            writer.incident(at, {"number": 1 + (second > 21 * 3600), "finding": findings[0], "bundle": None})
    writer.close("synthetic")
    return {"write_s": time.perf_counter() - began, "size": path.stat().st_size}


def first_screen(path: Path) -> float:
    """`dltop replay FILE` in a real terminal until its process table shows the last worker."""
    session = f"dltop-perf-{time.monotonic_ns()}"
    began = time.monotonic()
    tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40",
         f"cd {ROOT} && exec {sys.executable} -m dltop replay {path}")  # fmt: skip
    try:
        while str(100_000 + WORKERS - 1) not in tmux("capture-pane", "-p", "-t", session).stdout:
            time.sleep(0.01)
        return time.monotonic() - began
    finally:
        tmux("kill-session", "-t", session)


def open_ms(path: Path) -> float:
    from dltop.record.reader import Recording

    began = time.perf_counter()
    with Recording(path):
        return (time.perf_counter() - began) * 1000


def jumps_ms(path: Path, count: int = 60) -> list:
    """Wall time of a jump to a random frame on the replay screen: decode, show, render."""
    from dltop.record.reader import Recording
    from dltop.tui.replay import ReplayApp

    async def run() -> list:
        with Recording(path) as recording:
            app = ReplayApp(recording)
            rng, times = random.Random(2), []
            async with app.run_test(size=(120, 40)) as pilot:
                while app.snapshot is None:
                    await pilot.pause(0.05)
                for _ in range(count):
                    target = rng.randrange(len(recording))
                    began = time.perf_counter()
                    app.goto(target)
                    await pilot.pause()
                    times.append((time.perf_counter() - began) * 1000)
            return times

    return asyncio.run(run())


def cli_s(*args: str) -> float:
    began = time.monotonic()
    subprocess.run([sys.executable, "-m", "dltop", "replay", *args], cwd=ROOT, check=True, capture_output=True)
    return time.monotonic() - began


def synthetic(args) -> None:
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "day.dltop"
        made = synthetic_day(path)
        print(f"synthetic 24 h: {DAY:,} frames of {WORKERS} workers, {made['size'] / 1e6:.0f} MB"
              f" ({made['size'] / DAY:,.0f} B a frame), written in {made['write_s']:.0f} s")  # fmt: skip
        opened = [open_ms(path) for _ in range(args.runs)]
        index = Path(f"{path}.idx")
        shutil.move(index, f"{index}.away")
        rebuilt = [open_ms(path) for _ in range(args.runs)]
        shutil.move(f"{index}.away", index)
        print(f"  open: {statistics.median(opened):.0f} ms with its index, {statistics.median(rebuilt):.0f} ms"
              " rebuilding it by scanning every record (medians)")  # fmt: skip
        shots = [first_screen(path) for _ in range(args.runs)]
        print(f"  dltop replay to the first screen: median {statistics.median(shots):.2f} s ({_list(shots)};"
              " target <= 2)")  # fmt: skip
        jumps = jumps_ms(path)
        print(f"  a jump to a random time on the replay screen: median {statistics.median(jumps):.0f} ms,"
              f" max {max(jumps):.0f} ms over {len(jumps)} (target <= 200)")  # fmt: skip
        at = [cli_s(str(path), "--at", "+17h", "--json") for _ in range(args.runs)]
        summary = [cli_s(str(path), "--summary") for _ in range(args.runs)]
        print(f"  dltop replay --at +17h --json: median {statistics.median(at):.2f} s; --summary: median"
              f" {statistics.median(summary):.2f} s (whole commands, Python start-up included)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=120.0, help="recording for bytes per frame")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cpu-seconds", type=float, default=60.0)
    parser.add_argument("--skip-live", action="store_true", help="no CPU comparison (no tmux)")
    args = parser.parse_args()
    synthetic(args)
    real_job(args)


if __name__ == "__main__":
    main()

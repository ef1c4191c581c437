"""`dltop exporter` under tracemalloc, by hand: where its memory grows over a soak.

    python benchmarks/trace_exporter.py --out /tmp/trace --every 120 -- exporter --port 0 ...

Starts tracemalloc (``--frames`` deep), then runs ``python -m dltop <args>`` in this process (runpy).
Every ``--every`` seconds, and on SIGUSR1, a thread takes a snapshot and writes to ``--out``:
``diff-NNN.txt``, the top allocations by traceback grown since the first snapshot and since the
previous one, with the traced total and the process's RSS; and ``counts-NNN.txt``, the live objects
per type (gc) that changed most since the first snapshot. Not product code: tracemalloc costs CPU
and memory of its own, so the RSS it reports is not the exporter's RSS.

``--frames 0`` traces nothing: every ``--every`` seconds one line of ``memory.txt`` says the
process's RSS, glibc's heap (mallinfo2: in use, free but kept, mmapped) and Python's own
allocator (blocks in use, arenas), to tell memory Python holds from memory the C heap keeps.

benchmarks/soak_exporter.py ``--trace DIR`` starts the soak's exporters this way.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import gc
import linecache
import os
import runpy
import signal
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOP = 25


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def heap_line(began: float) -> str:
    """seconds, RSS MB, glibc in use / free kept / mmapped MB, Python blocks in use (MB), gc objects."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = MallInfo2
        info = libc.mallinfo2()
        heap = f"{info.uordblks / 2**20:.1f} {info.fordblks / 2**20:.1f} {info.hblkhd / 2**20:.1f}"
    except (OSError, AttributeError):
        heap = "? ? ?"
    blocks = sys.getallocatedblocks()
    return f"{time.monotonic() - began:.0f} {rss_mb():.1f} {heap} {blocks} {len(gc.get_objects())}"


def watch_heap(out: Path, every_s: float) -> None:
    began = time.monotonic()
    with open(out / "memory.txt", "a") as log:
        log.write("# s rss_mb glibc_in_use_mb glibc_free_kept_mb glibc_mmapped_mb py_blocks gc_objects\n")
        while True:
            log.write(heap_line(began) + "\n")
            log.flush()
            time.sleep(every_s)


def object_counts() -> collections.Counter:
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


class Tracer:
    def __init__(self, out: Path, every_s: float) -> None:
        self.out, self.every_s = out, every_s
        self.first: Optional[tracemalloc.Snapshot] = None
        self.previous: Optional[tracemalloc.Snapshot] = None
        self.first_counts: Optional[collections.Counter] = None
        self.index = 0
        self.began = time.monotonic()
        self.lock = threading.Lock()
        self.wake = threading.Event()

    def snapshot(self) -> None:
        with self.lock:
            snap = tracemalloc.take_snapshot().filter_traces(
                (
                    tracemalloc.Filter(False, tracemalloc.__file__),
                    tracemalloc.Filter(False, __file__),
                    tracemalloc.Filter(False, linecache.__file__),  # the source lines format() reads
                )
            )
            counts = object_counts()
            traced, peak = tracemalloc.get_traced_memory()
            lines = [
                f"snapshot {self.index} at {time.monotonic() - self.began:.0f} s: traced {traced / 1e6:.2f} MB "
                f"(peak {peak / 1e6:.2f}), RSS {rss_mb():.1f} MB, gc objects {sum(counts.values())}"
            ]
            if self.first is not None and self.previous is not None:
                for title, base in (("since the first snapshot", self.first), ("since the previous", self.previous)):
                    stats = snap.compare_to(base, "traceback")
                    grown = sum(s.size_diff for s in stats)
                    lines += ["", f"== {title}: {grown / 1e3:+.1f} KB in all; top {TOP} by growth =="]
                    for stat in sorted(stats, key=lambda s: s.size_diff, reverse=True)[:TOP]:
                        lines.append(
                            f"{stat.size_diff / 1e3:+.1f} KB ({stat.count_diff:+d}), now {stat.size / 1e3:.1f} KB"
                        )
                        lines += [f"    {line}" for line in stat.traceback.format(most_recent_first=True)]
                by_line = snap.compare_to(self.first, "lineno")
                lines += ["", f"== since the first, by line: top {TOP} =="]
                for stat in sorted(by_line, key=lambda s: s.size_diff, reverse=True)[:TOP]:
                    lines.append(str(stat))
            (self.out / f"diff-{self.index:03d}.txt").write_text("\n".join(lines) + "\n")
            if self.first_counts is None:
                self.first_counts = counts
            else:
                changed = counts.copy()
                changed.subtract(self.first_counts)
                rows = [f"{n:+d}  {name} (now {counts[name]})" for name, n in changed.most_common(40) if n]
                (self.out / f"counts-{self.index:03d}.txt").write_text("\n".join(rows) + "\n")
            if self.first is None:
                self.first = snap
            self.previous = snap
            self.index += 1

    def run(self) -> None:
        while True:
            self.wake.wait(self.every_s)
            self.wake.clear()
            try:
                self.snapshot()
            except Exception as problem:  # noqa: BLE001 - a hand-run tool: say it and go on
                print(f"trace_exporter: snapshot failed: {problem!r}", file=sys.stderr, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--every", type=float, default=120.0, help="seconds between snapshots")
    parser.add_argument("--frames", type=int, default=12)
    parser.add_argument("dltop_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    rest = args.dltop_args[1:] if args.dltop_args[:1] == ["--"] else args.dltop_args
    args.out.mkdir(parents=True, exist_ok=True)
    if args.frames > 0:
        tracemalloc.start(args.frames)
        tracer = Tracer(args.out, args.every)
        signal.signal(signal.SIGUSR1, lambda *_: tracer.wake.set())
        threading.Thread(target=tracer.run, daemon=True, name="trace-exporter").start()
    else:
        threading.Thread(target=watch_heap, args=(args.out, args.every), daemon=True, name="heap-exporter").start()
    sys.argv = ["dltop", *rest]
    runpy.run_module("dltop", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()

"""Where a watcher's own CPU goes, from a py-spy raw profile (``py-spy record --format raw
--full-filenames``; benchmarks/scale_node.py --profile-out writes them). Run by hand:

    python benchmarks/scale_profile.py /tmp/scale-prof-live.txt [--cpu-share 6.8]

Prints the samples by part (the first of PARTS that a stack is in), then dltop's functions by
inclusive share and every function by self share (leaf). py-spy counts a thread blocked in a
wait it cannot see as idle (a lock, select) as on CPU: those samples (WAITS) are set apart.
``--cpu-share``: the watcher's own measured share of a core, to turn shares into % of a core.
"""

from __future__ import annotations

import argparse
from collections import Counter

# a sample whose leaf is one of these waits (py-spy took the thread for active)
WAITS = ("Condition.wait", "EpollSelector.select", "_PollLikeSelector.select", "Event.wait", "select (",
         "BaseSelector.select", "sleep (")  # fmt: skip
PARTS = (
    ("collector thread: diagnose", ("_collect (", "LiveLoop.step"), ("/dltop/diagnose/", "/dltop/live/report.py")),
    ("collector thread: stack sampler", ("_collect (", "LiveLoop.step"), ("/dltop/collect/stacks/", "subprocess.py")),
    ("collector thread: /proc readers", ("_collect (", "LiveLoop.step"), ("/dltop/collect/", "/psutil/")),
    ("collector thread: other", ("_collect (", "LiveLoop.step"), ("",)),
    ("exporter: /metrics scrape", ("generate_latest", "make_wsgi_app", "WSGIRequestHandler"), ("",)),
    ("UI thread: Textual/Rich render", ("",), ("/textual/", "/rich/", "/dltop/tui/")),
    ("other (interpreter, threads)", ("",), ("",)),
)


def parse(raw: str) -> list:
    samples = []
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if count.isdigit():
            samples.append((stack, int(count)))
    return samples


def short(frame: str) -> str:
    """'func (/any/where/dltop/collect/procfs.py:12)' -> 'dltop/collect/procfs.py:func'."""
    function, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    for mark in ("/site-packages/", "/python3.11/", "/lib/python3"):
        if mark in path:
            path = path.split(mark, 1)[1]
            break
    else:
        if "/dltop/" in path:
            path = "dltop/" + path.rsplit("/dltop/", 1)[1]
    return f"{path}:{function}"


def part_of(stack: str) -> str:
    return next(
        name for name, roots, marks in PARTS if any(r in stack for r in roots) and any(m in stack for m in marks)
    )


def report(raw: str, cpu_share: float = 0.0, top: int = 25) -> None:
    samples = parse(raw)
    total = sum(count for _, count in samples) or 1
    waits = sum(count for stack, count in samples if stack.split(";")[-1].startswith(WAITS))
    busy = [(stack, count) for stack, count in samples if not stack.split(";")[-1].startswith(WAITS)]
    on_cpu = sum(count for _, count in busy) or 1
    scale = f" (x {cpu_share:.2f}% own = % of a core)" if cpu_share else ""
    print(f"{total} samples, {waits} of them waits py-spy took for CPU (left out); shares of the {on_cpu} others"
          f"{scale}:")  # fmt: skip

    def line(count: int, what: str) -> str:
        core = f" {cpu_share * count / on_cpu:5.2f}%core" if cpu_share else ""
        return f"  {100 * count / on_cpu:5.1f}%{core}  {what}"

    parts: Counter = Counter()
    inclusive: Counter = Counter()
    leaf: Counter = Counter()
    for stack, count in busy:
        parts[part_of(stack)] += count
        frames = [short(frame) for frame in stack.split(";")]
        for frame in dict.fromkeys(frames):
            inclusive[frame] += count
        leaf[frames[-1]] += count
    print("by part:")
    for part, count in parts.most_common():
        print(line(count, part))
    print(f"dltop's functions, inclusive (first {top}):")
    for frame, count in [(f, c) for f, c in inclusive.most_common() if f.startswith("dltop/")][:top]:
        print(line(count, frame))
    print("self (leaf) functions, first 15:")
    for frame, count in leaf.most_common(15):
        print(line(count, frame))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile")
    parser.add_argument("--cpu-share", type=float, default=0.0)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    with open(args.profile) as raw:
        report(raw.read(), args.cpu_share, args.top)


if __name__ == "__main__":
    main()

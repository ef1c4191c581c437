"""``dltop dump``: a full stack dump of every job process, with locals, on the user's request.

Unlike the periodic non-blocking samples, this pauses each process while py-spy reads it
(tens of milliseconds), which is what makes locals consistent: the loader's real settings
(num_workers, persistent_workers, batch size) come from ``_worker_loop``'s arguments.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from dltop.collect.processes.discovery import Discovery
from dltop.collect.stacks import ptrace
from dltop.collect.stacks.pyspy import PySpyRun, dump_command, find_py_spy, parse_dump
from dltop.errors import DltopError
from dltop.frames import worker_loop_config

DUMP_TIMEOUT_S = 20.0
SCHEMA = "dltop.dump/1"


def dump_job(pid: int, only: Optional[int] = None) -> dict:
    """Every trainer and worker of the job ``pid`` belongs to, or just the process ``only``."""
    tree = Discovery().resolve(pid)
    py_spy = find_py_spy()
    if py_spy is None:
        raise DltopError("py-spy not found: install it (`pip install py-spy`) or point DLTOP_PY_SPY at it")
    members = sorted((m for m in tree.members.values() if m.role in ("trainer", "worker")), key=lambda m: m.pid)
    if only is not None:
        members = [m for m in tree.members.values() if m.pid == only]
    runs = [(m, PySpyRun(dump_command(py_spy, m.pid, full=True), DUMP_TIMEOUT_S)) for m in members]
    processes = []
    for member, run in runs:
        result = run.wait()
        if result.denied:
            fix = ptrace.stacks_fix(ptrace.facts(tree.root_pid), tree.root_pid)
            raise DltopError(f"py-spy may not read pid {member.pid}: {fix}")
        entry = {"pid": member.pid, "role": member.role, "trainer_pid": member.trainer_pid}
        if not result.ok:
            processes.append({**entry, "error": result.error, "threads": []})
            continue
        threads = parse_dump(result.text)
        config = {}
        for thread in threads:
            config.update(worker_loop_config(thread.locals or {}))
        processes.append(
            {
                **entry,
                "loader_config": config or None,
                "threads": [
                    {
                        "tid": t.tid,
                        "name": t.name,
                        "frames": [dataclasses.asdict(f) for f in t.frames],
                        "locals": t.locals,
                    }
                    for t in threads
                ],
            }
        )
    return {"schema": SCHEMA, "job": tree.root_pid, "processes": processes}


def render_dump(dump: dict) -> str:
    lines = [f"job {dump['job']} (each process was paused briefly while py-spy read it)"]
    for proc in dump["processes"]:
        config = proc.get("loader_config")
        settings = " ".join(f"{k}={v}" for k, v in sorted(config.items())) if config else ""
        lines.append(f"\n{proc['role']} {proc['pid']} {settings}".rstrip())
        if proc.get("error"):
            lines.append(f"  (no stack: {proc['error']})")
        for thread in proc["threads"]:
            lines.append(f"  thread {thread['tid']} {thread['name']}")
            for frame in reversed(thread["frames"]):  # innermost first, as py-spy and tracebacks show it
                mark = ">" if frame["kind"] == "user" else " "
                lines.append(f"   {mark} {frame['function']} ({frame['file']}:{frame['line']})")
    return "\n".join(lines)

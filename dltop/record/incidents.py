"""Incidents: a fault finding's first appearance, captured as a bundle next to the recording.

A bundle is a directory a person can read at 3 a.m. without dltop (``cat report.txt``) and replay
with it (``dltop replay BUNDLE/frames.dltop``): the finding, the last two minutes of frames, every
job process's newest stack with its source lines, the trainers' log tails and the text report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from dltop.model.findings import is_fault
from dltop.record.access import Access

if TYPE_CHECKING:  # `dltop --help` reads this module's defaults: it stays light
    from dltop.model import Snapshot

BUNDLE_SCHEMA = "dltop.incident/1"
BUNDLE_FRAMES_S = 120.0  # the frames a bundle keeps: the two minutes before the incident
MAX_BUNDLES = 100  # per recording; later incidents are still marked on the timeline
HOOK_TIMEOUT_S = 30.0
HOOK_OUTPUT_BYTES = 4096


def opens_incident(finding) -> bool:
    """A fault (the registry's kind), or any finding of severity error (memory or /dev/shm about to
    run out): what someone paged at 3 a.m. needs a bundle for."""
    return is_fault(finding.id) or finding.severity == "error"


class IncidentDetector:
    """One incident per fault while it lasts: a finding is the same one while its id and pids are
    (the live view holds a finding 15 s after it clears, so a flapping hang stays one incident)."""

    def __init__(self) -> None:
        self._active: set = set()

    def new(self, findings: list) -> list:
        faults = {(f.id, tuple(f.pids)): f for f in findings if opens_incident(f)}
        fresh = [f for key, f in faults.items() if key not in self._active]
        self._active = set(faults)
        return fresh


def bundle_dir(recording: Path, number: int, finding_id: str) -> Path:
    stem = recording.name[: -len(".dltop")] if recording.name.endswith(".dltop") else recording.name
    return recording.with_name(f"{stem}.incident-{number}-{finding_id}")


def write_bundle(directory: Path, incident: dict, snap: Snapshot, log_tails: dict, access: Access) -> None:
    """Everything but the frames (``frames.dltop``, written by the recorder) and the dump."""
    from dltop.text_report import render

    access.mkdir(directory)
    access.write_text(directory / "incident.json", json.dumps(incident, indent=2) + "\n")
    access.write_text(directory / "report.txt", render(snap) + "\n")
    access.write_text(directory / "stacks.txt", stacks_text(snap))
    for pid, text in log_tails.items():
        if text:
            access.write_text(directory / f"trainer-{pid}.log", text)


def stacks_text(snap: Snapshot) -> str:
    """Every job process's newest stack, innermost frame first with its source line, user frames
    marked ▶; then the last stack of each worker that exited."""
    lines = [f"stacks of job {snap.job.pid} at {snap.taken_at} (sampled without pausing: py-spy --nonblocking)"]
    for proc in snap.processes:
        still = f" · same stack {proc.stuck_s:.0f}s without CPU" if proc.stuck_s else ""
        rank = f" rank {proc.rank}" if proc.role == "trainer" and proc.rank is not None else ""
        lines.append(
            f"\n{proc.role}{rank} {proc.pid} · {proc.state} · {proc.activity}{still} · sampled {proc.stack_at}"
        )
        lines.extend(_frame_lines(proc.stack) if proc.stack else ["  (no stack)"])
    for loader in snap.loaders:
        for gone in loader.workers_exited:
            lines.append(
                f"\nworker {gone.pid} exited at {gone.gone_at} ({gone.cause}, code {gone.exit_code}): last stack"
            )
            lines.extend(_frame_lines(gone.last_stack) if gone.last_stack else ["  (none sampled)"])
    return "\n".join(lines) + "\n"


def _frame_lines(frames: list) -> list:
    lines = []
    for frame in reversed(frames):
        lines.append(f"  {'▶' if frame.kind == 'user' else ' '} {frame.where()}")
        if frame.code:
            lines.append(f"        {frame.code.strip()}")
    return lines


def write_dump(directory: Path, dump_job, pid: int, access: Access) -> None:
    """``--incident-dump``: py-spy with locals, pausing each process briefly (as ``dltop dump``)."""
    from dltop.collect.stacks.full_dump import render_dump
    from dltop.errors import DltopError

    try:
        dump = dump_job(pid)
    except DltopError as err:
        access.write_text(directory / "dump.txt", f"no dump: {err}\n")
        return
    access.write_text(directory / "dump.json", json.dumps(dump, indent=2) + "\n")
    access.write_text(directory / "dump.txt", render_dump(dump) + "\n")


def run_hook(command: str, env: dict, timeout_s: float) -> Optional[str]:
    """Runs ``--on-incident``; None when it succeeded, else what went wrong. It runs in a session
    of its own, so a command that outlives its timeout is killed with everything it started."""
    proc = subprocess.Popen(command, shell=True, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"timed out after {timeout_s:g}s (killed)"
    if proc.returncode == 0:
        return None
    said = output[-HOOK_OUTPUT_BYTES:].decode(errors="replace").strip().splitlines()
    return f"exited with code {proc.returncode}" + (f": {said[-1]}" if said else "")


def hook_env(directory: Optional[Path], number: int, finding: dict, job_pid: int, recording: Path) -> dict:
    return {
        "DLTOP_INCIDENT_DIR": str(directory or ""),
        "DLTOP_INCIDENT_NUMBER": str(number),
        "DLTOP_FINDING_ID": finding["id"],
        "DLTOP_FINDING_TITLE": finding["title"],
        "DLTOP_FINDING_SEVERITY": finding["severity"],
        "DLTOP_FINDING_PIDS": " ".join(map(str, finding["pids"])),
        "DLTOP_JOB_PID": str(job_pid),
        "DLTOP_RECORDING": str(recording),
    }

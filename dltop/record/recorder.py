"""The flight recorder, a sink of the live loop: each Snapshot becomes a frame, and a
fault's first appearance an incident bundle. It reads nothing of the job itself but what the
loop's collector already holds (the trainers' log tails); only ``--incident-dump`` runs py-spy
with locals, which pauses each process briefly, because the user asked for it.

More: docs/how-it-works.md#one-live-loop-many-sinks.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable, Optional

from dltop import __version__
from dltop.collect import procfs
from dltop.errors import DltopError
from dltop.model import SCHEMA as SNAPSHOT_SCHEMA
from dltop.model import Snapshot
from dltop.record import format as fmt
from dltop.record import incidents
from dltop.record.access import PRIVATE, Access, group_name
from dltop.record.writer import RecordingWriter
from dltop.settings import DEFAULTS, Settings

THREADS_JOIN_S = incidents.HOOK_TIMEOUT_S + 25.0  # a dump (<= 20 s) then the hook, at close


@dataclass(frozen=True)
class RecordOptions:
    interval_s: float = 1.0
    settings: Settings = DEFAULTS
    stacks: bool = True
    max_size: Optional[int] = None
    on_incident: Optional[str] = None
    hook_timeout_s: float = incidents.HOOK_TIMEOUT_S
    incident_dump: bool = False
    access: Access = PRIVATE  # who may read the files besides the recording user


def default_path(job_pid: int, now: Optional[float] = None) -> Path:
    """dltop-<host>-<pid>-<time>.dltop in the current directory."""
    stamp = datetime.fromtimestamp(time.time() if now is None else now).strftime("%Y%m%dT%H%M%S")
    return Path(f"dltop-{socket.gethostname()}-{job_pid}-{stamp}.dltop")


def frame_time(snap: Snapshot, now: float) -> float:
    """The tick's time: ``now`` when it falls in the second ``taken_at`` names, else that second."""
    taken = datetime.fromisoformat(snap.taken_at).timestamp()
    return now if taken <= now < taken + 1 else taken


class Recorder:
    """Writes the loop's Snapshots to ``path`` and captures incidents. ``say`` gets progress lines
    (silenced by --quiet), ``warn`` problems (always shown); ``log_tail(pid)`` is the collector's
    trainer log tail and ``dump_job(pid)`` the full dump, used only with ``--incident-dump``."""

    def __init__(self, path: Path, options: RecordOptions, log_tail: Callable[[int], str],
                 say: Callable[[str], None], warn: Callable[[str], None],
                 dump_job: Optional[Callable[[int], dict]] = None) -> None:  # fmt: skip
        self.path, self.options = path, options
        self._log_tail, self._say, self._warn, self._dump_job = log_tail, say, warn, dump_job
        self.writer: Optional[RecordingWriter] = None
        self.incidents = 0
        self._detector = incidents.IncidentDetector()
        self._recent: deque = deque()  # (at, raw, meta) of the last BUNDLE_FRAMES_S, for bundles
        self._threads: list = []

    def record(self, snap: Snapshot) -> None:
        at = frame_time(snap, time.time())
        doc = snap.to_dict()
        raw, meta = fmt.pack(doc), fmt.frame_meta(snap.job.state, snap.findings)
        try:
            if self.writer is None:
                self.writer = RecordingWriter(self.path, self._header(doc), self.options.max_size, self.options.access)
            self.writer.frame(at, raw, meta)
            self._recent.append((at, raw, meta))
            while self._recent[0][0] < at - incidents.BUNDLE_FRAMES_S:
                self._recent.popleft()
            for finding in self._detector.new(snap.findings):
                self._incident(self.writer, at, doc["findings"][snap.findings.index(finding)], snap)
        except OSError as err:
            kept = self.writer.frames if self.writer else 0
            raise DltopError(
                f"cannot write {self.path}: {err.strerror}; the recording stops here ({kept} frames)"
            ) from err

    def _header(self, doc: dict) -> dict:
        job = doc["job"]
        options = self.options
        return {
            "schema": fmt.SCHEMA,
            "dltop": __version__,
            "recording_id": uuid.uuid4().hex,
            "host": socket.gethostname(),
            "started_at": doc["taken_at"],
            "job": {k: job[k] for k in ("pid", "requested_pid", "cmdline", "trainer_pids", "started_at")},
            "settings": {
                "interval_s": options.interval_s,
                "hang_after_s": options.settings.hang_after_s,
                "stacks": options.stacks,
                "max_size": options.max_size,
                "incident_dump": options.incident_dump,
                "on_incident": bool(options.on_incident),  # not the command: it may hold a token
            },
            "access": self.access_note(doc),
            "frame_schema": SNAPSHOT_SCHEMA,
            "encoding": f"msgpack frames, a zstd stream per {fmt.SEGMENT_FRAMES}-frame segment",
        }

    def access_note(self, doc: dict) -> dict:
        """Whose job this is, who recorded it and who may read the files: said in the header and
        every bundle, so a recording of another user's job made as root says so."""
        job_user = next((p["user"] for p in doc["processes"] if p["pid"] == doc["job"]["pid"]), None)
        gid = self.options.access.gid
        return {
            "job_user": job_user,
            "recorded_by": procfs.user_name(os.geteuid()),
            "readable_by": "the recording user" if gid is None else f"the recording user and group {group_name(gid)}",
            "file_mode": f"{self.options.access.file_mode:04o}",
        }

    def _incident(self, writer: RecordingWriter, at: float, finding: dict, snap: Snapshot) -> None:
        self.incidents += 1
        number = self.incidents
        directory: Optional[Path] = None
        if number <= incidents.MAX_BUNDLES:
            try:
                directory = self._write_bundle(writer, number, finding, snap)
            except (OSError, DltopError) as err:  # a bundle that cannot be written never stops the recording
                self._warn(f"incident {number} ({finding['id']}): no bundle: {err}")
        writer.incident(at, {"number": number, "finding": finding,
                                  "bundle": directory.name if directory else None})  # fmt: skip
        self._say(
            f"incident {number}: [{finding['severity']}] {finding['title']}" + (f" → {directory}" if directory else "")
        )
        if self.options.on_incident or (directory and self.options.incident_dump):
            thread = threading.Thread(target=self._after_bundle, args=(directory, number, finding, snap.job.pid),
                                      name=f"dltop-incident-{number}", daemon=True)  # fmt: skip
            thread.start()
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _write_bundle(self, writer: RecordingWriter, number: int, finding: dict, snap: Snapshot) -> Path:
        """The incident's bundle directory, written."""
        directory = incidents.bundle_dir(self.path, number, finding["id"])
        incident = {"schema": incidents.BUNDLE_SCHEMA, "number": number, "finding": finding, "at": snap.taken_at,
                    "job": writer.header["job"], "access": writer.header["access"],
                    "recording": str(self.path.resolve())}  # fmt: skip
        tails = {pid: self._log_tail(pid) for pid in snap.job.trainer_pids}
        incidents.write_bundle(directory, incident, snap, tails, self.options.access)
        frames = RecordingWriter(
            directory / "frames.dltop", {**writer.header, "bundle": directory.name}, access=self.options.access
        )
        for at, raw, meta in self._recent:
            frames.frame(at, raw, meta)
        frames.close(f"incident {number}: the {incidents.BUNDLE_FRAMES_S:.0f} s before it")
        return directory

    def _after_bundle(self, directory: Optional[Path], number: int, finding: dict, job_pid: int) -> None:
        """The dump (pauses the job's processes briefly), then the hook, on a thread of their own:
        neither delays a tick."""
        if directory and self.options.incident_dump and self._dump_job is not None:
            incidents.write_dump(directory, self._dump_job, job_pid, self.options.access)
        command = self.options.on_incident
        if not command:
            return
        env = incidents.hook_env(directory, number, finding, job_pid, self.path)
        try:
            failure = incidents.run_hook(command, env, self.options.hook_timeout_s)
        except OSError as err:
            failure = f"could not start: {err}"
        if directory:
            # the outcome, not the command: it may hold a token (the header leaves it out too)
            self.options.access.write_text(directory / "on-incident.txt", f"--on-incident: {failure or 'ok'}\n")
        if failure:
            self._warn(f"incident {number}: --on-incident {failure}")

    def close(self, reason: str) -> None:
        """Waits (bounded) for dumps and hooks under way, then ends the recording cleanly."""
        deadline = time.monotonic() + THREADS_JOIN_S
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if self.writer is None:
            return
        try:
            self.writer.close(reason)
        except OSError as err:
            self._warn(f"cannot close {self.path} cleanly: {err.strerror} (it replays up to its last frame)")
            return
        frames = self.writer.frames
        per_frame = self.writer.frame_bytes / frames if frames else 0
        self._say(f"{frames} frames ({per_frame:,.0f} B each) in {self.path}; {reason}")

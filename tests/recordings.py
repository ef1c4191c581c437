"""Recordings written without a job, for the recorder and replay tests."""

from __future__ import annotations

from pathlib import Path

from dltop.model import snapshot_from_dict
from dltop.record import format as fmt
from dltop.record.writer import RecordingWriter

SYNTHETIC_START = 1_780_000_000.0  # 2026-05-28 20:26:40 UTC


def write_synthetic(path: Path, docs: list, start: float = SYNTHETIC_START, incidents: tuple = (),
                    max_size=None) -> None:  # fmt: skip
    """A recording of ``docs``, one a second from ``start``; an incident record after each frame
    number in ``incidents`` (for its first error finding)."""
    header = {"schema": fmt.SCHEMA, "recording_id": "synthetic", "host": "test", "job": docs[0]["job"],
              "settings": {"interval_s": 1.0}}  # fmt: skip
    writer = RecordingWriter(path, header, max_size)
    for frame, doc in enumerate(docs):
        snap = snapshot_from_dict(doc)
        writer.frame(start + frame, fmt.pack(doc), fmt.frame_meta(snap.job.state, snap.findings))
        if frame in incidents:
            finding = next(f for f in doc["findings"] if f["severity"] == "error")
            writer.incident(start + frame, {"number": incidents.index(frame) + 1, "finding": finding, "bundle": None})
    writer.close("synthetic")


def mode(path: Path) -> int:
    """A file's permission bits."""
    return path.stat().st_mode & 0o777

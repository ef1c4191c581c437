"""A recording's timeline (``dltop replay FILE --summary``): start, end, findings raised and cleared,
incidents. Read from the frames' meta blocks and the incident records: no frame is decompressed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional

from dltop.model import most_severe
from dltop.record.reader import Recording
from dltop.record.times import local
from dltop.units import span

TIMELINE_SCHEMA = "dltop.timeline/1"


@dataclass
class Span:
    """A finding shown from frame ``first`` to ``last`` (inclusive)."""

    id: str
    severity: str
    title: str
    pids: list
    first: int
    last: int = -1


def finding_spans(metas: list, frames: int) -> list:
    """Every stretch of frames a finding was shown in, oldest first, from ``Recording.metas()``
    of a recording of ``frames`` frames; its highest severity."""
    spans: list[Span] = []
    shown: dict[tuple[str, tuple[int, ...]], Span] = {}
    for frame, _state, findings in metas:
        now = {(f[0], tuple(f[2])): f for f in findings}
        for key in [k for k in shown if k not in now]:
            shown[key].last = frame - 1
            spans.append(shown.pop(key))
        for key, (fid, severity, pids, title) in now.items():
            current = shown.setdefault(key, Span(fid, severity, title, list(pids), frame))
            current.severity = most_severe([current.severity, severity]) or severity
    for current in shown.values():
        current.last = frames - 1
        spans.append(current)
    return sorted(spans, key=lambda s: (s.first, s.id))


def _iso(at: Optional[float]) -> Optional[str]:
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds") if at is not None else None


def timeline(recording: Recording) -> dict:
    """The ``dltop.timeline/1`` document."""
    times, header, last = recording.times, recording.header, len(recording) - 1
    metas = list(recording.metas())
    exited = next((frame for frame, state, _ in metas if state == "exited"), None)
    return {
        "schema": TIMELINE_SCHEMA,
        "recording": str(recording.path),
        "host": header.get("host"),
        "job": header.get("job"),
        "interval_s": header.get("settings", {}).get("interval_s"),
        "start": _iso(times[0]),
        "end": _iso(times[last]),
        "duration_s": round(times[last] - times[0], 1),
        "frames": len(recording),
        "ended": recording.end["reason"] if recording.end else None,
        "stopped": recording.stopped,
        "older_dropped": recording.dropped,
        "job_exited_at": _iso(times[exited]) if exited is not None else None,
        "findings": [
            {
                "id": s.id,
                "severity": s.severity,
                "title": s.title,
                "pids": s.pids,
                "raised_at": _iso(times[s.first]),
                "cleared_at": _iso(times[s.last + 1]) if s.last < last else None,
                "frames": [s.first, s.last],
            }
            for s in finding_spans(metas, len(recording))
        ],
        "incidents": [
            {
                "number": i["number"],
                "at": _iso(i["at"]),
                "frame": i["frame"],
                "id": i["finding"]["id"],
                "severity": i["finding"]["severity"],
                "title": i["finding"]["title"],
                "pids": i["finding"]["pids"],
                "bundle": str(recording.path.with_name(i["bundle"])) if i["bundle"] else None,
            }
            for i in recording.incidents
        ],
    }


def render_summary(doc: dict) -> str:
    """The timeline document as text, events in time order."""
    job, interval = doc["job"] or {}, doc["interval_s"]
    lines = [
        f"recording {doc['recording']} · host {doc['host']} · job {job.get('pid')}: {job.get('cmdline')}",
        f"{_local(doc['start'])} → {_local(doc['end'])} ({span(doc['duration_s'])}, {doc['frames']} frames"
        + (f" every {interval:g}s)" if interval else ")"),
        f"ended: {doc['ended']}" if doc["ended"] else "ended: not cleanly (dltop was killed, or is still recording)",
    ]
    if doc["older_dropped"]:
        lines.append("older frames were dropped to keep within --max-size")
    if doc["stopped"]:
        lines.append(doc["stopped"])
    events = []
    for f in doc["findings"]:
        events.append((f["raised_at"], 1, f"raised   [{f['severity']}] {f['id']}: {f['title']}"))
        if f["cleared_at"]:
            shown = span(_seconds(f["cleared_at"]) - _seconds(f["raised_at"]))
            events.append((f["cleared_at"], 0, f"cleared  {f['id']} (shown {shown})"))
    for i in doc["incidents"]:
        bundle = f" → {i['bundle']}" if i["bundle"] else ""
        events.append((i["at"], 2, f"INCIDENT {i['number']} {i['id']}: {i['title']}{bundle}"))
    if doc["job_exited_at"]:
        events.append((doc["job_exited_at"], 3, "the job exited"))
    lines.append("")
    lines.extend(f"  {_local(at)}  {text}" for at, _, text in sorted(events, key=lambda e: (_seconds(e[0]), e[1])))
    if not events:
        lines.append("  no findings, no incidents")
    return "\n".join(lines)


def _seconds(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _local(iso: str) -> str:
    return local(_seconds(iso))

"""Disks: a device the job reads from is busy nearly all the time and its reads queue
(disk-saturated). The same figure (``saturated_disks``) caps the workers the capacity model
suggests, so input-bound never asks for workers that would only lengthen the queue."""

from __future__ import annotations

from dltop.diagnose.figures import saturated_disks
from dltop.diagnose.window import Window
from dltop.model import Finding
from dltop.model.findings import DISK_SATURATED
from dltop.settings import Settings
from dltop.units import human_bytes


def disk_saturated(window: Window, settings: Settings) -> list[Finding]:
    """A device the job reads from is busy nearly all the time and requests queue: more workers
    only lengthen the queue."""
    latest = window.latest
    waits = [ld.data_wait_percent for ld in latest.loaders if ld.data_wait_percent is not None]
    starving = bool(waits) and max(waits) >= settings.input_bound_percent
    findings = []
    for disk in saturated_disks(window, settings.disk_util_percent, settings.disk_await_ms):
        reads = human_bytes(disk.read_bytes_per_s, "/s")
        findings.append(
            Finding(
                id=DISK_SATURATED,
                severity="warning" if starving else "info",
                title=f"Disk {disk.name} is {disk.util_percent:.0f}% busy with {disk.r_await_ms:.0f} ms per read",
                detail=f"The job reads {reads} from {disk.name}; each read waits {disk.r_await_ms:.0f} ms"
                + (" while the trainer waits for data." if starving else ".")
                + " More workers will not help: they only queue more reads.",
                pids=[],
                evidence={
                    "device": disk.device,
                    "name": disk.name,
                    "util_percent": round(disk.util_percent, 1),
                    "r_await_ms": round(disk.r_await_ms, 1),
                    "read_bytes_per_s": round(disk.read_bytes_per_s),
                },
                suggestion=f"Read less from {disk.name}: fewer, larger reads (pack samples into shards: WebDataset,"
                " LMDB, arrow), cache decoded samples in RAM or on local NVMe, or move the dataset to faster storage.",
                impact=max(waits) / 100 if starving else 0.05,
            )
        )
    return findings

"""Plain data that flows from the collectors to every front end, and the words it is written in."""

from dltop.model.records import (
    SCHEMA,
    DiskSample,
    ExitedWorker,
    Finding,
    Frame,
    GpuProcess,
    GpuSample,
    JobInfo,
    LoaderSample,
    Pending,
    Placement,
    ProcessSample,
    Snapshot,
    SystemSample,
    TrainerTime,
    snapshot_from_dict,
)
from dltop.model.vocabulary import (
    ENDED,
    JOB_ROLES,
    PHASES,
    ROLES,
    SEVERITIES,
    STILL_NOTICE_S,
    WAITING,
    Activity,
    DatasetKind,
    Phase,
    Role,
    Severity,
    is_stuck,
    most_severe,
    severity_rank,
    still_for,
)

__all__ = [
    "SCHEMA", "DiskSample", "ExitedWorker", "Finding", "Frame", "GpuProcess", "GpuSample", "JobInfo",
    "LoaderSample", "Pending", "Placement", "ProcessSample", "Snapshot", "SystemSample", "TrainerTime",
    "snapshot_from_dict", "ENDED", "JOB_ROLES", "PHASES", "ROLES", "SEVERITIES", "STILL_NOTICE_S", "WAITING",
    "Activity", "DatasetKind", "Phase", "Role", "Severity", "is_stuck", "most_severe", "severity_rank", "still_for",
]  # fmt: skip

"""Iterable datasets: a worker with no part of the source gets no data.

An ``IterableDataset`` splits its source among the workers itself (``get_worker_info()``:
webdataset's ``split_by_worker``, Hugging Face ``datasets``' shards, litdata and MosaicML
streaming's chunks); a worker beyond the parts stops at once, and torch leaves it idle
(persistent workers) or shuts it down while its siblings go on. It holds memory and a process for
nothing, and users see "only worker 0 gets data" with no tool to say why.
"""

from __future__ import annotations

from dltop.diagnose.figures import loader_change, source_parts, starving_workers
from dltop.diagnose.window import Window
from dltop.model import Finding
from dltop.model.findings import WORKER_STARVING
from dltop.settings import Settings


def worker_starving(window: Window, settings: Settings) -> list[Finding]:
    findings = []
    for loader in window.latest.loaders:
        starving = starving_workers(window, loader, settings)
        if not starving.count:
            continue
        parts, how = source_parts(window, loader, settings)
        workers = loader.num_workers
        idle = f"worker(s) {', '.join(map(str, starving.idle_pids))} idle" if starving.idle_pids else ""
        ended = ", ".join(map(str, starving.ended_pids)) or f"{starving.ended} worker(s)"
        who = " and ".join(filter(None, (idle, f"{ended} shut down early" if starving.ended else "")))
        has = f"it has {parts} part(s) ({how})" if parts is not None else "it has fewer parts than workers"
        useful = parts if parts is not None else workers - starving.count
        findings.append(
            Finding(
                id=WORKER_STARVING,
                severity="warning",
                title=f"{starving.count} of {workers} workers of trainer {loader.trainer_pid} get no data:"
                f" {who} while their siblings fetch",
                detail=f"{loader.dataset or 'The dataset'} is an IterableDataset: each worker reads its own part of"
                f" the source, and {has}. Workers beyond the parts hold memory and a process and deliver"
                " nothing; more of them will not make the trainer wait less.",
                pids=[loader.trainer_pid, *starving.pids],
                evidence={
                    "trainer_pid": loader.trainer_pid,
                    "dataset": loader.dataset,
                    "num_workers": workers,
                    "starving_pids": starving.pids,
                    "ended_early": starving.ended,
                    "parts": parts,
                    "parts_source": how,
                    "change": {"num_workers": useful},
                },
                suggestion=f"{loader_change(loader, num_workers=max(1, useful))}; or re-shard the source into at"
                f" least {workers} parts (more, smaller shards) so every worker reads one",
                impact=0.05,
            )
        )
    return findings

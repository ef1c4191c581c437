"""Iterable datasets: workers are bounded by the parts of the source. The rules on
hand-built windows: no advice beyond the parts, re-sharding when the parts bind, a caveat when
the parts are unknown, and workers with no part found starving."""

from __future__ import annotations

import dataclasses

from dltop.collect.processes.shards import parts_from_indices, shard_pattern
from dltop.diagnose import diagnose
from dltop.frames import dataset_kind, make_frame, worker_loop_config
from tests.windows import STACK, bound_window

IDLE_STACK = [
    make_frame("_worker_loop", "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", 309),
    make_frame("Queue.get", "/usr/lib/python3.11/multiprocessing/queues.py", 113),
]


def _iterable(window: list, parts=None, source=None, persistent=True, idle=()) -> list:
    """The window's loader made iterable, with ``parts`` counted, and workers ``idle`` (no part)."""
    out = []
    for snap in window:
        loader = dataclasses.replace(snap.loaders[0], dataset_kind="iterable", parts=parts, parts_source=source,
                                     persistent_workers=persistent)  # fmt: skip
        processes = [
            dataclasses.replace(p, activity="idle", stack=IDLE_STACK, cpu_percent=0.0) if p.pid in idle else p
            for p in snap.processes
        ]
        out.append(dataclasses.replace(snap, loaders=[loader], processes=processes))
    return out


def _input_bound(findings):
    (finding,) = [f for f in findings if f.id == "input-bound"]
    return finding


def test_a_map_style_loader_may_grow_past_any_shard_count():
    finding = _input_bound(diagnose(bound_window(80.0, workers=1, cpu=100.0)))
    assert finding.evidence["suggested_workers"] > 2


def test_an_iterable_loader_is_never_advised_more_workers_than_parts_and_is_told_to_reshard():
    window = _iterable(bound_window(80.0, workers=1, cpu=100.0), parts=2, source="2 shard files like /d/train-0.tar")
    finding = _input_bound(diagnose(window))
    assert finding.evidence["suggested_workers"] == 2 and finding.evidence["parts"] == 2
    assert finding.evidence["binding"] == "parts"
    assert "num_workers=2" in finding.suggestion and "re-shard the source into at least" in finding.suggestion
    wanted = finding.evidence["workers_needed"]
    assert wanted > 2 and f"num_workers={wanted}" in finding.suggestion


def test_workers_already_at_the_parts_get_only_the_reshard():
    window = _iterable(bound_window(80.0, workers=2, cpu=100.0), parts=2, source="2 shard files")
    finding = _input_bound(diagnose(window))
    assert finding.evidence["suggested_workers"] == 2
    assert finding.suggestion.startswith("re-shard the source into at least")


def test_an_iterable_loader_with_unknown_parts_says_the_count_needs_as_many():
    finding = _input_bound(diagnose(_iterable(bound_window(80.0, workers=1, cpu=100.0))))
    more = finding.evidence["suggested_workers"]
    assert more > 1 and f"need at least {more} parts" in finding.detail


def test_an_idle_worker_of_an_iterable_loader_whose_siblings_fetch_is_starving():
    window = _iterable(bound_window(60.0, workers=3, cpu=100.0, ticks=4), idle=(12,))
    findings = diagnose(window)
    (starving,) = [f for f in findings if f.id == "worker-starving"]
    assert starving.evidence["starving_pids"] == [12] and starving.evidence["parts"] == 2
    assert "num_workers=2" in starving.suggestion and "re-shard" in starving.suggestion
    # its parts bound the input-bound advice too (2 useful workers: none to add without re-sharding)
    assert _input_bound(findings).evidence["parts"] == 2


def test_idle_workers_of_a_map_style_loader_are_not_starving():
    window = bound_window(60.0, workers=3, cpu=100.0, ticks=4)
    idle = [
        dataclasses.replace(p, activity="idle", stack=IDLE_STACK) if p.pid == 12 else p for p in window[0].processes
    ]
    window = [dataclasses.replace(s, processes=idle) for s in window]
    assert "worker-starving" not in [f.id for f in diagnose(window)]


def test_the_dataset_kind_is_read_from_the_fetcher_or_the_worker_loop_arguments():
    assert dataset_kind(STACK) == "map"
    iterable = [make_frame("_IterableDatasetFetcher.fetch", STACK[2].file, 35)]
    assert dataset_kind(iterable) == "iterable" and dataset_kind(IDLE_STACK) is None
    assert worker_loop_config({"_worker_loop": {"dataset_kind": "1"}}) == {
        "dataset_kind": "iterable"}  # fmt: skip


def test_the_parts_are_counted_from_the_shards_each_worker_was_dealt_once_all_showed_theirs():
    local_vars = {"_iter_pytorch": {"shards_indices": "[1, 3]"}, "_worker_loop": {"worker_id": "1"}}
    assert worker_loop_config(local_vars)["shard_indices"] == [1, 3]
    dealt = [{"shard_indices": [0, 2]}, {"shard_indices": [1, 3]}, {"shard_indices": []}]
    counted = parts_from_indices(dealt, 3)
    assert counted is not None and counted.parts == 4 and counted.seen is None
    assert parts_from_indices(dealt[:2], 3) is None  # a worker not read yet may hold the last


def test_a_shard_file_is_a_numbered_data_file_and_its_siblings_share_its_name():
    pattern = shard_pattern("/data/train-000017.tar")
    assert pattern is not None and pattern.match("train-000003.tar") and not pattern.match("val-000003.tar")
    assert shard_pattern("/venv/lib/python3.11/site-packages/x/data-1.bin") is None
    assert shard_pattern("/data/train.tar") is None and shard_pattern("/data/train-1.py") is None


def test_shard_files_seen_read_are_a_floor_of_the_parts_not_a_cap():
    """A folder may hold more shards than the loader reads (webdataset over 2 of 4), or it reads them
    all: the files its workers were seen reading are a floor of its parts, which caps nothing (no
    "re-shard into at least 3 parts (it has 1" where the folder holds 2); the count says it needs as
    many parts, and how many were seen read."""
    counted = _iterable(bound_window(80.0, workers=1, cpu=100.0, samples=2000, ticks=10), parts=4,
                        source="4 shard files like /d/train-0.tar")  # fmt: skip

    def seen(count: int) -> list:
        return [dataclasses.replace(s, loaders=[dataclasses.replace(s.loaders[0], parts_seen=count)]) for s in counted]

    finding = _input_bound(diagnose(seen(1)))
    assert finding.evidence["parts"] is None and finding.evidence["binding"] == "cpus"
    assert finding.evidence["suggested_workers"] == 4 and "re-shard" not in finding.suggestion
    assert "4 workers need at least 4 parts" in finding.detail
    assert "seen reading 1 of the 4 shard files like /d/train-0.tar so far: it has at least that many" in finding.detail
    finding = _input_bound(diagnose(seen(4)))  # all of them read: the count, a cap
    assert finding.evidence["parts"] == 4 and finding.evidence["suggested_workers"] == 4
    assert "seen read" not in finding.suggestion + finding.detail

"""Streaming datasets on the real libraries: webdataset over tar shards and Hugging Face
``datasets`` streaming, run as users run them (tests/jobs/). dltop must know the loader is
iterable, count the parts of its source, never advise more workers than parts, and name the
workers that get none."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import ROOT, run_dltop

JOBS = ROOT / "tests" / "jobs"


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> str:
    """Two webdataset tar shards, made once."""
    folder = tmp_path_factory.mktemp("wds")
    subprocess.run([sys.executable, str(JOBS / "wds_job.py"), "--make-shards", str(folder), "--shards", "2",
                    "--per-shard", "3000"], check=True, timeout=120)  # fmt: skip
    return str(folder)


def _report(job, workers: int, seconds: str = "8") -> dict:
    job.wait_workers(workers, timeout=90)
    result = run_dltop("snapshot", "--pid", str(job.pid), "--duration", seconds, "--json", timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_webdataset_one_worker_waiting_is_advised_no_more_workers_than_shards(start_job, shards):
    job = start_job("--shards-dir", shards, "--shards", "2", "--workers", "1", "--decode-ms", "8", "--step-ms", "1",
                    script=JOBS / "wds_job.py")  # fmt: skip
    report = _report(job, 1)
    (loader,) = report["loaders"]
    assert loader["dataset_kind"] == "iterable" and loader["parts"] == 2, loader
    # its one worker reads the shards one after the other (~24 s each): the count is the dataset's
    # own list where a worker's frames show it (exact), else the files in their folder, of which
    # those seen read so far are a floor
    exact = loader["parts_seen"] is None
    assert ("listed" in loader["parts_source"]) if exact else ("train-" in loader["parts_source"]), loader
    (finding,) = [f for f in report["findings"] if f["id"] == "input-bound"]
    evidence = finding["evidence"]
    assert (evidence["suggested_workers"] or 0) <= 2, evidence  # never 3 on two shards
    assert evidence["change"] in ({"num_workers": 2}, None), evidence
    if exact and evidence["workers_needed"] and evidence["workers_needed"] > 2:
        assert "re-shard" in finding["suggestion"], finding["suggestion"]
        assert "seen read" not in finding["suggestion"]  # the list is the count, not the files seen read


def test_webdataset_workers_beyond_the_shards_are_found_starving(start_job, shards):
    job = start_job("--shards-dir", shards, "--shards", "2", "--workers", "3", "--decode-ms", "8", "--step-ms", "1",
                    "--no-empty-check", script=JOBS / "wds_job.py")  # fmt: skip
    report = _report(job, 2, "10")
    (loader,) = report["loaders"]
    assert loader["dataset_kind"] == "iterable"
    (starving,) = [f for f in report["findings"] if f["id"] == "worker-starving"]
    assert starving["evidence"]["parts"] == 2 and starving["evidence"]["change"] == {"num_workers": 2}
    served = {r["pid"] for r in job.records("served")}  # the truth: the workers that delivered a sample
    # non-persistent workers: torch shut the one with no shard down while the two with one go on
    assert len(served) == 2 and starving["evidence"]["ended_early"] == 1, (starving["evidence"], served)
    assert not set(starving["evidence"]["starving_pids"]) & served  # one seen leaving is one that never served
    advised = [f["evidence"]["suggested_workers"] for f in report["findings"] if f["id"] == "input-bound"]
    assert all((n or 0) <= 2 for n in advised), advised


def test_datasets_streaming_tells_its_shards_in_the_trainers_log(start_job):
    job = start_job("--streaming", "--num-shards", "2", "--workers", "3", "--rows", "60000", "--row-ms", "2",
                    script=JOBS / "hf_job.py", env={"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"})  # fmt: skip
    report = _report(job, 2)
    (loader,) = report["loaders"]
    assert loader["dataset_kind"] == "iterable" and loader["parts"] == 2, loader
    # from datasets' warning in the log, or the shard indices its workers were dealt (when the third
    # worker, dealt none, was read before torch shut it down)
    assert "num_shards=2" in loader["parts_source"] or "2 shards dealt" in loader["parts_source"], loader
    assert [f for f in report["findings"] if (f["evidence"].get("suggested_workers") or 0) > 2] == []

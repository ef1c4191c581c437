"""The Collector's figures without a job: disk rates and the devices a job uses, a sample replaced."""

from __future__ import annotations

import os

import pytest

from dltop.collect.host.disk import DiskSampler, block_device_names


def test_disk_rates_and_the_devices_a_job_uses(tmp_path):
    here = os.stat(tmp_path).st_dev
    if not block_device_names(here):
        pytest.skip("the test directory is not on a block device here (tmpfs/overlay)")
    sampler = DiskSampler()
    assert sampler.sample([os.getpid()]) == []  # rates need two readings
    with open(tmp_path / "blob", "wb") as out:
        out.write(os.urandom(4 << 20))
        os.fsync(out.fileno())
    disks = {d.device: d for d in sampler.sample([os.getpid()])}
    used = [d for d in disks.values() if d.used_by_job]
    assert used and set(block_device_names(here)) <= {d.device for d in used}
    assert sum(d.write_bytes_per_s for d in used) > 0


def test_a_replaced_sample_is_what_dataclasses_replace_builds():
    import dataclasses

    from dltop.collect.collector import replaced
    from dltop.model import ProcessSample

    sample = ProcessSample(pid=7, ppid=1, role="worker", trainer_pid=3, name="pt_data_worker", cmdline="python",
                           state="sleeping", cpu_percent=12.5, unavailable={"uss_bytes": "not read yet"})  # fmt: skip
    changes = dict(activity="fetching", stuck_s=2.0, worker_id=1, stack=[], stack_at="2026-01-01T00:00:00+00:00")
    new = replaced(sample, **changes)
    assert new == dataclasses.replace(sample, **changes) and new is not sample
    assert sample.activity == "unknown" and new.unavailable is sample.unavailable  # the original unchanged
    with pytest.raises(TypeError):
        replaced(sample, no_such_field=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.activity = "idle"  # type: ignore[misc]

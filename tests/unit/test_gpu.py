"""NVML readings through a fake pynvml: states, units, and the pid mapping."""

from __future__ import annotations

import os
import sys

import pytest

from dltop.collect.host import gpu as gpu_module
from dltop.collect.host.gpu import GpuSampler, pid_aliases
from tests.support import FAKES


@pytest.fixture
def fake_nvml(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKES))
    sys.modules.pop("pynvml", None)
    import pynvml

    pynvml.state.devices, pynvml.state.pids, pynvml.state.init = None, [], "ok"
    pynvml.state.power_supported = True
    yield pynvml
    sys.modules.pop("pynvml", None)


def test_missing_module_is_a_normal_state():
    sampler = GpuSampler(module_name="dltop_tests_no_such_module")
    assert sampler.status == "no-nvml"
    assert sampler.sample([os.getpid()]) == []


def test_missing_library_no_devices_and_errors(fake_nvml):
    fake_nvml.state.init = "nolib"
    assert GpuSampler().status == "no-nvml"
    fake_nvml.state.init = "fail"
    assert GpuSampler().status == "error: Unknown Error"
    fake_nvml.state.init, fake_nvml.state.devices = "ok", 0
    sampler = GpuSampler()
    assert sampler.status == "no-devices" and sampler.sample([1]) == []


def test_readings_units_and_job_processes(fake_nvml):
    me = os.getpid()
    fake_nvml.state.pids = [me, 999_999_999]  # the second is not part of the job
    fake_nvml.state.power_supported = False
    (device,) = GpuSampler().sample([me])
    assert device.name == "Fake H200" and device.util_percent == 37
    assert device.mem_used_bytes == 10 * 2**30 and device.mem_total_bytes == 80 * 2**30
    assert device.pcie_rx_bytes_per_s == 2048 * 1024 and device.pcie_tx_bytes_per_s == 512 * 1024
    assert device.power_w is None  # NotSupported is a missing reading, not an error
    assert device.temperature_c == 61
    assert [(p.pid, p.used_memory_bytes, p.sm_util_percent) for p in device.processes] == [(me, 3 * 2**30, 55)]


def test_identity_is_spelt_as_dcgm_exporter_labels_it_and_read_once(fake_nvml, monkeypatch):
    fake_nvml.state.devices = 2
    names = []
    monkeypatch.setattr(fake_nvml, "nvmlDeviceGetName", lambda handle: names.append(handle) or b"Fake H200")

    def no_uuid(handle):
        if handle == 1:
            raise fake_nvml.NVMLError_NotSupported("Not Supported")
        return f"GPU-fa4e0000-0000-4000-8000-{handle:012d}"

    monkeypatch.setattr(fake_nvml, "nvmlDeviceGetUUID", no_uuid)
    sampler = GpuSampler()
    first, second = sampler.sample([])
    assert (first.name, first.uuid, first.minor_number, first.pci_bus_id) == (
        "Fake H200",
        "GPU-fa4e0000-0000-4000-8000-000000000000",
        0,
        "00000000:18:00.0",  # bytes from NVML, text here
    )
    assert second.uuid is None and second.minor_number == 1  # one unsupported reading hides nothing else
    sampler.sample([])
    assert names == [0, 1]  # name, UUID, minor number and bus id never change: read when NVML opens


def test_host_pids_map_to_ours_through_nspid(fake_nvml, monkeypatch):
    me = os.getpid()
    host_pid = 4_000_123
    # As the host sees a containerised process: NSpid lists its pid in each namespace.
    monkeypatch.setattr(gpu_module.procfs, "read_nspid", lambda pid: [pid, host_pid] if pid == me else [pid])
    assert pid_aliases([me]) == {me: me, host_pid: me}
    fake_nvml.state.pids = [host_pid]
    (device,) = GpuSampler().sample([me])
    assert [(p.pid, p.nvml_pid) for p in device.processes] == [(me, host_pid)]

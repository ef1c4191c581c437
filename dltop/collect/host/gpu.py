"""GPU figures from NVML (module ``pynvml`` of the nvidia-ml-py package).

No library, no driver or no device is a normal state reported in ``gpu_status``, never an
exception. NVML reports pids in the host's pid namespace; they are matched to the pids this
machine's /proc shows through each job process's ``NSpid`` line (docs/how-it-works.md#nvml).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from dltop.collect import procfs
from dltop.model import GpuProcess, GpuSample, status_error


def _reading(nvml: Any, call: Callable[..., Any], *args: Any) -> Any:
    """One NVML reading, or None where the device does not support it."""
    try:
        return call(*args)
    except nvml.NVMLError:
        return None


@dataclass(frozen=True)
class DeviceIdentity:
    """What names a device, spelt as dcgm-exporter labels it, so PromQL can join the two."""

    name: str  # modelName
    uuid: Optional[str]  # UUID: 'GPU-604ac76c-...'
    minor_number: Optional[int]  # device: nvidia<minor>
    pci_bus_id: Optional[str]  # pci_bus_id: '00000000:5B:00.0'


def _text(value: Any) -> Optional[str]:
    return value.decode() if isinstance(value, bytes) else value


def _identity(nvml: Any, handle: Any) -> DeviceIdentity:
    pci = _reading(nvml, nvml.nvmlDeviceGetPciInfo, handle)
    return DeviceIdentity(
        name=_text(_reading(nvml, nvml.nvmlDeviceGetName, handle)) or "unknown",
        uuid=_text(_reading(nvml, nvml.nvmlDeviceGetUUID, handle)),
        minor_number=_reading(nvml, nvml.nvmlDeviceGetMinorNumber, handle),
        pci_bus_id=_text(pci.busId) if pci is not None else None,
    )


def pid_aliases(pids: Iterable[int]) -> dict:
    """{any pid a process has in any namespace: the pid our /proc shows} for the given processes."""
    aliases = {}
    for pid in pids:
        aliases[pid] = pid
        try:
            for alias in procfs.read_nspid(pid):
                aliases.setdefault(alias, pid)
        except OSError:
            continue
    return aliases


class GpuSampler:
    """Opens NVML once; every tick reads each device and the job's processes on it."""

    def __init__(self, module_name: str = "pynvml") -> None:
        self.status = "no-nvml"
        self._nvml: Any = None
        self._handles: list = []
        self._identities: list = []  # DeviceIdentity per handle: read once, they never change
        self._last_seen: dict = {}  # device index -> NVML timestamp of the newest process sample
        try:
            nvml = importlib.import_module(module_name)
        except ImportError:
            return
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except nvml.NVMLError as error:
            not_there = tuple(
                getattr(nvml, name)
                for name in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
                if hasattr(nvml, name)
            )
            self.status = "no-nvml" if isinstance(error, not_there) else status_error(error)
            return
        self._nvml = nvml
        self._identities = [_identity(nvml, handle) for handle in self._handles]
        self.status = "ok" if self._handles else "no-devices"

    def holders(self) -> dict:
        """{nvml pid: used bytes} of every compute process on every device (for ``dltop jobs``)."""
        used: dict = {}
        for handle in self._handles:
            for proc in self._processes(handle):
                used[proc.pid] = used.get(proc.pid, 0) + (proc.usedGpuMemory or 0)
        return used

    def _processes(self, handle: Any) -> list:
        nvml = self._nvml
        found: list[Any] = []
        for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            if hasattr(nvml, getter):
                found += _reading(nvml, getattr(nvml, getter), handle) or []
        return found

    def sample(self, job_pids: Iterable[int]) -> list:
        if self._nvml is None:
            return []
        nvml = self._nvml
        aliases = pid_aliases(job_pids)
        devices = []
        for index, (handle, identity) in enumerate(zip(self._handles, self._identities)):
            util = _reading(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = _reading(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
            rx = _reading(nvml, nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
            tx = _reading(nvml, nvml.nvmlDeviceGetPcieThroughput, handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
            power = _reading(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
            temp = _reading(nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
            devices.append(
                GpuSample(
                    index=index,
                    name=identity.name,
                    util_percent=float(util.gpu) if util is not None else None,
                    mem_used_bytes=memory.used if memory is not None else None,
                    mem_total_bytes=memory.total if memory is not None else None,
                    pcie_rx_bytes_per_s=rx * 1024.0 if rx is not None else None,  # NVML gives KB/s
                    pcie_tx_bytes_per_s=tx * 1024.0 if tx is not None else None,
                    power_w=power / 1000.0 if power is not None else None,  # mW
                    temperature_c=float(temp) if temp is not None else None,
                    processes=self._job_processes(index, handle, aliases),
                    uuid=identity.uuid,
                    minor_number=identity.minor_number,
                    pci_bus_id=identity.pci_bus_id,
                )
            )
        return devices

    def _job_processes(self, index: int, handle: Any, aliases: dict) -> list:
        nvml = self._nvml
        sm_util: dict = {}
        samples = _reading(nvml, nvml.nvmlDeviceGetProcessUtilization, handle, self._last_seen.get(index, 0))
        for sample in samples or []:
            sm_util[sample.pid] = max(sm_util.get(sample.pid, 0), sample.smUtil)
            self._last_seen[index] = max(self._last_seen.get(index, 0), sample.timeStamp)
        found = []
        for proc in self._processes(handle):
            local = aliases.get(proc.pid)
            if local is not None:
                sm: Optional[float] = sm_util.get(proc.pid)
                found.append(GpuProcess(local, proc.usedGpuMemory, float(sm) if sm is not None else None, proc.pid))
        return found

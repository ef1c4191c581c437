"""A stand-in for nvidia-ml-py's ``pynvml`` (no CI machine has a GPU).

Shaped like the real module: NVMLError subclasses, handles, named tuples of readings.
Environment knobs let subprocess tests steer it: FAKE_NVML_PIDS (comma-separated pids that
hold GPU 0, in NVML's namespace), FAKE_NVML_DEVICES (count, default 1), FAKE_NVML_INIT
('ok', 'nolib', 'fail').
"""

from __future__ import annotations

import os
from types import SimpleNamespace

NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_TEMPERATURE_GPU = 0


class NVMLError(Exception):
    pass


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801 - the real module's name
    pass


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    pass


class NVMLError_Unknown(NVMLError):  # noqa: N801
    pass


def _env_pids() -> list:
    return [int(p) for p in os.environ.get("FAKE_NVML_PIDS", "").split(",") if p]


state = SimpleNamespace(devices=None, pids=None, init="ok", power_supported=True)


def nvmlInit() -> None:  # noqa: N802
    mode = os.environ.get("FAKE_NVML_INIT", state.init)
    if mode == "nolib":
        raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")
    if mode == "fail":
        raise NVMLError_Unknown("Unknown Error")


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return state.devices if state.devices is not None else int(os.environ.get("FAKE_NVML_DEVICES", "1"))


def nvmlDeviceGetHandleByIndex(index: int) -> int:  # noqa: N802
    return index


def nvmlDeviceGetName(handle: int) -> str:  # noqa: N802
    return "Fake H200"


def nvmlDeviceGetUUID(handle: int) -> str:  # noqa: N802
    return f"GPU-fa4e0000-0000-4000-8000-{handle:012d}"


def nvmlDeviceGetMinorNumber(handle: int) -> int:  # noqa: N802
    return handle


def nvmlDeviceGetPciInfo(handle: int):  # noqa: N802
    return SimpleNamespace(busId=f"00000000:{0x18 + handle:02X}:00.0".encode())  # bytes, as older releases return


def nvmlDeviceGetUtilizationRates(handle: int):  # noqa: N802
    return SimpleNamespace(gpu=37, memory=12)


def nvmlDeviceGetMemoryInfo(handle: int):  # noqa: N802
    return SimpleNamespace(total=80 * 2**30, used=10 * 2**30, free=70 * 2**30)


def nvmlDeviceGetPcieThroughput(handle: int, counter: int) -> int:  # noqa: N802
    return 2048 if counter == NVML_PCIE_UTIL_RX_BYTES else 512  # KB/s


def nvmlDeviceGetPowerUsage(handle: int) -> int:  # noqa: N802
    if not state.power_supported:
        raise NVMLError_NotSupported("Not Supported")
    return 250_000  # mW


def nvmlDeviceGetTemperature(handle: int, sensor: int) -> int:  # noqa: N802
    return 61


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list:  # noqa: N802
    pids = state.pids if state.pids is not None else _env_pids()
    return [SimpleNamespace(pid=pid, usedGpuMemory=3 * 2**30) for pid in pids] if handle == 0 else []


def nvmlDeviceGetGraphicsRunningProcesses(handle: int) -> list:  # noqa: N802
    return []


def nvmlDeviceGetProcessUtilization(handle: int, last_seen: int) -> list:  # noqa: N802
    pids = state.pids if state.pids is not None else _env_pids()
    return [SimpleNamespace(pid=pid, smUtil=55, memUtil=10, timeStamp=last_seen + 1) for pid in pids]

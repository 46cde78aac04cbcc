"""The part of nvidia-ml-py's `pynvml` module that the GPU counter source calls, as a
Protocol: the module itself (which ships no types) and the test double (tests/fake_nvml.py)
both satisfy it, so what the readers ask of NVML is checked against one declaration.

Device handles and GPM samples are opaque: made by the module, only handed back to it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

# What nvmlDeviceGetHandleByIndex and nvmlGpmSampleAlloc return (ctypes pointers in pynvml):
# nothing here looks inside them.
DeviceHandle = object
GpmSample = object


class GpmSupport(Protocol):
    isSupportedDevice: int


class GpmMetric(Protocol):
    metricId: int
    nvmlReturn: int
    value: float


class GpmMetricsRequest(Protocol):
    """nvmlGpmMetricsGet_t: the two samples in, a value and a return code per metric out."""

    version: int
    numMetrics: int
    sample1: GpmSample
    sample2: GpmSample

    @property
    def metrics(self) -> Sequence[GpmMetric]: ...


class MemoryInfo(Protocol):
    @property
    def used(self) -> int: ...


class UtilizationRates(Protocol):
    @property
    def gpu(self) -> int: ...

    @property
    def memory(self) -> int: ...


class Nvml(Protocol):
    """The `pynvml` module, by the names xpu-perf calls."""

    @property
    def NVMLError(self) -> type[Exception]: ...

    @property
    def NVML_CLOCK_SM(self) -> int: ...

    @property
    def NVML_CLOCK_MEM(self) -> int: ...

    @property
    def NVML_GPM_METRICS_GET_VERSION(self) -> int: ...

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int: ...

    def nvmlDeviceGetHandleByIndex(self, index: int) -> DeviceHandle: ...

    def nvmlDeviceGetName(self, handle: DeviceHandle) -> str | bytes: ...

    def nvmlDeviceGetUUID(self, handle: DeviceHandle) -> str | bytes: ...

    def nvmlDeviceGetMemoryInfo(self, handle: DeviceHandle) -> MemoryInfo: ...

    def nvmlDeviceGetClockInfo(self, handle: DeviceHandle, which: int) -> int: ...

    def nvmlDeviceGetPowerUsage(self, handle: DeviceHandle) -> int: ...

    def nvmlDeviceGetUtilizationRates(self, handle: DeviceHandle) -> UtilizationRates: ...

    def nvmlGpmQueryDeviceSupport(self, handle: DeviceHandle) -> GpmSupport: ...

    def nvmlGpmSampleAlloc(self) -> GpmSample: ...

    def nvmlGpmSampleFree(self, sample: GpmSample) -> None: ...

    def nvmlGpmSampleGet(self, handle: DeviceHandle, sample: GpmSample) -> object: ...

    def c_nvmlGpmMetricsGet_t(self) -> GpmMetricsRequest: ...

    def nvmlGpmMetricsGet(self, request: GpmMetricsRequest) -> object: ...

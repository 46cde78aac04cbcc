"""Reading a GPU's counters through NVML: the interval metrics of GPM (GpmReader) and the
counters read at an instant (InstantReader), each for one device handle.

`nvml` is the nvidia-ml-py module (`pynvml`) or a test double exposing the same names
(tests/fake_nvml.py): the functions, NVMLError with its `.value` code, the GPM structures.
A read that fails gives NaN for its counters (the writer skips them); what failed on the
first read is why the counter is missing, said in the summary."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence

from collector.gpu_metrics import catalog
from collector.gpu_metrics.catalog import Counter
from collector.gpu_metrics.nvml_api import DeviceHandle, Nvml

NVML_SUCCESS = 0
NAN = math.nan

# nvmlReturn_t codes (nvml.h) that say why a source or a counter was refused.
_WORDS = {
    2: "invalid argument",
    3: "not supported on this GPU",
    4: "no permission (profiling counters need root, or the driver's "
    "NVreg_RestrictProfilingToAdminUsers=0)",
    9: "no NVIDIA driver loaded",
    12: "no NVML library (libnvidia-ml.so; no NVIDIA driver installed)",
    13: "the driver's NVML lacks this function (driver too old)",
    15: "the GPU is lost",
    18: "NVML and the kernel driver differ in version",
    19: "counters in use by another client (DCGM or another profiler; pause it)",
    21: "no data yet",
    25: "the driver's NVML has another structure version (nvidia-ml-py and driver differ)",
    28: "GPU not found",
}


def error_code(exc: BaseException) -> int | None:
    """NVML's return code in an NVMLError (its `.value`), None for other errors."""
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def error_words(exc_or_code: BaseException | int) -> str:
    """What an NVML failure means for the user, in words."""
    code = exc_or_code if isinstance(exc_or_code, int) else error_code(exc_or_code)
    if code is None:
        return str(exc_or_code) or type(exc_or_code).__name__
    return _WORDS.get(code, f"NVML error {code}")


class GpmReader:
    """GPM metrics of one device: each read() takes a GPM sample and returns the metrics
    over the interval since the previous one (the first sample is taken at construction,
    so a refusal — no permission, counters in use, unsupported GPU — raises here)."""

    def __init__(self, nvml: Nvml, handle: DeviceHandle, counters: Sequence[Counter]) -> None:
        self.nvml = nvml
        self.handle = handle
        self.counters = tuple(counters)
        # Their GPM metric ids, checked before NVML is asked for anything (an instant
        # counter has none: it is InstantReader's).
        self._metric_ids = [c.gpm_metric for c in self.counters if c.gpm_metric is not None]
        if len(self._metric_ids) != len(self.counters):
            raise ValueError("GpmReader reads GPM counters only (catalog.GPM_COUNTERS)")
        self.failures: dict[str, str] = {}  # counter name -> why it had no value at first
        support = nvml.nvmlGpmQueryDeviceSupport(handle)
        if not support.isSupportedDevice:
            raise nvml.NVMLError(3)
        self._previous = nvml.nvmlGpmSampleAlloc()
        self._current = nvml.nvmlGpmSampleAlloc()
        try:
            nvml.nvmlGpmSampleGet(handle, self._previous)
        except BaseException:
            self.close()
            raise

    def read(self) -> list[float]:
        """The counters over the interval from the previous read (or construction) to now,
        in catalog order; raises the NVMLError of the sample itself."""
        nvml = self.nvml
        nvml.nvmlGpmSampleGet(self.handle, self._current)
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(self.counters)
        request.sample1 = self._previous
        request.sample2 = self._current
        for i, metric_id in enumerate(self._metric_ids):
            request.metrics[i].metricId = metric_id
        # The current sample starts the next interval, whatever the metrics say.
        self._previous, self._current = self._current, self._previous
        nvml.nvmlGpmMetricsGet(request)
        values = []
        for i, counter in enumerate(self.counters):
            metric = request.metrics[i]
            if metric.nvmlReturn != NVML_SUCCESS:
                self.failures.setdefault(counter.name, error_words(int(metric.nvmlReturn)))
                values.append(NAN)
            else:
                values.append(float(metric.value))
        return values

    def close(self) -> None:
        for sample in (self._previous, self._current):
            with contextlib.suppress(Exception):
                self.nvml.nvmlGpmSampleFree(sample)


class InstantReader:
    """Counters NVML reads at an instant: device memory used, SM and memory clocks, power,
    and (where GPM does not run) NVML's own utilisation.  A counter whose first read
    fails with 'not supported' is read no more."""

    def __init__(self, nvml: Nvml, handle: DeviceHandle, utilization: bool) -> None:
        self.nvml = nvml
        self.handle = handle
        self.counters = catalog.DEVICE_COUNTERS + (
            catalog.UTILIZATION_COUNTERS if utilization else ()
        )
        self.failures: dict[str, str] = {}
        self._dropped: set[str] = set()

    def read(self) -> list[float]:
        nvml, handle = self.nvml, self.handle
        values: dict[str, float] = {}
        self._read(
            values, (catalog.MEMORY_USED,), lambda: (nvml.nvmlDeviceGetMemoryInfo(handle).used,)
        )
        self._read(
            values,
            (catalog.SM_CLOCK,),
            lambda: (nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),),
        )
        self._read(
            values,
            (catalog.MEMORY_CLOCK,),
            lambda: (nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),),
        )
        # milliwatts
        self._read(
            values, (catalog.POWER,), lambda: (nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,)
        )
        if len(self.counters) > len(catalog.DEVICE_COUNTERS):

            def utilization() -> tuple[float, float]:
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                return rates.gpu, rates.memory

            self._read(values, (catalog.GPU_UTILIZATION, catalog.MEMORY_UTILIZATION), utilization)
        return [values.get(c.name, NAN) for c in self.counters]

    def _read(
        self,
        values: dict[str, float],
        names: tuple[str, ...],
        read: Callable[[], tuple[float, ...]],
    ) -> None:
        if names[0] in self._dropped:
            return
        try:
            got = read()
        except Exception as exc:  # an NVMLError (or the double's): NaN for this read
            for name in names:
                self.failures.setdefault(name, error_words(exc))
            if error_code(exc) == 3:
                self._dropped.update(names)
            return
        for name, value in zip(names, got, strict=True):
            values[name] = float(value)

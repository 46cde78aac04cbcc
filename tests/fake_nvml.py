"""A test double of nvidia-ml-py's `pynvml` module: the names xpu-perf's GPU counter
source calls, answering from a scripted GPU instead of a driver.

Each FakeGpu has phases (start_ns, end_ns, {GPM metric id: value}) on a clock the test
drives; a GPM metric between two samples is the time-weighted mean of the phases over the
samples' interval, as the hardware's counters would give it, so the source's pairing of
samples and the time it files each value under are what a test checks.  Failures are
scripted by NVML return code: at init, at the first GPM sample (no permission, counters in
use), per metric (unsupported), per instant counter."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_IN_USE = 19
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_GPM_METRICS_GET_VERSION = 1


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


Phase = tuple[int, int, dict[int, float]]


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-11111111-2222-3333-4444-555555555555"
    gpm_supported: bool = True
    gpm_error: int | None = None  # raised by every nvmlGpmSampleGet
    gpm_error_after: int | None = None  # ... from this sample on (0-based)
    unsupported_metrics: frozenset[int] = frozenset()
    phases: list[Phase] = field(default_factory=list)
    memory_used: Callable[[int], int] = lambda ns: 1 << 30
    power_error: int | None = None
    samples_taken: int = 0

    def mean(self, metric: int, start: int, end: int) -> float:
        """The time-weighted mean of `metric` over [start, end] (0 outside phases)."""
        area = 0.0
        for a, b, values in self.phases:
            overlap = min(b, end) - max(a, start)
            if overlap > 0:
                area += values.get(metric, 0.0) * overlap
        return area / (end - start) if end > start else 0.0


class FakeNvml:
    """The module: functions and structures by pynvml's names."""

    NVMLError = NVMLError
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_GPM_METRICS_GET_VERSION = NVML_GPM_METRICS_GET_VERSION

    def __init__(
        self, gpus: list[FakeGpu], clock: Callable[[], int], init_error: int | None = None
    ) -> None:
        self.gpus = gpus
        self.clock = clock
        self.init_error = init_error
        self.initialised = False
        self.shut_down = False
        self.samples_freed = 0

    # lifecycle and devices
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self.gpus[index]

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        return gpu.name

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    # instant counters
    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> SimpleNamespace:
        used = gpu.memory_used(self.clock())
        return SimpleNamespace(total=80 << 30, used=used, free=(80 << 30) - used)

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, which: int) -> int:
        return 1980 if which == NVML_CLOCK_SM else 2619

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        if gpu.power_error is not None:
            raise NVMLError(gpu.power_error)
        return 312_500  # mW

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(gpu=97, memory=41)

    # GPM
    def nvmlGpmQueryDeviceSupport(self, gpu: FakeGpu) -> SimpleNamespace:
        return SimpleNamespace(version=1, isSupportedDevice=int(gpu.gpm_supported))

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:
        return SimpleNamespace(gpu=None, ts=None)

    def nvmlGpmSampleFree(self, sample: SimpleNamespace) -> None:
        self.samples_freed += 1

    def nvmlGpmSampleGet(self, gpu: FakeGpu, sample: SimpleNamespace) -> SimpleNamespace:
        index = gpu.samples_taken
        gpu.samples_taken += 1
        failing = gpu.gpm_error is not None and (
            gpu.gpm_error_after is None or index >= gpu.gpm_error_after
        )
        if failing:
            raise NVMLError(gpu.gpm_error)  # type: ignore[arg-type]
        sample.gpu, sample.ts = gpu, self.clock()
        return sample

    @staticmethod
    def c_nvmlGpmMetricsGet_t() -> SimpleNamespace:
        return SimpleNamespace(
            version=0,
            numMetrics=0,
            sample1=None,
            sample2=None,
            metrics=[SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(210)],
        )

    def nvmlGpmMetricsGet(self, request: SimpleNamespace) -> SimpleNamespace:
        s1, s2 = request.sample1, request.sample2
        assert request.version == NVML_GPM_METRICS_GET_VERSION
        assert s1.gpu is s2.gpu and s1.ts <= s2.ts, "samples of one GPU, in time order"
        gpu: FakeGpu = s1.gpu
        for metric in request.metrics[: request.numMetrics]:
            if metric.metricId in gpu.unsupported_metrics:
                metric.nvmlReturn, metric.value = NVML_ERROR_NOT_SUPPORTED, 0.0
            else:
                metric.nvmlReturn = NVML_SUCCESS
                metric.value = gpu.mean(metric.metricId, s1.ts, s2.ts)
        return request


class ManualClock:
    """A CLOCK_MONOTONIC the test moves."""

    def __init__(self, start: int = 10_000_000_000) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now

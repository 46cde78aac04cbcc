"""The GPU counters a recording can hold: their track names, units and where each comes
from.  Track names are the SQL-facing contract (docs/ARCHITECTURE.md): the counter track
of that name under the `GPU D (<name>)` track.

GPM (NVML GPU Performance Monitoring, Hopper and later) metrics are averages over the
interval between two samples; the others are read at one instant.  NVML's GPM has no SM
issue or DRAM read/write split: those come from CUPTI PM sampling (`PM_COUNTERS`), which the
injection library runs inside the program; its metric names are listed here only and handed
to the library in XPU_PERF_PM_METRICS."""

from __future__ import annotations

from dataclasses import dataclass

# NVML's nvmlGpmMetricId_t values (nvml.h; pynvml NVML_GPM_METRIC_*), kept here so the
# catalog reads without the bindings installed.
GPM_GRAPHICS_UTIL = 1
GPM_SM_UTIL = 2
GPM_SM_OCCUPANCY = 3
GPM_ANY_TENSOR_UTIL = 5
GPM_DRAM_BW_UTIL = 10
GPM_FP32_UTIL = 12
GPM_FP16_UTIL = 13
GPM_PCIE_TX_PER_SEC = 20
GPM_PCIE_RX_PER_SEC = 21
GPM_NVLINK_TOTAL_RX_PER_SEC = 60
GPM_NVLINK_TOTAL_TX_PER_SEC = 61


@dataclass(frozen=True)
class Counter:
    """One counter track: `name` (the track's name), `unit`, and its GPM metric id (None
    for the counters NVML reads at an instant)."""

    name: str
    unit: str
    gpm_metric: int | None = None


# Track names (SQL and report read these).
GPU_ACTIVE = "GPU active %"
SM_ACTIVE = "SM active %"
SM_OCCUPANCY = "SM occupancy %"  # warps in flight over the SMs' warp slots
TENSOR_ACTIVE = "tensor active %"
DRAM_BANDWIDTH = "DRAM bandwidth %"
FP32_ACTIVE = "FP32 active %"
FP16_ACTIVE = "FP16 active %"
PCIE_RX = "PCIe rx MiB/s"
PCIE_TX = "PCIe tx MiB/s"
NVLINK_RX = "NVLink rx MiB/s"
NVLINK_TX = "NVLink tx MiB/s"
GPU_UTILIZATION = "GPU utilization %"  # NVML: time a kernel ran (no SM detail)
MEMORY_UTILIZATION = "memory controller %"  # NVML: time the memory was read or written
MEMORY_USED = "device memory used"  # NVML: all processes' and the driver's
MEMORY_IN_USE = "device memory in use"  # CUPTI: the recorded processes' allocations
SM_CLOCK = "SM clock MHz"
# Only from CUPTI PM sampling.
SM_ISSUE = "SM issue %"  # cycles a warp scheduler issued an instruction
DRAM_READ = "DRAM read MiB/s"
DRAM_WRITE = "DRAM write MiB/s"
GPC_CLOCK = "GPC clock MHz"  # the SMs' clock as the counters saw it
MEMORY_CLOCK = "memory clock MHz"
POWER = "power W"

GPM_COUNTERS = (
    Counter(GPU_ACTIVE, "%", GPM_GRAPHICS_UTIL),
    Counter(SM_ACTIVE, "%", GPM_SM_UTIL),
    Counter(SM_OCCUPANCY, "%", GPM_SM_OCCUPANCY),
    Counter(TENSOR_ACTIVE, "%", GPM_ANY_TENSOR_UTIL),
    Counter(DRAM_BANDWIDTH, "%", GPM_DRAM_BW_UTIL),
    Counter(FP32_ACTIVE, "%", GPM_FP32_UTIL),
    Counter(FP16_ACTIVE, "%", GPM_FP16_UTIL),
    Counter(PCIE_RX, "MiB/s", GPM_PCIE_RX_PER_SEC),
    Counter(PCIE_TX, "MiB/s", GPM_PCIE_TX_PER_SEC),
    Counter(NVLINK_RX, "MiB/s", GPM_NVLINK_TOTAL_RX_PER_SEC),
    Counter(NVLINK_TX, "MiB/s", GPM_NVLINK_TOTAL_TX_PER_SEC),
)
# Read at an instant with every source.
DEVICE_COUNTERS = (
    Counter(MEMORY_USED, "bytes"),
    Counter(SM_CLOCK, "MHz"),
    Counter(MEMORY_CLOCK, "MHz"),
    Counter(POWER, "W"),
)
# Only where GPM does not run: NVML's coarse utilisation (its own sampling period, 1/6 s
# to 1 s, ending at the read).
UTILIZATION_COUNTERS = (
    Counter(GPU_UTILIZATION, "%"),
    Counter(MEMORY_UTILIZATION, "%"),
)


@dataclass(frozen=True)
class PmCounter:
    """A CUPTI PM sampling metric (the profiler host's name) and its counter track: the
    metric's GPU value times `scale` is the track's value."""

    metric: str
    name: str
    unit: str
    scale: float = 1.0


MIB = 1.0 / (1 << 20)
# Checked against CUPTI 13.0's GH100 tables (cuptiProfilerHostConfigAddMetrics for
# CUPTI_PROFILER_TYPE_PM_SAMPLING): all names accepted, one pass when added in one call (added
# one call each, the same list needs 17).  A name the device's tables lack is dropped by the
# library and named in gpu_metrics_missing; the order is the priority where the list would
# not fit one pass.  Same quantity, same track as GPM: xpu_kernel_metrics reads either.
PM_COUNTERS = (
    PmCounter("sm__cycles_active.avg.pct_of_peak_sustained_elapsed", SM_ACTIVE, "%"),
    # Not the _realtime variant: sampled on the H100, its ratio to the SM's elapsed cycles
    # read 1,000-1,600x too high (a bf16 GEMM at 146,351%).
    PmCounter(
        "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", TENSOR_ACTIVE, "%"
    ),
    PmCounter("dram__throughput.avg.pct_of_peak_sustained_elapsed", DRAM_BANDWIDTH, "%"),
    PmCounter("dram__bytes_read.sum.per_second", DRAM_READ, "MiB/s", MIB),
    PmCounter("dram__bytes_write.sum.per_second", DRAM_WRITE, "MiB/s", MIB),
    PmCounter("smsp__issue_active.avg.pct_of_peak_sustained_elapsed", SM_ISSUE, "%"),
    PmCounter("sm__warps_active.avg.pct_of_peak_sustained_elapsed", SM_OCCUPANCY, "%"),
    PmCounter("gr__cycles_active.avg.pct_of_peak_sustained_elapsed", GPU_ACTIVE, "%"),
    PmCounter("pcie__read_bytes.sum.per_second", PCIE_RX, "MiB/s", MIB),
    PmCounter("pcie__write_bytes.sum.per_second", PCIE_TX, "MiB/s", MIB),
    PmCounter("nvlrx__bytes.sum.per_second", NVLINK_RX, "MiB/s", MIB),
    PmCounter("nvltx__bytes.sum.per_second", NVLINK_TX, "MiB/s", MIB),
    PmCounter("gpc__cycles_elapsed.avg.per_second", GPC_CLOCK, "MHz", 1e-6),
)

# Counters whose value covers an interval (GPM's, PM sampling's), not an instant: what
# xpu_kernel_metrics averages per kernel.  One source of them per GPU (their times form the
# device's grid): where PM sampling runs, no GPM track is written.
INTERVAL_COUNTER_NAMES = tuple(
    dict.fromkeys([*(c.name for c in GPM_COUNTERS), *(c.name for c in PM_COUNTERS)])
)

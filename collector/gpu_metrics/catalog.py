"""The GPU counters a recording can hold: their track names, units and where each comes
from.  Track names are the SQL-facing contract (docs/ARCHITECTURE.md): the counter track
of that name under the `GPU D (<name>)` track.

GPM (NVML GPU Performance Monitoring, Hopper and later) metrics are averages over the
interval between two samples; the others are read at one instant.  NVML's GPM has no SM
issue or DRAM read/write split: those need CUPTI PM sampling (not built)."""

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

"""Which counter source runs on each GPU, by what this machine permits, best first:

1. CUPTI PM sampling (SM active, issue, warps, tensor, DRAM read/write, PCIe, NVLink; needs
   profiling permission), run by the injection library inside the program: whether it ran
   on a GPU is known only once its streams are read (collector/sources/cupti_pm_sampling.py),
   so NVML below is read as well, and where PM sampling ran its tracks replace NVML's of the
   same quantity (collector/recording/gpu_metrics.py);
2. NVML GPM (Hopper and later: SM active, occupancy, tensor active, DRAM bandwidth, PCIe,
   NVLink), refused on older GPUs, where the driver keeps it from this user, or while
   another client (DCGM) holds the counters (on the lent H100, driver 580, it answered an
   unprivileged user as it answers root: docs/benchmarks.md);
3. NVML's utilisation, memory, clocks and power, which any user may read.

A refusal never fails the recording: it is a reason in the summary and the metadata.
Devices are numbered as CUDA numbers them in the target (what CUPTI's device ids and the
`GPU D` tracks are): the entries of CUDA_VISIBLE_DEVICES in order (an index, a `GPU-` UUID
or a prefix of one; CUDA stops at the first entry it cannot read, so do we), else all
of NVML's devices.  NVML orders devices by PCI bus id; CUDA does too on machines of one
GPU model (its default FASTEST_FIRST falls back to the bus order), which is what this
mapping assumes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from collector.gpu_metrics import catalog
from collector.gpu_metrics.nvml_api import DeviceHandle, Nvml
from collector.gpu_metrics.nvml_readers import GpmReader, InstantReader, error_words

PM_SAMPLING = "cupti_pm_sampling"
GPM = "nvml_gpm"
NVML = "nvml"
NONE = "none"
# Diagnostic switch: XPU_PERF_GPM=off keeps NVML GPM closed (whether GPM holding the
# counters is what refuses PM sampling on a machine: bench/pm_sampling_gpu.sh).
GPM_SWITCH = "XPU_PERF_GPM"


@dataclass
class DeviceSource:
    """One GPU's readers: GPM (None where refused) and the instant counters."""

    device: int  # CUDA's number for it in the target
    name: str
    source: str  # GPM or NVML
    gpm: GpmReader | None
    instant: InstantReader


@dataclass
class Choice:
    """What runs: a DeviceSource per GPU, and why better sources were refused."""

    devices: list[DeviceSource] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    nvml: Nvml | None = None

    @property
    def source(self) -> str:
        """The source that ran, one name; several where GPUs differ."""
        return source_names({d.source for d in self.devices})

    def close(self) -> None:
        for device in self.devices:
            if device.gpm is not None:
                device.gpm.close()
        if self.nvml is not None:
            with contextlib.suppress(Exception):
                self.nvml.nvmlShutdown()
            self.nvml = None


def source_names(sources: set[str]) -> str:
    """Sources that ran, best first, as one name (`none` for no source)."""
    names = sorted(sources, key=[PM_SAMPLING, GPM, NVML].index)
    return ",".join(names) if names else NONE


def load_pynvml() -> Nvml:
    """nvidia-ml-py's module (an ImportError where it is not installed)."""
    import pynvml  # (no types of its own: nvml_api.Nvml declares what is called)

    return pynvml


def choose(
    visible_devices: str | None,
    load: Callable[[], Nvml] = load_pynvml,
) -> Choice:
    """Open NVML and a source per visible GPU.  `visible_devices`: the target's
    CUDA_VISIBLE_DEVICES (None: unset); `load`: the NVML bindings (a test double)."""
    choice = Choice()
    try:
        nvml = load()
    except ImportError:
        choice.refused.append(f"{NVML}: nvidia-ml-py is not installed (pip install nvidia-ml-py)")
        return choice
    try:
        nvml.nvmlInit()
    except Exception as exc:  # an NVMLError, or a broken library: no source, said
        choice.refused.append(f"{NVML}: {error_words(exc)}")
        return choice
    choice.nvml = nvml
    try:
        handles = visible_handles(nvml, visible_devices, choice.refused)
        for device, handle in enumerate(handles):
            choice.devices.append(device_source(nvml, device, handle, choice.refused))
    except Exception as exc:  # NVML failed while listing the GPUs: no source, said
        choice.refused.append(f"{NVML}: {error_words(exc)}")
        choice.close()
        choice.devices = []
    return choice


def device_source(
    nvml: Nvml, device: int, handle: DeviceHandle, refused: list[str]
) -> DeviceSource:
    """GPM where this GPU and this user may have it, else the NVML counters alone."""
    name = _text(nvml.nvmlDeviceGetName(handle))
    reader: GpmReader | None = None
    if os.environ.get(GPM_SWITCH) == "off":
        refused.append(f"{GPM} on GPU {device}: off ({GPM_SWITCH}=off)")
    else:
        try:
            reader = GpmReader(nvml, handle, catalog.GPM_COUNTERS)
        except Exception as exc:  # the NVMLError's code is the reason for the summary
            refused.append(f"{GPM} on GPU {device}: {error_words(exc)}")
    instant = InstantReader(nvml, handle, utilization=reader is None)
    return DeviceSource(device, name, GPM if reader else NVML, reader, instant)


def visible_handles(nvml: Nvml, visible: str | None, refused: list[str]) -> list[DeviceHandle]:
    """NVML handles of the target's CUDA devices, in CUDA's order."""
    count = nvml.nvmlDeviceGetCount()
    if visible is None:
        return [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    uuids: list[str] | None = None
    handles = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isdigit() and int(entry) < count:
            handles.append(nvml.nvmlDeviceGetHandleByIndex(int(entry)))
            continue
        if entry.startswith("GPU-"):
            if uuids is None:
                uuids = [
                    _text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i)))
                    for i in range(count)
                ]
            matches = [i for i, u in enumerate(uuids) if u.startswith(entry)]
            if len(matches) == 1:
                handles.append(nvml.nvmlDeviceGetHandleByIndex(matches[0]))
                continue
        if entry.startswith("MIG-"):
            refused.append(f"{NVML}: MIG instance {entry}: counters of MIG instances not read")
        break  # CUDA ignores this entry and every one after it
    return handles


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value

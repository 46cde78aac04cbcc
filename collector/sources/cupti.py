"""CUPTI stream source: the injection library's per-process streams → collector.model events.

The facade over one-job modules; per process it hands out:
- GPU ops (kernels, copies, sets, syncs) on their device/stream tracks (cupti_gpu_ops.py);
- CUDA API calls as `cuda_api` slices on the calling thread, each with its launch stack
  (cupti_api.py);
- a flow from every API call to each GPU op it caused (cupti_flows.py; a graph launch → every
  kernel of it); GPU records carry the outermost API's correlation id, or a nested driver
  call's, which the stream's API_ALIAS rows map back to the runtime call;
- NVTX ranges/markers on the thread that made them (cupti_nvtx.py);
- device memory: each allocation's and release's size and address on its API call, and a
  `device memory in use` counter track per device over all processes (cupti_memory.py);
all as one SliceBatch in numpy columns (cupti_rows.py), and here: the process and its threads,
its GPU devices, its capture windows, and counts (records per kind, CUPTI and transport drops,
GPU ops without an API call, launches without a stack) in `counts`, for the trace metadata
and the end-of-record summary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from collector import model
from collector.sources.cupti_api import api_rows
from collector.sources.cupti_flows import link
from collector.sources.cupti_gpu_ops import gpu_op_rows
from collector.sources.cupti_memory import DeviceMemory
from collector.sources.cupti_nvtx import nvtx_rows
from collector.sources.cupti_pm_sampling import PmSampling
from collector.sources.cupti_program import program_client_line
from collector.sources.cupti_stream import (
    Stream,
    count_unwritten,
    process_events,
    read_streams,
)
from collector.sources.cupti_windows import outside_windows
from collector.symbolize import Symbolizer

STREAM_GLOB = "cupti-*.xpstream"

REPORTED_COUNTS = (
    "streams",
    "records_kernel",
    "records_memcpy",
    "records_memset",
    "records_sync",
    "records_api",
    "records_marker",
    "cupti_dropped_records",
    "transport_dropped_rows",
    "gpu_ops",
    "gpu_ops_with_flow",
    "gpu_ops_without_api",
    "gpu_ops_matched_via_alias",
    "launches",
    "launches_without_stack",
    "launches_with_user_frame",
    "stacks_unique",
    "stack_table_full",
    "python_guard_failures",
    "streams_truncated",
    "streams_without_counters",
    "unwritten_gpu_records",  # rows the library could not write (a full disk): its UNWRITTEN block
    "streams_counters_unwritten",  # final flush ran, its counters could not be written
    "streams_rejected",  # files planted where the streams go (a FIFO, a link): not read
    "streams_python_unsupported",
    "python_unsupported_minor",  # CPython 3.x without Python frames (0: none)
    "cupti_delivered_kernel",
    "windows",  # capture windows recorded (record --capture-range / --delay), all processes
    "windows_ignored",  # cudaProfilerStart calls past --capture-range-end's last window
    "nvtx_ranges_untracked",  # NVTX ranges --capture-range nvtx:NAME could not follow
    "records_memory",  # device memory allocations and releases (CUPTI MEMORY2)
    "memory_frees_unmatched",  # releases of memory not seen allocated (before a window)
    "memory_records_without_api",  # allocations whose API call was not recorded
    # The program's own CUPTI client (torch.profiler) while we held CUPTI (cupti_program.py).
    "program_cupti_processes",
    "program_cupti_calls",
    "program_cupti_refused",
    "program_records_forwarded",
    "program_callbacks_forwarded",
    "program_records_not_forwarded",
    "gpu_ops_outside_window",  # kept on for the program's profiler outside our windows
)
# The library's final counters (COUNTER rows) summed over the processes.
LIBRARY_COUNTS = (
    "cupti_dropped_records",
    "transport_dropped_rows",
    "stack_table_full",
    "python_guard_failures",
    "unwind_fp_fallbacks",
    "unwind_cfi_misses",
    "api_alias_records",
    "transport_bytes",
    "transport_reopened",  # the stream's descriptor was closed or replaced by the target
    "transport_lost_bytes",  # bytes that could not be written (the file could not reopen)
    "windows_ignored",
    "nvtx_ranges_untracked",
    "program_records_forwarded",
    "program_callbacks_forwarded",
    "program_records_not_forwarded",
    "program_records_clock_mapped",  # forwarded in the program's own clock
    "program_buffers_kept",  # ours kept alive: a forwarded record pointed into one
    "program_cupti_rows_full",
    "records_program_only",  # kinds only the program's profiler had on
    "cupti_subscribe_refused",  # another CUPTI client subscribed before us: no API calls
)


def stream_paths(directory: Path, glob: str = STREAM_GLOB) -> list[Path]:
    """The stream files of a run's directory: its own, then those of processes that became
    another user, in uid-N/ (cupti_inject/src/process_hooks.c); a process's images in exec
    order (PID, PID.1, PID.2...), so that the names of the last image describe its tracks."""
    return sorted(directory.glob(glob), key=_image_order) + sorted(
        directory.glob(f"uid-*/{glob}"), key=_image_order
    )


def _image_order(path: Path) -> tuple[int, int, str]:
    """(pid, image number) of <prefix>-PID[.N].xpstream; unparsable names last, by name."""
    parts = path.name.split("-", 1)[-1].split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 2 else 0, ""
    except ValueError:
        return 1 << 31, 0, path.name


def stream_pid(path: Path) -> int:
    """The pid in a stream's name (<prefix>-PID[.N].xpstream), readable or not."""
    return int(path.name.split("-", 1)[1].split(".", 1)[0])


class CuptiSource:
    """Reads every stream in a directory; iterate `events()` once, then read `counts`."""

    def __init__(self, directory: Path, symbolizer: Symbolizer | None = None) -> None:
        self.directory = directory
        self.symbolizer = symbolizer or Symbolizer()
        # Every reported counter is present, zero included (SQL reads them by name).
        self.counts: Counter[str] = Counter({key: 0 for key in REPORTED_COUNTS})
        self._devices_seen: set[int] = set()
        self.windows: list[model.CaptureWindow] = []  # in stream order
        # 'pid N (name)' of each process whose stream has no final counters (killed).
        self.without_final_data: list[str] = []
        self._memory = DeviceMemory()
        # 'pid N (name): <caller>: <calls>; <what it got>' of each process whose program
        # used CUPTI while we held it (its own profiler).
        self.program_profilers: list[str] = []
        # CUPTI PM sampling's devices and samples (the GPU counter source writes them).
        self.pm_sampling = PmSampling()

    def events(self) -> Iterator[model.Event]:
        for stream in read_streams(stream_paths(self.directory), self.counts):
            yield from self._process(stream)
        # Over every process: several may share a device.
        yield from self._memory.series()

    def _process(self, stream: Stream) -> Iterator[model.Event]:
        """One process: its process/thread events, new devices, then its slices as one
        SliceBatch and its NVTX marks.  (The order of the counts' first increments is the
        order of the trace's metadata: keep it.)"""
        counts = self.counts
        # First: a stream the full disk cut may hold nothing more.  final: its final flush ran
        # (the process was not killed), whatever it could not write.
        final = count_unwritten(stream, counts)
        info = process_events(stream, counts)
        if info is None:
            # Not even its first write: ended (killed) within its first flush period.
            counts["streams_without_counters"] += 1
            counts["streams_counters_unwritten"] += int(final)
            self.without_final_data.append(f"pid {stream_pid(stream.path)} (no data)")
            return
        pid, events = info
        yield from events
        yield from self._new_devices(stream)
        strings = _strings(stream)
        known = isinstance(events[0], model.ProcessInfo)
        name = events[0].name if isinstance(events[0], model.ProcessInfo) else "?"
        counters = self._count_library_counters(stream)
        if counters is None:
            counts["streams_counters_unwritten"] += int(final)
        if counters is None and known:
            self.without_final_data.append(f"pid {pid} ({name})")
        program = program_client_line(f"pid {pid} ({name})", stream, counters or {}, counts)
        if program is not None:
            self.program_profilers.append(program)
        self._keep_windows(stream, pid)
        self.pm_sampling.add(stream)
        cpu = api_rows(stream, strings, self.symbolizer, counts)
        self._memory.add_process(stream, cpu, counts)
        gpu = gpu_op_rows(stream, strings, counts)
        outside = outside_windows(stream, gpu)
        if outside.any():
            gpu.keep(~outside)
            counts["gpu_ops_outside_window"] += int(outside.sum())
        flow_from, flow_to = link(stream, gpu, counts)
        instants = nvtx_rows(stream, strings, pid, cpu, counts)  # after link: API rows first
        if self.pm_sampling.wanted and gpu.rows:
            ts = gpu.column("ts")
            work = gpu.column("category") != gpu.categories.index_of([model.CAT_SYNC])[0]
            self.pm_sampling.add_gpu_work(
                gpu.column("device")[work], ts[work], (ts + gpu.column("dur"))[work]
            )
        counts["gpu_ops"] += gpu.rows
        counts["gpu_ops_with_flow"] += len(flow_to)
        yield model.SliceBatch(pid, cpu.columns(), gpu.columns(), flow_from, flow_to)
        yield from instants

    def _new_devices(self, stream: Stream) -> Iterator[model.GpuDevice]:
        """The stream's GPU devices not yet handed out by an earlier process."""
        devices = stream.table("DEVICE")
        for dev, name in zip(devices["device"], devices["name"], strict=True):
            if dev not in self._devices_seen:
                self._devices_seen.add(dev)
                yield model.GpuDevice(dev, name)

    def _count_library_counters(self, stream: Stream) -> dict[str, int] | None:
        """The library's final counters (the last value of each name), or None: the process
        died before writing them."""
        counts = self.counts
        counters = stream.table("COUNTER")
        if not counters.rows:
            counts["streams_without_counters"] += 1  # killed before its final flush
            return None
        last = dict(zip(counters["name"], counters["value"], strict=True))
        counts["cupti_delivered_kernel"] += last.get("records_kernel", 0)
        for key in LIBRARY_COUNTS:
            counts[key] += last.get(key, 0)
        minor = last.get("python_unsupported_minor", 0)
        if minor:  # Python frames wanted, but not this CPython's frame layout
            counts["streams_python_unsupported"] += 1
            counts["python_unsupported_minor"] = max(counts["python_unsupported_minor"], minor)
        return last

    def _keep_windows(self, stream: Stream, pid: int) -> None:
        """The process's capture windows (WINDOW rows), kept for `windows`."""
        windows = stream.table("WINDOW")
        self.counts["windows"] += windows.rows
        for start, end, reason, end_reason in zip(
            windows["start"], windows["end"], windows["reason"], windows["end_reason"], strict=True
        ):
            self.windows.append(model.CaptureWindow(pid, start, end, reason, end_reason))


def _strings(stream: Stream) -> dict[int, str]:
    """The stream's string table (kernel names, NVTX names and domains, frame names)."""
    t = stream.table("STRING")
    return dict(zip(t["string_id"], t["text"], strict=True)) if t.rows else {}

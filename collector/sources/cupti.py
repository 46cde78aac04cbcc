"""CUPTI stream source: the injection library's per-process streams → collector.model events.

- GPU ops (kernels, copies, sets, syncs) on their device/stream tracks;
- CUDA API calls as `cuda_api` slices on the calling thread, each with its launch stack;
- a flow from every API call to each GPU op it caused (a graph launch → every kernel of it);
  GPU records carry the outermost API's correlation id, or a nested driver call's, which the
  stream's API_ALIAS rows map back to the runtime call;
- NVTX ranges/markers on the thread that made them;
- counts (records per kind, CUPTI and transport drops, GPU ops without an API call, launches
  without a stack) in `counts`, for the trace metadata and the end-of-record summary.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

from collector import model
from collector.sources.cupti_launch_stacks import (
    Module,
    ModuleMap,
    PythonFrame,
    launch_stack,
    merge_python,
    symbolize_native,
)
from collector.sources.cupti_stream import Stream, StreamError, read_stream
from collector.symbolize import Symbolizer, demangle

STREAM_GLOB = "cupti-*.xpstream"
_MEMCPY_KINDS = {
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
_SYNC_KINDS = {
    1: "cudaEventSynchronize",
    2: "cudaStreamWaitEvent",
    3: "cudaStreamSynchronize",
    4: "cudaDeviceSynchronize",
}
_MARKER_INSTANT, _MARKER_START, _MARKER_END = 1, 2, 4
_LAUNCH_PREFIXES = (
    "cudaLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cuLaunchKernel",
    "cuLaunchCooperativeKernel",
    "cuGraphLaunch",
    "cuLaunchGrid",
)
_NO_ID = 0xFFFFFFFF  # the library's NO_ID: a sync op's stream or device not known
# Frames of these libraries do not count as a launch site (the stack criterion).
CUDA_LIBRARY_MARKERS = ("libcuda.so", "libcupti.so", "libcudart.so", "libxpu_perf_cupti.so")


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
    "streams_python_unsupported",
    "python_unsupported_minor",  # CPython 3.x without Python frames (0: none)
    "cupti_delivered_kernel",
)


def stream_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob(STREAM_GLOB))


def is_launch(api_name: str) -> bool:
    return api_name.startswith(_LAUNCH_PREFIXES)


def has_user_frame(stack: model.Stack | None) -> bool:
    """True when a stack has a frame outside libcuda/libcupti/libcudart (and this library)."""
    if stack is None:
        return False
    return any(
        not any(m in os.path.basename(f.module) for m in CUDA_LIBRARY_MARKERS) for f in stack.frames
    )


class CuptiSource:
    """Reads every stream in a directory; iterate `events()` once, then read `counts`."""

    def __init__(self, directory: Path, symbolizer: Symbolizer | None = None) -> None:
        self.directory = directory
        self.symbolizer = symbolizer or Symbolizer()
        # Every reported counter is present, zero included (SQL reads them by name).
        self.counts: Counter[str] = Counter({key: 0 for key in REPORTED_COUNTS})
        self._devices_seen: set[int] = set()

    def events(self) -> Iterator[model.Event]:
        for path in stream_paths(self.directory):
            try:
                stream = read_stream(path)
            except (OSError, StreamError) as exc:
                self.counts["streams_unreadable"] += 1
                print(f"xpu-perf: skipping {path.name}: {exc}")
                continue
            self.counts["streams"] += 1
            self.counts["streams_truncated"] += int(stream.truncated)
            yield from self._process(stream)

    # -- one process ----------------------------------------------------------------------
    def _process(self, stream: Stream) -> Iterator[model.Event]:
        counts = self.counts
        proc = stream.table("PROCESS")
        if proc.rows == 0:
            counts["streams_without_process"] += 1
            return
        pid = proc["pid"][0]
        cmdline = tuple(a for a in proc["cmdline"][0].split("\0") if a)
        exe = proc["exe"][0]
        yield model.ProcessInfo(pid, os.path.basename(cmdline[0] if cmdline else exe), cmdline)
        threads = stream.table("THREAD")
        for tid, name in zip(threads["tid"], threads["name"], strict=True):
            yield model.ThreadInfo(pid, tid, name)
        devices = stream.table("DEVICE")
        for dev, name in zip(devices["device"], devices["name"], strict=True):
            if dev not in self._devices_seen:
                self._devices_seen.add(dev)
                yield model.GpuDevice(dev, name)

        strings = self._strings(stream)
        counters = stream.table("COUNTER")
        if counters.rows:
            last = dict(zip(counters["name"], counters["value"], strict=True))
            counts["cupti_delivered_kernel"] += last.get("records_kernel", 0)
            for key in (
                "cupti_dropped_records",
                "transport_dropped_rows",
                "stack_table_full",
                "python_guard_failures",
                "unwind_fp_fallbacks",
                "unwind_cfi_misses",
                "api_alias_records",
                "transport_bytes",
            ):
                counts[key] += last.get(key, 0)
            minor = last.get("python_unsupported_minor", 0)
            if minor:  # Python frames wanted, but not this CPython's frame layout
                counts["streams_python_unsupported"] += 1
                counts["python_unsupported_minor"] = max(counts["python_unsupported_minor"], minor)
        else:
            counts["streams_without_counters"] += 1  # killed before its final flush

        api = stream.table("API")
        api_names = stream.table("API_NAME")
        names = dict(zip(api_names["api_id"], api_names["name"], strict=True))
        api_by_corr: dict[int, int] = {}
        if api.rows:
            for i, corr in enumerate(api["correlation_id"]):
                api_by_corr[corr] = i
        alias = stream.table("API_ALIAS")
        runtime_of = (
            dict(zip(alias["driver_correlation_id"], alias["runtime_correlation_id"], strict=True))
            if alias.rows
            else {}
        )

        flows: dict[int, list[int]] = defaultdict(list)  # API row -> flow ids

        def link(corr: int) -> tuple[int | None, tuple[int, ...]]:
            row = api_by_corr.get(corr)
            owner = corr
            if row is None and corr in runtime_of:
                owner = runtime_of[corr]
                row = api_by_corr.get(owner)
                counts["gpu_ops_matched_via_alias"] += row is not None
            if row is None:
                counts["gpu_ops_without_api"] += 1
                return None, ()
            fid = model.flow_id(pid, owner, len(flows[row]))
            flows[row].append(fid)
            return owner, (fid,)

        gpu_ops: list[model.GpuOp] = []
        gpu_ops.extend(self._kernels(stream, strings, link))
        gpu_ops.extend(self._memcpys(stream, link))
        gpu_ops.extend(self._memsets(stream, link))
        gpu_ops.extend(self._syncs(stream, link))
        counts["gpu_ops"] += len(gpu_ops)
        counts["gpu_ops_with_flow"] += sum(1 for op in gpu_ops if op.terminating_flow_ids)

        stacks = self._stacks(stream, strings)
        if api.rows:
            for i in range(api.rows):
                name = names.get(api["api_id"][i], f"cuda_api_{api['api_id'][i]:#x}")
                stack = stacks.get(api["stack_id"][i])
                if is_launch(name):
                    counts["launches"] += 1
                    if stack is None:
                        counts["launches_without_stack"] += 1
                    elif has_user_frame(stack):
                        counts["launches_with_user_frame"] += 1
                start = api["start"][i]
                corr = api["correlation_id"][i]
                yield model.CpuSlice(
                    pid,
                    api["tid"][i],
                    start,
                    max(0, api["end"][i] - start),
                    name,
                    category=model.CAT_CUDA_API,
                    args={"correlation_id": corr},
                    flow_ids=tuple(flows.get(i, ())),
                    launch_stack=stack,
                )
        counts["records_api"] += api.rows
        # GPU ops after the API calls that caused them: a sync op starts at its API call's own
        # timestamp, and trace_processor keeps same-timestamp packets of a sequence in order,
        # so the flow must begin (API slice) before it ends (GPU op).
        yield from gpu_ops
        yield from self._markers(stream, strings, pid)

    # -- tables -----------------------------------------------------------------------------
    @staticmethod
    def _strings(stream: Stream) -> dict[int, str]:
        t = stream.table("STRING")
        return dict(zip(t["string_id"], t["text"], strict=True)) if t.rows else {}

    def _kernels(self, stream: Stream, strings: dict[int, str], link) -> Iterator[model.GpuOp]:
        t = stream.table("KERNEL")
        if not t.rows:
            return
        self.counts["records_kernel"] += t.rows
        demangled: dict[int, str] = {}
        c = t.columns
        for i in range(t.rows):
            name_id = c["name_id"][i]
            name = demangled.get(name_id)
            if name is None:
                name = demangled[name_id] = demangle(strings.get(name_id, "?"))
            corr = c["correlation_id"][i]
            _, fids = link(corr)
            args: dict[str, model.ArgValue] = {
                "grid_x": c["grid_x"][i],
                "grid_y": c["grid_y"][i],
                "grid_z": c["grid_z"][i],
                "block_x": c["block_x"][i],
                "block_y": c["block_y"][i],
                "block_z": c["block_z"][i],
                "registers_per_thread": c["registers"][i],
                "shared_memory": c["static_shared_memory"][i] + c["dynamic_shared_memory"][i],
            }
            if c["graph_id"][i]:
                args["graph_id"] = c["graph_id"][i]
                args["graph_node_id"] = c["graph_node_id"][i]
            start = c["start"][i]
            yield model.GpuOp(
                c["device"][i],
                c["stream"][i],
                start,
                max(0, c["end"][i] - start),
                name,
                model.CAT_KERNEL,
                args,
                corr,
                terminating_flow_ids=fids,
            )

    def _memcpys(self, stream: Stream, link) -> Iterator[model.GpuOp]:
        t = stream.table("MEMCPY")
        if not t.rows:
            return
        self.counts["records_memcpy"] += t.rows
        c = t.columns
        for i in range(t.rows):
            kind = _MEMCPY_KINDS.get(c["copy_kind"][i], "unknown")
            _, fids = link(c["correlation_id"][i])
            args: dict[str, model.ArgValue] = {"bytes": c["bytes"][i], "copy_kind": kind}
            if kind == "PtoP":
                args["src_device"] = c["src_device"][i]
                args["dst_device"] = c["dst_device"][i]
            start = c["start"][i]
            yield model.GpuOp(
                c["device"][i],
                c["stream"][i],
                start,
                max(0, c["end"][i] - start),
                f"Memcpy {kind}",
                model.CAT_MEMCPY,
                args,
                c["correlation_id"][i],
                terminating_flow_ids=fids,
            )

    def _memsets(self, stream: Stream, link) -> Iterator[model.GpuOp]:
        t = stream.table("MEMSET")
        if not t.rows:
            return
        self.counts["records_memset"] += t.rows
        c = t.columns
        for i in range(t.rows):
            _, fids = link(c["correlation_id"][i])
            start = c["start"][i]
            yield model.GpuOp(
                c["device"][i],
                c["stream"][i],
                start,
                max(0, c["end"][i] - start),
                "Memset",
                model.CAT_MEMSET,
                {"bytes": c["bytes"][i], "value": c["value"][i]},
                c["correlation_id"][i],
                terminating_flow_ids=fids,
            )

    def _syncs(self, stream: Stream, link) -> Iterator[model.GpuOp]:
        t = stream.table("SYNC")
        if not t.rows:
            return
        self.counts["records_sync"] += t.rows
        c = t.columns
        # The device of a sync: the library's own (from the sync call's context) when it has
        # one, else the device of the context's kernels (CUPTI's SYNCHRONIZATION records name
        # only the context), else the process's first device.
        kernels = stream.table("KERNEL")
        context_device = (
            dict(zip(kernels.columns["context"], kernels.columns["device"], strict=True))
            if kernels.rows
            else {}
        )
        devices = stream.table("DEVICE")
        first = devices["device"][0] if devices.rows else 0
        for i in range(t.rows):
            _, fids = link(c["correlation_id"][i])
            dev = c["device"][i]
            if dev == _NO_ID:
                dev = context_device.get(c["context"][i], first)
            stream_id = c["stream"][i]
            # Context-wide syncs have no stream: they go on a "Stream -1"-free track, stream 0.
            sid = 0 if stream_id == _NO_ID else stream_id
            start = c["start"][i]
            yield model.GpuOp(
                dev,
                sid,
                start,
                max(0, c["end"][i] - start),
                _SYNC_KINDS.get(c["sync_type"][i], "Synchronize"),
                model.CAT_SYNC,
                {"sync_type": c["sync_type"][i]},
                c["correlation_id"][i],
                terminating_flow_ids=fids,
            )

    def _stacks(self, stream: Stream, strings: dict[int, str]) -> dict[int, model.Stack]:
        t = stream.table("STACK")
        if not t.rows:
            return {}
        mods = stream.table("MODULE")
        modules = ModuleMap(
            [
                Module(
                    mods["lo"][i],
                    mods["hi"][i],
                    mods["load_bias"][i],
                    mods["path"][i],
                    mods["build_id"][i],
                )
                for i in range(mods.rows)
            ]
        )
        pyt = stream.table("PYFRAME")
        pyframes: dict[int, PythonFrame] = {}
        for i in range(pyt.rows):
            pyframes[pyt["pyframe_id"][i]] = PythonFrame(
                strings.get(pyt["filename_id"][i], "?"),
                strings.get(pyt["function_id"][i], "?"),
                pyt["line"][i],
            )
        out: dict[int, model.Stack] = {}
        for i in range(t.rows):
            native = symbolize_native(self.symbolizer, modules, t["native_pcs"][i])
            python = [pyframes.get(fid) if fid else None for fid in t["python_frames"][i]]
            out[t["stack_id"][i]] = launch_stack(merge_python(native, python))
        self.counts["stacks_unique"] += t.rows
        return out

    def _markers(self, stream: Stream, strings: dict[int, str], pid: int) -> Iterator[model.Event]:
        t = stream.table("MARKER")
        if not t.rows:
            return
        self.counts["records_marker"] += t.rows
        open_ranges: dict[int, tuple[int, int, str, str]] = {}
        c = t.columns
        for i in range(t.rows):
            flags, mid, ts, tid = c["flags"][i], c["marker_id"][i], c["timestamp"][i], c["tid"][i]
            name = strings.get(c["name_id"][i], "")
            domain = strings.get(c["domain_id"][i], "")
            if flags & _MARKER_INSTANT:
                yield model.Instant(
                    pid, tid, ts, name, "nvtx", {"domain": domain} if domain else {}
                )
            elif flags & _MARKER_START:
                open_ranges[mid] = (ts, tid, name, domain)
            elif flags & _MARKER_END and mid in open_ranges:
                start, stid, sname, sdomain = open_ranges.pop(mid)
                yield model.CpuSlice(
                    pid,
                    stid,
                    start,
                    max(0, ts - start),
                    sname,
                    "nvtx",
                    {"domain": sdomain} if sdomain else {},
                )
